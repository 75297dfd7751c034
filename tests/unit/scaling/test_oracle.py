"""The oracle asks for replicas exactly lead_s before they are needed and drops them after."""

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.errors import ConfigError
from gpuscale.scaling.oracle import OracleConfig, OraclePolicy, OracleState
from gpuscale.scaling.policy import PROMETHEUS_QUERY, Decision, Observation, PodStatus, TargetStatus
from gpuscale.scaling.rangemax import RangeMax
from gpuscale.scaling.static import StaticState


def at(now, desired=1, healthy=True):
    return Observation(now, TargetStatus(desired), healthy=healthy)


def decisions(policy, until):
    times = [policy.interval_s * i for i in range(int(until / policy.interval_s) + 1)]
    return {t: policy.decide(at(t), policy.initial_state()).replicas for t in times}


def test_step_up_is_requested_exactly_lead_s_ahead():
    required = [2] * 100 + [6] * 100
    policy = OraclePolicy(required, lead_s=30.0, interval_s=5.0)
    out = decisions(policy, 150)
    assert out[65.0] == 2
    assert out[70.0] == 6  # 100 - 30: ready exactly when needed
    assert min(t for t, r in out.items() if r == 6) == 70.0


def test_step_up_with_one_second_decisions_lands_lead_s_ahead():
    required = [1] * 50 + [4] * 50
    policy = OraclePolicy(required, lead_s=12.0, interval_s=1.0)
    out = decisions(policy, 60)
    assert min(t for t, r in out.items() if r == 4) == 38.0  # 50 - 12


def test_drop_scales_down_as_soon_as_no_need_remains_in_the_lead_window():
    required = [6] * 200 + [1] * 200
    policy = OraclePolicy(required, lead_s=30.0, interval_s=5.0)
    out = decisions(policy, 300)
    assert out[195.0] == 6
    assert out[200.0] == 1


def test_short_dip_is_bridged_when_the_need_returns_within_the_lead_window():
    required = [5] * 100 + [1] * 10 + [5] * 100
    policy = OraclePolicy(required, lead_s=30.0, interval_s=5.0)
    out = decisions(policy, 200)
    assert min(out.values()) == 5


def test_clamps_and_holds_last_value_past_the_trace():
    policy = OraclePolicy([0, 0, 9, 3], lead_s=1.0, min_replicas=1, max_replicas=5, interval_s=1.0)
    assert policy.decide(at(0.0), policy.initial_state()).replicas == 1
    assert policy.decide(at(1.0), policy.initial_state()).replicas == 5
    assert policy.decide(at(100.0), policy.initial_state()).replicas == 3


def test_reads_no_telemetry_and_keeps_only_its_pod_count():
    policy = OraclePolicy([2, 2, 2], lead_s=0.0)
    decision = policy.decide(at(0.0, desired=7, healthy=False), policy.initial_state())
    assert decision.replicas == 2
    assert decision.state == OracleState(created=2, at=0.0)  # no pods listed: it made both
    assert dict(policy.signals) == {}
    assert dict(policy.pod_signals) == {}
    assert policy.max_replicas == 2


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"required_per_s": [], "lead_s": 1.0}, "OraclePolicy.required_per_s"),
        ({"required_per_s": [1, -1], "lead_s": 1.0}, "OraclePolicy.required_per_s=-1"),
        ({"required_per_s": [1], "lead_s": -1.0}, "OraclePolicy.lead_s=-1.0"),
        ({"required_per_s": [1], "lead_s": 1.0, "interval_s": 0.0}, "OraclePolicy.interval_s"),
    ],
)
def test_bad_input_raises_config_error_naming_it(kwargs, key):
    with pytest.raises(ConfigError) as info:
        OraclePolicy(**kwargs)
    assert str(info.value).startswith(key)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 50), min_size=1, max_size=300),
    st.floats(0.0, 120.0),
    st.floats(-10.0, 400.0),
)
def test_never_short_over_the_lead_window_and_within_bounds(required, lead_s, now):
    policy = OraclePolicy(required, lead_s=lead_s, min_replicas=0, max_replicas=60)
    replicas = policy.decide(at(now), policy.initial_state()).replicas
    assert 0 <= replicas <= 60
    # every second from now until a replica requested at the next decision is Ready
    start = max(0, math.floor(now))
    end = max(start, math.ceil(now + lead_s + policy.interval_s))  # a negative end is no slice
    assert replicas >= max(required[start:end], default=0)


