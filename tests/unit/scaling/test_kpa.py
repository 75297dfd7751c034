"""Knative KPA baseline: windows, panic, rate limits and scale to zero, with Knative's numbers.

Cases named ``TestXxx`` are ported from knative/serving: the decider's from
``pkg/autoscaler/scaling/autoscaler_test.go`` (its test spec: panic threshold 200 %,
max scale up and down rates 10) and the scale-to-zero gate's from
``pkg/reconciler/autoscaling/kpa/scaler_test.go`` ``TestScaler`` (its config: stable
window 5 min, grace period 60 s), same inputs and expected scale.
"""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.errors import ConfigError
from gpuscale.scaling.kpa import KpaConfig, KpaPolicy, KpaState, window_average
from gpuscale.scaling.policy import Observation, PodStatus, TargetStatus
from tests.support.policystate import through_json


def running(since: float = -1000.0, panic_time=None, max_panic=0, proxy_since=None) -> KpaState:
    """State of a decider created long ago for a revision that is active and serving."""
    return KpaState(
        created_at=-1000.0,
        panic_time=panic_time,
        max_panic_pods=max_panic,
        active="active",
        active_changed_at=since,
        initialised=True,
        proxy_since=proxy_since,
    )


LONG_AGO = running()


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


def windows(stable: int, panic: int) -> list[float]:
    """60 one-second integer samples: 60 s mean ``stable``, last 6 s mean ``panic`` (exactly)."""
    q, r = divmod(60 * stable - 6 * panic, 54)
    return [float(q + 1)] * r + [float(q)] * (54 - r) + [float(panic)] * 6


def test_defaults_match_knative():
    config = KpaConfig()
    policy = KpaPolicy(config)
    assert config.target == 70.0
    assert config.panic_window_s == 6.0
    assert (config.scale_to_zero_grace_s, config.target_burst_capacity) == (30.0, 211.0)
    assert (policy.interval_s, policy.history_s) == (2.0, 60.0)
    assert (config.max_scale_up_rate, config.max_scale_down_rate) == (1000.0, 2.0)
    assert set(policy.signals) == {"concurrency", "queue"}


def test_declares_a_one_second_undelayed_signal():
    # collector.go scrapeTickInterval: queue-proxies are scraped every second, directly
    policy = KpaPolicy()
    path = policy.signal_path
    assert (path.source, path.interval_s, path.delay_s) == ("direct", 1.0, 0.0)
    assert policy.history_s / path.interval_s == 60  # a stable window of buckets
    assert KpaConfig().panic_window_s / path.interval_s == 6


def test_every_config_field_states_its_unit():
    units = {f.name: f.metadata["unit"] for f in dataclasses.fields(KpaConfig)}
    assert units["stable_window_s"] == units["scale_to_zero_grace_s"] == "s"
    assert units["panic_threshold_percentage"] == "%"
    assert units["target"] == "requests"
    assert units["min_replicas"] == "replicas"


def test_stable_and_panic_windows_average_different_spans():
    points = tuple((float(t), 60.0 if t >= 54 else 0.0) for t in range(60))
    assert window_average(points, 60.0) == pytest.approx(6.0)
    assert window_average(points, 6.0) == pytest.approx(60.0)


def test_partial_window_averages_what_exists():
    points = ((0.0, 10.0), (1.0, 20.0))
    assert window_average(points, 60.0) == pytest.approx(15.0)


def test_stable_mode_uses_ceil_of_stable_over_target():
    decision = KpaPolicy().decide(observe(100.0, 2, 2, 150.0), LONG_AGO)
    assert decision.replicas == 3  # ceil(150 / 70)
    assert decision.state.panic_time is None


def test_queue_counts_as_concurrency():
    assert KpaPolicy().decide(observe(100.0, 2, 2, 100.0, 110.0), LONG_AGO).replicas == 3


# ----------------------------------------------------------------- start in panic
def test_start_in_panic_holds_the_count_for_a_stable_window():
    # newAutoscaler: more than one Ready pod at creation -> panic from creation with
    # maxPanicPods = ready pods. The reported failure: 25 -> 1 in 20 s on empty windows.
    policy = KpaPolicy()
    state = policy.initial_state()
    seen = {}
    replicas = 25
    for t in range(0, 71, 2):
        decision = policy.decide(observe(float(t), replicas, replicas, 0.0, 0.0), state)
        state, replicas = decision.state, decision.replicas
        seen[t] = (replicas, decision.reason.split(":")[0])
    assert seen[0] == (25, "panic")
    assert seen[60] == (25, "panic")  # creation + 60 s is not before now: still panicking
    assert seen[62] == (12, "stable")  # then at most halve 25 ready pods per tick
    assert seen[64] == (6, "stable")
    assert state.created_at == 0.0


