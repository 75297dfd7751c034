"""Kubernetes HPA v2 baseline: one test per controller rule, with the controller's numbers."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.errors import ConfigError
from gpuscale.scaling.baseline import RatePolicy
from gpuscale.scaling.hpa import (
    HpaConfig,
    HpaPolicy,
    external_average_value_replicas,
    external_value_replicas,
    group_pods,
    pods_metric_replicas,
)
from gpuscale.scaling.policy import Observation, PodStatus, TargetStatus

METRIC = "DCGM_FI_DEV_GPU_UTIL"


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


@pytest.mark.parametrize("util", [73.5, 66.5, 70.0])
def test_no_change_inside_tolerance(util):
    # ratio 1.05, 0.95 and 1.0 are all within the default 10 % tolerance
    decision = HpaPolicy().decide(uniform(0.0, 4, util), {})
    assert decision.replicas == 4


def test_just_outside_tolerance_scales_up():
    # ratio 1.2 on 5 pods -> ceil(6.0) = 6
    assert HpaPolicy().decide(uniform(0.0, 5, 84.0), {}).replicas == 6


def test_scale_up_at_200_percent_doubles_two_pods():
    assert HpaPolicy().decide(uniform(0.0, 2, 140.0), {}).replicas == 4


def test_scale_up_from_two_pods_limited_to_four_more_per_period():
    policy = HpaPolicy()
    # ratio 5.0 wants 10; the Pods policy allows +4 (2 -> 6), Percent 100 % only 4.
    first = policy.decide(uniform(0.0, 2, 350.0), {})
    assert first.replicas == 6
    # Still inside the same 15 s period: the period started at 2 replicas.
    second = policy.decide(uniform(10.0, 6, 350.0), first.state)
    assert second.replicas == 6
    # A new period starts from 6: max(6 + 4, 6 x 2) = 12.
    third = policy.decide(uniform(15.0, 6, 350.0), second.state)
    assert third.replicas == 12


def test_scale_up_from_ten_pods_limited_to_one_hundred_percent():
    # ratio 3.0 wants 30; max(10 + 4, 10 x 2) = 20.
    assert HpaPolicy().decide(uniform(0.0, 10, 210.0), {}).replicas == 20


def test_scale_down_held_for_300_s_of_stabilisation_then_applied():
    policy = HpaPolicy()
    state: dict = {}
    replicas = 4
    seen = {}
    for t in range(0, 316, 15):
        util = 70.0 if t == 0 else 17.5  # ratio 0.25 -> recommendation 1
        decision = policy.decide(uniform(float(t), replicas, util), state)
        state, replicas = dict(decision.state), decision.replicas
        seen[t] = replicas
    assert seen[0] == 4
    assert seen[285] == 4
    assert seen[300] == 1
    assert seen[315] == 1


def test_scale_down_without_stabilisation_is_immediate_but_rate_limited():
    config = HpaConfig(
        scale_down_stabilization_s=0.0, scale_down_policies=(RatePolicy("Pods", 2, 60.0),)
    )
    policy = HpaPolicy(config)
    first = policy.decide(uniform(0.0, 8, 7.0, desired=8), {"recommendations": []})
    assert first.replicas == 6  # wants 1, at most 2 pods per 60 s
    second = policy.decide(uniform(30.0, 6, 7.0), first.state)
    assert second.replicas == 6  # the 60 s period still holds the first 2
    third = policy.decide(uniform(61.0, 6, 7.0), second.state)
    assert third.replicas == 4


def test_missing_pods_count_as_zero_on_scale_up():
    pods = [ready("a"), ready("b"), ready("c")]
    utils = {"a": 140.0, "b": 140.0}  # c reports nothing
    proposal = pods_metric_replicas(3, pods, utils, 0.0, HpaConfig())
    # ratio 2.0 -> c counts as 0 -> (140 + 140 + 0) / 3 / 70 = 1.333 -> ceil(4.0) = 4
    assert proposal is not None
    assert proposal.replicas == 4
    assert HpaPolicy().decide(observe(0.0, 3, pods, utils), {}).replicas == 4


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


def test_clamps_to_max_and_min():
    config = HpaConfig(min_replicas=2, max_replicas=10)
    policy = HpaPolicy(config)
    assert policy.decide(uniform(0.0, 8, 700.0), {}).replicas == 10
    assert policy.decide(uniform(0.0, 12, 70.0), {}).replicas == 10  # above max
    assert policy.decide(uniform(0.0, 1, 70.0), {}).replicas == 2  # below min
    down = HpaPolicy(HpaConfig(min_replicas=2, scale_down_stabilization_s=0.0))
    assert down.decide(uniform(0.0, 5, 1.0), {"recommendations": []}).replicas == 2


def test_target_at_zero_replicas_is_restored_to_min():
    assert HpaPolicy().decide(observe(0.0, 0, [], {}), {}).replicas == 1


def test_unhealthy_observation_holds_and_keeps_state():
    state = {"recommendations": [[0.0, 9.0]], "scale_up_events": [], "scale_down_events": []}
    obs = observe(0.0, 5, [ready("a")], {"a": 1.0}, healthy=False)
    decision = HpaPolicy().decide(obs, state)
    assert decision.replicas == 5
    assert "hold" in decision.reason
    assert "unhealthy" in decision.reason
    assert decision.state == state


def test_no_sample_for_any_pod_holds():
    obs = observe(0.0, 5, [ready(f"p{i}") for i in range(5)], {})
    decision = HpaPolicy().decide(obs, {})
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
        ("scale_up_policies", (), "HpaConfig.scale_up.policies=()"),
        ("scale_down_stabilization_s", 4000.0, "HpaConfig.scale_down.stabilization_window_s"),
    ],
)
def test_bad_config_raises_config_error_naming_the_key(field, value, key):
    with pytest.raises(ConfigError) as info:
        HpaConfig(**{field: value})
    message = str(info.value)
    assert message.startswith(key)
    assert "\n" not in message


def test_state_round_trips_through_json_with_identical_decisions():
    policy = HpaPolicy()
    utils = [70.0, 300.0, 300.0, 20.0, 20.0, 5.0, 90.0]
    state: dict = {}
    replicas = 3
    for i, util in enumerate(utils * 6):
        obs = uniform(15.0 * i, replicas, util)
        direct = policy.decide(obs, state)
        via_json = policy.decide(obs, json.loads(json.dumps(state)))
        assert via_json == direct
        state, replicas = json.loads(json.dumps(direct.state)), direct.replicas
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
)
def test_replicas_always_within_bounds(steps, lo, hi, readiness):
    policy = HpaPolicy(HpaConfig(min_replicas=lo, max_replicas=hi, readiness=readiness))
    state: dict = {}
    for i, (desired, pod_specs, healthy) in enumerate(steps):
        pods = [
            PodStatus(f"p{j}", is_ready, -100.0, -50.0 if is_ready else None)
            for j, (is_ready, _) in enumerate(pod_specs)
        ]
        utils = {f"p{j}": v for j, (_, v) in enumerate(pod_specs) if v is not None}
        decision = policy.decide(observe(15.0 * i, desired, pods, utils, healthy), state)
        assert lo <= decision.replicas <= hi
        state = json.loads(json.dumps(decision.state))
