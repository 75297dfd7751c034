"""Kubernetes HPA v2 baseline: one test per controller rule, with the controller's numbers.

Cases named ``TestXxx`` are ported from kubernetes ``pkg/controller/podautoscaler``
(``replica_calculator_test.go``, ``horizontal_test.go``): same inputs, same expected
replicas. Metric levels there are milli-units (20000 = 20.0).
"""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.errors import ConfigError
from gpuscale.scaling.baseline import HpaBehavior, RatePolicy, ScalingRules
from gpuscale.scaling.hpa import (
    DEFAULT_BEHAVIOR,
    HpaConfig,
    HpaPolicy,
    _group_and_read,
    external_average_value_replicas,
    external_value_replicas,
    group_pods,
    pods_metric_replicas,
    reconcile_legacy,
)
from gpuscale.scaling.policy import Observation, PodStatus, TargetStatus
from gpuscale.scaling.recommendations import HpaState
from tests.support.policystate import through_json

METRIC = "DCGM_FI_DEV_GPU_UTIL"
LEGACY = HpaConfig()
WITH_BEHAVIOR = HpaConfig(behavior=DEFAULT_BEHAVIOR)


def ready(name: str, created: float = -1000.0) -> PodStatus:
    return PodStatus(name, True, created, created + 60.0)


def starting(name: str, created: float = -10.0) -> PodStatus:
    return PodStatus(name, False, created, None)


def observe(now, desired, pods, utils, healthy=True):
    return Observation(
        now=now,
        target=TargetStatus(desired, tuple(pods)),
        pod_metrics={METRIC: dict(utils)},
        healthy=healthy,
    )


def uniform(now, n, util, desired=None):
    pods = [ready(f"p{i}") for i in range(n)]
    return observe(now, n if desired is None else desired, pods, {p.name: util for p in pods})


def test_policy_declares_controller_cadence_and_pod_signal():
    policy = HpaPolicy()
    assert policy.interval_s == 15.0
    assert policy.pod_signals[METRIC].metric == METRIC
    assert policy.pod_signals[METRIC].by == ("pod",)
    assert (policy.min_replicas, policy.max_replicas) == (1, 100)
    assert policy.config.behavior is None  # no spec.behavior: the legacy path
    assert policy.config.downscale_stabilization_s == 300.0


def test_every_config_field_states_its_unit():
    units = {f.name: f.metadata["unit"] for f in dataclasses.fields(HpaConfig)}
    assert units["tolerance"] == "ratio"
    assert units["sync_period_s"] == units["downscale_stabilization_s"] == "s"
    assert units["min_replicas"] == units["max_replicas"] == "replicas"


@pytest.mark.parametrize("config", [LEGACY, WITH_BEHAVIOR], ids=["legacy", "behavior"])
@pytest.mark.parametrize("util", [73.5, 66.5, 70.0])
def test_no_change_inside_tolerance(util, config):
    # ratio 1.05, 0.95 and 1.0 are all within the default 10 % tolerance
    decision = HpaPolicy(config).decide(uniform(0.0, 4, util), HpaPolicy(config).initial_state())
    assert decision.replicas == 4


def test_tolerance_table_case_tolerance_cm():
    # TestReplicaCalcToleranceCM: levels 20, 21, 21 against 20 -> ratio 1.033, stay at 3
    pods = [ready("a"), ready("b"), ready("c")]
    config = HpaConfig(target_average_value=20.0)
    proposal = pods_metric_replicas(3, pods, {"a": 20.0, "b": 21.0, "c": 21.0}, 0.0, config)
    assert proposal is not None
    assert (proposal.replicas, proposal.usage) == (3, 20.666)


def test_just_outside_tolerance_scales_up():
    # ratio 1.2 on 5 pods -> ceil(6.0) = 6
    assert HpaPolicy().decide(uniform(0.0, 5, 84.0), HpaPolicy().initial_state()).replicas == 6


