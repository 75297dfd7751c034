"""``gpuscale fields``: the field catalogue, as a table or as a counters file to edit.

A terminal wide enough for every field name whole gets a table; a narrower
terminal or a pipe gets one tab-separated row per field, so no name is ever cut
and ``gpuscale fields | grep GPU_UTIL`` finds the field.
"""

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from gpuscale.fields.catalogue import DCGM_FIELDS
from gpuscale.fields.counters import DEFAULT_COUNTERS_CSV

COLUMNS = ("field", "id", "type", "unit", "default", "meaning")
MIN_MEANING_WIDTH = 24
"""Narrowest the wrapped ``meaning`` column may get before rows replace the table."""


def field_rows() -> list[tuple[str, ...]]:
    """One row of cells per catalogue field, in the order of ``COLUMNS``."""
    return [
        (f.name, str(f.field_id), f.type, f.unit, "on" if f.default else "", f.help)
        for f in DCGM_FIELDS.values()
    ]


def table_width(rows: list[tuple[str, ...]]) -> int:
    """Columns a table needs to show every cell but ``meaning`` whole.

    Returns:
        Width in terminal cells: the widest cell of each column, ``MIN_MEANING_WIDTH``
        for ``meaning``, and three cells of border and padding per column plus one.
    """
    widths = [max(len(c) for c in (head, *(r[i] for r in rows))) for i, head in enumerate(COLUMNS)]
    widths[-1] = MIN_MEANING_WIDTH
    return sum(widths) + 3 * len(widths) + 1


def print_fields(console: Console) -> None:
    """Print the catalogue on ``console``: a table when it fits, else tab-separated rows."""
    rows = field_rows()
    if not console.is_terminal or console.width < table_width(rows):
        console.file.write("\t".join(COLUMNS) + "\n")
        for row in rows:
            console.file.write("\t".join(row) + "\n")
        return
    table = Table(title="DCGM fields")
    for column in COLUMNS:
        table.add_column(column, no_wrap=column != "meaning", overflow="fold")
    for row in rows:
        table.add_row(*row)
    console.print(table)


def fields(
    csv: Annotated[
        bool,
        typer.Option(
            "--csv",
            help="Print the default counters file (edit it and pass --collectors).",
            envvar="GPUSCALE_FIELDS_CSV",
        ),
    ] = False,
) -> None:
    """List every DCGM field gpuscale can export, with id, type, unit and default state."""
    if csv:
        typer.echo(DEFAULT_COUNTERS_CSV, nl=False)
        return
    print_fields(Console())


def register(app: typer.Typer) -> None:
    """Add the ``fields`` command to ``app``."""
    app.command("fields")(fields)
