"""Hybrid scaling: the larger of plan and reactive need, on healthy Ready capacity only."""

import dataclasses
import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuscale.errors import ConfigError
from gpuscale.scaling import health, hybrid, service_time
from gpuscale.scaling.demand import rising
from gpuscale.scaling.health import HealthState
from gpuscale.scaling.hybrid import TTFT, HybridConfig, HybridPolicy, HybridState
from gpuscale.scaling.policy import Observation, PodStatus, TargetStatus
from gpuscale.scaling.predictive import DEMAND_METRICS
from tests.support.policystate import through_json

IN_FLIGHT, QUEUE = DEMAND_METRICS
STEP_S = 15.0
LONG_AGO = HybridState(started_at=0.0)
"""State of a policy whose first decision was long ago (past its start-up hold)."""
FLAT = HybridConfig(per_replica=10.0, stabilization_window_s=0.0, scale_down_percent=100.0)
"""Demand of 10 per replica and no stabilisation, so one decision shows the need."""


def ready_pods(n, ready_at=-1000.0):
    return tuple(PodStatus(f"p{i}", True, ready_at, ready_at) for i in range(n))


def observe(now, target, demand, pod_metrics=None, series=None):
    points = tuple((now - STEP_S * (len(demand) - 1 - i), float(v)) for i, v in enumerate(demand))
    all_series = {IN_FLIGHT: points, QUEUE: tuple((t, 0.0) for t, _ in points), **(series or {})}
    return Observation(now, target, pod_metrics or {}, all_series)


def metrics(n, sm=0.3, **per_pod):
    """Per-pod metrics for pods p0..p{n-1}; ``per_pod`` overrides by key: {pod: value}."""
    base = {
        health.SM: {f"p{i}": sm for i in range(n)},
        health.XID: {f"p{i}": 0.0 for i in range(n)},
        health.DBE: {f"p{i}": 0.0 for i in range(n)},
        health.THERMAL: {f"p{i}": 0.0 for i in range(n)},
        health.DONE: {f"p{i}": 0.0 for i in range(n)},
    }
    for key, values in per_pod.items():
        base[key] = {**base[key], **values}
    return base


def test_reactive_sm_need_wins_over_a_low_forecast():
    # Demand says 1 replica; 8 Ready pods each 0.95 SM active (above the 0.9 guard)
    # need ceil(7.6 / 0.9) = 9.
    target = TargetStatus(8, ready_pods(8))
    m = metrics(8, sm=0.95)
    d = HybridPolicy(FLAT).decide(observe(600.0, target, [5.0] * 41, m), LONG_AGO)
    assert d.replicas == 9
    assert "SM 7.60 -> 9" in d.reason


def test_sm_below_its_guard_sets_no_level():
    # An LLM server's SMs read ~0.5 at a light batch: below the guard they do not hold
    # the fleet up, so the demand (1 replica) drives a scale-in.
    target = TargetStatus(8, ready_pods(8))
    d = HybridPolicy(FLAT).decide(observe(600.0, target, [5.0] * 41, metrics(8, sm=0.5)), LONG_AGO)
    assert "SM 4.00 -> 0" in d.reason
    assert d.replicas < 8


def test_no_scale_in_while_requests_queue():
    # In flight is bounded by the Ready pods when they are short: a queue blocks scale-in
    # even when the served load alone would allow it.
    target = TargetStatus(8, ready_pods(8))
    demand = [5.0] * 41
    queue = tuple((600.0 - STEP_S * (40 - i), 50.0) for i in range(41))
    obs = observe(600.0, target, demand, metrics(8))
    obs = Observation(obs.now, obs.target, obs.pod_metrics, {**obs.series, QUEUE: queue})
    d = HybridPolicy(FLAT).decide(obs, LONG_AGO)
    assert d.replicas >= 8


