"""``gpuscale fields``: the field catalogue, as a table or as a counters file to edit."""

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from gpuscale.fields.catalogue import DCGM_FIELDS
from gpuscale.fields.counters import DEFAULT_COUNTERS_CSV


def fields(
    csv: Annotated[
        bool,
        typer.Option(
            "--csv", help="Print the default counters file (edit it and pass --collectors)."
        ),
    ] = False,
) -> None:
    """List every DCGM field gpuscale can export, with id, type, unit and default state."""
    if csv:
        typer.echo(DEFAULT_COUNTERS_CSV, nl=False)
        return
    table = Table(title="DCGM fields")
    for column in ("field", "id", "type", "unit", "default", "meaning"):
        table.add_column(column)
    for f in DCGM_FIELDS.values():
        table.add_row(f.name, str(f.field_id), f.type, f.unit, "on" if f.default else "", f.help)
    Console().print(table)


def register(app: typer.Typer) -> None:
    """Add the ``fields`` command to ``app``."""
    app.command("fields")(fields)
