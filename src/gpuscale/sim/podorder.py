"""Which live pods a ReplicaSet deletes first when it scales in.

Kubernetes' order (``controller.ActivePods``, as far as the simulated pods carry it):
unscheduled pods first, then those not Ready, then the most recently Ready, then the
newest; ties keep the older pod (creation order, which is uid order) first.
"""

import heapq
import math
from collections.abc import Collection, Sequence

from gpuscale.sim.pod import READY, Pod


def scale_in_victims(
    live: Sequence[Pod],
    k: int,
    *,
    pending: int,
    starting: Collection[Pod],
    ready: dict[int, tuple[float, Pod]] | None,
) -> list[Pod]:
    """The first ``k`` live pods in deletion order, in that order.

    With no pod unscheduled the order needs no rank of every pod: the starting pods
    come first (they tie on all but their age), then the Ready ones from the most
    recently Ready, read backwards from ``ready`` until the ``k``-th's time is passed.

    Args:
        live: The live pods (unscheduled, starting or Ready), oldest first.
        k: How many to delete, at most ``len(live)``.
        pending: How many of them are unscheduled.
        starting: Those scheduled and not yet Ready.
        ready: The Ready ones as (Ready time, pod), in the order they turned Ready when
            that is also Ready-time order; None where it is not known to be.

    Returns:
        The same pods, in the same order, as a stable sort of ``live`` by the full key.
    """
    if not pending and (ready is not None or len(starting) >= k):
        newest = sorted(starting, key=lambda p: (-p.created_at, p.uid))[:k]
        if len(newest) < k and ready is not None:
            rest, found = k - len(newest), list[tuple[float, Pod]]()
            for at, pod in reversed(ready.values()):  # most recently Ready first
                if len(found) >= rest and at < found[-1][0]:
                    break  # every pod further back turned Ready earlier: none ties
                found.append((at, pod))
            found.sort(key=lambda e: (-e[0], -e[1].created_at, e[1].uid))
            newest += [pod for _, pod in found[:rest]]
        return newest
    inf = math.inf
    rank = [  # each pod's key built inline (no call per pod)
        (p.slot >= 0, p.state == READY, -(inf if p.ready_at is None else p.ready_at), -p.created_at)
        for p in live
    ]
    first = heapq.nsmallest(k, range(len(live)), key=rank.__getitem__)
    return [live[i] for i in first]  # = sorted(live, key=rank)[:k]: ties keep the older first