def test_queued_requests_count_at_the_share_of_a_cold_start_a_service_takes():
    # 10 pods completed 20 requests each in 15 s with 100 in flight: service time
    # 100 / (200 / 15) = 7.5 s, an eighth of the 60 s default cold start; 400 queued
    # count as 50.
    target = TargetStatus(10, ready_pods(10))
    first = metrics(10)
    policy = HybridPolicy(FLAT)
    queue0 = tuple((585.0 - STEP_S * (40 - i), 0.0) for i in range(41))
    o1 = observe(585.0, target, [100.0] * 41, first)
    o1 = Observation(o1.now, o1.target, o1.pod_metrics, {**o1.series, QUEUE: queue0})
    d1 = policy.decide(o1, LONG_AGO)
    later = metrics(10, **{health.DONE: {f"p{i}": 20.0 for i in range(10)}})
    # The queue has held 400 for the last minute: no growth.
    queue = tuple((600.0 - STEP_S * (40 - i), 0.0 if i < 36 else 400.0) for i in range(41))
    o2 = observe(600.0, target, [100.0] * 41, later)
    o2 = Observation(o2.now, o2.target, o2.pod_metrics, {**o2.series, QUEUE: queue})
    d2 = policy.decide(o2, d1.state)
    assert "demand 150.00 -> 15" in d2.reason
    # Growing by 2 requests per second over the last minute: 2 x 7.5 s = 15 more in flight.
    rising_q = tuple((t, 400.0 - 2.0 * (600.0 - t) if t > 540.0 else 0.0) for t, _ in queue)
    o3 = Observation(o2.now, o2.target, o2.pod_metrics, {**o2.series, QUEUE: rising_q})
    d3 = policy.decide(o3, d1.state)
    assert "demand 165.00 -> 17" in d3.reason


def scale_in_with_a_queue(queued: float, cfg: HybridConfig) -> int:
    """Replicas after 10 pods serving 50 in flight (need 5) see ``queued`` requests wait.

    A first decision at 100 in flight sets the completion counters; by the second the
    pods have completed 200 requests in 15 s: service time 50 / (200 / 15) = 3.75 s.
    """
    target, policy = TargetStatus(10, ready_pods(10)), HybridPolicy(cfg)
    d1 = policy.decide(observe(585.0, target, [100.0] * 41, metrics(10)), LONG_AGO)
    assert d1.replicas >= 10  # no scale-in yet, so no cool-down at the second
    later = metrics(10, **{health.DONE: {f"p{i}": 20.0 for i in range(10)}})
    obs = observe(600.0, target, [50.0] * 41, later)
    queue = tuple((t, 0.0 if t < 560.0 else queued) for t, _ in obs.series[IN_FLIGHT])
    obs = Observation(obs.now, obs.target, obs.pod_metrics, {**obs.series, QUEUE: queue})
    return policy.decide(obs, d1.state).replicas


@pytest.mark.parametrize(
    ("queued", "wait_s", "scales_in"),
    [
        (2.0, None, False),  # without a wait bound any queue holds
        (2.0, 1.0, True),  # 2 x 3.75 / 50 = 0.15 s expected wait: ordinary
        (40.0, 1.0, False),  # 40 queued: 3 s, over the bound
    ],
)
def test_a_queue_holds_scale_in_only_when_its_expected_wait_is_long(queued, wait_s, scales_in):
    cfg = HybridConfig(
        per_replica=10.0,
        stabilization_window_s=0.0,
        scale_down_percent=100.0,
        queue_wait_s=wait_s,
    )
    assert (scale_in_with_a_queue(queued, cfg) < 10) is scales_in


