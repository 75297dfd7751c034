"""Predictive scaling: a measured horizon, scale-out on the forecast, scale-in when load agrees."""

import dataclasses
import json
import math
from statistics import NormalDist

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.errors import ConfigError
from gpuscale.scaling.demand import rising, smooth
from gpuscale.scaling.nodes import fewest_nodes, held_by, known_slots
from gpuscale.scaling.policy import Observation, PodStatus, TargetStatus
from gpuscale.scaling.predictive import (
    DEMAND_METRICS,
    ColdStarts,
    PredictiveConfig,
    PredictivePolicy,
    PredictiveState,
    cold_start_s,
    horizon_s,
    settle,
)
from tests.support.policystate import through_json

IN_FLIGHT, QUEUE = DEMAND_METRICS
STEP_S = 15.0
LONG_AGO = PredictiveState(started_at=0.0)
"""State of a policy whose first decision was long ago (past its start-up hold)."""


def pods(n, created=-1000.0, ready=-1000.0):
    return tuple(PodStatus(f"p{i}", True, created, ready) for i in range(n))


def observe(now, desired, demand, *, ready=None, healthy=True):
    """An observation whose in-flight history is ``demand`` (values every 15 s ending at now)."""
    points = tuple((now - STEP_S * (len(demand) - 1 - i), float(v)) for i, v in enumerate(demand))
    series = {IN_FLIGHT: points, QUEUE: tuple((t, 0.0) for t, _ in points)}
    target = TargetStatus(desired, pods(desired if ready is None else ready))
    return Observation(now, target, series=series, healthy=healthy)


def test_cold_start_is_the_quantile_of_the_pods_own_starts():
    cfg = PredictiveConfig(cold_start_quantile=0.9)
    starts = [20.0 + i for i in range(10)]  # 20..29 s
    live = tuple(PodStatus(f"p{i}", True, 100.0, 100.0 + s) for i, s in enumerate(starts))
    cold, state = cold_start_s(live, ColdStarts(), cfg)
    assert cold == 28.0  # ceil(0.9 * 10) = 9th of 10 sorted
    assert state.samples == tuple(starts)
    # A pod seen once is not counted again, even when its ready_at changes (a restart).
    moved = (PodStatus("p0", True, 100.0, 900.0), *live[1:])
    again, state2 = cold_start_s(moved, state, cfg)
    assert again == 28.0
    assert state2.samples == tuple(starts)


def test_cold_start_defaults_until_a_pod_has_been_seen_starting():
    cfg = PredictiveConfig(default_cold_start_s=75.0)
    warm = (PodStatus("p0", True, 0.0, 0.0), PodStatus("p1", False, 5.0, None))
    cold, state = cold_start_s(warm, ColdStarts(), cfg)
    assert cold == 75.0
    assert state == ColdStarts(samples=(), seen=("p0",))


def test_scales_out_ahead_of_a_rising_trend():
    cfg = PredictiveConfig(
        per_replica=1.0, max_replicas=100, default_cold_start_s=120.0, smoothing_s=0.0
    )
    demand = [10.0 + 0.5 * i for i in range(41)]  # +2 requests per minute, 30 now
    d = PredictivePolicy(cfg).decide(observe(600.0, 30, demand), LONG_AGO)
    # The line reaches 34 at +120 s; the upper bound is a little above it.
    assert d.replicas >= 34
    assert "trend forecast 34.00" in d.reason
    assert "+120 s" in d.reason


def test_horizon_adds_node_provisioning_beyond_fast_capacity():
    cfg = PredictiveConfig(
        per_replica=1.0, default_cold_start_s=60.0, node_provision_s=180.0, fast_capacity=8
    )
    demand = [10.0 + 0.5 * i for i in range(41)]
    d = PredictivePolicy(cfg).decide(observe(600.0, 30, demand), LONG_AGO)
    assert "+240 s" in d.reason
    assert "trend forecast 38.00" in d.reason  # 30 + 0.5 / 15 s x 240 s
    assert d.replicas >= 38


