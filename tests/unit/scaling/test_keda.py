"""KEDA Prometheus-trigger baseline: activation, cooldown to zero, polling, and its HPA."""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.errors import ConfigError
from gpuscale.metrics.signal import Signal
from gpuscale.scaling.hpa import DEFAULT_BEHAVIOR
from gpuscale.scaling.keda import KedaConfig, KedaFallback, KedaPolicy, KedaState, due
from gpuscale.scaling.policy import Observation, PodStatus, TargetStatus
from tests.support.policystate import through_json

IN_FLIGHT = "gpuscale_serving_requests_in_flight"
QUEUE = "gpuscale_serving_queue_requests"


def observe(now, desired, ready_pods, in_flight, queue, healthy=True):
    """An observation with the default query's two terms (None = no series)."""
    pods = tuple(PodStatus(f"p{i}", True, -100.0, -50.0) for i in range(ready_pods))
    series = {}
    if in_flight is not None:
        series["query_0"] = ((now - 15.0, in_flight), (now, in_flight))
    if queue is not None:
        series["query_1"] = ((now - 15.0, queue), (now, queue))
    return Observation(now, TargetStatus(desired, pods), series=series, healthy=healthy)


def drive(policy, steps, replicas, state=None):
    """Run (time, in_flight, queue) steps, feeding each decision back as the target's count."""
    state = policy.initial_state() if state is None else state
    out = {}
    for t, in_flight, queue in steps:
        obs = observe(float(t), replicas, replicas, in_flight if replicas else None, queue)
        decision = policy.decide(obs, state)
        state, replicas = through_json(policy, decision.state), decision.replicas
        out[t] = replicas
    return out, state


def test_defaults_match_keda():
    config = KedaConfig(threshold=4.0)
    policy = KedaPolicy(config)
    assert config.polling_interval_s == 30.0
    assert config.cooldown_period_s == 300.0
    assert config.activation_threshold == 0.0
    assert (policy.min_replicas, policy.max_replicas) == (0, 100)
    assert policy.interval_s == 15.0  # HPA sync; the 30 s poll is gated in state
    assert [s.metric for s in policy.signals.values()] == [IN_FLIGHT, QUEUE]
    assert all(s.aggregation == "sum" for s in policy.signals.values())


def test_activation_from_zero_to_one():
    policy = KedaPolicy(KedaConfig(threshold=4.0))
    decision = policy.decide(observe(0.0, 0, 0, None, 3.0), policy.initial_state())
    assert decision.replicas == 1
    assert "activated" in decision.reason


def test_no_activation_at_or_below_activation_threshold():
    policy = KedaPolicy(KedaConfig(threshold=4.0, activation_threshold=2.0))
    assert policy.decide(observe(0.0, 0, 0, None, 2.0), policy.initial_state()).replicas == 0
    assert policy.decide(observe(0.0, 0, 0, None, 2.5), policy.initial_state()).replicas == 1


def test_activation_waits_for_the_30_s_poll():
    policy = KedaPolicy(KedaConfig(threshold=4.0))
    out, _ = drive(policy, [(0, None, 0.0), (15, None, 5.0), (30, None, 5.0)], replicas=0)
    assert out == {0: 0, 15: 0, 30: 1}


def test_scale_to_zero_only_after_cooldown():
    policy = KedaPolicy(KedaConfig(threshold=4.0))
    steps = [(0, 2.0, 0.0)] + [(t, 0.0, 0.0) for t in range(15, 346, 15)]
    out, _ = drive(policy, steps, replicas=1)
    # last active at the t=0 poll; 0 + 300 < now first holds at the t=330 poll
    assert out[300] == 1
    assert out[315] == 1
    assert out[330] == 0


def test_value_at_activation_threshold_counts_as_inactive_for_cooldown():
    policy = KedaPolicy(KedaConfig(threshold=4.0, activation_threshold=1.0, cooldown_period_s=60))
    steps = [(0, 3.0, 0.0)] + [(t, 1.0, 0.0) for t in range(15, 106, 15)]
    out, _ = drive(policy, steps, replicas=1)
    assert out[60] == 1
    assert out[90] == 0