@pytest.mark.parametrize(("queued", "scales_in"), [(0.0, True), (5.0, False)])
def test_a_queue_beside_idle_pods_holds_scale_in(queued, scales_in):
    # Completions but nothing in flight: a service time of 0 s says nothing of the
    # queue's wait, which is then unknown and holds, as without a bound.
    cfg = HybridConfig(
        per_replica=10.0, stabilization_window_s=0.0, scale_down_percent=100.0, queue_wait_s=1.0
    )
    target, policy = TargetStatus(10, ready_pods(10)), HybridPolicy(cfg)
    d1 = policy.decide(observe(585.0, target, [100.0] * 41, metrics(10)), LONG_AGO)
    assert d1.replicas >= 10
    later = metrics(10, **{health.DONE: {f"p{i}": 20.0 for i in range(10)}})
    obs = observe(600.0, target, [0.0] * 41, later)
    queue = tuple((t, queued) for t, _ in obs.series[IN_FLIGHT])
    obs = Observation(obs.now, obs.target, obs.pod_metrics, {**obs.series, QUEUE: queue})
    assert (policy.decide(obs, d1.state).replicas < 10) is scales_in


@pytest.mark.parametrize("leave_out", [True, False])
def test_the_load_scale_in_agrees_with_leaves_out_a_drained_backlog(leave_out, monkeypatch):
    # 10 pods served 100 in flight while 100 more queued (a 2.25 s expected wait, over
    # the 1 s bound) until t = 450 s, then 30 with nothing queued. The 100 was their
    # capacity draining the backlog: the observed peak of the last 300 s must not hold
    # the fleet for it. Without ``served_since`` it does (10 replicas).
    if not leave_out:
        monkeypatch.setattr(hybrid, "served_since", lambda points, since, smoothing_s: points)
    cfg = HybridConfig(
        per_replica=10.0, stabilization_window_s=0.0, scale_down_percent=100.0, queue_wait_s=1.0
    )
    target, policy = TargetStatus(10, ready_pods(10)), HybridPolicy(cfg)
    d1 = policy.decide(observe(585.0, target, [100.0] * 41, metrics(10)), LONG_AGO)
    later = metrics(10, **{health.DONE: {f"p{i}": 20.0 for i in range(10)}})
    obs = observe(600.0, target, [100.0] * 31 + [30.0] * 10, later)
    busy = obs.series[IN_FLIGHT]
    queue = tuple((t, 100.0 if v > 50.0 else 0.0) for t, v in busy)
    obs = Observation(obs.now, obs.target, obs.pod_metrics, {**obs.series, QUEUE: queue})
    assert max(t for t, v in busy if v > 50.0) == 450.0
    decision = policy.decide(obs, dataclasses.replace(d1.state, last_in=None))
    # the plan: the forecast's q0.9 of 30 in flight at 10 per replica
    assert decision.replicas == (4 if leave_out else 10), decision.reason


def test_a_starting_pod_is_not_capacity():
    pods = (*ready_pods(4), PodStatus("p4", False, 590.0, None))
    target = TargetStatus(5, pods)
    m = metrics(4, sm=0.95)
    d = HybridPolicy(FLAT).decide(observe(600.0, target, [5.0] * 41, m), LONG_AGO)
    assert "SM 3.80 -> 5" in d.reason  # the four Ready pods only
    assert d.replicas == 5


def test_queue_and_in_flight_drive_the_reactive_need():
    target = TargetStatus(2, ready_pods(2))
    demand = [20.0] * 40 + [95.0]
    d = HybridPolicy(FLAT).decide(observe(600.0, target, demand, metrics(2)), LONG_AGO)
    assert "demand 95.00 -> 10" in d.reason
    assert d.replicas == 10


def test_ttft_over_its_slo_adds_replicas():
    cfg = HybridConfig(per_replica=10.0, ttft_metric="ttft_p95_seconds", ttft_slo_s=1.0)
    target = TargetStatus(4, ready_pods(4))
    series = {TTFT: ((600.0, 2.5),)}
    d = HybridPolicy(cfg).decide(observe(600.0, target, [5.0] * 41, metrics(4), series), LONG_AGO)
    assert "TTFT 2.50 s > 1 s -> 10" in d.reason
    assert d.replicas == 10  # within one step: max(8 pods, 100 %)


