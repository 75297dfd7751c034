"""``gpuscale rules``: render the alert catalogue for Prometheus, and backtest it on history.

``render`` writes the catalogue (vendor-neutral recording rules, GPU health,
anomaly and SLO burn-rate alerts) as a Prometheus rules file or a Prometheus
Operator ``PrometheusRule``, with thresholds and ``for:`` durations from an
optional settings file. A mistake in that file ends with one line naming the
file, line and key. ``backtest`` scores the catalogue on simulated hosts with
injected faults in a real Prometheus, and sweeps a threshold or ``for:``.
"""

import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError

from gpuscale.alerts.catalogue import build_catalogue
from gpuscale.alerts.config import default_settings_yaml, load_config
from gpuscale.alerts.model import alert_names
from gpuscale.alerts.render import render as render_rules
from gpuscale.alerts.resource import ResourceMetadata
from gpuscale.durations import whole_seconds_option
from gpuscale.errors import config_error

if TYPE_CHECKING:
    from gpuscale.alerts.backtest import RuleScore
    from gpuscale.alerts.config import AlertConfig
    from gpuscale.alerts.simtest import Sweep, SweepPoint

rules_app = typer.Typer(
    name="rules",
    help="Render the GPU alert catalogue for Prometheus, or backtest it on history.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


class RuleFormat(StrEnum):
    """Output formats of ``rules render``."""

    prometheus = "prometheus"
    prometheus_operator = "prometheus-operator"


ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="YAML settings: thresholds, for: durations, severities, SLOs (docs/alerts.md).",
        envvar="GPUSCALE_RULES_CONFIG",
    ),
]


@rules_app.command("render")
def render(
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="File to write; - for standard output, as rules defaults writes.",
            envvar="GPUSCALE_RULES_OUT",
        ),
    ] = Path("-"),
    fmt: Annotated[
        RuleFormat,
        typer.Option(
            "--format",
            help="prometheus: a rules file for rule_files; prometheus-operator: a PrometheusRule.",
            envvar="GPUSCALE_RULES_FORMAT",
        ),
    ] = RuleFormat.prometheus,
    config: ConfigOption = None,
    name: Annotated[
        str | None,
        typer.Option(
            help="PrometheusRule name (prometheus-operator); overrides prometheus_rule.name "
            "of the settings (default gpuscale).",
            envvar="GPUSCALE_RULES_NAME",
        ),
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option(
            help="PrometheusRule namespace (prometheus-operator); overrides "
            "prometheus_rule.namespace of the settings (default: none, kubectl's).",
            envvar="GPUSCALE_RULES_NAMESPACE",
        ),
    ] = None,
) -> None:
    """Write the alert catalogue as a Prometheus rules file or a PrometheusRule resource."""
    settings = load_config(config)
    if fmt is not RuleFormat.prometheus_operator and (name or namespace):
        raise config_error(
            "--name/--namespace",
            "apply only to a PrometheusRule",
            "add --format prometheus-operator",
        )
    meta = _metadata(settings, name, namespace)
    groups = build_catalogue(settings)
    text = render_rules(groups, fmt.value, meta)
    if str(out) == "-":
        sys.stdout.write(text)
        return
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise config_error(
            f"--out {out}", f"cannot be written ({exc.strerror})", "pick a writable path"
        ) from None
    rules = sum(len(g.rules) for g in groups)
    typer.echo(f"wrote {out}: {rules} rules, alerts {', '.join(alert_names(groups))}", err=True)


def _metadata(settings: "AlertConfig", name: str | None, namespace: str | None) -> ResourceMetadata:
    """The settings' PrometheusRule metadata with --name and --namespace applied."""
    meta = settings.prometheus_rule
    for flag, key, value in (("--name", "name", name), ("--namespace", "namespace", namespace)):
        if value is None:
            continue
        try:
            meta = ResourceMetadata.model_validate(meta.model_dump() | {key: value})
        except ValidationError as exc:
            problem = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
            raise config_error(flag, problem, "pass a valid Kubernetes name") from None
    return meta


