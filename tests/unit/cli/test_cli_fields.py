"""``gpuscale fields``: a table when it fits, whole names in rows otherwise, the CSV unchanged."""

import io
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from gpuscale.cli.app import main
from gpuscale.cli.fields import field_rows, print_fields, table_width
from gpuscale.fields.catalogue import DCGM_FIELDS
from gpuscale.fields.counters import DEFAULT_COUNTERS_CSV

NAMES = list(DCGM_FIELDS)


@pytest.fixture(autouse=True)
def keep_root_logger():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def render(width: int, terminal: bool) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=terminal, color_system=None)
    print_fields(console)
    return buffer.getvalue()


def test_wide_terminal_gets_a_table_with_every_name_whole():
    out = render(200, terminal=True)
    assert "DCGM fields" in out
    assert "┃ field" in out
    for name in NAMES:
        assert f" {name} " in out, name
    assert "…" not in out


@pytest.mark.parametrize(("width", "terminal"), [(80, True), (200, False), (80, False)])
def test_narrow_terminals_and_pipes_get_one_tab_separated_row_per_field(width, terminal):
    out = render(width, terminal)
    lines = out.splitlines()
    assert lines[0] == "field\tid\ttype\tunit\tdefault\tmeaning"
    rows = [line.split("\t") for line in lines[1:]]
    assert [r[0] for r in rows] == NAMES
    util = rows[NAMES.index("DCGM_FI_DEV_GPU_UTIL")]
    field = DCGM_FIELDS["DCGM_FI_DEV_GPU_UTIL"]
    assert util == [field.name, str(field.field_id), field.type, field.unit, "on", field.help]
    assert "│" not in out


def test_table_is_used_only_from_the_width_that_fits_every_name():
    needed = table_width(field_rows())
    assert needed > 80
    table = render(needed, terminal=True)
    assert "┃ field" in table
    assert max(len(line) for line in table.splitlines()) <= needed
    for name in NAMES:
        assert f" {name} " in table, name
    assert "┃ field" not in render(needed - 1, terminal=True)


def test_fields_through_a_pipe_can_be_grepped():
    script = Path(sys.executable).with_name("gpuscale")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "gpuscale"]
    proc = subprocess.run([*cmd, "fields"], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    hits = [line for line in proc.stdout.splitlines() if "GPU_UTIL" in line]
    assert hits
    assert hits[0].startswith("DCGM_FI_DEV_GPU_UTIL\t203\t")


def test_csv_option_prints_the_default_counters_file(capsys):
    main(["fields", "--csv"])  # returns: exit status 0
    assert capsys.readouterr().out == DEFAULT_COUNTERS_CSV