@pytest.mark.parametrize(
    ("override", "why"),
    [
        ({health.XID: {"p1": 79.0}}, "xid 79"),
        ({health.DBE: {"p1": 1.0}}, "dbe"),
        ({health.SM: {"p1": float("nan")}}, "lost"),
    ],
)
def test_a_sick_gpu_is_not_capacity_and_is_replaced(override, why):
    target = TargetStatus(4, ready_pods(4))
    m = metrics(4, sm=0.95)
    if why == "lost":
        del m[health.SM]["p1"]
    else:
        m = metrics(4, sm=0.95, **override)
    d = HybridPolicy(FLAT).decide(observe(600.0, target, [5.0] * 41, m), LONG_AGO)
    assert d.state.sick == {"p1": why}
    assert "SM 2.85 -> 4" in d.reason  # three healthy pods
    assert d.replicas == 5  # 4 needed + 1 to replace p1


def test_quarantine_outlasts_the_event_and_then_ends():
    cfg = HybridConfig(per_replica=10.0, health=health.HealthConfig(quarantine_s=300.0))
    policy, target = HybridPolicy(cfg), TargetStatus(4, ready_pods(4))
    m = metrics(4, **{health.DBE: {"p2": 3.0}})
    d1 = policy.decide(observe(600.0, target, [5.0] * 41, m), LONG_AGO)
    d2 = policy.decide(observe(615.0, target, [5.0] * 41, m), d1.state)
    d3 = policy.decide(observe(915.0, target, [5.0] * 41, m), d2.state)
    assert d1.state.sick == d2.state.sick == {"p2": "dbe"}
    assert d3.state.sick == {}


def test_thermal_throttling_and_stragglers_are_judged_on_rates():
    policy, target = HybridPolicy(FLAT), TargetStatus(5, ready_pods(5))
    first = metrics(5)
    d1 = policy.decide(observe(600.0, target, [5.0] * 41, first), LONG_AGO)
    # 15 s later: p0 spent 6 s of 15 s throttled; p3 completed 2 requests to the others' 30.
    later = metrics(
        5,
        **{
            health.THERMAL: {"p0": 6e9},  # ns, as DCGM reports it
            health.DONE: {"p0": 30.0, "p1": 30.0, "p2": 30.0, "p3": 2.0, "p4": 30.0},
        },
    )
    d2 = policy.decide(observe(615.0, target, [5.0] * 41, later), d1.state)
    assert d2.state.sick == {"p0": "throttled", "p3": "straggler"}


@pytest.mark.parametrize(
    ("others", "slow", "straggles"),
    [
        (1.0, 0.0, False),  # one 35 s request at a time: 0 against 1 has probability 0.37
        (4.0, 1.0, False),  # 1 against 4: 0.09
        (30.0, 2.0, True),  # 2 against 30: 5e-11
        (30.0, 20.0, False),  # 20 against 30 is above half the median
    ],
)
def test_a_straggler_needs_a_count_improbable_at_the_median_rate(others, slow, straggles):
    policy, target = HybridPolicy(FLAT), TargetStatus(5, ready_pods(5))
    d1 = policy.decide(observe(600.0, target, [5.0] * 41, metrics(5)), LONG_AGO)
    done = {f"p{i}": others for i in range(5)} | {"p3": slow}
    d2 = policy.decide(
        observe(615.0, target, [5.0] * 41, metrics(5, **{health.DONE: done})), d1.state
    )
    assert (d2.state.sick == {"p3": "straggler"}) is straggles
    assert d2.state.sick in ({}, {"p3": "straggler"})


def test_a_pod_first_seen_without_gpu_series_is_judged_once_they_appear():
    policy, target = HybridPolicy(FLAT), TargetStatus(3, ready_pods(3))
    d1 = policy.decide(observe(600.0, target, [5.0] * 41, {}), LONG_AGO)
    d2 = policy.decide(observe(615.0, target, [5.0] * 41, metrics(3)), d1.state)
    d3 = policy.decide(
        observe(630.0, target, [5.0] * 41, metrics(3, **{health.DBE: {"p1": 2.0}})), d2.state
    )
    assert d1.state.sick == d2.state.sick == {}
    assert d3.state.sick == {"p1": "dbe"}