def test_renewed_activity_restarts_the_cooldown():
    policy = KedaPolicy(KedaConfig(threshold=4.0, cooldown_period_s=60))
    steps = [(0, 2.0, 0.0), (30, 0.0, 0.0), (60, 1.0, 0.0), (90, 0.0, 0.0), (120, 0.0, 0.0)]
    steps += [(150, 0.0, 0.0)]
    out, _ = drive(policy, steps, replicas=1)
    assert out[120] == 1  # active at 60: 60 + 60 < 120 is false
    assert out[150] == 0


def test_min_replicas_above_zero_never_scales_to_zero():
    policy = KedaPolicy(KedaConfig(threshold=4.0, min_replicas=2))
    steps = [(t, 0.0, 0.0) for t in range(0, 1000, 15)]
    out, _ = drive(policy, steps, replicas=2)
    assert min(out.values()) == 2


def test_average_value_is_ceil_of_value_over_threshold():
    policy = KedaPolicy(KedaConfig(threshold=4.0))
    # 6 in flight + 4 queued = 10 -> ceil(10 / 4) = 3
    decision = policy.decide(observe(0.0, 1, 1, 6.0, 4.0), policy.initial_state())
    assert decision.replicas == 3


def test_average_value_within_tolerance_holds():
    policy = KedaPolicy(KedaConfig(threshold=4.0))
    # 12.5 / (4 x 3) = 1.04 is within 10 %, although ceil(12.5 / 4) = 4
    assert policy.decide(observe(0.0, 3, 3, 12.5, 0.0), policy.initial_state()).replicas == 3


def test_value_metric_type_scales_ready_pods_by_ratio():
    config = KedaConfig(threshold=10.0, metric_type="Value", behavior=DEFAULT_BEHAVIOR)
    assert (
        KedaPolicy(config)
        .decide(observe(0.0, 2, 2, 30.0, 0.0), KedaPolicy(config).initial_state())
        .replicas
        == 6
    )


def test_without_behavior_keda_s_hpa_runs_the_legacy_path():
    # A ScaledObject without advanced.horizontalPodAutoscalerConfig.behavior creates an
    # HPA without spec.behavior: at most max(2 x current, 4) per sync.
    assert KedaConfig(threshold=1.0).behavior is None
    policy = KedaPolicy(KedaConfig(threshold=1.0))
    assert policy.decide(observe(0.0, 2, 2, 100.0, 0.0), policy.initial_state()).replicas == 4
    assert policy.decide(observe(0.0, 3, 3, 100.0, 0.0), policy.initial_state()).replicas == 6


def test_hpa_scale_up_rate_limit_applies_with_the_default_behavior():
    policy = KedaPolicy(KedaConfig(threshold=1.0, behavior=DEFAULT_BEHAVIOR))
    # value 100 wants 100; HPA allows max(2 + 4, 2 x 2) = 6
    assert policy.decide(observe(0.0, 2, 2, 100.0, 0.0), policy.initial_state()).replicas == 6


def test_hpa_scale_down_stabilisation_applies_while_active():
    steps = [(0, 20.0, 0.0)] + [(t, 4.0, 0.0) for t in range(15, 331, 15)]
    legacy, _ = drive(KedaPolicy(KedaConfig(threshold=4.0)), steps, replicas=5)
    assert (legacy[0], legacy[285]) == (5, 5)
    assert legacy[300] == 5  # legacy: a recommendation exactly 300 s old still counts
    assert legacy[315] == 1
    config = KedaConfig(threshold=4.0, behavior=DEFAULT_BEHAVIOR)
    behaved, _ = drive(KedaPolicy(config), steps, replicas=5)
    assert (behaved[0], behaved[285]) == (5, 5)
    assert behaved[300] == 1


def test_hpa_runs_every_15_s_and_poll_every_30_s():
    policy = KedaPolicy(KedaConfig(threshold=4.0))
    first = policy.decide(observe(0.0, 1, 1, 4.0, 0.0), policy.initial_state())
    assert first.state.last_poll == 0.0
    assert first.state.last_hpa == 0.0
    second = policy.decide(observe(15.0, 1, 1, 4.0, 0.0), first.state)
    assert second.state.last_poll == 0.0
    assert second.state.last_hpa == 15.0
    third = policy.decide(observe(30.0, 1, 1, 4.0, 0.0), second.state)
    assert third.state.last_poll == 30.0
    assert third.state.last_hpa == 30.0


def test_missing_query_result_holds():
    policy = KedaPolicy(KedaConfig(threshold=4.0))
    decision = policy.decide(observe(0.0, 3, 3, None, None), policy.initial_state())
    assert decision.replicas == 3
    assert "no data" in decision.reason
    # ready pods but no in-flight series: missing, not zero
    assert policy.decide(observe(0.0, 3, 3, None, 0.0), policy.initial_state()).replicas == 3


