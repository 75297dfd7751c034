"""Which live pods a ReplicaSet deletes first when it scales in.

Kubernetes' order (``controller.ActivePodsWithRanks``), as ``scaling.placement``
states it: unscheduled pods first, then by phase, then those not Ready, then the
lower ``pod-deletion-cost``, then those on the nodes holding more of the
workload's pods, then the most recently Ready, then the newest; ties keep the
older pod (creation order, which is uid order) first. The simulator's scheduled
pods are ``Running`` and its unscheduled ones ``Pending``; they carry no restart
count (a crashed pod cold-starts again and is not Ready, ranked by rule 3).
"""

import heapq
from collections import Counter
from collections.abc import Sequence

from gpuscale.sim.pod import READY, Pod


def scale_in_victims(
    live: Sequence[Pod], k: int, *, node_gpus: int, ranked: bool = True
) -> list[Pod]:
    """The first ``k`` live pods in deletion order, in that order.

    Args:
        live: The live pods (unscheduled, starting or Ready), oldest first.
        k: How many to delete, at most ``len(live)``.
        node_gpus: GPU slots per node (a pod's node is its first slot's).
        ranked: Apply the deletion cost and the pods-per-node rank; without them the
            order is by scheduling, readiness and age alone (``Scenario.placement``
            off, the order the simulator's published comparisons ran with).

    Returns:
        The same pods, in the same order, as a stable sort of ``live`` by the full key.
    """
    nodes = [p.slot // node_gpus if p.slot >= 0 else -1 for p in live]
    # ``replicaset_rank``'s key built inline (no call per pod): scheduled pods are
    # Running (ordinal 2), unscheduled ones Pending (0), so the phase adds nothing to
    # whether a pod is scheduled.
    rank: list[tuple[bool, bool, float, float]] | list[tuple[bool, bool, int, int, float, float]]
    if ranked:
        on_node = Counter(nodes)
        rank = [
            (
                n >= 0,
                p.state == READY,
                p.deletion_cost,
                -on_node[n],
                -(p.ready_at if p.state == READY and p.ready_at is not None else 0.0),
                -p.created_at,
            )
            for p, n in zip(live, nodes, strict=True)
        ]
    else:  # no deletion cost and no node rank: the key without them, in the same order
        rank = [
            (
                n >= 0,
                p.state == READY,
                -(p.ready_at if p.state == READY and p.ready_at is not None else 0.0),
                -p.created_at,
            )
            for p, n in zip(live, nodes, strict=True)
        ]
    first = heapq.nsmallest(k, range(len(live)), key=rank.__getitem__)
    return [live[i] for i in first]  # = sorted(live, key=rank)[:k]: ties keep the older first