def test_a_measured_cold_start_longer_than_a_node_holds_its_wait():
    cfg = PredictiveConfig(node_provision_s=180.0, fast_capacity=8)
    assert horizon_s(40.0, 8, cfg) == 40.0  # fits on the always-up nodes
    assert horizon_s(40.0, 9, cfg) == 220.0  # a warm-node start: add the node
    assert horizon_s(230.0, 9, cfg) == 230.0  # already waited for a node


def test_scale_in_is_spaced_by_its_cooldown():
    cfg = PredictiveConfig(
        per_replica=1.0, stabilization_window_s=0.0, scale_down_percent=50.0, scale_in_window_s=0.0
    )
    policy = PredictivePolicy(cfg)
    d1 = policy.decide(observe(600.0, 40, [5.0] * 41), LONG_AGO)
    d2 = policy.decide(observe(615.0, d1.replicas, [5.0] * 41), d1.state)
    d3 = policy.decide(observe(660.0, d2.replicas, [5.0] * 41), d2.state)
    assert d1.replicas == 20  # half of 40 at most
    assert d2.replicas == 20  # 15 s later: cooling down
    assert "cooling down" in d2.reason
    assert d3.replicas == 10  # 60 s after the first


def test_a_stabilisation_window_cut_short_holds_only_what_was_recommended_since():
    # 40 recommended 60 s ago, within the 120 s window: it holds the fleet, unless the
    # window is cut to start after it (a load that has passed, as hybrid's floor between
    # bursts on a period tells it).
    cfg = PredictiveConfig(per_replica=1.0, scale_down_percent=100.0)
    state = dataclasses.replace(LONG_AGO, recs=((540.0, 40),))
    held, _, kept = settle(600.0, 40, 5, state, cfg)
    assert held == 40
    cut, _, kept_cut = settle(600.0, 40, 5, state, cfg, stable_since=560.0)
    assert cut == 5
    assert kept == ((540.0, 40), (600.0, 5))
    assert kept_cut == ((600.0, 5),)


def test_scale_in_waits_for_the_observed_peak():
    cfg = PredictiveConfig(per_replica=1.0, stabilization_window_s=0.0, scale_down_percent=100.0)
    # Demand fell from 20 to 5 two minutes ago: the forecast is low, the 5-minute peak is not.
    demand = [20.0] * 33 + [5.0] * 8
    d = PredictivePolicy(cfg).decide(observe(600.0, 20, demand), LONG_AGO)
    assert d.replicas == 20
    assert "observed peak needs 20" in d.reason


def test_scales_in_once_observed_load_agrees():
    cfg = PredictiveConfig(per_replica=1.0, stabilization_window_s=0.0, scale_down_percent=100.0)
    d = PredictivePolicy(cfg).decide(observe(600.0, 20, [5.0] * 41), LONG_AGO)
    assert 5 <= d.replicas <= 6  # the upper bound of a flat line is at most one replica above


def test_no_scale_in_before_a_whole_scale_in_window_is_seen():
    cfg = PredictiveConfig(per_replica=1.0, stabilization_window_s=0.0, scale_down_percent=100.0)
    policy = PredictivePolicy(cfg)
    first = policy.decide(observe(600.0, 20, [5.0] * 41), policy.initial_state())
    early = policy.decide(observe(885.0, 20, [5.0] * 41), first.state)
    late = policy.decide(observe(900.0, 20, [5.0] * 41), early.state)
    assert (first.replicas, early.replicas) == (20, 20)
    assert "no scale-in yet" in early.reason
    assert 5 <= late.replicas <= 6


def test_scale_in_is_bounded_per_decision():
    cfg = PredictiveConfig(per_replica=1.0, stabilization_window_s=0.0, scale_down_percent=10.0)
    d = PredictivePolicy(cfg).decide(observe(600.0, 40, [5.0] * 41), LONG_AGO)
    assert d.replicas == 36


