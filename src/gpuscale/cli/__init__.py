"""The ``gpuscale`` command: one Typer app, a module per subcommand."""

from gpuscale.cli.app import app, main

__all__ = ["app", "main"]