@rules_app.command("backtest")
def backtest(
    ctx: typer.Context,
    fault: Annotated[
        list[str] | None,
        typer.Option(
            help="A fault to inject, each on its own simulated host (repeatable): "
            "gpu-lost@SECONDS:gpu=N, xid@SECONDS:code=N:gpu=N, ecc-dbe@SECONDS:gpu=N, "
            "row-remap@SECONDS:gpu=N, thermal@SECONDS:gpu=N (optionally :rise_c=C, "
            ":duration=SECONDS).",
            envvar="GPUSCALE_BACKTEST_FAULTS",
        ),
    ] = None,
    fault_free: Annotated[
        int,
        typer.Option(
            min=0,
            help="Hosts with no fault, to count false alarms on.",
            envvar="GPUSCALE_BACKTEST_FAULT_FREE",
        ),
    ] = 2,
    gpus: Annotated[
        int,
        typer.Option(
            min=1, max=64, help="GPUs per simulated host.", envvar="GPUSCALE_BACKTEST_GPUS"
        ),
    ] = 8,
    duration: Annotated[
        int,
        typer.Option(
            parser=whole_seconds_option,
            metavar="<duration>",
            help="Length of the history (a duration).",
            envvar="GPUSCALE_BACKTEST_DURATION",
        ),
    ] = 7200,
    scrape_interval: Annotated[
        int,
        typer.Option(
            parser=whole_seconds_option,
            metavar="<duration>",
            help="Scrape and evaluation interval.",
            envvar="GPUSCALE_BACKTEST_SCRAPE_INTERVAL",
        ),
    ] = 15,
    seed: Annotated[
        int,
        typer.Option(
            help="Seed of the first host; host i uses seed + i.", envvar="GPUSCALE_BACKTEST_SEED"
        ),
    ] = 0,
    sweep: Annotated[
        list[str] | None,
        typer.Option(
            help="Sweep one alert setting: ALERT.KEY=V1,V2,... e.g. "
            "GpuTemperatureHigh.threshold=80,85,90 or GpuThermalThrottling.for=0s,2m,5m "
            "(repeatable).",
            envvar="GPUSCALE_BACKTEST_SWEEP",
        ),
    ] = None,
    prometheus: Annotated[
        str | None,
        typer.Option(
            help="Backtest on this Prometheus's history instead of a simulated one; it must "
            "record the catalogue's rules. Needs --start and --end.",
            envvar="GPUSCALE_BACKTEST_PROMETHEUS",
        ),
    ] = None,
    start: Annotated[
        str | None,
        typer.Option(
            help="Start of the range (RFC 3339 or epoch seconds; with --prometheus).",
            envvar="GPUSCALE_BACKTEST_START",
        ),
    ] = None,
    end: Annotated[
        str | None,
        typer.Option(
            help="End of the range (RFC 3339 or epoch seconds; with --prometheus).",
            envvar="GPUSCALE_BACKTEST_END",
        ),
    ] = None,
    faults_file: Annotated[
        Path | None,
        typer.Option(
            help="Known faults of that range, CSV host,gpu,kind,start,end (with --prometheus).",
            envvar="GPUSCALE_BACKTEST_FAULTS_FILE",
        ),
    ] = None,
    config: ConfigOption = None,
    report: Annotated[
        Path | None,
        typer.Option(help="Write the scores as JSON here.", envvar="GPUSCALE_BACKTEST_REPORT"),
    ] = None,
) -> None:
    """Backtest the catalogue on simulated hosts with injected faults, in a real Prometheus.

    Each fault runs on its own simulated host beside fault-free ones; the history
    is backfilled into Prometheus, every alert expression is queried over it, and
    each rule's firings are judged against the faults: true and false positives,
    recall and detection delay, and a trade-off table for each --sweep.
    """
    from gpuscale.alerts.history import HostRun
    from gpuscale.alerts.simtest import parse_sweep, run_backtest
    from gpuscale.telemetry.faults import parse_fault

    _check_combination(ctx, prometheus)
    settings = load_config(config)
    sweeps = [parse_sweep(s) for s in sweep or []]
    step = scrape_interval
    if prometheus is not None:
        _live(prometheus, start, end, faults_file, step, settings, sweeps, report)
        return
    faults = [parse_fault(f, "exporter") for f in fault or []]
    length = duration
    for f in faults:
        if f.at_s >= length or (f.gpu or 0) >= gpus:
            raise config_error(
                f"--fault {f.spec()!r}",
                f"is outside the history ({length:g} s, GPUs 0..{gpus - 1})",
                "inject it earlier or on an existing GPU",
            )
    runs = [HostRun(f"sim-{i}", gpus, seed + i, (f,)) for i, f in enumerate(faults)]
    runs += [
        HostRun(f"sim-{len(faults) + i}", gpus, seed + len(faults) + i) for i in range(fault_free)
    ]
    if not runs:
        raise config_error("--fault-free 0", "leaves nothing to backtest", "give --fault or hosts")
    scores, points = run_backtest(runs, length, step, settings, sweeps)
    print_scores(scores, points, step)
    if report is not None:
        _write_report(report, scores, points)