def test_unhealthy_holds_even_when_idle_past_cooldown():
    policy = KedaPolicy(KedaConfig(threshold=4.0))
    state = KedaState(created_at=0.0, last_poll=0.0, last_active=0.0)
    decision = policy.decide(observe(1000.0, 2, 2, 0.0, 0.0, healthy=False), state)
    assert decision.replicas == 2
    assert "unhealthy" in decision.reason


def test_single_signal_query_is_accepted():
    config = KedaConfig(threshold=5.0, query_signal=Signal(QUEUE, aggregation="sum"))
    policy = KedaPolicy(config)
    assert list(policy.signals) == ["query_0"]
    obs = Observation(0.0, TargetStatus(1, ()), series={"query_0": ((0.0, 12.0),)})
    assert policy.decide(obs, policy.initial_state()).replicas == 3


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"threshold": 0.0}, "KedaConfig.threshold=0.0"),
        ({"threshold": 1.0, "activation_threshold": -1.0}, "KedaConfig.activation_threshold"),
        ({"threshold": 1.0, "polling_interval_s": 0.0}, "KedaConfig.polling_interval_s"),
        ({"threshold": 1.0, "min_replicas": 5, "max_replicas": 2}, "KedaConfig.max_replicas"),
        ({"threshold": 1.0, "metric_type": "Utilization"}, "KedaConfig.metric_type"),
        ({"threshold": 1.0, "query_signal": ()}, "KedaConfig.query_signal"),
    ],
)
def test_bad_config_raises_config_error_naming_the_key(kwargs, key):
    with pytest.raises(ConfigError) as info:
        KedaConfig(**kwargs)
    assert str(info.value).startswith(key)


def test_state_round_trips_through_json_with_identical_decisions():
    policy = KedaPolicy(KedaConfig(threshold=4.0, cooldown_period_s=60))
    values = [0.0, 5.0, 30.0, 30.0, 8.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 12.0]
    state = policy.initial_state()
    replicas = 0
    seen = set()
    for i, value in enumerate(values * 4):
        obs = observe(15.0 * i, replicas, replicas, value if replicas else None, value / 2)
        direct = policy.decide(obs, state)
        assert through_json(policy, state) == state
        assert policy.decide(obs, through_json(policy, state)) == direct
        state, replicas = through_json(policy, direct.state), direct.replicas
        seen.add(replicas)
    assert 0 in seen
    assert max(seen) >= 3


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 60),
            st.integers(0, 20),
            st.one_of(st.none(), st.floats(0.0, 500.0)),
            st.one_of(st.none(), st.floats(0.0, 500.0)),
            st.booleans(),
        ),
        min_size=1,
        max_size=10,
    ),
    st.integers(0, 3),
    st.integers(3, 40),
)
def test_replicas_always_within_bounds(steps, lo, hi):
    policy = KedaPolicy(KedaConfig(threshold=3.0, min_replicas=lo, max_replicas=hi))
    state = policy.initial_state()
    for i, (desired, ready_pods, in_flight, queue, healthy) in enumerate(steps):
        obs = observe(15.0 * i, desired, ready_pods, in_flight, queue, healthy)
        decision = policy.decide(obs, state)
        assert lo <= decision.replicas <= hi
        state = through_json(policy, decision.state)


def test_config_errors_read_where_what_and_fix():
    with pytest.raises(ConfigError) as info:
        KedaConfig(threshold=0.0)
    assert str(info.value) == "KedaConfig.threshold=0.0: out of range; use a value > 0"


def test_every_numeric_setting_states_its_unit():
    numeric = [f for f in dataclasses.fields(KedaConfig) if f.type in (float, int, "float", "int")]
    assert numeric
    assert all(f.metadata.get("unit") for f in numeric), [f.name for f in numeric]
    units = {f.name: f.metadata["unit"] for f in numeric}
    assert units["threshold"] == "requests per replica"
    assert units["polling_interval_s"] == "s"


JITTER_S = (1.7, -2.0, 0.4, 2.0, -1.3, -0.2, 1.1, -1.9, 0.8, -0.6)
JITTER_S += (2.0, -2.0, 0.0, 1.5, -0.9, 0.3, -1.6, 1.9, -0.4, 0.6)
"""Offsets of 20 live decisions from a 15 s grid, within +/- 2 s (the controller reads its
clock after its API calls, so a sync lands a little early or late)."""