def test_config_checks_both_parts():
    with pytest.raises(ConfigError, match=r"^HybridConfig\.sm_target=0\.0: out of range"):
        HybridConfig(sm_target=0.0)
    with pytest.raises(ConfigError, match=r"^HybridConfig\.per_replica=-1\.0: out of range"):
        HybridConfig(per_replica=-1.0)


def test_declares_its_signals_and_path():
    p = HybridPolicy()
    assert (p.signal_path.source, p.signal_path.delay_s) == ("prometheus", 0.0)
    assert set(p.signals) == set(DEMAND_METRICS)
    assert p.pod_signals[health.SM].metric == "DCGM_FI_PROF_SM_ACTIVE"
    assert p.history_s == 600.0


# ----------------------------------------------------------------- properties
@st.composite
def paths(draw):
    """Demand every 15 s, and SM activity per Ready pod at each step."""
    n = draw(st.integers(1, 50))
    demand = draw(st.lists(st.floats(0.0, 300.0, allow_nan=False), min_size=n, max_size=n))
    sm = draw(st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=n, max_size=n))
    queued = draw(st.lists(st.floats(0.0, 50.0, allow_nan=False), min_size=n, max_size=n))
    return demand, sm, queued


def run(policy, demand, sm, queued, start):
    """Decisions along a path; each pod completes 5 requests per step (service time known)."""
    state = policy.initial_state()
    current = start
    history, backlog = [demand[0]] * 40, [0.0] * 40
    for i, (v, s, q) in enumerate(zip(demand, sm, queued, strict=True)):
        history, backlog = [*history[1:], v], [*backlog[1:], q]
        now = 600.0 + STEP_S * i
        target = TargetStatus(current, ready_pods(current))
        done = {health.DONE: {f"p{k}": 5.0 * i for k in range(current)}}
        obs = observe(now, target, history, metrics(current, sm=s, **done))
        times = [t for t, _ in obs.series[IN_FLIGHT]]
        queue = tuple(zip(times, backlog, strict=True))
        obs = Observation(obs.now, obs.target, obs.pod_metrics, {**obs.series, QUEUE: queue})
        d = policy.decide(obs, state)
        yield now, current, obs, d, state
        state = through_json(policy, d.state)
        current = d.replicas


WINDOWS = st.sampled_from([(0.0, 0.0), (300.0, 0.0), (300.0, 300.0)])
"""(stabilisation window, scale-in window): with both 0 only the rise rule stops a scale-in."""
WAITS = st.sampled_from([None, 0.0, 2.0])
"""``queue_wait_s``: any queue holds, any queue with a known service time holds, or 2 s."""


@settings(max_examples=100, deadline=None)
@given(
    paths(),
    st.integers(1, 4),
    st.integers(0, 40),
    WINDOWS,
    st.booleans(),
    st.sampled_from([1, 4]),
    WAITS,
)
def test_property_bounds_rise_and_stabilisation(path, low, span, windows, start_high, size, wait):
    stable, scale_in = windows
    cfg = HybridConfig(
        queue_wait_s=wait,
        node_size=size,
        per_replica=10.0,
        min_replicas=low,
        max_replicas=low + span,
        stabilization_window_s=stable,
        scale_in_window_s=scale_in,
        scale_down_percent=100.0,
    )
    last_up = None
    start = low + span if start_high else low
    for now, current, obs, d, _ in run(HybridPolicy(cfg), *path, start=start):
        assert cfg.min_replicas <= d.replicas <= cfg.max_replicas
        if rising(obs.series[IN_FLIGHT], now, cfg.rise_window_s):
            assert d.replicas >= current, d.reason
        if last_up is not None and now - last_up < cfg.stabilization_window_s:
            assert d.replicas >= current, d.reason
        if d.replicas > current:
            last_up = now


