"""The deployment's request queue as a fluid, advanced one second at a time.

A 24-hour trace at one-second resolution on a 100-GPU fleet must simulate in
seconds, so requests are not objects here. The deployment is one FIFO queue in
front of ``k`` servers (Ready replicas times their batch slots), kept as a few
scalars and one small cohort per second of arrivals:

* The number of requests in the system follows the pointwise stationary fluid
  flow approximation (Tipper and Sundareshan 1990; Wang, Tipper and Banerjee
  1996): each second, the busy servers are those of a stationary M/G/k queue
  holding that many requests, solved implicitly so any server count is stable.
  With a constant rate this is exactly the M/M/k mean; in overload it is the
  fluid backlog draining at full capacity.
* Each second's arrivals form a cohort spread uniformly over the second. The
  queue is FIFO: requests leave its head for service as servers take them, and
  a leaving portion's mean wait comes from the piecewise-linear arrival and
  service-entry curves. Requests still queued ``timeout_s`` after arriving are
  dropped and counted.
* Each portion's latency distribution (its wait split into the stationary
  exponential spread and a deterministic rest, plus a service time fitted to its
  mean and variability) is computed afterwards, vectorised: see
  ``latency.summarise_latency``.

The per-request discrete-event run in ``des.py`` checks this on small cases
(tests/unit/sim/test_fluid_vs_des.py): mean latency within 10 % and SLO
attainment within 0.05 from 50 % to 90 % load, for service-time variability from
deterministic to exponential, bursts and overload with timeouts, on 4 or more
servers. With arrivals well under one per second on one or two slow servers it
overestimates latency by up to about 20 %; for service times more variable than
exponential the two-phase fit and a gamma differ by up to 0.05 in attainment.
"""

import logging
from collections import deque
from dataclasses import dataclass

import numpy as np

from gpuscale.sim.latency import LatencyRecords, summarise_latency
from gpuscale.sim.queueing import stationary_table
from gpuscale.sim.workload import Workload

logger = logging.getLogger(__name__)

_EPS = 1e-9


class FluidQueue:
    """A deployment's request queue, advanced one second at a time.

    The stationary relation uses the Allen-Cunneen factor ``(ca2 + cs2) / 2`` with
    ``ca2 = arrival_scv``: the arrival variability the per-second input does not
    already carry. Per-second counts of a Poisson process carry it all (0); a smooth
    rate carries none (1); ``residual_arrival_scv`` estimates it from a workload.

    Args:
        timeout_s: Requests waiting longer are dropped.
        service_scv: Squared coefficient of variation of service times.
        arrival_scv: Arrival variability missing from the per-second input.
    """

    def __init__(
        self, *, timeout_s: float, service_scv: float = 1.0, arrival_scv: float = 0.0
    ) -> None:
        self.timeout_s = float(timeout_s)
        self.service_scv = float(service_scv)
        self.arrival_scv = float(arrival_scv)
        self.in_system = 0.0
        self.busy = 0.0
        self.dropped = 0.0
        self.departed = 0.0
        self.last_departures = 0.0
        self.records = LatencyRecords()
        self._queued_work = 0.0
        self._service_work = 0.0
        # Waiting cohorts, oldest first: [arrival second, requests left, lo, hi, work per
        # request]; the requests left arrived spread evenly over [second + lo, second + hi].
        self._fifo: deque[list[float]] = deque()
        self._tables: dict[int, tuple[list[float], list[float]]] = {}
        self._hint = 0

    @property
    def waiting(self) -> float:
        """Requests queued and not yet in service."""
        return max(self.in_system - self.busy, 0.0)

    def _table(self, k: int) -> tuple[list[float], list[float]]:
        cached = self._tables.get(k)
        if cached is None:
            t = stationary_table(k)
            cached = self._tables[k] = (t.busy.tolist(), t.queue.tolist())
        return cached

    def _solve(self, total: float, servers: int, service: float) -> float:
        """Busy servers after one implicit PSFFA step from ``total`` requests in system.

        Finds the tabulated utilisation where busy servers, their departures within the
        second and the stationary queue add up to ``total``, starting from the last
        answer (the operating point moves little from one second to the next).
        """
        f = 0.5 * (self.arrival_scv + self.service_scv)
        busy_t, queue_t = self._table(servers)
        gain = 1.0 + 1.0 / service  # stays busy + departs within the second
        top = len(busy_t) - 1
        if total >= busy_t[top] * gain + f * queue_t[top]:
            return float(servers)
        i = min(self._hint, top - 1)
        while i > 0 and busy_t[i] * gain + f * queue_t[i] > total:
            i -= 1
        while i < top - 1 and busy_t[i + 1] * gain + f * queue_t[i + 1] <= total:
            i += 1
        self._hint = i
        l0 = busy_t[i] * gain + f * queue_t[i]
        l1 = busy_t[i + 1] * gain + f * queue_t[i + 1]
        w = min(max((total - l0) / (l1 - l0), 0.0), 1.0) if l1 > l0 else 0.0
        return busy_t[i] + w * (busy_t[i + 1] - busy_t[i])

    def step(self, t: int, arrivals: float, work_s: float, servers: int, capacity: float) -> None:
        """Advance one second.

        Args:
            t: The second being simulated.
            arrivals: Requests arriving during it.
            work_s: Their total work, reference-GPU seconds.
            servers: Ready slots (replicas times slots per replica).
            capacity: Work the Ready replicas do per second, reference-GPU seconds.
        """
        rec = self.records
        queued_before = self.waiting
        if arrivals > _EPS:
            self._fifo.append([float(t), arrivals, 0.0, 1.0, work_s / arrivals])
            self._queued_work += work_s
            queued_before += arrivals
        total = self.in_system + max(arrivals, 0.0)
        if servers <= 0 or capacity <= 0.0 or total <= _EPS:
            departures, busy, per_size = 0.0, 0.0, 0.0
        else:
            per_size = servers / capacity  # service seconds per unit of work on one slot
            size = (self._queued_work + self._service_work) / total
            service = max(size * per_size, 1e-9)
            busy = self._solve(total, servers, service)
            departures = min(busy / service, total)
        rec.per_size_s.append(per_size)
        rec.offered_s.append(max(work_s, 0.0) * per_size)
        rec.servers.append(servers)
        self.in_system = max(total - departures, 0.0)
        busy = min(busy, self.in_system)
        entering = queued_before - (self.in_system - busy)
        pool = self.busy
        if entering > _EPS:
            self._enter_service(t, entering)
            pool += entering
        elif entering < -_EPS:  # fewer servers: requests return to the head of the queue
            size = self._service_work / max(self.busy, _EPS)
            self._fifo.appendleft([float(t), -entering, 0.0, 1.0, size])
            self._queued_work -= entering * size
            self._service_work += entering * size
            pool += entering
        if pool > _EPS:  # departures take their share of the work in service
            self._service_work *= min(max(1.0 - departures / pool, 0.0), 1.0)
        self.busy = busy
        self.last_departures = departures
        self.departed += departures
        if self._fifo and self._fifo[0][0] + self._fifo[0][2] < t + 1 - self.timeout_s:
            self._drop_expired(t + 1 - self.timeout_s)

    def _enter_service(self, t: int, entering: float) -> None:
        rec, fifo = self.records, self._fifo
        left, done = entering, 0.0
        while left > _EPS and fifo:
            c = fifo[0]
            take = min(c[1], left)
            span = (c[3] - c[2]) * take / c[1]
            arrived = c[0] + c[2] + 0.5 * span
            starts = t + (done + 0.5 * take) / entering
            rec.step.append(t)
            rec.count.append(take)
            rec.wait_s.append(max(starts - arrived, 0.0))
            rec.size_s.append(c[4])
            self._queued_work -= take * c[4]
            self._service_work += take * c[4]
            c[1] -= take
            c[2] += span
            left -= take
            done += take
            if c[1] <= _EPS:
                fifo.popleft()
        if not fifo:
            self._queued_work = 0.0

    def _drop_expired(self, cutoff: float) -> None:
        dropped = 0.0
        for c in self._fifo:
            if c[0] + c[2] >= cutoff:
                break
            width = c[3] - c[2]
            share = 1.0 if width <= _EPS else min((cutoff - c[0] - c[2]) / width, 1.0)
            gone = c[1] * share
            c[1] -= gone
            c[2] += width * share
            self._queued_work -= gone * c[4]
            dropped += gone
        while self._fifo and self._fifo[0][1] <= _EPS:
            self._fifo.popleft()
        if not self._fifo:
            self._queued_work = 0.0
        self.in_system = max(self.in_system - dropped, 0.0)
        self.busy = min(self.busy, self.in_system)
        self.dropped += dropped