_SIMULATED = {
    "fault": "--fault",
    "fault_free": "--fault-free",
    "gpus": "--gpus",
    "duration": "--duration",
    "seed": "--seed",
}
_LIVE = {"start": "--start", "end": "--end", "faults_file": "--faults-file"}


def _given(ctx: typer.Context, names: dict[str, str]) -> list[str]:
    """The flags among ``names`` the user set (on the command line or in the environment)."""
    given = []
    for name, flag in names.items():
        source = ctx.get_parameter_source(name)
        # Typer bundles its own click, so compare the enum by name, not by class.
        if source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT"):
            given.append(flag)
    return given


def _check_combination(ctx: typer.Context, prometheus: str | None) -> None:
    """Refuse flags of the simulated history with --prometheus, and the reverse."""
    wrong = _given(ctx, _SIMULATED if prometheus is not None else _LIVE)
    verb = "is" if len(wrong) == 1 else "are"
    if wrong and prometheus is not None:
        raise config_error(
            ", ".join(wrong), f"{verb} for a simulated history only", "drop it or --prometheus"
        )
    if wrong:
        raise config_error(
            ", ".join(wrong), f"{verb} for --prometheus only", "add --prometheus URL"
        )


def _when(flag: str, text: str | None) -> float:
    from datetime import datetime

    if text is None:
        raise config_error(flag, "is required with --prometheus", "give an RFC 3339 time")
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise config_error(
            f"{flag} {text}",
            "is not a time",
            "give RFC 3339 (2026-01-31T12:00:00Z) or epoch seconds",
        ) from None


def _live(
    url: str,
    start: str | None,
    end: str | None,
    faults_file: Path | None,
    step: float,
    settings: "AlertConfig",
    sweeps: list["Sweep"],
    report: Path | None,
) -> None:
    from gpuscale.alerts.simtest import backtest_prometheus, read_faults

    start_s, end_s = _when("--start", start), _when("--end", end)
    if end_s <= start_s:
        raise config_error(f"--end {end}", "is not after --start", "give a later end")
    faults = read_faults(faults_file) if faults_file is not None else []
    scores, points = backtest_prometheus(url, start_s, end_s, step, faults, settings, sweeps)
    print_scores(scores, points, step)
    if report is not None:
        _write_report(report, scores, points)


def _delay(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} s"


def print_scores(scores: list["RuleScore"], points: list["SweepPoint"], step_s: float) -> None:
    """Print the per-rule table and one trade-off table per sweep."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title="Backtest: every alert with its own settings")
    table.add_column("alert", no_wrap=True, min_width=max(len(s.alert) for s in scores))
    for column in ("for", "fired", "TP", "FP", "faults", "caught", "median delay"):
        table.add_column(column, justify="right")
    for s in scores:
        table.add_row(
            s.alert,
            f"{s.for_s:.0f} s",
            str(s.fired),
            str(s.true_positives),
            str(s.false_positives),
            str(s.faults),
            str(s.detected),
            _delay(s.median_delay_s),
        )
    console.print(table)
    sweeps = list(dict.fromkeys(p.sweep for p in points))
    for sw in sweeps:
        t = Table(title=f"Sweep {sw.alert}.{sw.key}")
        key = "for (s)" if sw.key == "for" else sw.key
        for column in (key, "fired", "TP", "FP", "caught", "median delay"):
            t.add_column(column, justify="right")
        for p in (p for p in points if p.sweep == sw):
            s = p.score
            t.add_row(
                f"{p.value:g}",
                str(s.fired),
                str(s.true_positives),
                str(s.false_positives),
                f"{s.detected}/{s.faults}",
                _delay(s.median_delay_s),
            )
        console.print(t)


def _write_report(path: Path, scores: list["RuleScore"], points: list["SweepPoint"]) -> None:
    import json

    from gpuscale.alerts.simtest import score_dict

    doc = {
        "scores": [score_dict(s) for s in scores],
        "sweeps": [
            {"alert": p.sweep.alert, "key": p.sweep.key, "value": p.value, **score_dict(p.score)}
            for p in points
        ],
    }
    try:
        path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise config_error(
            f"--report {path}", f"cannot be written ({exc.strerror})", "pick a writable path"
        ) from None


@rules_app.command("defaults")
def defaults() -> None:
    """Print the settings file with every key at its default, to copy and pass to --config."""
    typer.echo(default_settings_yaml(), nl=False)


def register(app: typer.Typer) -> None:
    """Add the ``rules`` command group to ``app``."""
    app.add_typer(rules_app, name="rules")