NODES = PredictiveConfig(
    per_replica=1.0, stabilization_window_s=0.0, scale_down_percent=100.0, node_size=8
)
"""Whole nodes of 8 replicas, no stabilisation, any scale-in step."""


def test_a_scale_out_fills_the_nodes_it_opens():
    d = PredictivePolicy(NODES).decide(observe(600.0, 8, [9.0] * 41), LONG_AGO)
    assert d.replicas == 16  # 9 or 10 needed: the second node's GPUs are paid for anyway
    assert "fills 2 nodes" in d.reason


def test_a_scale_in_within_a_node_is_held():
    d = PredictivePolicy(NODES).decide(observe(600.0, 16, [10.0] * 41), LONG_AGO)
    assert d.replicas == 16  # 10 or 11 still need 2 nodes: removing 5 pods saves nothing
    assert "holds its 2 nodes" in d.reason


def test_a_scale_in_releases_whole_nodes_at_the_scale_down_pace():
    small = dataclasses.replace(NODES, scale_down_percent=5.0)
    policy = PredictivePolicy(small)
    d1 = policy.decide(observe(600.0, 24, [5.0] * 41), LONG_AGO)
    assert d1.replicas == 16  # 5 or 6 need 1 node; 5 % of 24 is under a node: one node goes
    assert "releases 1 of 3 nodes" in d1.reason
    d2 = policy.decide(observe(675.0, 16, [5.0] * 41), d1.state)
    assert d2.replicas == 8
    # On a large fleet the pace is 5 % of the replicas, in whole nodes: 10 % of 400 = 5 nodes.
    large = dataclasses.replace(NODES, scale_down_percent=10.0, max_replicas=500)
    d = PredictivePolicy(large).decide(observe(600.0, 400, [5.0] * 41), LONG_AGO)
    assert d.replicas == 360
    assert "releases 5 of 50 nodes" in d.reason


def test_a_node_that_lost_a_gpu_is_filled_to_what_it_holds():
    # 9 or 10 needed on a node whose GPU fell off the bus (7 slots): a second node holds
    # 8, so 15 fill both; 16 would leave a pod pending that opens a third node alone.
    slots = TargetStatus(7, pods(7), node_slots=(7,))
    obs = dataclasses.replace(observe(600.0, 7, [9.0] * 41), target=slots)
    d = PredictivePolicy(NODES).decide(obs, LONG_AGO)
    assert (d.replicas, "fills 2 nodes" in d.reason) == (15, True)
    blind = PredictivePolicy(NODES).decide(observe(600.0, 7, [9.0] * 41), LONG_AGO)
    assert blind.replicas == 16  # not told the node is short: whole nodes of 8


def test_a_scale_in_keeps_what_the_kept_nodes_hold():
    # 16 asked for on nodes of 7 and 8 (one pod pending for a third node); 5 or 6 need
    # one node, priced at the smaller: 7 replicas, and no pod left waiting for a node.
    target = TargetStatus(16, pods(16), node_slots=(8, 7))
    obs = dataclasses.replace(observe(600.0, 16, [5.0] * 41), target=target)
    d = PredictivePolicy(NODES).decide(obs, LONG_AGO)
    assert (d.replicas, "releases 2 of 3 nodes" in d.reason) == (7, True)


def test_a_filled_node_respects_max_replicas():
    cfg = PredictiveConfig(per_replica=1.0, node_size=8, max_replicas=12)
    d = PredictivePolicy(cfg).decide(observe(600.0, 8, [9.0] * 41), LONG_AGO)
    assert d.replicas == 12