def test_dip_shorter_than_grace_plus_cold_start_keeps_replicas_longer_one_releases():
    required = [5] * 100 + [1] * 60 + [5] * 100
    policy = OraclePolicy(required, lead_s=10.0, interval_s=5.0, hold_s=80.0)
    # At t=100 with 5 running, the need returns at t=160, within the 80 s break-even.
    assert policy.decide(at(100.0, desired=5), policy.initial_state()).replicas == 5
    long_dip = [5] * 100 + [1] * 200 + [5] * 100
    policy = OraclePolicy(long_dip, lead_s=10.0, interval_s=5.0, hold_s=80.0)
    assert policy.decide(at(100.0, desired=5), policy.initial_state()).replicas == 1
    # The hold never grows the fleet: from 1 it asks only for the short-horizon need.
    assert policy.decide(at(100.0, desired=1), policy.initial_state()).replicas == 1


def test_replicas_beyond_standing_nodes_are_requested_a_node_provisioning_earlier():
    required = [4] * 300 + [12] * 300
    policy = OraclePolicy(
        required, lead_s=20.0, interval_s=5.0, node_lead_s=180.0, fast_capacity=8,
        node_size=8, node_keep_s=600.0,
    )  # fmt: skip
    state = policy.initial_state()
    first = None
    for t in range(0, 300, 5):
        decision = policy.decide(at(float(t), desired=4), state)
        state = decision.state
        if decision.replicas == 12 and first is None:
            first = t
    assert first == 100  # the first t whose window [t, t + 20 + 5 + 180) reaches t=300


def test_a_node_still_up_needs_no_provisioning_lead():
    required = [12] * 100 + [4] * 100 + [12] * 100
    policy = OraclePolicy(
        required, lead_s=20.0, interval_s=5.0, node_lead_s=180.0, fast_capacity=8,
        node_size=8, node_keep_s=600.0,
    )  # fmt: skip
    state = policy.decide(
        at(0.0, desired=12), policy.initial_state()
    ).state  # the second node is up
    # At t=150 the return to 12 at t=200 is 50 s away: beyond the cold-start lead but
    # the node is still there, so the oracle waits for the short lead.
    assert policy.decide(at(150.0, desired=4), state).replicas == 4
    assert policy.decide(at(175.0, desired=4), state).replicas == 4
    assert policy.decide(at(180.0, desired=4), state).replicas == 12  # [180, 205) has t=200
    # Without that memory it would have asked a node-provisioning earlier.
    assert policy.decide(at(150.0, desired=4), policy.initial_state()).replicas == 12


def test_built_from_its_config_like_from_its_arguments():
    config = OracleConfig(lead_s=3.0, hold_s=10.0, min_replicas=1, max_replicas=9, node_size=4)
    a = OraclePolicy.from_config([1, 2, 5, 3, 0], config)
    b = OraclePolicy([1, 2, 5, 3, 0], 3.0, min_replicas=1, max_replicas=9, hold_s=10.0, node_size=4)
    assert (a.required, a.lead_s, a.hold_s, a.min_replicas, a.max_replicas, a.node_size) == (
        b.required,
        b.lead_s,
        b.hold_s,
        b.min_replicas,
        b.max_replicas,
        b.node_size,
    )
    assert all(f.metadata.get("unit") for f in dataclasses.fields(OracleConfig))


