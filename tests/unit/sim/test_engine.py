"""The simulation loop: policies see only delayed telemetry; runs are reproducible."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.errors import ConfigError
from gpuscale.metrics.signal import Signal
from gpuscale.scaling.policy import PROMETHEUS_QUERY
from gpuscale.sim.cluster import ClusterConfig
from gpuscale.sim.engine import simulate
from gpuscale.sim.workload import Workload
from tests.support.sim import Recorder, scenario, smooth, workload


def test_policy_sees_gpu_util_through_the_store_after_scrape_and_rule_delay():
    rate = np.zeros(1200)
    rate[600:] = 1.6  # 80 % of two replicas from t=600
    policy = Recorder(replicas=2)
    simulate(scenario(smooth(rate)), policy)
    seen = {o.now: np.mean(list(o.pod_metrics["util"].values())) for o in policy.seen if o.healthy}
    assert set(seen) >= {600.0, 625.0, 630.0, 635.0}
    # Hidden utilisation is ~80 % from t=600. The scrape at 615 is the first to show it,
    # and a policy evaluating 15 s in the past first sees it at t=630: 30 s late.
    assert max(v for t, v in seen.items() if t < 630) < 5.0
    assert seen[630.0] > 50.0  # this scrape's window still holds the ramp up
    # GPU_UTIL is NVML's last 1 s sample at each 30 s collect: it follows the queue's ramp.
    assert min(v for t, v in seen.items() if t >= 690) == pytest.approx(80.0, abs=2.0)


def test_without_rule_delay_the_lag_is_one_scrape():
    rate = np.zeros(1200)
    rate[600:] = 1.6
    policy = Recorder(replicas=2, signal_path=PROMETHEUS_QUERY)
    simulate(scenario(smooth(rate)), policy)
    seen = {o.now: np.mean(list(o.pod_metrics["util"].values())) for o in policy.seen if o.healthy}
    assert seen[610.0] < 5.0
    assert seen[615.0] > 50.0
    assert seen[690.0] == pytest.approx(80.0, abs=2.0)


def test_the_step_holds_until_data_exists_then_the_policy_sees_the_deployment_status():
    policy = Recorder(replicas=3)
    result = simulate(scenario(workload(np.full(300, 1.0))), policy)
    # Through a 15 s recording rule nothing is there before 15 s: the decision step holds
    # (the fail-safe's "missing"), as the controller would, and the policy is not asked.
    assert dict(result.holds)["missing"] == 3  # at 0, 5 and 10 s
    first, later = policy.seen[0], policy.seen[7]
    assert first.now == 15.0
    assert first.healthy
    assert later.now == 50.0
    assert later.healthy
    assert later.target.desired == 3
    assert later.target.ready == 2  # the third pod is still cold-starting (60 s)
    assert later.target.starting == 1
    # A starting pod already holds its GPU, so dcgm-exporter reports it, idle.
    util = later.pod_metrics["util"]
    assert sorted(util) == ["inference-00001", "inference-00002", "inference-00003"]
    assert util["inference-00003"] == 0.0


def test_serving_and_dcgm_series_carry_production_names_and_labels():
    names = [
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        "DCGM_FI_DEV_XID_ERRORS",
        "gpuscale_serving_requests_in_flight",
        "gpuscale_serving_requests_total",
    ]
    policy = Recorder(
        replicas=2,
        pod_signals={n: Signal(n, aggregation="max", by=("pod",)) for n in names},
        signals={
            "queue": Signal("gpuscale_serving_queue_requests", aggregation="sum"),
            "labels": Signal("DCGM_FI_DEV_GPU_UTIL"),
        },
    )
    simulate(scenario(workload(np.full(600, 1.6))), policy)
    last = policy.seen[-1]
    for n in names:
        assert set(last.pod_metrics[n]) == {"inference-00001", "inference-00002"}, n
    assert 60 <= last.pod_metrics["DCGM_FI_DEV_GPU_UTIL"]["inference-00001"] <= 100
    assert 0.5 < last.pod_metrics["gpuscale_serving_requests_in_flight"]["inference-00002"] <= 1
    assert last.pod_metrics["gpuscale_serving_requests_total"]["inference-00001"] > 300
    assert last.pod_metrics["DCGM_FI_DEV_FB_USED"]["inference-00001"] > 15_000  # MiB
    assert last.latest("queue") is not None


def test_the_received_counter_counts_every_arrival_before_the_scrape_dropped_or_not():
    # Twice what one replica serves: the queue fills and requests time out, yet the
    # gateway's counter still counts each that arrived, as a gateway in front would.
    wl = workload(np.full(600, 2.0))
    name = "gpuscale_serving_requests_received_total"
    policy = Recorder(replicas=1, signals={"received": Signal(name, aggregation="sum")})
    sc = scenario(wl)
    res = simulate(sc, policy)
    assert res.dropped > 0
    before = np.floor(np.concatenate(([0.0], np.cumsum(wl.arrivals))))  # by second
    scrapes = np.arange(0, 600, sc.scrape_interval_s).astype(int)
    points = [p for seen in policy.seen for p in seen.series["received"]]
    assert len({t for t, _ in points}) > 10
    for t, value in points:  # a query reads the newest scrape at or before its time
        newest = scrapes[scrapes <= t][-1]
        assert value == before[newest], t


def test_run_result_totals_and_timeline_are_consistent():
    wl = workload(np.full(1800, 1.2))
    res = simulate(scenario(wl, record_interval_s=10.0), Recorder(replicas=[2, 3]))
    tl = res.timeline
    assert tl.time_s.shape == (180,)
    assert tl.time_s[:3].tolist() == [0.0, 10.0, 20.0]
    assert res.requests == float(wl.arrivals.sum())
    assert res.gpu_seconds == pytest.approx(float(tl.allocated_gpus.sum() * 10.0))
    assert 0.0 < res.busy_gpu_seconds < res.gpu_seconds
    assert res.within_slo <= res.requests
    served = float(res.latency_counts.sum())
    assert served == pytest.approx(res.completed_requests, rel=1e-9)
    assert served + res.dropped + res.in_flight_requests == pytest.approx(res.requests, rel=1e-9)
    assert res.latency_edges_s.size == res.latency_counts.size + 1
    assert res.scale_events > 10  # the policy alternates between 2 and 3
    assert np.all((tl.gpu_utilization >= 0) & (tl.gpu_utilization <= 1))
    assert np.nanmedian(tl.p50_latency_s) < np.nanmedian(tl.p99_latency_s)
    assert tl.demand_rps.mean() == pytest.approx(wl.arrivals.mean(), rel=1e-9)


def test_scale_up_becomes_capacity_only_after_cold_start():
    policy = Recorder(replicas=4, signal_path=PROMETHEUS_QUERY)
    res = simulate(scenario(workload(np.full(300, 0.5)), record_interval_s=1.0), policy)
    tl = res.timeline
    assert tl.desired_replicas[1] == 4
    assert tl.ready_replicas[59] == 2
    assert tl.ready_replicas[61] == 4
    assert tl.allocated_gpus[1] == 4
    assert tl.capacity_rps[59] == pytest.approx(2.0)
    assert tl.capacity_rps[61] == pytest.approx(4.0)


def test_decisions_are_clamped_to_the_policy_bounds():
    policy = Recorder(replicas=[100, -5], min_replicas=1, max_replicas=6)
    policy.signal_path = PROMETHEUS_QUERY  # data from the first decision on: no hold
    res = simulate(scenario(workload(np.full(120, 0.5)), record_interval_s=5.0), policy)
    desired = set(res.timeline.desired_replicas.tolist())
    assert desired <= {1.0, 6.0}
    assert desired == {1.0, 6.0}


def run(seed: int):
    rate = np.concatenate([np.full(600, 1.0), np.full(1200, 6.0)])
    sc = scenario(
        workload(rate, seed=1),
        seed=seed,
        cluster=ClusterConfig(gpus_per_node=4, initial_nodes=1, max_nodes=4),
    )
    return simulate(sc, Recorder(replicas=[2, 8, 8, 8]))


def test_same_scenario_seed_and_policy_give_identical_results():
    a, b = run(5), run(5)
    for name in a.timeline.__slots__:
        assert np.array_equal(getattr(a.timeline, name), getattr(b.timeline, name), equal_nan=True)
    assert (a.requests, a.within_slo, a.dropped, a.gpu_seconds, a.busy_gpu_seconds) == (
        b.requests,
        b.within_slo,
        b.dropped,
        b.gpu_seconds,
        b.busy_gpu_seconds,
    )
    assert np.array_equal(a.latency_counts, b.latency_counts)
    c = run(6)  # other cold-start draws
    assert not np.array_equal(a.timeline.ready_replicas, c.timeline.ready_replicas)


def test_progress_is_reported_up_to_one():
    calls: list[float] = []
    simulate(scenario(workload(np.full(500, 1.0))), Recorder(), progress=calls.append)
    assert calls[0] == 0.0
    assert calls[-1] == 1.0
    assert calls == sorted(calls)


def test_state_is_kept_between_decisions():
    policy = Recorder(signal_path=PROMETHEUS_QUERY)
    simulate(scenario(workload(np.full(100, 1.0))), policy)
    assert len(policy.seen) == 20


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [({"slo_latency_s": 0.0}, "slo_latency_s"), ({"initial_replicas": 99}, "initial_replicas")],
)
def test_bad_scenario_is_a_config_error(kwargs, key):
    with pytest.raises(ConfigError, match=f"scenario.{key}"):
        scenario(workload(np.full(10, 1.0)), **kwargs)


def test_empty_workload_is_a_config_error():
    empty = Workload("none", np.zeros(0), np.zeros(0))
    with pytest.raises(ConfigError, match="empty"):
        simulate(scenario(empty), Recorder())


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(-10, 40), min_size=1, max_size=8), st.integers(0, 3))
def test_desired_replicas_always_within_bounds(wants, low):
    policy = Recorder(replicas=wants, min_replicas=low, max_replicas=low + 5)
    res = simulate(scenario(workload(np.full(120, 1.0)), record_interval_s=1.0), policy)
    d = res.timeline.desired_replicas
    assert d.min() >= low
    assert d.max() <= low + 5
    assert res.timeline.ready_replicas.max() <= max(d.max(), 2)
    assert math.isfinite(res.gpu_seconds)