@pytest.mark.parametrize(
    ("name", "n", "levels", "target", "expected"),
    [
        ("TestReplicaCalcScaleUpCM", 3, (20.0, 10.0, 30.0), 15.0, 4),
        ("TestReplicaCalcScaleDownCM", 5, (12.0,) * 5, 20.0, 3),
    ],
)
def test_pods_metric_table_cases(name, n, levels, target, expected):
    pods = [ready(f"p{i}") for i in range(n)]
    utils = {p.name: v for p, v in zip(pods, levels, strict=True)}
    proposal = pods_metric_replicas(n, pods, utils, 0.0, HpaConfig(target_average_value=target))
    assert proposal is not None, name
    assert proposal.replicas == expected, name


@pytest.mark.parametrize(("current", "legacy", "behavior"), [(1, 4, 5), (2, 4, 6), (3, 6, 7)])
def test_one_sync_scale_up_limit_from_one_two_three_replicas(current, legacy, behavior):
    # ratio 10 wants 10 x current. Legacy (horizontal.go calculateScaleUpLimit, as in
    # TestConvertDesiredReplicasWithRules "scaleUpLimit is the limit"): max(2 x current, 4).
    # Default behavior (autoscaling/v2 defaults.go, docs "Default Behavior"):
    # max(current + 4, 2 x current).
    obs = uniform(0.0, current, 700.0)
    assert HpaPolicy(LEGACY).decide(obs, HpaPolicy(LEGACY).initial_state()).replicas == legacy
    assert (
        HpaPolicy(WITH_BEHAVIOR).decide(obs, HpaPolicy(WITH_BEHAVIOR).initial_state()).replicas
        == behavior
    )


def test_legacy_limit_applies_per_sync_without_a_period_memory():
    policy = HpaPolicy(LEGACY)
    state = policy.initial_state()
    replicas, seen = 1, []
    for t in (0.0, 15.0, 30.0, 45.0):
        decision = policy.decide(uniform(t, replicas, 7000.0), state)
        state, replicas = decision.state, decision.replicas
        seen.append(replicas)
    assert seen == [4, 8, 16, 32]
    assert state.scale_up_events == state.scale_down_events == ()  # none on the legacy path
    assert "scale-up limit max(2 x current, 4)" in decision.reason


@pytest.mark.parametrize(
    ("current", "proposal", "lo", "hi", "expected"),
    [
        (5, 7, 3, 8, 7),  # prenormalized desired replicas within range
        (3, 1, 2, 8, 2),  # prenormalized desired replicas < minReplicas
        (20, 1000, 1, 10, 10),  # maxReplicas is the limit because maxReplicas < scaleUpLimit
        (3, 1000, 1, 2000, 6),  # scaleUpLimit is the limit: calculateScaleUpLimit(3)
    ],
)
def test_legacy_bounds_table_convert_desired_replicas_with_rules(
    current, proposal, lo, hi, expected
):
    # TestConvertDesiredReplicasWithRules, through the legacy sync with an empty log.
    replicas, _, _ = reconcile_legacy(
        0.0,
        current,
        proposal,
        min_replicas=lo,
        max_replicas=hi,
        downscale_stabilization_s=300.0,
        state=HpaState(recommendations=()),
    )
    assert replicas == expected


@pytest.mark.parametrize(
    ("name", "log", "expected"),
    [
        ("empty log", [], 3),
        ("stabilize", [(4, -120.0), (5, -60.0)], 5),
        ("no stabilize", [(1, -120.0), (2, -60.0)], 3),
        ("no stabilize - old recommendations", [(10, -600.0), (9, -540.0)], 3),
        (
            "stabilize - old recommendations",
            [(10, -600.0), (4, -60.0), (5, -120.0), (9, -540.0)],
            5,
        ),
    ],
)
def test_legacy_stabilisation_table_normalize_desired_replicas(name, log, expected):
    # TestNormalizeDesiredReplicas (legacy stabilizeRecommendation, 5 minute window),
    # proposal 3 at current 3 ("empty log" proposes 5 upstream; 3 here keeps one proposal).
    state = HpaState(tuple((t, r) for r, t in log))
    replicas, _, new_state = reconcile_legacy(
        0.0, 3, 3, min_replicas=1, max_replicas=100, downscale_stabilization_s=300.0, state=state
    )
    assert replicas == expected, name
    assert all(t >= -300.0 for t, _ in new_state.recommendations)
    assert (0.0, 3) in new_state.recommendations