def test_start_in_panic_sets_panic_at_creation_test_autoscaler_start_metrics():
    # TestAutoscalerStartMetrics: created with 2 ready pods -> panic gauge 1
    decision = KpaPolicy().decide(observe(5.0, 2, 2, 0.0, 0.0), KpaPolicy().initial_state())
    assert decision.state.panic_time == 5.0
    assert decision.state.max_panic_pods == 2
    assert decision.replicas == 2


def test_one_ready_pod_at_creation_does_not_start_in_panic():
    decision = KpaPolicy().decide(observe(5.0, 1, 1, 0.0, 0.0), KpaPolicy().initial_state())
    assert decision.state.panic_time is None
    assert decision.reason.startswith("stable")


def test_creation_is_recorded_even_when_the_first_observation_is_unhealthy():
    policy = KpaPolicy()
    sick = policy.decide(observe(0.0, 8, 8, 0.0, healthy=False), policy.initial_state())
    assert sick.replicas == 8
    assert sick.state.panic_time == 0.0
    later = policy.decide(observe(30.0, 8, 8, 0.0, 0.0), sick.state)
    assert later.replicas == 8  # still within a stable window of creation


# ----------------------------------------------------------------- decider table
TEST_SPEC = {"max_scale_up_rate": 10.0, "max_scale_down_rate": 10.0, "max_replicas": 10_000}
CREATED = running(since=0.0, max_panic=1)  # created with 1 ready pod: not in panic


def test_autoscaler_unpanic_after_slow_increase():
    # TestAutoscalerUnpanicAfterSlowIncrease (target 1)
    policy = KpaPolicy(KpaConfig(target=1.0, **TEST_SPEC))
    first = policy.decide(observe(0.0, 10, 10, windows(11, 25)), CREATED)
    assert (first.replicas, first.state.panic_time) == (25, 0.0)
    half = policy.decide(observe(30.0, 40, 40, windows(30, 41)), first.state)
    assert (half.replicas, half.state.panic_time) == (41, 0.0)  # panic time did not move
    end = policy.decide(observe(62.0, 55, 55, windows(50, 56)), half.state)
    assert (end.replicas, end.state.panic_time) == (50, None)  # no longer in panic


def test_autoscaler_extend_panic_window():
    # TestAutoscalerExtendPanicWindow (target 1)
    policy = KpaPolicy(KpaConfig(target=1.0, **TEST_SPEC))
    first = policy.decide(observe(0.0, 10, 10, windows(11, 25)), CREATED)
    assert first.replicas == 25
    again = policy.decide(observe(30.0, 40, 40, windows(30, 80)), first.state)
    assert (again.replicas, again.state.panic_time) == (80, 30.0)


def test_autoscaler_stable_mode_decrease():
    # TestAutoscalerStableModeDecrease (target 10, 8 ready pods)
    policy = KpaPolicy(KpaConfig(target=10.0, **TEST_SPEC))
    first = policy.decide(observe(0.0, 8, 8, 100.0), CREATED)
    assert first.replicas == 10
    assert policy.decide(observe(2.0, 10, 8, 50.0), first.state).replicas == 5


def test_autoscaler_panic_mode_exponential_track_and_stabilize():
    # TestAutoscalerPanicModeExponentialTrackAndStabilize (target 1)
    policy = KpaPolicy(KpaConfig(target=1.0, **TEST_SPEC))
    state = CREATED
    for t, ready, load, want in [
        (0.0, 1, 6, 6),
        (1.0, 6, 36, 36),
        (2.0, 36, 216, 216),
        (2.0, 216, 1296, 1296),
        (3.0, 1296, 1296, 1296),
    ]:
        decision = policy.decide(observe(t, ready, ready, float(load)), state)
        assert decision.replicas == want, (t, ready)
        state = decision.state
    assert state.panic_time == 2.0


@pytest.mark.parametrize(("panic_load", "panics"), [(280.0, True), (210.0, False)])
def test_panic_entered_at_200_percent(panic_load, panics):
    # 2 ready pods; 280 -> ceil(4.0) = 4 pods = 200 % of ready; 210 -> 3 pods = 150 %
    series = [0.0] * 54 + [panic_load] * 6
    decision = KpaPolicy().decide(observe(100.0, 2, 2, series), LONG_AGO)
    assert (decision.state.panic_time == 100.0) is panics
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
    assert state.panic_time is None
    assert state.max_panic_pods == 0


