"""Top-level Typer application and error handling shared by every subcommand.

A user's mistake (``ConfigError``) ends with one line and exit status 2; a
runtime failure (``GpuscaleError``) with one line and exit status 1. Neither
shows a traceback.
"""

import logging
import sys
from enum import StrEnum
from typing import Annotated

import typer

from gpuscale.cli.logs import configure_logging
from gpuscale.errors import GpuscaleError

app = typer.Typer(
    name="gpuscale",
    help="Monitor GPU fleets with dcgm-exporter-compatible telemetry and scale GPU workloads.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

logger = logging.getLogger(__name__)


class LogLevel(StrEnum):
    """Log levels."""

    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


class LogFormatName(StrEnum):
    """Log output formats."""

    text = "text"
    json = "json"


@app.callback()
def _global_options(
    log_level: Annotated[
        LogLevel, typer.Option(help="Log verbosity.", envvar="GPUSCALE_LOG_LEVEL")
    ] = LogLevel.info,
    log_format: Annotated[
        LogFormatName, typer.Option(help="Log line format.", envvar="GPUSCALE_LOG_FORMAT")
    ] = LogFormatName.text,
) -> None:
    """Monitor GPU fleets and scale GPU workloads from their telemetry."""
    configure_logging(log_level.value, "json" if log_format is LogFormatName.json else "text")


def _register_subcommands() -> None:
    from gpuscale.cli import evaluate, exporter, fields

    exporter.register(app)
    fields.register(app)
    evaluate.register(app)


def main() -> None:
    """Entry point of the ``gpuscale`` console script."""
    _register_subcommands()
    try:
        app()
    except GpuscaleError as exc:
        typer.echo(f"gpuscale: error: {exc}", err=True)
        sys.exit(exc.exit_code)