@settings(max_examples=100, deadline=None)
@given(paths(), st.sampled_from([None, 1, 4]), st.sampled_from([0.0, 2.0]), st.integers(1, 8))
# A subnormal request in service and in the queue read a pod's slots as 2e-311, and
# Erlang's staffing over them overflowed; a pod serves at least one request at a time.
@example(
    ([0.0] * 3 + [2.2e-311] + [0.0] * 10, [0.0] * 14, [0.0] * 3 + [2.2e-311] + [0.0] * 10),
    None,
    0.0,
    1,
)
def test_property_told_its_target_it_decides_within_bounds_on_any_load(path, slots, budget, low):
    # The learned floor, Erlang's staffing and the service time on any demand, the
    # idle fleet whose pods complete requests never seen in service included.
    cfg = HybridConfig(
        per_replica=10.0,
        min_replicas=low,
        max_replicas=low + 40,
        queue_wait_s=0.5,
        wait_budget_s=budget,
        target_attainment=0.99,
        pod_concurrency=slots,
        service_completions=1,
    )
    policy = HybridPolicy(cfg)
    policy.initial_state = lambda: HybridState(started_at=-86_400.0)  # the floor reads
    for _, _, _, d, _ in run(policy, *path, start=low):
        assert cfg.min_replicas <= d.replicas <= cfg.max_replicas, d.reason


@settings(max_examples=40, deadline=None)
@given(paths(), WAITS)
def test_property_deterministic_and_state_round_trips(path, wait):
    cfg = HybridConfig(per_replica=10.0, queue_wait_s=wait)
    for _, _, obs, d, state in run(HybridPolicy(cfg), *path, start=2):
        policy = HybridPolicy(cfg)
        again = policy.decide(obs, through_json(policy, state))
        assert (again.replicas, again.reason, again.state) == (d.replicas, d.reason, d.state)
        assert through_json(policy, d.state) == d.state
        before = json.dumps(state.to_json(), sort_keys=True)
        policy.decide(obs, state)
        assert json.dumps(state.to_json(), sort_keys=True) == before  # input not mutated


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0.0, 300.0, allow_nan=False), min_size=2, max_size=40),
    st.lists(st.floats(0.0, 50.0, allow_nan=False), min_size=40, max_size=40),
    st.sampled_from([None, 0.0]),
)
def test_property_no_scale_in_while_requests_queue_or_within_the_cooldown(demand, queued, wait):
    # queue_wait_s = 0: any expected wait is too long, so any queue holds, as with None.
    cfg = HybridConfig(
        per_replica=10.0,
        stabilization_window_s=0.0,
        scale_in_window_s=0.0,
        max_replicas=60,
        queue_wait_s=wait,
    )
    policy, state, current, last_in = HybridPolicy(cfg), LONG_AGO, 60, None
    history = [demand[0]] * 40
    for i, v in enumerate(demand):
        history = [*history[1:], v]
        now = 600.0 + STEP_S * i
        done = {health.DONE: {f"p{k}": 5.0 * i for k in range(current)}}
        obs = observe(
            now, TargetStatus(current, ready_pods(current)), history, metrics(current, **done)
        )
        times = [t for t, _ in obs.series[IN_FLIGHT]]
        queue = tuple(zip(times, [*queued[i + 1 :], *queued[: i + 1]], strict=True))
        obs = Observation(obs.now, obs.target, obs.pod_metrics, {**obs.series, QUEUE: queue})
        d = policy.decide(obs, state)
        backlog = queue[-1][1] > 0.01 * history[-1] and queue[-1][1] > 0
        if backlog or (last_in is not None and now - last_in < cfg.scale_in_cooldown_s):
            assert d.replicas >= current, d.reason
        if d.replicas < current:
            last_in = now
        state, current = through_json(policy, d.state), d.replicas


