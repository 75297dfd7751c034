"""A small-budget run of ``bench/fuzz_parsers.py``: every user-fed parser, 50 inputs each.

The bench itself runs 1,000 inputs per parser; this keeps the same targets,
inputs and checks in the suite at a cost of a few seconds.
"""

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "bench" / "fuzz_parsers.py"
EXAMPLES = 50


def _bench():
    spec = importlib.util.spec_from_file_location("fuzz_parsers", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fuzz_parsers = _bench()
NAMES = [t.name for t in fuzz_parsers.targets(Path("/nonexistent"))]


@pytest.mark.parametrize("name", NAMES)
def test_parser_never_tracebacks_hangs_or_accepts_the_invalid(tmp_path, name):
    (target,) = [t for t in fuzz_parsers.targets(tmp_path) if t.name == name]
    tally = fuzz_parsers.fuzz(target, EXAMPLES)
    assert tally.inputs >= EXAMPLES // 2  # hypothesis may stop early on a small input space
    assert tally.tracebacks == 0, tally.first_problem
    assert tally.hangs == 0, tally.first_problem
    assert tally.invalid == 0, tally.first_problem
    assert tally.multiline == 0, tally.first_problem
    assert tally.accepted + tally.refused == tally.inputs