@pytest.mark.parametrize("healthy", [False, True])
def test_holds_without_data(healthy):
    policy = PredictivePolicy(PredictiveConfig(min_replicas=2))
    obs = Observation(600.0, TargetStatus(7, pods(7)), healthy=healthy)
    d = policy.decide(obs, PredictiveState(recs=((1.0, 3),)))
    assert d.replicas == 7
    assert d.state == PredictiveState(recs=((1.0, 3),))
    assert ("unhealthy" if not healthy else "no demand data") in d.reason


def test_config_errors_are_one_line():
    with pytest.raises(ConfigError) as info:
        PredictiveConfig(per_replica=0.0)
    assert str(info.value) == ("PredictiveConfig.per_replica=0.0: out of range; use a demand > 0")


def test_rising_needs_a_positive_slope_and_a_high_newest_point():
    assert rising(((0.0, 1.0), (15.0, 2.0), (30.0, 3.0)), 30.0, 60.0)
    assert not rising(((0.0, 1.0), (15.0, 5.0), (30.0, 2.0)), 30.0, 60.0)
    assert not rising(((0.0, 3.0), (15.0, 2.0), (30.0, 1.0)), 30.0, 60.0)


# ----------------------------------------------------------------- properties
demands = st.lists(st.floats(0.0, 200.0, allow_nan=False), min_size=1, max_size=60)


def run(policy, values, start=1, window=40):
    """Decide every 15 s on a demand path; replicas follow the decisions. Yields each step."""
    state = policy.initial_state()
    current = start
    history = [values[0]] * window
    for i, v in enumerate(values):
        history = [*history[1:], v]
        now = 600.0 + STEP_S * i
        obs = observe(now, current, history)
        d = policy.decide(obs, state)
        yield now, current, obs, d, state
        state = through_json(policy, d.state)
        current = d.replicas


WINDOWS = st.sampled_from([(0.0, 0.0), (300.0, 0.0), (300.0, 300.0)])
"""(stabilisation window, scale-in window): with both 0 only the rise rule stops a scale-in."""


@settings(max_examples=100, deadline=None)
@given(
    demands, st.integers(1, 5), st.integers(0, 50), WINDOWS, st.booleans(), st.sampled_from([1, 4])
)
def test_property_bounds_rise_and_stabilisation(values, low, span, windows, start_high, size):
    stable, scale_in = windows
    cfg = PredictiveConfig(
        node_size=size,
        per_replica=2.0,
        min_replicas=low,
        max_replicas=low + span,
        stabilization_window_s=stable,
        scale_in_window_s=scale_in,
        scale_down_percent=100.0,
    )
    policy = PredictivePolicy(cfg)
    last_up = None
    for now, current, obs, d, _ in run(policy, values, start=low + span if start_high else low):
        assert cfg.min_replicas <= d.replicas <= cfg.max_replicas
        points = obs.series[IN_FLIGHT]
        if rising(points, now, cfg.rise_window_s):
            assert d.replicas >= current  # no scale-in while observed load rises
        if last_up is not None and now - last_up < cfg.stabilization_window_s:
            assert d.replicas >= current  # no scale-in inside the stabilisation window
        if d.replicas > current:
            last_up = now