@pytest.mark.parametrize(
    ("config", "held_until", "applied_at"),
    [(LEGACY, 300, 315), (WITH_BEHAVIOR, 285, 300)],
    ids=["legacy", "behavior"],
)
def test_scale_down_held_for_300_s_of_stabilisation_then_applied(config, held_until, applied_at):
    # Legacy keeps a recommendation until it is *before* the cutoff (stabilizeRecommendation);
    # the behaviour path only while it is *after* it (stabilizeRecommendationWithBehaviors).
    policy = HpaPolicy(config)
    state = policy.initial_state()
    replicas = 4
    seen = {}
    for t in range(0, 331, 15):
        util = 70.0 if t == 0 else 17.5  # ratio 0.25 -> recommendation 1
        decision = policy.decide(uniform(float(t), replicas, util), state)
        state, replicas = decision.state, decision.replicas
        seen[t] = replicas
    assert seen[0] == 4
    assert seen[held_until] == 4
    assert seen[applied_at] == 1  # no scale-down rate limit on either default path
    assert seen[330] == 1


def test_behavior_scale_up_from_two_pods_limited_to_four_more_per_period():
    policy = HpaPolicy(WITH_BEHAVIOR)
    # ratio 5.0 wants 10; the Pods policy allows +4 (2 -> 6), Percent 100 % only 4.
    first = policy.decide(uniform(0.0, 2, 350.0), policy.initial_state())
    assert first.replicas == 6
    # Still inside the same 15 s period: the period started at 2 replicas.
    second = policy.decide(uniform(10.0, 6, 350.0), first.state)
    assert second.replicas == 6
    # A new period starts from 6: max(6 + 4, 6 x 2) = 12.
    third = policy.decide(uniform(15.0, 6, 350.0), second.state)
    assert third.replicas == 12


def test_behavior_scale_up_from_ten_pods_limited_to_one_hundred_percent():
    # ratio 3.0 wants 30; max(10 + 4, 10 x 2) = 20; legacy also allows 20.
    assert (
        HpaPolicy(WITH_BEHAVIOR)
        .decide(uniform(0.0, 10, 210.0), HpaPolicy(WITH_BEHAVIOR).initial_state())
        .replicas
        == 20
    )
    assert (
        HpaPolicy(LEGACY)
        .decide(uniform(0.0, 10, 210.0), HpaPolicy(LEGACY).initial_state())
        .replicas
        == 20
    )


def test_behavior_scale_down_without_stabilisation_is_immediate_but_rate_limited():
    down = ScalingRules((RatePolicy("Pods", 2, 60.0),), "Max", 0.0)
    policy = HpaPolicy(HpaConfig(behavior=HpaBehavior(scale_down=down)))
    first = policy.decide(uniform(0.0, 8, 7.0, desired=8), HpaState(recommendations=()))
    assert first.replicas == 6  # wants 1, at most 2 pods per 60 s
    second = policy.decide(uniform(30.0, 6, 7.0), first.state)
    assert second.replicas == 6  # the 60 s period still holds the first 2
    third = policy.decide(uniform(61.0, 6, 7.0), second.state)
    assert third.replicas == 4


def test_legacy_downscale_window_is_the_controller_flag():
    policy = HpaPolicy(HpaConfig(downscale_stabilization_s=0.0))
    decision = policy.decide(uniform(0.0, 8, 7.0), HpaState(recommendations=()))
    assert decision.replicas == 1  # ratio 0.1 -> 1 at once: no window, no rate limit


def test_missing_pods_count_as_zero_on_scale_up():
    pods = [ready("a"), ready("b"), ready("c")]
    utils = {"a": 140.0, "b": 140.0}  # c reports nothing
    proposal = pods_metric_replicas(3, pods, utils, 0.0, HpaConfig())
    # ratio 2.0 -> c counts as 0 -> (140 + 140 + 0) / 3 / 70 = 1.333 -> ceil(4.0) = 4
    assert proposal is not None
    assert proposal.replicas == 4
    assert (
        HpaPolicy().decide(observe(0.0, 3, pods, utils), HpaPolicy().initial_state()).replicas == 4
    )


