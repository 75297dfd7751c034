"""``gpuscale rules``: render the alert catalogue for Prometheus, and backtest it on history.

``render`` writes the catalogue (vendor-neutral recording rules, GPU health,
anomaly and SLO burn-rate alerts) as a Prometheus rules file or a Prometheus
Operator ``PrometheusRule``, with thresholds and ``for:`` durations from an
optional settings file. A mistake in that file ends with one line naming the
file, line and key.
"""

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from gpuscale.alerts.catalogue import build_catalogue
from gpuscale.alerts.config import default_settings_yaml, load_config
from gpuscale.alerts.model import alert_names
from gpuscale.alerts.render import render as render_rules
from gpuscale.errors import config_error

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
            "--out", "-o", help="File to write; - for standard output.", envvar="GPUSCALE_RULES_OUT"
        ),
    ],
    fmt: Annotated[
        RuleFormat,
        typer.Option(
            "--format",
            help="prometheus: a rules file for rule_files; prometheus-operator: a PrometheusRule.",
            envvar="GPUSCALE_RULES_FORMAT",
        ),
    ] = RuleFormat.prometheus,
    config: ConfigOption = None,
) -> None:
    """Write the alert catalogue as a Prometheus rules file or a PrometheusRule resource."""
    groups = build_catalogue(load_config(config))
    text = render_rules(groups, fmt.value)
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


@rules_app.command("defaults")
def defaults() -> None:
    """Print the settings file with every key at its default, to copy and pass to --config."""
    typer.echo(default_settings_yaml(), nl=False)


def register(app: typer.Typer) -> None:
    """Add the ``rules`` command group to ``app``."""
    app.add_typer(rules_app, name="rules")