def pods(n: int) -> tuple[PodStatus, ...]:
    return tuple(PodStatus(f"p{i}", True, 0.0, 0.0) for i in range(n))


def test_each_new_pod_is_requested_exactly_its_own_cold_start_ahead():
    # Pod 0 is the initial replica; the next two take 10 s and 50 s to start.
    required = [1] * 200 + [2] * 100 + [3] * 100
    policy = OraclePolicy(required, lead_s=99.0, interval_s=1.0, cold_starts_s=(0.0, 10.0, 50.0))
    state = policy.initial_state()
    desired, asked = 1, {}
    for t in range(0, 320):
        obs = Observation(float(t), TargetStatus(desired, pods(desired)))
        decision = policy.decide(obs, state)
        state = decision.state
        if decision.replicas > desired:
            asked[decision.replicas] = t
        desired = decision.replicas
    assert asked == {2: 190, 3: 250}  # 200 - 1 - 10 + 1 and 300 - 1 - 50 + 1
    assert state.created == 3


def test_a_pod_with_a_longer_cold_start_brings_the_ones_before_it_forward():
    # The third pod starts slowly; it is created after the second, so both go early.
    required = [1] * 200 + [3] * 100
    policy = OraclePolicy(required, lead_s=99.0, interval_s=1.0, cold_starts_s=(0.0, 5.0, 60.0))
    decision = policy.decide(Observation(140.0, TargetStatus(1, pods(1))), policy.initial_state())
    assert decision.replicas == 3
    assert (
        policy.decide(Observation(138.0, TargetStatus(1, pods(1))), policy.initial_state()).replicas
        == 1
    )


def test_pods_the_replicaset_made_without_it_shift_the_cold_starts_it_reads():
    policy = OraclePolicy([2] * 50, lead_s=1.0, interval_s=5.0)
    first = policy.decide(Observation(0.0, TargetStatus(2, pods(2))), policy.initial_state())
    assert first.state.created == 2
    replaced = (PodStatus("p0", True, 0.0, 0.0), PodStatus("p9", False, 3.0))  # a GPU failed
    later = policy.decide(Observation(5.0, TargetStatus(2, replaced)), first.state)
    assert later.state.created == 3


def test_margin_and_slack_raise_and_widen_the_plan():
    required = [0] * 100 + [10] * 20 + [0] * 100
    policy = OraclePolicy(required, lead_s=0.0, interval_s=1.0, margin=0.25, slack_s=30.0)
    assert policy.needed(100.0) == 13  # ceil(10 x 1.25)
    assert policy.needed(69.0) == 0  # [39, 100): 30 s of slack each side of [69, 70)
    assert policy.needed(70.0) == 13  # [40, 101) reaches t=100
    assert policy.needed(149.0) == 13  # [119, ...): the need's last second is still in
    assert policy.needed(150.0) == 0


class Recorder:
    """Asks for ``replicas`` at t=0 and notes how long each pod took to be Ready."""

    def __init__(self, replicas: int) -> None:
        self.name, self.interval_s, self.history_s = "recorder", 5.0, 0.0
        self.signals: dict = {}
        self.pod_signals: dict = {}
        self.min_replicas, self.max_replicas = 0, replicas
        self.signal_path, self.reads_node_slots = PROMETHEUS_QUERY, False
        self.replicas = replicas
        self.cold: dict[int, float] = {}

    def initial_state(self):
        return StaticState()

    def load_state(self, data):
        return StaticState.from_json(data)

    def decide(self, observation, state):
        for pod in observation.target.pods:
            if pod.ready_at is not None:
                self.cold[int(pod.name.rsplit("-", 1)[1])] = pod.ready_at - pod.created_at
        return Decision(self.replicas, "record", state)