def test_missing_pods_count_as_target_on_scale_down():
    pods = [ready("a"), ready("b"), ready("c")]
    utils = {"a": 35.0, "b": 35.0}
    proposal = pods_metric_replicas(3, pods, utils, 0.0, HpaConfig())
    # ratio 0.5 -> c counts as 70 -> 140 / 3 / 70 = 0.667 -> ceil(2.0) = 2 (not 1)
    assert proposal is not None
    assert proposal.replicas == 2


def test_missing_pods_that_would_flip_direction_hold():
    pods = [ready("a"), ready("b"), ready("c"), ready("d")]
    utils = {"a": 84.0}  # ratio 1.2 up, but 3 missing pods at 0 make it 0.3 (down)
    proposal = pods_metric_replicas(4, pods, utils, 0.0, HpaConfig())
    assert proposal is not None
    assert proposal.replicas == 4


def test_unready_pods_count_as_zero_on_scale_up():
    pods = [ready("a"), ready("b"), ready("c"), starting("d")]
    utils = {"a": 100.0, "b": 100.0, "c": 100.0}
    # ignoring d would give ceil(1.43 x 3) = 5; with d at 0: 300 / 4 / 70 = 1.07 -> hold 4
    proposal = pods_metric_replicas(4, pods, utils, 0.0, HpaConfig())
    assert proposal is not None
    assert proposal.replicas == 4


def test_unready_pods_are_ignored_on_scale_down():
    pods = [ready("a"), ready("b"), ready("c"), starting("d")]
    utils = {"a": 35.0, "b": 35.0, "c": 35.0}
    proposal = pods_metric_replicas(4, pods, utils, 0.0, HpaConfig())
    assert proposal is not None
    assert proposal.replicas == 2


def test_pods_metric_counts_a_not_ready_pod_that_reports_a_sample():
    pods = [ready("a"), ready("b"), starting("c")]
    utils = {"a": 140.0, "b": 140.0, "c": 70.0}
    groups = group_pods(pods, utils, 0.0, HpaConfig())
    assert groups == (3, set(), set())
    proposal = pods_metric_replicas(3, pods, utils, 0.0, HpaConfig())
    assert proposal is not None
    assert proposal.replicas == 5


@pytest.mark.parametrize(
    ("name", "current", "pods", "levels", "target", "expected"),
    [
        # 5 pods, 2 without a sample; ratio exactly 1.0 so nothing is filled in
        (
            "TestPlainMetricReplicaCalcMissingMetricsNoChangeEq",
            5,
            [ready(f"p{i}") for i in range(5)],
            {"p0": 20.0, "p1": 19.0, "p2": 21.0},
            20.0,
            5,
        ),
        # 3 running pods, spec 2, one without a sample: filled at the target the
        # ratio 0.725 gives 3 > 2, which would reverse a scale-down: stay at 2
        (
            "TestReplicaCalcDuringRollingUpdateWithMaxSurgeCM",
            2,
            [ready(f"p{i}") for i in range(3)],
            {"p0": 10.0, "p1": 10.0},
            17.0,
            2,
        ),
        # a not-Ready pod that reports the metric counts (Pods metric, no CPU rule)
        (
            "TestReplicaCalcScaleUpCMUnreadyHotCpuNoLessScale",
            3,
            [ready("p0"), ready("p1"), starting("p2")],
            {"p0": 50.0, "p1": 10.0, "p2": 30.0},
            15.0,
            6,
        ),
        (
            "TestReplicaCalcScaleUpCMUnreadyHotCpuScaleWouldScaleDown",
            3,
            [starting("p0"), ready("p1"), starting("p2")],
            {"p0": 50.0, "p1": 15.0, "p2": 30.0},
            15.0,
            7,
        ),
    ],
)
def test_missing_and_not_ready_table_cases(name, current, pods, levels, target, expected):
    proposal = pods_metric_replicas(
        current, pods, levels, 0.0, HpaConfig(target_average_value=target)
    )
    assert proposal is not None, name
    assert proposal.replicas == expected, name


