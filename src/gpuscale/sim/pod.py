"""A replica's record in the simulated cluster, and the states it goes through."""

import math
from dataclasses import dataclass

from gpuscale.scaling.policy import PodStatus

PENDING, STARTING, READY, TERMINATING, GONE = range(5)  # in lifecycle order (``status``)


@dataclass(slots=True)
class Pod:
    """One replica (mutable simulator state).

    Attributes:
        uid: Creation sequence number.
        name: Pod name.
        created_at: Creation time, seconds.
        state: PENDING, STARTING, READY, TERMINATING or GONE.
        slot: First GPU slot it holds, -1 while unscheduled.
        gpus: Every GPU slot it holds (all on one node), empty while unscheduled.
        ready_at: When it became Ready (None before).
        due: When its current phase ends (Ready for STARTING, GPU freed for TERMINATING).
        status: Cached API view of the pod (None where it must be rebuilt).
        deletion_cost: Its ``pod-deletion-cost`` annotation (0 when unset).
    """

    uid: int
    name: str
    created_at: float
    state: int = PENDING
    slot: int = -1
    gpus: tuple[int, ...] = ()
    ready_at: float | None = None
    due: float = math.inf
    status: PodStatus | None = None
    deletion_cost: int = 0


def pod_status(p: Pod, node: str) -> PodStatus:
    """The API view of ``p`` on ``node`` ("" while unscheduled), kept on it until it changes.

    A scheduled pod is ``Running`` (its image pull is part of the cold start), an
    unscheduled one ``Pending``.
    """
    phase = "Running" if p.slot >= 0 else "Pending"
    p.status = PodStatus(
        p.name, p.state == READY, p.created_at, p.ready_at, node, phase, p.deletion_cost
    )
    return p.status
