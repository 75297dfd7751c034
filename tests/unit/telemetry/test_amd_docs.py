"""docs/amd.md says what the code does: one table row per series, with its amdsmi call."""

import re
from pathlib import Path

from gpuscale.fields.amd import (
    AMD_FIELDS,
    AMD_MANDATORY_LABELS,
    AMD_PROFILER_ONLY,
    PROFILER_COUNTERS,
)
from gpuscale.telemetry.amd_reads import FEEDS

DOC = Path(__file__).resolve().parents[3] / "docs" / "amd.md"


def test_every_series_has_a_row_naming_its_unit_and_call():
    rows = {
        m.group(1): (m.group(2), m.group(3))
        for m in re.finditer(r"^\| `(\w+)` \| ([^|]+) \| `?([^|`]+)`? \|", DOC.read_text(), re.M)
    }
    assert set(rows) == set(AMD_FIELDS)
    for name, (unit, call) in rows.items():
        assert unit.strip() == AMD_FIELDS[name].unit, name
        if name in FEEDS:
            assert FEEDS[name].startswith(call.strip()), name
        if name in AMD_PROFILER_ONLY:
            assert call.strip() == "rocpctl", name
    for name, (counter, _) in PROFILER_COUNTERS.items():
        row = re.search(rf"^\| `{name}` \|.*$", DOC.read_text(), re.M)
        assert row is not None
        assert f"`{counter}`" in row.group(0), name  # the rocprofiler counter behind it


def test_doc_names_the_labels_and_what_is_absent():
    text = DOC.read_text()
    assert all(f"`{label}`" in text for label in AMD_MANDATORY_LABELS)
    assert all(f"`{name}`" in text for name in AMD_PROFILER_ONLY)
