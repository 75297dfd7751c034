"""``gpuscale evaluate``: placeholder until the evaluation harness lands."""

import typer


def register(app: typer.Typer) -> None:
    """Add the ``evaluate`` command to ``app``."""
    del app