def test_a_broken_gpus_pod_is_named_for_deletion_once():
    policy, target = HybridPolicy(FLAT), TargetStatus(4, ready_pods(4))
    m = metrics(4, **{health.XID: {"p1": 79.0}})
    d1 = policy.decide(observe(600.0, target, [5.0] * 41, m), LONG_AGO)
    d2 = policy.decide(observe(615.0, target, [5.0] * 41, m), d1.state)
    assert d1.delete == ("p1",)
    assert d2.delete == ()  # asked once; the pod is terminating or already replaced
    assert through_json(policy, d2.state) == d2.state


def test_a_throttled_pod_is_replaced_only_when_it_stays_throttled():
    cfg = HybridConfig(per_replica=10.0, replace_after_s=30.0)
    policy, target = HybridPolicy(cfg), TargetStatus(4, ready_pods(4))
    state, deletes = LONG_AGO, []
    for i in range(5):  # p0 in thermal violation the whole time
        m = metrics(4, **{health.THERMAL: {"p0": i * 15e9}})  # ns: held the whole 15 s
        d = policy.decide(observe(600.0 + 15 * i, target, [5.0] * 41, m), state)
        state, deletes = d.state, [*deletes, d.delete]
    assert deletes[:3] == [(), (), ()]  # throttled from the second decision, 30 s to wait
    assert deletes[3] == ("p0",)


def test_replacement_can_be_turned_off():
    cfg = HybridConfig(per_replica=10.0, replace_sick=False)
    m = metrics(4, **{health.XID: {"p1": 79.0}})
    policy = HybridPolicy(cfg)
    obs = observe(600.0, TargetStatus(4, ready_pods(4)), [5.0] * 41, m)
    d = policy.decide(obs, policy.initial_state())
    assert d.state.sick == {"p1": "xid 79"}
    assert d.delete == ()


def test_a_day_of_points_decides_as_its_window_does():
    # After a first decision, the points the forecaster has seen and those older than
    # the window change nothing: a caller may pass a day and pay for the window only.
    policy, target = HybridPolicy(FLAT), TargetStatus(4, ready_pods(4))
    day = [5.0 + (i % 7) for i in range(5761)]
    first = policy.decide(observe(86385.0, target, day[:-1], metrics(4)), LONG_AGO)
    whole = policy.decide(observe(86400.0, target, day, metrics(4)), first.state)
    window = policy.decide(observe(86400.0, target, day[-41:], metrics(4)), first.state)
    assert whole == window


def test_a_sample_below_the_panic_ratio_is_smoothed():
    # 30 in flight on 2 Ready pods at 10 each needs 3 < 2 x 2: the need reads the
    # 60 s mean (20, 20, 20, 30), 22.5; 95 needs 10 >= 4 and is read as sampled.
    target = TargetStatus(2, ready_pods(2))
    d = HybridPolicy(FLAT).decide(
        observe(600.0, target, [20.0] * 40 + [30.0], metrics(2)), LONG_AGO
    )
    assert "demand 22.50 -> 3" in d.reason


@pytest.mark.parametrize(
    ("window_s", "completions", "weight"),
    [
        (300.0, 100, "0.67"),  # 75 completions in the window, fewer than 100: all count
        (15.0, 100, "1.00"),  # a window of one interval: 150 s, capped at the weight's 1
        (300.0, 2, "1.00"),  # the newest interval's 2 completions suffice
    ],
)
def test_the_service_time_is_littles_law_over_enough_completions(window_s, completions, weight):
    # 20 pods each serve one 40 s request: 7.5 completions per 15 s on average, here
    # 13 and 2 in turn. Over the last interval alone (2 completions) the service time
    # reads 20 / (2 / 15) = 150 s; over the window, 20 x 150 s / 75 = 40 s, which
    # weighs the queue at 40 / 60 s (the default cold start).
    cfg = HybridConfig(
        per_replica=1.0,
        stabilization_window_s=0.0,
        service_window_s=window_s,
        service_completions=completions,
    )
    target, policy = TargetStatus(20, ready_pods(20)), HybridPolicy(cfg)
    state, done = LONG_AGO, {f"p{i}": 0.0 for i in range(20)}
    for k in range(11):
        now = 600.0 + STEP_S * k
        for i in range(13 if k % 2 else 2 if k else 0):
            done[f"p{i}"] += 1.0
        obs = observe(now, target, [20.0] * 41, metrics(20, **{health.DONE: dict(done)}))
        queue = tuple((t, 10.0) for t, _ in obs.series[IN_FLIGHT])
        obs = Observation(obs.now, obs.target, obs.pod_metrics, {**obs.series, QUEUE: queue})
        decision = policy.decide(obs, state)
        state = through_json(policy, decision.state)
    assert f"queue x{weight} + growth 0.0" in decision.reason