def test_scale_down_rate_halves_ready_pods_at_most():
    assert KpaPolicy().decide(observe(100.0, 10, 10, 0.0), LONG_AGO).replicas == 5


def test_scale_up_rate_limit():
    policy = KpaPolicy(KpaConfig(max_scale_up_rate=2.0))
    assert policy.decide(observe(100.0, 2, 2, 7000.0), LONG_AGO).replicas == 4


# ----------------------------------------------------------------- scale to zero
SCALER_TEST = KpaConfig(stable_window_s=300.0, scale_to_zero_grace_s=60.0)


def pa(active: str, since: float, proxy_since=None) -> KpaState:
    return dataclasses.replace(running(since=since, proxy_since=proxy_since), active=active)


@pytest.mark.parametrize(
    ("label", "start", "state", "config", "want"),
    [
        ("waits to scale to zero (just before idle period)", 1, pa("active", -299.0), {}, 1),
        ("scale to 1 waiting for idle expires", 10, pa("active", -299.0), {}, 1),
        ("waits to scale to zero after idle period", 1, pa("active", -300.0), {}, 1),
        ("scale to zero after grace period", 1, pa("inactive", -60.0), {}, 0),
        ("waits to scale to zero (just before grace period)", 1, pa("inactive", -59.0), {}, 1),
        (
            "waits to scale to zero (just before grace period, sks short)",
            1,
            pa("inactive", -59.0, proxy_since=-59.0),
            {},
            1,
        ),
        (
            "waits to scale to zero (just before grace period, sks in proxy long)",
            1,
            pa("inactive", -59.0, proxy_since=-60.0),
            {},
            0,
        ),
        (
            "... sks in proxy long) and last pod timeout positive",
            1,
            pa("inactive", -59.0, proxy_since=-60.0),
            {"scale_to_zero_pod_retention_s": 42.0},
            0,
        ),
        (
            "can't scale to zero after grace period, but before last pod retention",
            1,
            pa("inactive", -60.0),
            {"scale_to_zero_pod_retention_s": 120.0},
            1,
        ),
        (
            "scale to zero after grace period, and after last pod retention",
            1,
            pa("inactive", -60.0),
            {"scale_to_zero_pod_retention_s": 60.0},
            0,
        ),
        (
            "waits to scale to zero while activating until after deadline exceeded",
            1,
            pa("activating", -315.0),
            {},
            1,
        ),
        (
            "scale to zero while activating after deadline exceeded",
            1,
            pa("activating", -631.0),
            {},
            0,
        ),
    ],
)
def test_scale_to_zero_gate_test_scaler_table(label, start, state, config, want):
    # the decider wants 0: one Ready pod (floor(1 / 2) = 0) and no traffic
    policy = KpaPolicy(dataclasses.replace(SCALER_TEST, **config))
    decision = policy.decide(observe(0.0, start, 1, 0.0, 0.0), state)
    assert decision.replicas == want, label


def test_active_for_less_than_a_stable_window_scales_to_one_not_the_current_count():
    # handleScaleToZero returns (1, true): the old gate kept all 10
    decision = KpaPolicy().decide(observe(0.0, 10, 1, 0.0, 0.0), running(since=-20.0))
    assert decision.replicas == 1
    assert decision.state.active == "active"


def test_active_for_a_stable_window_marks_inactive_and_keeps_the_count():
    decision = KpaPolicy().decide(observe(0.0, 3, 1, 0.0, 0.0), running(since=-60.0))
    assert decision.replicas == 3
    assert (decision.state.active, decision.state.active_changed_at) == ("inactive", 0.0)


def test_new_deployment_with_one_pod_reaches_zero_after_window_and_grace():
    # target-burst-capacity 0: the activator leaves the path while serving, so the
    # grace period runs from the moment the revision is marked inactive.
    policy = KpaPolicy(KpaConfig(target_burst_capacity=0.0))
    state = policy.initial_state()
    out = {}
    replicas = 1
    for t in range(0, 96, 2):
        decision = policy.decide(observe(float(t), replicas, replicas, 0.0, 0.0), state)
        state, replicas = decision.state, decision.replicas
        out[t] = replicas
    assert out[0] == 1  # activating at creation: the scale is left alone
    assert out[58] == 1  # active for less than a stable window: 1
    assert out[60] == 1  # marked inactive now
    assert out[88] == 1
    assert out[90] == 0  # inactive for the 30 s grace period
    assert state.active == "inactive"