def test_simulated_pods_take_exactly_the_cold_starts_the_oracle_reads():
    from gpuscale.evaluate.runner import EvaluationRequest
    from gpuscale.sim.coldstart import pod_cold_starts
    from gpuscale.sim.engine import simulate

    prepared = EvaluationRequest("ramp", duration_s=300, seed=11).prepare()
    scenario = prepared.scenario
    fleet = scenario.cluster.initial_nodes * scenario.cluster.gpus_per_node
    recorder = Recorder(fleet)
    simulate(scenario, recorder)
    draws = pod_cold_starts(scenario.cluster.cold_start, scenario.seed, fleet)
    new = {uid: c for uid, c in recorder.cold.items() if uid > scenario.initial_replicas}
    assert len(new) == fleet - scenario.initial_replicas > 0
    for uid, cold in new.items():
        assert cold == pytest.approx(draws[uid - 1])


def test_nothing_is_released_within_hold_s_of_the_end_of_the_requirement():
    required = [6] * 200 + [1] * 100
    policy = OraclePolicy(required, lead_s=10.0, interval_s=5.0, hold_s=60.0)
    assert (
        policy.decide(at(200.0, desired=6), policy.initial_state()).replicas == 1
    )  # 200 + 5 + 60 < 300
    assert (
        policy.decide(at(235.0, desired=6), policy.initial_state()).replicas == 6
    )  # 235 + 5 + 60 >= 300: kept
    early = OraclePolicy([6] * 200 + [1] * 200, lead_s=10.0, interval_s=5.0, hold_s=60.0)
    assert (
        early.decide(at(235.0, desired=6), early.initial_state()).replicas == 1
    )  # far from the end: released


def test_fill_nodes_plans_whole_nodes_and_nothing_else_changes():
    required = [0, 1, 4, 5, 9, 3]
    filled = OraclePolicy(required, 3.0, node_size=4, fill_nodes=True, margin=0.1)
    plain = OraclePolicy(required, 3.0, node_size=4, margin=0.1)
    assert plain.planned.tolist() == [0, 2, 5, 6, 10, 4]  # ceil(r x 1.1)
    assert filled.planned.tolist() == [0, 4, 8, 8, 12, 4]  # each up to whole nodes of 4
    assert filled.max_replicas == 12
    one = OraclePolicy(required, 3.0, node_size=1, fill_nodes=True)
    assert one.planned.tolist() == required
    config = OracleConfig(lead_s=3.0, node_size=4, fill_nodes=True)
    assert OraclePolicy.from_config(required, config).planned.tolist() == [0, 4, 4, 8, 12, 4]


def test_a_plan_in_whole_nodes_asks_for_what_short_nodes_hold():
    # Two nodes of 4 planned; one lost a GPU (3 slots): asking for 8 would leave a pod
    # pending that opens a third node, so the oracle asks for 7, and reads 7 back as its
    # two whole nodes (nothing more is due).
    policy = OraclePolicy([8] * 60, 3.0, node_size=4, fill_nodes=True)
    short = Observation(10.0, TargetStatus(8, node_slots=(4, 3)))
    d = policy.decide(short, policy.initial_state())
    assert d.replicas == 7
    assert "7 on nodes that hold 1 fewer" in d.reason
    again = policy.decide(Observation(25.0, TargetStatus(7, node_slots=(4, 3))), d.state)
    assert again.replicas == 7
    whole = policy.decide(
        Observation(10.0, TargetStatus(8, node_slots=(4, 4))), policy.initial_state()
    )
    assert whole.replicas == 8
    unfilled = OraclePolicy([8] * 60, 3.0, node_size=4)  # plans replicas, not nodes
    assert unfilled.decide(short, unfilled.initial_state()).replicas == 8


