"""Knative KPA baseline: windows, panic, rate limits and scale to zero, with Knative's numbers."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.errors import ConfigError
from gpuscale.scaling.kpa import KpaConfig, KpaPolicy, window_average
from gpuscale.scaling.policy import Observation, PodStatus, TargetStatus

LONG_AGO = {"active_since": -1000.0, "initialised": True}


def observe(now, desired, ready_pods, concurrency, queue=0.0, healthy=True):
    """concurrency/queue: a constant, a list of per-second values ending at now, or None."""
    pods = tuple(PodStatus(f"p{i}", True, -1000.0, -900.0) for i in range(ready_pods))
    series = {}
    for key, values in (("concurrency", concurrency), ("queue", queue)):
        if values is None:
            continue
        if not isinstance(values, list):
            values = [values] * 60
        n = len(values)
        series[key] = tuple((now - n + 1 + i, float(v)) for i, v in enumerate(values))
    return Observation(now, TargetStatus(desired, pods), series=series, healthy=healthy)


def test_defaults_match_knative():
    config = KpaConfig()
    policy = KpaPolicy(config)
    assert config.target == 70.0
    assert config.panic_window_s == 6.0
    assert (policy.interval_s, policy.history_s) == (2.0, 60.0)
    assert (config.max_scale_up_rate, config.max_scale_down_rate) == (1000.0, 2.0)
    assert set(policy.signals) == {"concurrency", "queue"}


def test_stable_and_panic_windows_average_different_spans():
    points = tuple((float(t), 60.0 if t >= 54 else 0.0) for t in range(60))
    assert window_average(points, 60.0) == pytest.approx(6.0)
    assert window_average(points, 6.0) == pytest.approx(60.0)


def test_partial_window_averages_what_exists():
    points = ((0.0, 10.0), (1.0, 20.0))
    assert window_average(points, 60.0) == pytest.approx(15.0)


def test_stable_mode_uses_ceil_of_stable_over_target():
    policy = KpaPolicy()
    decision = policy.decide(observe(100.0, 2, 2, 150.0), LONG_AGO)
    assert decision.replicas == 3  # ceil(150 / 70)
    assert decision.state["panic_time"] is None


def test_queue_counts_as_concurrency():
    policy = KpaPolicy()
    assert policy.decide(observe(100.0, 2, 2, 100.0, 110.0), LONG_AGO).replicas == 3


@pytest.mark.parametrize(("panic_load", "panics"), [(280.0, True), (210.0, False)])
def test_panic_entered_at_200_percent(panic_load, panics):
    # 2 ready pods; 280 -> ceil(4.0) = 4 pods = 200 % of ready; 210 -> 3 pods = 150 %
    series = [0.0] * 54 + [panic_load] * 6
    decision = KpaPolicy().decide(observe(100.0, 2, 2, series), LONG_AGO)
    assert (decision.state["panic_time"] == 100.0) is panics
    assert decision.replicas == (4 if panics else 1)  # stable would be ceil(28 or 21 / 70) = 1


def test_no_scale_down_during_panic():
    policy = KpaPolicy()
    burst = [0.0] * 54 + [700.0] * 6  # panic 700 -> 10 pods on 5 ready
    first = policy.decide(observe(0.0, 5, 5, burst), LONG_AGO)
    assert first.replicas == 10
    calm = policy.decide(observe(2.0, 10, 10, 0.0), first.state)
    assert calm.replicas == 10
    assert "panic" in calm.reason


def test_panic_exits_one_stable_window_after_last_overload():
    policy = KpaPolicy()
    burst = [0.0] * 54 + [700.0] * 6
    state = policy.decide(observe(0.0, 5, 5, burst), LONG_AGO).state
    out = {}
    for t in range(2, 65, 2):
        decision = policy.decide(observe(float(t), 10, 10, 70.0), state)
        state = decision.state
        out[t] = decision.replicas
    assert out[60] == 10  # 0 + 60 < 60 is false: still panicking
    assert out[62] == 5  # stable ceil(70/70) = 1, but at most halve 10 ready pods
    assert state["panic_time"] is None
    assert state["max_panic_pods"] == 0


def test_scale_down_rate_halves_ready_pods_at_most():
    assert KpaPolicy().decide(observe(100.0, 10, 10, 0.0), LONG_AGO).replicas == 5


def test_scale_up_rate_limit():
    policy = KpaPolicy(KpaConfig(max_scale_up_rate=2.0))
    assert policy.decide(observe(100.0, 2, 2, 7000.0), LONG_AGO).replicas == 4


def test_scale_to_zero_after_grace_period():
    policy = KpaPolicy()
    state = dict(LONG_AGO)
    out = {}
    for t in range(0, 32, 2):
        decision = policy.decide(observe(float(t), 1, 1, 0.0, 0.0), state)
        state = decision.state
        out[t] = decision.replicas
    assert out[0] == 1  # marked inactive now
    assert out[28] == 1
    assert out[30] == 0
    assert state["active_since"] is None
    assert state["inactive_since"] is None


def test_scale_to_zero_waits_for_a_stable_window_of_activity():
    policy = KpaPolicy()
    state = {"active_since": 0.0, "initialised": True}
    decision = policy.decide(observe(20.0, 1, 1, 0.0, 0.0), state)
    assert decision.replicas == 1
    assert decision.state.get("inactive_since") is None


def test_traffic_during_grace_cancels_scale_to_zero():
    policy = KpaPolicy()
    state = policy.decide(observe(0.0, 1, 1, 0.0, 0.0), LONG_AGO).state
    state = policy.decide(observe(10.0, 1, 1, [0.0] * 59 + [5.0], 0.0), state).state
    assert state["inactive_since"] is None
    assert policy.decide(observe(40.0, 1, 1, 0.0, 0.0), state).replicas == 1


def test_scale_to_zero_disabled_keeps_one():
    policy = KpaPolicy(KpaConfig(enable_scale_to_zero=False))
    assert policy.decide(observe(100.0, 1, 1, 0.0, 0.0), LONG_AGO).replicas == 1


def test_scale_from_zero_on_queued_requests():
    policy = KpaPolicy()
    decision = policy.decide(observe(100.0, 0, 0, None, [0.0] * 59 + [3.0]), {})
    assert decision.replicas == 1


def test_initial_scale_holds_until_reached():
    policy = KpaPolicy(KpaConfig(initial_scale=3))
    decision = policy.decide(observe(0.0, 3, 0, None, 0.0), {})
    assert decision.replicas == 3
    assert not decision.state.get("initialised")
    reached = policy.decide(observe(100.0, 3, 3, 0.0, 0.0), decision.state)
    assert reached.state["initialised"] is True
    assert reached.replicas == 1  # no traffic: floor(3 ready / max-scale-down-rate 2)


def test_missing_data_and_unhealthy_hold():
    policy = KpaPolicy()
    missing = policy.decide(observe(0.0, 4, 4, None, 0.0), LONG_AGO)
    assert missing.replicas == 4
    assert "no data" in missing.reason
    sick = policy.decide(observe(0.0, 4, 4, 0.0, 0.0, healthy=False), LONG_AGO)
    assert sick.replicas == 4
    assert "unhealthy" in sick.reason


def test_bounds_clamp():
    policy = KpaPolicy(KpaConfig(min_replicas=2, max_replicas=6))
    assert policy.decide(observe(100.0, 2, 2, 7000.0), LONG_AGO).replicas == 6
    assert policy.decide(observe(100.0, 2, 2, 0.0), LONG_AGO).replicas == 2


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"target": 0.0}, "KpaConfig.target=0.0"),
        ({"stable_window_s": 5.0}, "KpaConfig.stable_window_s"),
        ({"panic_threshold_percentage": 100.0}, "KpaConfig.panic_threshold_percentage"),
        ({"max_scale_down_rate": 1.0}, "KpaConfig.max_scale_down_rate"),
        ({"max_replicas": 0}, "KpaConfig.max_replicas"),
    ],
)
def test_bad_config_raises_config_error_naming_the_key(kwargs, key):
    with pytest.raises(ConfigError) as info:
        KpaConfig(**kwargs)
    assert str(info.value).startswith(key)


def test_state_round_trips_through_json_with_identical_decisions():
    policy = KpaPolicy()
    loads = [0.0, 50.0, 400.0, 900.0, 300.0, 0.0] + [0.0] * 40 + [100.0]
    state: dict = {}
    replicas = 1
    seen = set()
    for i, load in enumerate(loads):
        obs = observe(2.0 * i, replicas, replicas, load if replicas else None, 0.0)
        direct = policy.decide(obs, state)
        assert policy.decide(obs, json.loads(json.dumps(state))) == direct
        state, replicas = json.loads(json.dumps(direct.state)), direct.replicas
        seen.add(replicas)
    assert max(seen) >= 10


values = st.one_of(st.none(), st.lists(st.floats(0.0, 5000.0), min_size=1, max_size=60))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 50), st.integers(0, 50), values, values, st.booleans()),
        min_size=1,
        max_size=10,
    ),
    st.integers(0, 3),
    st.integers(3, 60),
)
def test_replicas_always_within_bounds(steps, lo, hi):
    policy = KpaPolicy(KpaConfig(min_replicas=lo, max_replicas=hi))
    state: dict = {}
    for i, (desired, ready_pods, concurrency, queue, healthy) in enumerate(steps):
        obs = observe(2.0 * i, desired, ready_pods, concurrency, queue, healthy)
        decision = policy.decide(obs, state)
        assert lo <= decision.replicas <= hi
        state = json.loads(json.dumps(decision.state))