@pytest.mark.parametrize("config", [LEGACY, WITH_BEHAVIOR], ids=["legacy", "behavior"])
def test_missing_and_pending_pods_on_both_paths(config):
    pods = [ready("a"), ready("b"), ready("c"), starting("d")]
    utils = {"a": 140.0, "b": 140.0}  # c is missing, d is Pending
    # ratio 2.0 -> c and d count as 0 -> 280 / 4 / 70 = 1.0 -> within tolerance: stay at 4
    assert (
        HpaPolicy(config)
        .decide(observe(0.0, 4, pods, utils), HpaPolicy(config).initial_state())
        .replicas
        == 4
    )
    utils = {"a": 21.0, "b": 21.0, "c": 21.0}  # d Pending is ignored on the way down
    # ratio 0.3 on 3 pods -> ceil(0.9) = 1, after stabilisation; without a window at once
    assert (
        HpaPolicy(config)
        .decide(observe(0.0, 4, pods, utils), HpaPolicy(config).initial_state())
        .replicas
        == 4
    )
    state = HpaState(recommendations=())
    assert HpaPolicy(config).decide(observe(0.0, 4, pods, utils), state).replicas == 1


def test_resource_readiness_rule_treats_a_not_ready_pod_as_unready():
    pods = [ready("a"), ready("b"), starting("c")]
    utils = {"a": 140.0, "b": 140.0, "c": 70.0}
    config = HpaConfig(readiness="resource")
    assert group_pods(pods, utils, 0.0, config) == (2, {"c"}, set())
    proposal = pods_metric_replicas(3, pods, utils, 0.0, config)
    assert proposal is not None
    assert proposal.replicas == 4


def test_resource_readiness_rule_after_initialisation_keeps_pods_that_were_ready():
    config = HpaConfig(readiness="resource")
    never_ready = PodStatus("n", False, -1000.0, None)
    was_ready = PodStatus("w", False, -1000.0, -500.0)
    fresh = PodStatus("f", True, -100.0, -10.0)  # inside the 300 s init period, ready 10 s
    utils = {"n": 50.0, "w": 50.0, "f": 50.0}
    _, unready, _ = group_pods([never_ready, was_ready, fresh], utils, 0.0, config)
    assert unready == {"n", "f"}


@pytest.mark.parametrize("behavior", [None, DEFAULT_BEHAVIOR], ids=["legacy", "behavior"])
def test_clamps_to_max_and_min(behavior):
    config = HpaConfig(min_replicas=2, max_replicas=10, behavior=behavior)
    policy = HpaPolicy(config)
    assert policy.decide(uniform(0.0, 8, 700.0), policy.initial_state()).replicas == 10
    assert policy.decide(uniform(0.0, 12, 70.0), policy.initial_state()).replicas == 10  # above max
    assert policy.decide(uniform(0.0, 1, 70.0), policy.initial_state()).replicas == 2  # below min
    assert policy.decide(uniform(0.0, 5, 1.0), HpaState(recommendations=())).replicas == 2


def test_target_at_zero_replicas_is_restored_to_min():
    assert HpaPolicy().decide(observe(0.0, 0, [], {}), HpaPolicy().initial_state()).replicas == 1


def test_unhealthy_observation_holds_and_keeps_state():
    state = HpaState(recommendations=((0.0, 9),))
    obs = observe(0.0, 5, [ready("a")], {"a": 1.0}, healthy=False)
    decision = HpaPolicy().decide(obs, state)
    assert decision.replicas == 5
    assert "hold" in decision.reason
    assert "unhealthy" in decision.reason
    assert decision.state == state


def test_no_sample_for_any_pod_holds():
    obs = observe(0.0, 5, [ready(f"p{i}") for i in range(5)], {})
    decision = HpaPolicy().decide(obs, HpaPolicy().initial_state())
    assert decision.replicas == 5
    assert f"no {METRIC} sample" in decision.reason


def test_external_average_value_math():
    assert external_average_value_replicas(1, 10.0, 4.0, 0.1).replicas == 3
    assert external_average_value_replicas(3, 12.5, 4.0, 0.1).replicas == 3  # ratio 1.04
    assert external_average_value_replicas(0, 0.0, 4.0, 0.1).replicas == 0
    assert external_value_replicas(2, 2, 30.0, 10.0, 0.1).replicas == 6
    assert external_value_replicas(0, 0, 25.0, 10.0, 0.1).replicas == 3