@settings(max_examples=40, deadline=None)
@given(demands)
def test_property_deterministic_and_state_round_trips(values):
    policy = PredictivePolicy(PredictiveConfig(per_replica=2.0))
    for _, _, obs, d, state in run(policy, values):
        again = policy.decide(obs, state)
        assert (again.replicas, again.reason, again.state) == (d.replicas, d.reason, d.state)
        text = json.dumps(d.state.to_json())
        before = json.dumps(state.to_json(), sort_keys=True)
        policy.decide(obs, state)
        assert json.dumps(state.to_json(), sort_keys=True) == before  # input not mutated
        assert policy.load_state(json.loads(text)) == d.state
        restored = PredictivePolicy(PredictiveConfig(per_replica=2.0)).decide(
            obs, through_json(policy, state)
        )
        assert restored == d


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_property_no_scale_in_while_load_rises_whatever_the_current_count(data):
    base = data.draw(st.floats(0.0, 100.0))
    slope = data.draw(st.floats(-1.0, 1.0))
    noise = data.draw(st.lists(st.floats(-5.0, 5.0), min_size=41, max_size=41))
    values = [max(base + slope * i + e, 0.0) for i, e in enumerate(noise)]
    current = data.draw(st.integers(1, 100))
    cfg = PredictiveConfig(
        per_replica=2.0, stabilization_window_s=0.0, scale_in_window_s=0.0, scale_down_percent=100.0
    )
    obs = observe(600.0, current, values)
    d = PredictivePolicy(cfg).decide(obs, PredictivePolicy(cfg).initial_state())
    if rising(obs.series[IN_FLIGHT], 600.0, cfg.rise_window_s):
        assert d.replicas >= current, d.reason
    else:
        assert d.replicas >= 1


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 8), max_size=6),
    st.integers(1, 60),
    st.floats(0.0, 100.0),
)
def test_property_a_scale_out_fills_its_nodes_to_what_they_hold(slots, current, demand):
    # Whatever nodes are short, a scale-out asks for exactly what its nodes hold
    # (within max_replicas): no pod is left pending for a node of its own.
    cfg = dataclasses.replace(NODES, max_replicas=200)
    target = TargetStatus(current, pods(current), node_slots=tuple(slots))
    obs = dataclasses.replace(observe(600.0, current, [demand] * 41), target=target)
    d = PredictivePolicy(cfg).decide(obs, LONG_AGO)
    known = known_slots(slots, cfg.node_size)
    if d.replicas > current and d.replicas < cfg.max_replicas:
        nodes = fewest_nodes(d.replicas, known, cfg.node_size)
        assert held_by(nodes, known, cfg.node_size) == d.replicas, d.reason


def test_smooth_is_the_trailing_mean_of_its_window():
    points = ((0.0, 0.0), (15.0, 4.0), (30.0, 8.0), (45.0, 0.0))
    assert smooth(points, 30.0) == ((0.0, 0.0), (15.0, 2.0), (30.0, 6.0), (45.0, 4.0))
    assert smooth(points, 0.0) == points


def test_scatter_is_no_rise():
    # A steady load's samples: the newest is high and the slope positive, but the
    # slope is well inside its scatter (t about 0.6), so scale-in is not held.
    noisy = tuple((STEP_S * i, v) for i, v in enumerate([10.0, 14.0, 8.0, 13.0, 9.0, 12.0, 14.0]))
    assert not rising(noisy, noisy[-1][0], 120.0)
    line = tuple((STEP_S * i, 10.0 + 0.2 * i) for i in range(8))
    assert rising(line, line[-1][0], 120.0)


def test_a_steady_noisy_load_scales_in_to_its_mean_not_its_peaks():
    # In flight alternates 5 and 15 (mean 10) at 1 request per replica. Read sample by
    # sample, the 5-minute peak alone holds 15 replicas. Smoothed, the peak is 10, and
    # the level's bound is for the mean of the 4 samples of the next 60 s: the mean
    # plus z(0.9) sample deviations times sqrt(1/4 + 1/40) (the 40 window samples).
    cfg = PredictiveConfig(per_replica=1.0, stabilization_window_s=0.0, scale_down_percent=100.0)
    demand = [5.0 if i % 2 else 15.0 for i in range(41)]
    d = PredictivePolicy(cfg).decide(observe(600.0, 20, demand), LONG_AGO)
    sd = 5.0 * math.sqrt(40 / 39)
    assert d.replicas == math.ceil(10.0 + NormalDist().inv_cdf(0.9) * sd * math.sqrt(0.275)) < 15
    raw = PredictiveConfig(
        per_replica=1.0, stabilization_window_s=0.0, scale_down_percent=100.0, smoothing_s=0.0
    )
    assert PredictivePolicy(raw).decide(observe(600.0, 20, demand), LONG_AGO).replicas >= 15
