"""Advancing a queue over a block of seconds one ``step`` at a time.

Between two events (a decision, a scrape, a collect, a cluster or fault event)
the engine's Ready capacity is constant, so it advances the queue over the
seconds in between in one call. ``FluidQueue.advance`` runs them compiled
(``fluid_kernel``) when no retry waits and no replica drains;
``step_each_second`` is the plain loop, for retries or drains, and for any
other queue with ``step`` (the per-request ``RequestQueue``). A ``QueueMark`` is the
fluid queue's state where a compiled block starts, to come back to.
"""

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from gpuscale.sim.workload import FloatArray

EPS = 1e-9
"""Amounts of requests below this count as none."""


@dataclass(frozen=True, slots=True)
class QueueMark:
    """A fluid queue's state where a compiled block of seconds starts (``FluidQueue.mark``).

    Attributes:
        scalars: In system, in service, queued work, work in service, departed, the
            in-service ledger's log survival, dropped, last departures.
        counts: The solve's hint, the ledger's first live portion, the portions and
            the seconds recorded.
        cohorts: A copy of the waiting cohorts, oldest first.
    """

    scalars: tuple[float, ...]
    counts: tuple[int, ...]
    cohorts: np.ndarray


class SecondStepper(Protocol):
    """A queue the engine can drive one second at a time (``FluidQueue`` or another)."""

    @property
    def busy(self) -> float:
        """Requests in service now."""
        ...

    @property
    def last_departures(self) -> float:
        """Requests that left service in the last second stepped."""
        ...

    @property
    def waiting(self) -> float:
        """Requests queued and not yet in service."""
        ...

    def step(self, t: int, arrivals: float, work_s: float, servers: int, capacity: float) -> None:
        """Advance one second."""


def step_each_second(
    queue: SecondStepper,
    t0: int,
    t1: int,
    arrivals: FloatArray,
    work_s: FloatArray,
    servers: int,
    capacity: float,
    waiting: list[float] | None = None,
) -> tuple[list[float], list[float]]:
    """``FluidQueue.advance`` for any queue: ``step`` once per second from ``t0`` to ``t1 - 1``.

    The arguments are ``FluidQueue.advance``'s, after the queue.

    Returns:
        Requests in service at the end of each second, and departures in each.
    """
    busy_out, dep_out = [], []
    for t in range(t0, t1):
        queue.step(t, float(arrivals[t]), float(work_s[t]), servers, capacity)
        busy_out.append(queue.busy)
        dep_out.append(queue.last_departures)
        if waiting is not None:
            waiting.append(queue.waiting)
    return busy_out, dep_out