@pytest.mark.parametrize(
    ("field", "value", "key"),
    [
        ("target_average_value", 0.0, "HpaConfig.target_average_value=0.0"),
        ("tolerance", 1.5, "HpaConfig.tolerance=1.5"),
        ("min_replicas", 0, "HpaConfig.min_replicas=0"),
        ("max_replicas", 0, "HpaConfig.max_replicas=0"),
        ("downscale_stabilization_s", 4000.0, "HpaConfig.downscale_stabilization_s=4000.0"),
        (
            "behavior",
            HpaBehavior(scale_up=ScalingRules(())),
            "HpaConfig.behavior.scale_up.policies=()",
        ),
        (
            "behavior",
            HpaBehavior(scale_down=ScalingRules((RatePolicy("Percent", 100, 15.0),), "Max", 4000)),
            "HpaConfig.behavior.scale_down.stabilization_window_s",
        ),
    ],
)
def test_bad_config_raises_config_error_naming_the_key(field, value, key):
    with pytest.raises(ConfigError) as info:
        HpaConfig(**{field: value})
    message = str(info.value)
    assert message.startswith(key)
    assert "\n" not in message


@pytest.mark.parametrize("config", [LEGACY, WITH_BEHAVIOR], ids=["legacy", "behavior"])
def test_state_round_trips_through_json_with_identical_decisions(config):
    policy = HpaPolicy(config)
    utils = [70.0, 300.0, 300.0, 20.0, 20.0, 5.0, 90.0]
    state = policy.initial_state()
    replicas = 3
    for i, util in enumerate(utils * 6):
        obs = uniform(15.0 * i, replicas, util)
        direct = policy.decide(obs, state)
        assert through_json(policy, state) == state
        via_json = policy.decide(obs, through_json(policy, state))
        assert via_json == direct
        state, replicas = through_json(policy, direct.state), direct.replicas
    assert replicas >= 1


pod_strategy = st.tuples(st.booleans(), st.one_of(st.none(), st.floats(0.0, 1000.0)))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 40),
            st.lists(pod_strategy, max_size=12),
            st.booleans(),
        ),
        min_size=1,
        max_size=8,
    ),
    st.integers(1, 5),
    st.integers(5, 30),
    st.sampled_from(["pods", "resource"]),
    st.sampled_from([None, DEFAULT_BEHAVIOR]),
)
def test_replicas_always_within_bounds(steps, lo, hi, readiness, behavior):
    config = HpaConfig(min_replicas=lo, max_replicas=hi, readiness=readiness, behavior=behavior)
    policy = HpaPolicy(config)
    state = policy.initial_state()
    for i, (desired, pod_specs, healthy) in enumerate(steps):
        pods = [
            PodStatus(f"p{j}", is_ready, -100.0, -50.0 if is_ready else None)
            for j, (is_ready, _) in enumerate(pod_specs)
        ]
        utils = {f"p{j}": v for j, (_, v) in enumerate(pod_specs) if v is not None}
        decision = policy.decide(observe(15.0 * i, desired, pods, utils, healthy), state)
        assert lo <= decision.replicas <= hi
        state = through_json(policy, decision.state)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c", "d", "e", "f"]),
            st.booleans(),
            st.one_of(st.none(), st.just(float("nan")), st.floats(0.0, 1e6)),
        ),
        max_size=8,
    )
)
def test_pods_are_grouped_and_read_as_the_rule_says_one_by_one(rows):
    # Reference: groupPods' rule pod by pod (no CPU rule): a pod with a sample that is
    # not NaN is used, a Ready one without is missing, any other is unready; a name
    # that is skipped anywhere is not used.
    pods = [PodStatus(name, ready, 0.0, 0.0 if ready else None) for name, ready, _ in rows]
    values = {name: v for name, _, v in rows if v is not None}  # the last value per name
    used_count, unready, missing, milli = 0, set(), set(), {}
    for pod in pods:
        v = values.get(pod.name)
        if v is not None and v == v:
            used_count += 1
            milli.setdefault(pod.name, int(v * 1000))
        elif pod.ready:
            missing.add(pod.name)
        else:
            unready.add(pod.name)
    milli = {n: m for n, m in milli.items() if n not in unready | missing}
    assert _group_and_read(pods, values, 0.0, HpaConfig()) == (used_count, unready, missing, milli)
    assert list(_group_and_read(pods, values, 0.0, HpaConfig())[3]) == list(milli)  # order
