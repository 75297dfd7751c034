"""Which pods a scale-in removes, chosen so that whole GPU nodes empty.

Lowering ``spec.replicas`` leaves the choice of victims to the ReplicaSet
controller, whose order (``ActivePodsWithRanks.Less`` in kubernetes
``pkg/controller/controller_utils.go``) takes, for the pods it compares:

1. unscheduled before scheduled (``spec.nodeName`` empty);
2. phase ``Pending`` before ``Unknown`` before ``Running``;
3. not Ready before Ready;
4. lower ``controller.kubernetes.io/pod-deletion-cost`` before higher (0 when unset);
5. more active pods of the workload on the same node before fewer ("doubled up");
6. both Ready: more recently Ready first;
7. more container restarts first;
8. more recently created first.

Rule 5 alone spreads: it deletes from the fullest nodes, so a fleet that shrinks
keeps every node partly used and the cluster autoscaler can release none. Rule 4
is the one handle a controller has, and it ranks only after rules 1 to 3. So the
step chooses its victims within what those rules allow: in each class (as 1 to 3
sort them) it prefers pods on unhealthy GPUs, then pods still loading (they are
the not-Ready class), then pods on the nodes serving the fewest Ready pods of the
workload; it then writes negative costs on exactly those pods, lowest on the
first choice, and the controller's rules 1 to 4 delete exactly them.

Costs this module writes are negative; a non-victim pod whose cost is negative
(ours from an earlier scale-in that took other pods) has it removed, so a stale
mark cannot take a pod later. Positive costs set by others are left alone.

This module is pure: the step passes what it read and writes what it returns
through its ``Workload``. Rule 7 is not modelled (``PodStatus`` carries no restart
count), and times compare exactly, as with the ``LogarithmicScaleDown`` feature
gate off (with it on, times within a factor of two of age tie and pod UIDs,
random, break the tie).
"""

import heapq
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence

from gpuscale.scaling.policy import PodStatus

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
"""The annotation the ReplicaSet controller reads (an int32 as a decimal string)."""

PHASE_ORDINAL: Mapping[str, int] = {"Pending": 0, "Unknown": 1, "Running": 2}
"""Rule 2's order; any other phase ranks as 0, as the Go map's zero value does."""

RankKey = tuple[bool, int, bool, int, int, float, float]


def replicaset_rank(
    *,
    scheduled: bool,
    phase: str,
    ready: bool,
    cost: int,
    colocated: int,
    ready_at: float | None,
    created_at: float,
) -> RankKey:
    """One pod's sort key in the ReplicaSet controller's deletion order (rules 1-6, 8).

    Sorting pods by this key (stably, the older first on a tie) lists them in the
    order the controller deletes them.

    Args:
        scheduled: Whether ``spec.nodeName`` is set.
        phase: ``status.phase``.
        ready: Whether the Ready condition is true.
        cost: Its ``pod-deletion-cost`` (0 when unset).
        colocated: Active pods of the workload on its node, itself included.
        ready_at: When it turned Ready, seconds (read only when ``ready``).
        created_at: Its creation time, seconds.

    Returns:
        The key: smaller is deleted first.
    """
    newest_ready = -(ready_at if ready and ready_at is not None else 0.0)
    return (
        scheduled,
        PHASE_ORDINAL.get(phase, 0),
        ready,
        cost,
        -colocated,
        newest_ready,
        -created_at,
    )


def colocated_counts(pods: Iterable[PodStatus]) -> Counter[str]:
    """Active pods per node name (rule 5's rank; unscheduled pods count under "").

    Returns:
        Node name to its pods of the workload.
    """
    return Counter(p.node for p in pods)


def replicaset_order(pods: Sequence[PodStatus]) -> list[PodStatus]:
    """The live pods in the order the ReplicaSet controller deletes them.

    Args:
        pods: The workload's active pods (not terminating).

    Returns:
        The same pods, first to go first.
    """
    on_node = colocated_counts(pods)
    return sorted(
        pods,
        key=lambda p: replicaset_rank(
            scheduled=bool(p.node),
            phase=p.phase,
            ready=p.ready,
            cost=p.deletion_cost,
            colocated=on_node[p.node],
            ready_at=p.ready_at,
            created_at=p.created_at,
        ),
    )


def choose_victims(
    pods: Sequence[PodStatus], remove: int, unhealthy: Collection[str] = ()
) -> list[PodStatus]:
    """The pods a scale-in by ``remove`` should take, in order of preference.

    Within each class the ReplicaSet controller ranks before costs (scheduled,
    phase, Ready), pods on unhealthy GPUs go first, then those on the nodes with
    the fewest Ready pods of the workload (then the fewest pods), a node's pods
    together, then in the controller's own order. Each class is used up before the
    next, as the controller does, so costs can make it delete exactly these.

    Args:
        pods: The active pods.
        remove: How many go.
        unhealthy: Names of pods whose GPU is known to be broken.

    Returns:
        At most ``remove`` pods, the first choice first.
    """
    if remove <= 0:
        return []
    on_node = colocated_counts(pods)
    ready_on = Counter(p.node for p in pods if p.ready)
    phase = PHASE_ORDINAL.get
    # replicaset_rank's rules 1-3, then the preference; within a node rule 5 is constant
    # and every cost is taken as 0, so what follows is rules 6 and 8. Built inline: one
    # tuple per pod, no call per pod (a simulated day makes thousands of scale-ins).
    keys = [
        (
            bool(p.node),
            phase(p.phase, 0),
            p.ready,
            p.name not in unhealthy,
            ready_on[p.node] if p.node else 0,
            on_node[p.node] if p.node else 0,
            p.node,
            -(p.ready_at if p.ready and p.ready_at is not None else 0.0),
            -p.created_at,
        )
        for p in pods
    ]
    first = heapq.nsmallest(remove, range(len(pods)), key=keys.__getitem__)
    return [pods[i] for i in first]  # = a stable sort's first ``remove``


def deletion_costs(
    pods: Sequence[PodStatus], victims: Sequence[PodStatus]
) -> dict[str, int | None]:
    """The cost annotations to write so the controller deletes ``victims`` first.

    Args:
        pods: The active pods, with the costs they carry now.
        victims: ``choose_victims``' answer.

    Returns:
        Pod name to its new cost (None: remove the annotation), only where it changes:
        the ``k`` victims get ``-k`` to ``-1`` in order; other pods with a negative
        cost lose it.
    """
    want: dict[str, int | None] = {v.name: i - len(victims) for i, v in enumerate(victims)}
    for p in pods:
        if p.name not in want and p.deletion_cost < 0:
            want[p.name] = None
    now = {p.name: p.deletion_cost for p in pods}
    return {name: cost for name, cost in want.items() if (0 if cost is None else cost) != now[name]}
