"""Top-level Typer application and error handling shared by every subcommand.

A user's mistake (``ConfigError``) ends with one line and exit status 2; a
runtime failure (``GpuscaleError``) with one line and exit status 1. Neither
shows a traceback.
"""

import logging
import sys

import typer

from gpuscale.errors import GpuscaleError

app = typer.Typer(
    name="gpuscale",
    help="Monitor GPU fleets with dcgm-exporter-compatible telemetry and scale GPU workloads.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

logger = logging.getLogger(__name__)


def _register_subcommands() -> None:
    from gpuscale.cli import evaluate, exporter  # noqa: PLC0415

    exporter.register(app)
    evaluate.register(app)


def main() -> None:
    """Entry point of the ``gpuscale`` console script."""
    _register_subcommands()
    try:
        app()
    except GpuscaleError as exc:
        typer.echo(f"gpuscale: error: {exc}", err=True)
        sys.exit(exc.exit_code)