def jittered(policy, replicas=2, value=8.0):
    """Decide at each jittered time; return (decisions that polled, that ran the HPA)."""
    state, polls, syncs = policy.initial_state(), 0, 0
    for i, jitter in enumerate(JITTER_S):
        now = 15.0 * (i + 1) + jitter
        decision = policy.decide(observe(now, replicas, replicas, value, 0.0), state)
        state = decision.state
        polls += state.last_poll == now
        syncs += state.last_hpa == now
    return polls, syncs


def test_a_jittered_clock_polls_and_syncs_at_every_call_when_both_periods_are_the_interval():
    # Half of these calls come less than 15 s after the one before: with exact timing a
    # loop due every 15 s would skip them and act every second call.
    config = KedaConfig(threshold=4.0, polling_interval_s=15.0, hpa_sync_period_s=15.0)
    policy = KedaPolicy(config)
    assert policy.interval_s == 15.0
    assert jittered(policy) == (20, 20)


def test_a_jittered_clock_syncs_the_hpa_at_every_call_and_polls_at_every_second():
    policy = KedaPolicy(KedaConfig(threshold=4.0))  # polling 30 s, HPA sync 15 s
    assert jittered(policy) == (10, 20)


@pytest.mark.parametrize(
    ("last", "now", "is_due"),
    [(None, 0.0, True), (0.0, 7.5, True), (0.0, 7.4999, False), (0.0, 30.0, True)],
)
def test_a_loop_is_due_half_an_interval_before_its_period_ends(last, now, is_due):
    assert due(last, 15.0, now, 15.0) is is_due


def _failing_syncs(cfg, current, ready, syncs):
    """Each HPA sync's replicas while the trigger gives no reading (state kept through JSON)."""
    policy = KedaPolicy(cfg)
    pods = tuple(PodStatus(f"p{i}", i < ready, -100.0, -50.0) for i in range(current))
    state, out = policy.initial_state(), []
    for k in range(syncs):
        decision = policy.fall_back(TargetStatus(current, pods), 15.0 * k, state)
        state = through_json(policy, decision.state)
        out.append(decision.replicas)
    return out, state


@pytest.mark.parametrize(
    ("behavior", "current", "expected"),
    [
        ("static", 2, 6),
        ("currentReplicas", 2, 2),
        ("currentReplicasIfHigher", 8, 8),
        ("currentReplicasIfHigher", 2, 6),
        ("currentReplicasIfLower", 2, 2),
        ("currentReplicasIfLower", 8, 6),
    ],
)
def test_fallback_heads_for_its_replicas_after_more_failures_than_the_threshold(
    behavior, current, expected
):
    cfg = KedaConfig(
        threshold=10.0,
        fallback=KedaFallback(failure_threshold=2, replicas=6, behavior=behavior),
        behavior=DEFAULT_BEHAVIOR,
    )
    replicas, state = _failing_syncs(cfg, current, current, 6)
    # KEDA counts failures and falls back once the count passes the threshold (> 2):
    # the third failed sync; the HPA's default behavior allows the whole step at once,
    # except scale-down, which waits out its 300 s window.
    assert replicas[:2] == [current, current]
    if expected >= current:
        assert replicas[2:] == [expected] * 4
    else:
        assert replicas[2:] == [current] * 4  # stabilised: within 300 s of current
    assert state.failures == 6


def test_a_value_target_falls_back_through_its_ready_pods_and_holds_without_any():
    fb = KedaFallback(failure_threshold=0, replicas=6)
    cfg = KedaConfig(threshold=10.0, metric_type="Value", fallback=fb, behavior=DEFAULT_BEHAVIOR)
    # Value: the HPA reads threshold x 6 / 3 ready = 20 against 10: ceil(2 x 3) = 6.
    assert _failing_syncs(cfg, 3, 3, 2)[0] == [6, 6]
    assert _failing_syncs(cfg, 3, 0, 2)[0] == [3, 3]  # no ready pod: KEDA cannot fall back


def test_without_a_fallback_a_failed_read_keeps_the_state():
    replicas, state = _failing_syncs(KedaConfig(threshold=10.0), 4, 4, 3)
    assert replicas == [4, 4, 4]
    assert state == KedaState()