@pytest.mark.parametrize(
    ("budget_s", "reach_s", "guard"),
    [
        (None, 250.0, 0.9),  # no budget: sm_target as it is
        (3.0, 200.0, 0.9),  # the queue absorbs 1.5 % for a horizon: less than 11.1 %
        (117.0, 250.0, None),  # 47 %: more than the guard's headroom
        (30.0, 225.0, None),  # 13.3 %: more than 11.1 % as well
        (3.0, None, 0.9),  # the queue not observed: nothing absorbs a shortfall
    ],
)
def test_the_sm_guard_is_off_when_the_queue_absorbs_its_headroom(budget_s, reach_s, guard):
    cfg = HybridConfig(sm_target=0.9, wait_budget_s=budget_s)
    assert hybrid.sm_guard(cfg, reach_s) == pytest.approx(guard)


@pytest.mark.parametrize(
    ("budget_s", "sm_need"), [(None, "SM 22.80 -> 26"), (117.0, "-> 0 (guard off)")]
)
def test_a_wait_budget_that_covers_a_horizon_turns_the_sm_guard_off(budget_s, sm_need):
    # 24 pods 0.95 SM active, 20 in flight and nothing queued: a fleet of one-request
    # servers running full. A 117 s budget against a 60 s horizon (the default cold
    # start) absorbs far more than the guard's 11 % headroom: no SM need, no scale-out.
    cfg = HybridConfig(per_replica=1.0, stabilization_window_s=0.0, wait_budget_s=budget_s)
    target = TargetStatus(24, ready_pods(24))
    d = HybridPolicy(cfg).decide(
        observe(600.0, target, [20.0] * 41, metrics(24, sm=0.95)), LONG_AGO
    )
    assert sm_need in d.reason
    assert (d.replicas > 24) is (budget_s is None)


@pytest.mark.parametrize(("sampled", "service_s"), [(20.0, 1200.0 / 240.0), (100.0, 300.0 / 120.0)])
def test_the_service_time_waits_for_enough_sampled_requests_in_service(sampled, service_s):
    # The newest interval completed 120 requests, but one sample of 20 in service says
    # their mean only within about a quarter: the interval before counts too. A sample
    # of 100 is enough alone. (No previous decision time: no interval is added.)
    kept = ((570.0, 120.0, 900.0, 60.0), (585.0, 120.0, 300.0, sampled))
    obs = observe(600.0, TargetStatus(10, ready_pods(10)), [20.0] * 41, metrics(10))
    got, intervals = service_time.service_time_s(
        obs, obs.series[IN_FLIGHT], HealthState(), kept, 300.0, 100
    )
    assert got == pytest.approx(service_s)
    assert intervals == kept


def test_completions_with_no_request_ever_seen_in_service_read_no_service_time():
    # Short requests at a low rate finish between samples: 3 completions, 0 in service
    # at every sample. That bounds the service time by the interval, it does not read 0 s.
    kept = ((585.0, 3.0, 0.0, 0.0),)
    obs = observe(600.0, TargetStatus(10, ready_pods(10)), [0.0] * 41, metrics(10))
    got, intervals = service_time.service_time_s(
        obs, obs.series[IN_FLIGHT], HealthState(), kept, 300.0, 100
    )
    assert got is None
    assert intervals == kept
