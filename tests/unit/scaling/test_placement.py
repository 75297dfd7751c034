"""Scale-in victims chosen so whole nodes empty, in the ReplicaSet controller's exact order."""

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.scaling.placement import (
    choose_victims,
    deletion_costs,
    replicaset_order,
)
from gpuscale.scaling.policy import PodStatus


def pod(name: str, node: str = "n1", *, ready: bool = True, **kw) -> PodStatus:
    ready_at = kw.pop("ready_at", 10.0 if ready else None)
    return PodStatus(name, ready, kw.pop("created_at", 0.0), ready_at, node, **kw)


def names(pods) -> list[str]:
    return [p.name for p in pods]


def test_each_rule_of_the_replicaset_order_in_turn():
    # Each pair differs in one rule (and agrees on those before it): the first goes first.
    pairs = [
        (pod("unscheduled", "", phase="Pending"), pod("scheduled", "n1", phase="Pending")),
        (
            pod("pending", phase="Pending", ready=False),
            pod("unknown", phase="Unknown", ready=False),
        ),
        (pod("unknown", phase="Unknown", ready=False), pod("running", ready=False)),
        (pod("not-ready", ready=False), pod("ready")),
        (pod("cheap", deletion_cost=-5), pod("dear", deletion_cost=3)),
        (pod("crowded", "n1"), pod("alone", "n2")),
        (pod("newly-ready", ready_at=20.0), pod("long-ready", ready_at=5.0)),
        (pod("newer", created_at=9.0), pod("older", created_at=1.0)),
    ]
    for first, second in pairs:
        # rule 5 counts the pods on each node: give "crowded" a neighbour both ways
        extra = [pod("neighbour", "n1", deletion_cost=100)] if first.name == "crowded" else []
        for pods in ([first, second, *extra], [second, first, *extra]):
            order = names(replicaset_order(pods))
            assert order.index(first.name) < order.index(second.name), (first, second)


def test_cost_ranks_only_after_scheduled_phase_and_ready():
    # a Ready pod with the lowest cost still goes after any pod not Ready, and after an
    # unscheduled one; among Ready pods the cost comes before the node count and age
    pods = [
        pod("ready-cheap", deletion_cost=-100),
        pod("loading-dear", ready=False, deletion_cost=100),
        pod("unscheduled-dear", "", phase="Pending", ready=False, deletion_cost=100),
        pod("ready-newest", ready_at=99.0, created_at=99.0),
    ]
    assert names(replicaset_order(pods)) == [
        "unscheduled-dear",
        "loading-dear",
        "ready-cheap",
        "ready-newest",
    ]


def test_ties_keep_the_given_order():
    pods = [pod("a"), pod("b"), pod("c")]
    assert names(replicaset_order(pods)) == ["a", "b", "c"]
    assert names(replicaset_order(pods[::-1])) == ["c", "b", "a"]


def test_invalid_or_unset_cost_counts_as_zero_between_minus_and_plus():
    pods = [pod("plus", deletion_cost=1), pod("zero"), pod("minus", deletion_cost=-1)]
    assert names(replicaset_order(pods)) == ["minus", "zero", "plus"]


def test_victims_unhealthy_then_loading_then_emptiest_node():
    pods = [
        pod("a1", "a"),
        pod("a2", "a"),
        pod("a3", "a"),
        pod("b1", "b"),
        pod("b2", "b"),
        pod("c1", "c"),
        pod("sick", "a"),
        pod("loading", "a", ready=False),
    ]
    # the loading pod is in the class the controller takes first; then the sick Ready one;
    # then node c (1 Ready pod), then b's two (a whole node each time)
    got = choose_victims(pods, 5, unhealthy={"sick"})
    assert names(got) == ["loading", "sick", "c1", "b1", "b2"]


def test_victims_among_not_ready_prefer_the_unhealthy_then_the_emptiest_node():
    pods = [
        pod("x1", "x", ready=False),
        pod("y1", "y", ready=False),
        pod("y2", "y", ready=False),
        pod("stuck", "y", ready=False),
        pod("r", "x"),
    ]
    got = choose_victims(pods, 2, unhealthy={"stuck"})
    # among the not-Ready class: the unhealthy pod, then node y (no Ready pod; x serves one)
    assert names(got) == ["stuck", "y1"]


def test_costs_mark_victims_lowest_first_and_clear_only_stale_negative_marks():
    pods = [
        pod("v1", "a"),
        pod("v2", "a", deletion_cost=-1),
        pod("stale", "b", deletion_cost=-2),
        pod("user", "b", deletion_cost=7),
    ]
    victims = [pods[0], pods[1]]
    assert deletion_costs(pods, victims) == {"v1": -2, "stale": None}  # v2 already -1


def test_nothing_to_remove_chooses_nothing():
    assert choose_victims([pod("a")], 0) == []


@st.composite
def fleets(draw):
    n = draw(st.integers(1, 14))
    pods = []
    for i in range(n):
        node = draw(st.sampled_from(["", "n1", "n2", "n3", "n4"]))
        phase = "Pending" if not node else draw(st.sampled_from(["Pending", "Running", "Unknown"]))
        ready = bool(node) and phase == "Running" and draw(st.booleans())
        pods.append(
            PodStatus(
                f"p{i:02d}",
                ready,
                float(draw(st.integers(0, 5))),
                float(draw(st.integers(0, 5))) if ready else None,
                node,
                phase,
                draw(st.sampled_from([0, 0, -3, -1, 2])),  # marks left from earlier steps
            )
        )
    k = draw(st.integers(0, n))
    sick = draw(st.sets(st.sampled_from([p.name for p in pods])))
    return pods, k, sick


@settings(max_examples=300, deadline=None)
@given(fleets())
def test_the_replicaset_deletes_exactly_the_marked_victims(fleet):
    # Whatever the pods and their old marks, once the costs are written the controller's
    # own order takes exactly the chosen pods first.
    pods, k, sick = fleet
    victims = choose_victims(pods, k, sick)
    costs = deletion_costs(pods, victims)
    marked = [
        replace(p, deletion_cost=0 if costs[p.name] is None else costs[p.name])
        if p.name in costs
        else p
        for p in pods
    ]
    assert len(victims) == k
    assert set(names(replicaset_order(marked)[:k])) == set(names(victims))
    assert all(p.deletion_cost >= 0 for p in marked if p.name not in names(victims))
