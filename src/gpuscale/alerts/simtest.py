"""Backtest the catalogue on a simulated fleet with injected faults, and sweep its knobs.

Each simulated host carries its own seed and faults (``history.HostRun``); the
whole fleet is one history in one TSDB, so peer comparisons see a fleet and
every rule is queried once. The report tells a user, for each rule, what it
caught and what it cried wolf on, and, over a sweep of a ``for:`` or a
threshold, the trade-off between detection delay and false alarms.
"""

import logging
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuscale.alerts.backtest import LabelledFault, Query, RuleScore, backtest
from gpuscale.alerts.catalogue import build_catalogue
from gpuscale.alerts.config import AlertConfig
from gpuscale.alerts.history import XID_WINDOW_S, HostRun, Onsets, write_history
from gpuscale.alerts.model import RecordingRule, RuleGroup
from gpuscale.alerts.tsdb import HistoryPrometheus, Series, query_range
from gpuscale.errors import config_error

logger = logging.getLogger(__name__)

BLOCK_S = 7200.0
"""Prometheus's block length, to which the default history start is aligned."""


@dataclass(frozen=True, slots=True)
class Sweep:
    """Values to try for one alert setting, e.g. ``GpuTemperatureHigh.threshold``."""

    alert: str
    key: str
    values: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One alert scored with one value of a swept setting."""

    sweep: Sweep
    value: float
    score: RuleScore


def labelled_faults(
    runs: Sequence[HostRun], start_s: float, step_s: float, onsets: Onsets | None = None
) -> list[LabelledFault]:
    """The faults of ``runs`` at the sample where the simulator injects them.

    Args:
        runs: The simulated hosts.
        start_s: Start of the history.
        step_s: Scrape interval.
        onsets: Observable onsets the history noted (``history.write_history``).

    Returns:
        One labelled fault per injected fault; an XID's effect ends when it leaves
        the exporter's count window, a fault with a duration at its end.
    """
    out = []
    for run in runs:
        for n, f in enumerate(run.faults):
            # The simulator fires a fault at the first sample at or after its time.
            at = start_s + step_s * -(-f.at_s // step_s)
            end = None
            if f.kind == "xid":
                end = at + XID_WINDOW_S
            elif f.duration_s is not None:
                end = at + f.duration_s
            seen = (onsets or {}).get((run.hostname, n), {})
            gpu = "" if f.gpu is None else str(f.gpu)
            out.append(
                LabelledFault(run.hostname, gpu, f.kind, at, end, tuple(sorted(seen.items())))
            )
    return out


def _records(groups: Sequence[RuleGroup]) -> list[RecordingRule]:
    return [r for g in groups for r in g.rules if isinstance(r, RecordingRule)]


def _variant(config: AlertConfig, sweep: Sweep, value: float) -> AlertConfig:
    settings = getattr(config.alerts, sweep.alert, None)
    where = f"--sweep {sweep.alert}.{sweep.key}"
    if settings is None or sweep.key not in ("for", *type(settings).model_fields):
        raise config_error(where, "no such alert setting", "name an alert and one of its keys")
    key = "for" if sweep.key in ("for", "for_") else sweep.key
    data = config.model_dump(by_alias=True)
    # Durations (for:, windows) are swept in seconds and written as Prometheus durations.
    duration = isinstance(data["alerts"][sweep.alert][key], str)
    data["alerts"][sweep.alert][key] = f"{int(value)}s" if duration else value
    return AlertConfig.model_validate(data)


def _check_sweeps(config: AlertConfig, sweeps: Sequence[Sweep]) -> None:
    """Refuse a sweep that names no setting or changes a recording rule."""
    records = _records(build_catalogue(config))
    for sweep in sweeps:
        for value in sweep.values:
            if _records(build_catalogue(_variant(config, sweep, value))) != records:
                raise config_error(
                    f"--sweep {sweep.alert}.{sweep.key}",
                    "changes a recording rule, which the backtest computes once",
                    "sweep a threshold or for: of the alert itself",
                )


def _sweep(
    config: AlertConfig,
    sweeps: Sequence[Sweep],
    query: Query,
    faults: Sequence[LabelledFault],
    end_s: float,
    step_s: float,
) -> list[SweepPoint]:
    """Score each swept alert once per value of its setting."""
    points = []
    for sweep in sweeps:
        for value in sweep.values:
            variant = build_catalogue(_variant(config, sweep, value))
            only = [
                RuleGroup(
                    g.name, tuple(r for r in g.rules if getattr(r, "alert", None) == sweep.alert)
                )
                for g in variant
            ]
            points += [
                SweepPoint(sweep, value, s) for s in backtest(only, query, faults, end_s, step_s)
            ]
    return points


def run_backtest(
    runs: Sequence[HostRun],
    duration_s: float,
    step_s: float,
    config: AlertConfig | None = None,
    sweeps: Sequence[Sweep] = (),
    start_s: float | None = None,
    workdir: Path | None = None,
) -> tuple[list[RuleScore], list[SweepPoint]]:
    """Simulate ``runs``, load them into a real Prometheus, and score the catalogue.

    Args:
        runs: The simulated hosts and their faults.
        duration_s: Seconds of history.
        step_s: Scrape and evaluation interval, seconds.
        config: Alert settings (defaults when None).
        sweeps: Settings to sweep; each value re-renders the catalogue. A sweep of
            ``for`` costs no query; a threshold sweep queries its alert once per value.
        start_s: Start of the history, seconds since the epoch (default: on a 2-hour
            boundary at least an hour plus the history's length ago, so no block is
            in the future).
        workdir: Where blocks go (default: a temporary directory, removed after).

    Returns:
        The scores of every alert with its own settings, and the sweep points.

    Raises:
        ConfigError: A sweep names no alert setting, or one that changes a recording rule.
    """
    config = config or AlertConfig()
    groups = build_catalogue(config)
    _check_sweeps(config, sweeps)
    # Prometheus cuts blocks on 2-hour boundaries and promtool backfills rules block by
    # block, from each block's start: a history starting on a boundary keeps every
    # evaluation on the scrape grid.
    aligned = (time.time() - duration_s - 3600) // BLOCK_S * BLOCK_S
    start = start_s if start_s is not None else aligned
    end = start + duration_s
    with tempfile.TemporaryDirectory(prefix="gpuscale-backtest-") as tmp:
        work = workdir or Path(tmp)
        history = work / "history.om"
        samples, onsets = write_history(runs, start, duration_s, step_s, history, config)
        faults = labelled_faults(runs, start, step_s, onsets)
        logger.info("backtest history: %d hosts, %d samples", len(runs), samples)
        with HistoryPrometheus(work, step_s) as prom:
            prom.load(history, groups, start, end)

            def query(expr: str) -> list[Series]:
                return prom.query_range(expr, start, end, step_s)

            scores = backtest(groups, query, faults, end, step_s)
            points = _sweep(config, sweeps, query, faults, end, step_s)
    return scores, points


def score_dict(s: RuleScore) -> dict[str, object]:
    """One score as JSON-ready numbers (seconds, shares).

    Returns:
        The score's fields, recall and median delay included.
    """
    return {
        "alert": s.alert,
        "for_s": s.for_s,
        "fired": s.fired,
        "true_positives": s.true_positives,
        "false_positives": s.false_positives,
        "faults": s.faults,
        "detected": s.detected,
        "recall": s.recall,
        "median_delay_s": s.median_delay_s,
        "delays_s": s.delays_s,
        "median_onset_delay_s": s.median_onset_delay_s,
        "onset_delays_s": s.onset_delays_s,
        "false_hosts": sorted(s.false_hosts),
    }


def parse_sweep(text: str) -> Sweep:
    """Read ``ALERT.KEY=V1,V2,...``; ``for`` values are durations (``90s``, ``2m``) or seconds.

    Returns:
        The sweep.

    Raises:
        ConfigError: The text is not of that form.
    """
    from gpuscale.alerts.promql_text import duration_seconds

    where, fix = f"--sweep {text!r}", "write ALERT.KEY=V1,V2,... e.g. GpuTemperatureHigh.for=0s,2m"
    name, eq, values = text.partition("=")
    alert, dot, key = name.partition(".")
    if not (eq and dot and alert and key and values):
        raise config_error(where, "is not ALERT.KEY=VALUES", fix)
    out = []
    for v in values.split(","):
        try:
            out.append(
                float(duration_seconds(v)) if key == "for" and v[-1:].isalpha() else float(v)
            )
        except ValueError:
            raise config_error(where, f"{v!r} is not a number", fix) from None
    return Sweep(alert, key, tuple(out))


def read_faults(path: Path) -> list[LabelledFault]:
    """Read labelled faults from a CSV file: ``host,gpu,kind,start,end`` per line.

    ``start`` and ``end`` are seconds since the epoch or RFC 3339 times; ``end``
    may be empty (the fault lasts to the end of the history). Lines starting
    with ``#`` and a header line starting with ``host`` are skipped.

    Returns:
        The faults.

    Raises:
        ConfigError: A line is malformed; the message names the file and line.
    """
    import csv
    from datetime import datetime

    def when(text: str) -> float:
        try:
            return float(text)
        except ValueError:
            return datetime.fromisoformat(text).timestamp()

    fix = "write host,gpu,kind,start,end (times in epoch seconds or RFC 3339)"
    try:
        rows = list(csv.reader(path.read_text(encoding="utf-8").splitlines()))
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        raise config_error(f"--faults-file {path}", f"cannot be read ({why})", fix) from None
    out = []
    for line, row in enumerate(rows, 1):
        if not row or row[0].startswith("#") or row[0].strip() == "host":
            continue
        cells = [c.strip() for c in row] + [""] * (5 - len(row))
        try:
            host, gpu, kind, start, end = cells[:5]
            out.append(LabelledFault(host, gpu, kind, when(start), when(end) if end else None))
        except ValueError:
            raise config_error(f"{path}:{line}", f"cannot read {','.join(row)!r}", fix) from None
    return out


def backtest_prometheus(
    url: str,
    start_s: float,
    end_s: float,
    step_s: float,
    faults: Sequence[LabelledFault] = (),
    config: AlertConfig | None = None,
    sweeps: Sequence[Sweep] = (),
) -> tuple[list[RuleScore], list[SweepPoint]]:
    """Score the catalogue on a range of a live Prometheus that already records its rules.

    Args:
        url: The Prometheus.
        start_s: Start of the range, seconds since the epoch.
        end_s: End of the range.
        step_s: Evaluation step, seconds (the rules' evaluation interval).
        faults: What is known to have broken, and when.
        config: Alert settings (defaults when None).
        sweeps: Settings to sweep, as for ``run_backtest``.

    Returns:
        The scores and the sweep points.
    """
    config = config or AlertConfig()
    groups = build_catalogue(config)
    _check_sweeps(config, sweeps)

    def query(expr: str) -> list[Series]:
        return query_range(url, expr, start_s, end_s, step_s)

    return backtest(groups, query, faults, end_s, step_s), _sweep(
        config, sweeps, query, faults, end_s, step_s
    )