def test_activator_in_path_for_the_grace_period_scales_to_zero_right_after_inactive():
    # target-burst-capacity 211 (default) on one small pod: the SKS stays in proxy mode
    policy = KpaPolicy()
    state = policy.initial_state()
    out = {}
    replicas = 1
    for t in range(0, 66, 2):
        decision = policy.decide(observe(float(t), replicas, replicas, 0.0, 0.0), state)
        state, replicas = decision.state, decision.replicas
        out[t] = replicas
    assert out[60] == 1  # marked inactive
    assert out[62] == 0  # proxy mode since 0 s >= 30 s grace: fast path


def test_traffic_during_grace_reactivates_and_restarts_the_window():
    policy = KpaPolicy()
    inactive = pa("inactive", -10.0)
    busy = policy.decide(observe(0.0, 1, 1, [0.0] * 59 + [70.0], 0.0), inactive)
    assert busy.replicas == 1
    assert (busy.state.active, busy.state.active_changed_at) == ("active", 0.0)
    idle = policy.decide(observe(40.0, 1, 1, 0.0, 0.0), busy.state)
    assert idle.replicas == 1
    assert idle.state.active == "active"  # 40 s < a stable window since reactivation


def test_scale_to_zero_disabled_keeps_one():
    policy = KpaPolicy(KpaConfig(enable_scale_to_zero=False))
    assert policy.decide(observe(100.0, 1, 1, 0.0, 0.0), LONG_AGO).replicas == 1


def test_scale_from_zero_on_queued_requests():
    policy = KpaPolicy()
    decision = policy.decide(observe(100.0, 0, 0, None, [0.0] * 59 + [3.0]), pa("inactive", 0.0))
    assert decision.replicas == 1
    assert decision.state.active == "activating"  # wanted > 0, no Ready pod yet


def test_initial_scale_holds_until_reached():
    policy = KpaPolicy(KpaConfig(initial_scale=3))
    decision = policy.decide(observe(0.0, 3, 0, None, 0.0), policy.initial_state())
    assert decision.replicas == 3
    assert not decision.state.initialised
    reached = policy.decide(observe(100.0, 3, 3, 0.0, 0.0), decision.state)
    assert reached.state.initialised is True
    assert reached.replicas == 3  # initialised only after this sync (scale reads the old status)
    later = policy.decide(observe(102.0, 3, 3, 0.0, 0.0), reached.state)
    assert later.replicas == 1  # no traffic: floor(3 ready / max-scale-down-rate 2)


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
        ({"stable_window_s": 5.0}, "KpaConfig.stable_window_s=5.0"),
        ({"panic_threshold_percentage": 100.0}, "KpaConfig.panic_threshold_percentage=100.0"),
        ({"max_scale_down_rate": 1.0}, "KpaConfig.max_scale_down_rate=1.0"),
        ({"target_burst_capacity": -2.0}, "KpaConfig.target_burst_capacity=-2.0"),
        ({"target_utilization": 0.0}, "KpaConfig.target_utilization=0.0"),
        ({"max_replicas": 0}, "KpaConfig.max_replicas=0"),
    ],
)
def test_bad_config_raises_config_error_naming_the_key(kwargs, key):
    with pytest.raises(ConfigError) as info:
        KpaConfig(**kwargs)
    message = str(info.value)
    assert message.startswith(key)
    assert "\n" not in message


def test_state_round_trips_through_json_with_identical_decisions():
    policy = KpaPolicy()
    loads = [0.0, 50.0, 400.0, 900.0, 300.0, 0.0] + [0.0] * 40 + [100.0]
    state = policy.initial_state()
    replicas = 1
    seen = set()
    for i, load in enumerate(loads):
        obs = observe(2.0 * i, replicas, replicas, load if replicas else None, 0.0)
        direct = policy.decide(obs, state)
        assert through_json(policy, state) == state
        assert policy.decide(obs, through_json(policy, state)) == direct
        state, replicas = through_json(policy, direct.state), direct.replicas
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
    state = policy.initial_state()
    for i, (desired, ready_pods, concurrency, queue, healthy) in enumerate(steps):
        obs = observe(2.0 * i, desired, ready_pods, concurrency, queue, healthy)
        decision = policy.decide(obs, state)
        assert lo <= decision.replicas <= hi
        state = through_json(policy, decision.state)
