"""bench/bench_hybrid.py --update: a rerun replaces only the stored runs it names."""

import pytest

from tests.support.bench import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("bench_hybrid")


def entry(trace, scale=1.0, faults=(), value=0.0):
    return {"trace": trace, "scale": scale, "faults": list(faults), "value": value}


def test_a_rerun_replaces_its_run_in_place_and_keeps_the_others(bench):
    stored = [entry("ramp"), entry("ramp", faults=["gpu-lost@1200"]), entry("diurnal", 4.0)]
    rerun = [entry("ramp", value=1.0), entry("bursty", value=2.0)]
    got = bench.updated(stored, rerun)
    assert [(e["trace"], e["faults"], e["value"]) for e in got] == [
        ("ramp", [], 1.0),  # replaced where it stood
        ("ramp", ["gpu-lost@1200"], 0.0),  # same trace, other faults: kept
        ("diurnal", [], 0.0),
        ("bursty", [], 2.0),  # new: appended
    ]


def test_the_same_trace_at_another_scale_is_another_run(bench):
    got = bench.updated([entry("diurnal", 1.0)], [entry("diurnal", 4.0, value=1.0)])
    assert [(e["scale"], e["value"]) for e in got] == [(1.0, 0.0), (4.0, 1.0)]
