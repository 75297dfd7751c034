import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuscale.evaluate.results import (
    evaluation_from,
    histogram_quantile,
    load_results,
    summarise,
    write_results,
)
from gpuscale.sim.outcome import RunResult, Timeline


def make_result(
    policy="static",
    *,
    requests=1000.0,
    within=900.0,
    dropped=10.0,
    gpu_seconds=7200.0,
    busy=3600.0,
    counts=(0.0, 500.0, 490.0, 0.0),
    edges=(0.0, 1.0, 2.0, 4.0, math.inf),
    steps=6,
):
    n = steps
    zeros = np.zeros(n)
    timeline = Timeline(
        time_s=np.arange(n) * 10.0,
        demand_rps=np.full(n, 5.0),
        capacity_rps=np.full(n, 6.0),
        desired_replicas=np.full(n, 2.0),
        ready_replicas=np.full(n, 2.0),
        allocated_gpus=np.full(n, 2.0),
        gpu_utilization=np.full(n, 0.5),
        p50_latency_s=np.where(np.arange(n) == 0, np.nan, 1.0),
        p99_latency_s=zeros + 3.0,
    )
    return RunResult(
        policy=policy,
        timeline=timeline,
        requests=requests,
        within_slo=within,
        dropped=dropped,
        latency_edges_s=np.asarray(edges, dtype=float),
        latency_counts=np.asarray(counts, dtype=float),
        gpu_seconds=gpu_seconds,
        busy_gpu_seconds=busy,
        scale_events=3,
    )


def test_summary_converts_gpu_seconds_to_hours_and_fractions():
    s = summarise(make_result(), {"replicas": 2})
    assert s.gpu_hours == pytest.approx(2.0)
    assert s.slo_attainment == pytest.approx(0.9)
    assert s.mean_gpu_utilization == pytest.approx(0.5)
    assert s.requests == 1000.0
    assert s.dropped_requests == 10.0
    assert s.scale_events == 3
    assert s.parameters == {"replicas": 2}


def test_summary_latency_percentiles_interpolate_inside_bins():
    s = summarise(make_result())
    # 990 completions: the median (rank 495) lies in [1, 2) at 495/500 of the bin.
    assert s.p50_latency_s == pytest.approx(1.0 + 495 / 500)
    # p99 rank 980.1 lies in [2, 4): (980.1 - 500) / 490 of the way.
    assert s.p99_latency_s == pytest.approx(2.0 + 2.0 * (980.1 - 500) / 490)


def test_summary_of_an_idle_run_reports_missing_values_not_zero():
    s = summarise(
        make_result(requests=0.0, within=0.0, gpu_seconds=0.0, busy=0.0, counts=(0, 0, 0, 0))
    )
    assert s.slo_attainment is None
    assert s.mean_gpu_utilization is None
    assert s.p50_latency_s is None
    assert s.p99_latency_s is None


def test_quantile_in_open_last_bin_returns_its_lower_edge():
    edges = np.array([0.0, 1.0, math.inf])
    assert histogram_quantile(edges, np.array([0.0, 5.0]), 0.99) == 1.0


@given(
    counts=st.lists(st.integers(min_value=0, max_value=1000), min_size=1, max_size=20),
    q=st.floats(min_value=0.01, max_value=1.0),
)
def test_histogram_quantile_stays_within_edges_and_is_monotone(counts, q):
    arr = np.asarray(counts, dtype=float)
    edges = np.arange(len(counts) + 1, dtype=float) * 0.5
    value = histogram_quantile(edges, arr, q)
    if arr.sum() == 0:
        assert value is None
        return
    assert value is not None
    assert edges[0] <= value <= edges[-1]
    lower = histogram_quantile(edges, arr, q / 2)
    assert lower is not None
    assert lower <= value + 1e-12


def test_results_json_has_required_keys_per_policy(tmp_path):
    evaluation = evaluation_from(
        trace="diurnal",
        seed=7,
        duration_s=60.0,
        scale=2.0,
        slo_latency_s=5.0,
        timeout_s=30.0,
        faults=["gpu-lost@10"],
        runs=[
            (make_result("static"), {"replicas": 2}),
            (make_result("oracle", gpu_seconds=3600.0), {}),
        ],
    )
    path = tmp_path / "results.json"
    write_results(evaluation, path)
    data = load_results(path)
    assert data["trace"] == "diurnal"
    assert data["seed"] == 7
    assert data["duration_s"] == 60.0
    assert data["faults"] == ["gpu-lost@10"]
    assert list(data["policies"]) == ["static", "oracle"]
    static = data["policies"]["static"]
    for key in (
        "gpu_hours",
        "slo_attainment",
        "mean_gpu_utilization",
        "p50_latency_s",
        "p99_latency_s",
        "requests",
        "dropped_requests",
        "scale_events",
    ):
        assert key in static
    assert static["gpu_hours"] == pytest.approx(2.0)
    assert evaluation.gpu_hours_vs("oracle") == {"static": pytest.approx(2.0), "oracle": 1.0}
    # strict JSON: no NaN tokens
    json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))


def test_ratio_to_missing_reference_is_none():
    evaluation = evaluation_from(
        trace="t",
        seed=0,
        duration_s=1.0,
        scale=1.0,
        slo_latency_s=1.0,
        timeout_s=1.0,
        faults=[],
        runs=[(make_result("hpa"), {})],
    )
    assert evaluation.gpu_hours_vs("oracle") == {"hpa": None}