def slot_waits(policy: OraclePolicy, live: list[tuple[int, float]]) -> list[float]:
    """Each slot's node wait by the rule, slot by slot: provisioning above the standing
    nodes, lowered over the slots each live entry's nodes hold to the least wait of it
    and every entry of more capacity."""
    top, fast = policy.max_replicas, policy.fast_capacity
    if policy.node_lead_s <= 0 or fast is None:
        return [0.0] * top
    waits = [policy.node_lead_s if j > fast else 0.0 for j in range(1, top + 1)]
    covered = 0
    for cap, _ in sorted(live):
        best = min(w for c, w in live if c >= cap)
        for j in range(covered + 1, min(cap, top) + 1):
            waits[j - 1] = min(waits[j - 1], best)
        covered = max(covered, cap)
    return waits


@settings(max_examples=150, deadline=None)
@given(
    plan=st.lists(st.integers(0, 40), min_size=1, max_size=300),
    now=st.floats(0.0, 400.0),
    desired=st.integers(0, 45),
    created=st.integers(0, 30),
    colds=st.lists(st.floats(0.0, 120.0), max_size=50),
    live=st.lists(st.tuples(st.integers(1, 60), st.floats(0.0, 200.0)), max_size=4),
    fast=st.sampled_from([None, -1, 0, 5, 20]),
    slack=st.sampled_from([0.0, 4.0]),
)
def test_largest_due_slot_is_the_rule_applied_slot_by_slot(
    plan, now, desired, created, colds, live, fast, slack
):
    policy = OraclePolicy(
        plan,
        lead_s=30.0,
        max_replicas=50,
        interval_s=5.0,
        node_lead_s=90.0,
        fast_capacity=fast,
        slack_s=slack,
        cold_starts_s=colds,
    )
    # Reference: slot j is due when the plan over [now - slack, now + lead_j + slack)
    # reaches j; lead_j = interval + node wait + the cold start of the pod filling it.
    waits = slot_waits(policy, live)
    start = max(0, math.floor(now - slack))
    want = 0
    for j in range(1, 51):
        cold = policy.cold_start(created + max(j - desired - 1, 0))
        lead = (cold + waits[j - 1]) + 5.0
        if start >= len(plan):
            most = plan[-1]
        else:
            end = max(start + 1, math.ceil(now + lead + slack))
            most = max(plan[start : min(end, len(plan))])
        if most >= j:
            want = j
    assert policy._largest_due(now, desired, created, list(live)) == want


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-(10**12), 10**12), min_size=1, max_size=200), st.data())
def test_range_max_is_the_max_of_the_slice(values, data):
    table = RangeMax(np.asarray(values, dtype=np.int64))
    for _ in range(20):
        lo = data.draw(st.integers(0, len(values) - 1))
        hi = data.draw(st.integers(lo + 1, len(values)))
        assert table.max(lo, hi) == max(values[lo:hi])


def test_node_memory_refreshes_held_levels_keeps_one_per_level_and_forgets_idle_nodes():
    policy = OraclePolicy(
        [4] * 10, lead_s=20.0, interval_s=5.0, node_lead_s=180.0, fast_capacity=8,
        node_size=8, node_keep_s=600.0,
    )  # fmt: skip
    old = (
        (0.0, 3.0, 0.0),  # held now (3 <= 5): refreshed to now
        (0.0, 3.0, -5.0),  # the same level, nodes up: one of them is kept
        (10.0, 9.0, 50.0),  # above desired, idle 90 s < 600 s: kept as it was
        (5.0, 12.0, 0.0),
        (90.0, 20.0, 200.0),  # its nodes join at 200 s: a wait of 100 s
        (-1000.0, 15.0, 0.0),  # idle 1,100 s > 600 s: its nodes are gone
    )
    recent, live = policy._walk(100.0, 5, OracleState(recent=old))
    assert recent == [
        (100.0, 3.0, 0.0),
        (10.0, 9.0, 50.0),
        (5.0, 12.0, 0.0),
        (90.0, 20.0, 200.0),
    ]
    # Nodes up cover up to the most replicas held (12, two nodes of 8); the joining
    # ones cover 20 replicas (three nodes) with their wait.
    assert sorted(live) == [(16, 0.0), (24, 100.0)]