@dataclass(frozen=True, slots=True)
class FixedRun:
    """Totals of a queue served by a fixed set of replicas (for tests and checks).

    Attributes:
        requests: Requests that arrived.
        completed: Requests served.
        dropped: Requests dropped after waiting past the timeout.
        within_slo: Requests served within the SLO.
        mean_latency_s: Mean end-to-end latency of served requests, seconds.
    """

    requests: float
    completed: float
    dropped: float
    within_slo: float
    mean_latency_s: float

    @property
    def attainment(self) -> float:
        """Share of arrived requests served within the SLO."""
        return self.within_slo / self.requests if self.requests > 0 else 1.0


def serve_fixed(
    workload: Workload,
    *,
    replicas: int,
    slo_s: float,
    timeout_s: float,
    speed: float = 1.0,
    slots: int = 1,
    service_scv: float = 1.0,
) -> FixedRun:
    """Run the fluid queue with ``replicas`` Ready replicas of equal ``speed`` throughout.

    Returns:
        Request totals and latency of the run.
    """
    q = FluidQueue(
        timeout_s=timeout_s,
        service_scv=service_scv,
        arrival_scv=residual_arrival_scv(workload),
    )
    for t in range(workload.duration_s):
        a, w = float(workload.arrivals[t]), float(workload.work_s[t])
        q.step(t, a, w, replicas * slots, replicas * speed)
    s = summarise_latency(
        q.records,
        slo_s=slo_s,
        timeout_s=timeout_s,
        row_steps=workload.duration_s,
        n_rows=1,
        service_scv=service_scv,
    )
    return FixedRun(
        float(workload.arrivals.sum()),
        s.completed,
        q.dropped + s.dropped,
        s.within_slo,
        s.mean_latency_s,
    )


def residual_arrival_scv(workload: Workload) -> float:
    """Arrival variability a workload's per-second counts do not carry, 0 to 1.

    Counts of a Poisson process have successive differences with variance about
    twice the mean; a smooth rate has almost none. One minus that dispersion index,
    clipped to [0, 1], is the share of Poisson variability the fluid must add.

    Returns:
        Squared coefficient of variation to add, 0 (Poisson counts or burstier) to 1.
    """
    a = np.asarray(workload.arrivals, dtype=float)
    total = float(a.sum())
    if a.size < 2 or total <= 0.0:
        return 1.0
    dispersion = float(np.square(np.diff(a)).sum()) / (2.0 * total)
    return min(max(1.0 - dispersion, 0.0), 1.0)
