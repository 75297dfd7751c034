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
* A request in service stays there until it completes, or until its replica
  stops: a deleted replica drains (``start_drain``), and what a stopped replica
  was serving is retried once (``FluidQueue``). Every arrival is counted once.

The per-request discrete-event run in ``des.py`` checks this on small cases
(tests/unit/sim/test_fluid_vs_des.py): mean latency within 10 % and SLO
attainment within 0.05 from 50 % to 90 % load, for service-time variability from
deterministic to exponential, bursts and overload with timeouts, on 4 or more
servers. On the measured GenTD26 service shape and on exponential service (SLO
twice the mean, Poisson counts, 150,000 requests) the attainment gap (fluid minus
discrete-event) is within 0.01 at 50-95 % load on 64 servers and 50-90 % on 16;
on 4 servers at 50-70 % (measured) or 50-60 % (exponential), else at most 0.022
up to 90 %; on 1 and 2 servers at most 0.026 (measured) and 0.032 (exponential) up
to 90 %. At 95 % load it is +0.041/+0.054/+0.068/+0.026 (measured) and
+0.020/+0.039/+0.059/+0.049 (exponential) on 1/2/4/16 servers, where the spread's
utilisation cap (``latency.SPREAD_RHO_CAP``) binds.
With arrivals well under one per second on one or two slow servers it
overestimates latency by up to about 20 %; for service times more variable than
exponential the two-phase fit and a gamma differ by up to 0.05 in attainment.
On LLM fleets of two to eight replicas at 80-91 % load its TTFT attainment is
0.03-0.15 below the per-request queue's; on 16 replicas at 92 %, 0.006.

Where it is used: the engine serves with this queue only where it is accurate
and the exact one is costly. ``Scenario.queue_model="auto"`` (the default,
``queue_model.choose``) serves requests one by one (``requests.RequestQueue``,
exact) when the run has at most 2 million requests and either arrives at 20
requests per second or less on average (there the per-request run costs at
most about 2.2 times this one; bench/bench_queue_models.py) or keeps at most 61
slots or 14 replicas busy at peak (where this queue can be off by more than
0.01). Everything else (large, busy fleets: the Azure traces at fleet scale,
within 0.007 of the per-request queue there) runs on this queue.
"""

import logging
import math
from collections import deque
from collections.abc import Sequence

import numpy as np

from gpuscale.sim.fluid_block import EPS as _EPS
from gpuscale.sim.fluid_block import QueueMark, SecondStepper, step_each_second
from gpuscale.sim.fluid_kernel import advance_seconds
from gpuscale.sim.latency import Draining, InService, LatencyRecords
from gpuscale.sim.queueing import stationary_table
from gpuscale.sim.workload import FloatArray, Workload

__all__ = [
    "DRAINED",
    "FluidQueue",
    "QueueMark",
    "SecondStepper",
    "residual_arrival_scv",
    "step_each_second",
]

logger = logging.getLogger(__name__)


_FIFO_ROWS = 64
"""Rows the FIFO's array starts with (it grows as needed; usually one or two are in use)."""

_NO_TABLE = np.zeros(0)

DRAINED = 0.5
"""A deleted replica with fewer requests than this left in service has drained.

With exponential service, ``n`` requests decay below one half after
``ln(2n)`` mean service times, close to the expected wait for the last of them
(``H_n``, about ``ln(n) + 0.58``)."""


class FluidQueue:
    """A deployment's request queue, advanced one second at a time.

    The stationary relation uses the Allen-Cunneen factor ``(ca2 + cs2) / 2`` with
    ``ca2 = arrival_scv``: the arrival variability the per-second input does not
    already carry. Per-second counts of a Poisson process carry it all (0); a smooth
    rate carries none (1); ``residual_arrival_scv`` estimates it from a workload.

    Every arrival ends exactly once: served (a portion of ``records``), dropped
    (``dropped``), or in flight when the run ends (``finish``). A request in service
    on a replica that stops (``interrupt``, or ``stop_drain`` at the end of a
    deleted replica's grace) is retried once, ahead of the queue, keeping its
    arrival time; interrupted again, it is dropped.

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
        self.retried = 0.0
        self.dropped_interrupted = 0.0
        self.records = LatencyRecords()
        self.in_service = InService(self.records)
        self.drains: dict[int, Draining] = {}
        self.draining = 0.0
        self.drained: list[int] = []
        self._queued_work = 0.0
        self._service_work = 0.0
        # Waiting cohorts, oldest first, in rows ``_head`` to ``_tail - 1`` of ``_fifo`` (an
        # array, so the compiled block reads and writes it in place): [queued second,
        # requests left, lo, hi, work per request, seconds since arrival when queued]; the
        # requests left were queued spread evenly over [second + lo, second + hi]. Retries
        # wait in ``_retry`` (the same fields, as lists), served first.
        self._fifo = np.zeros((_FIFO_ROWS, 6))
        self._head = self._tail = 0
        self._retry: deque[list[float]] = deque()
        # Busy and queue columns per server count: as lists for ``_solve``, as arrays for
        # the compiled block.
        self._tables: dict[int, tuple[list[float], list[float], np.ndarray, np.ndarray]] = {}
        self._hint = 0
        # The compiled block's state in and out (``fluid_kernel``), and its per-second output.
        self._fs = np.zeros(8)
        self._ist = np.zeros(6, dtype=np.int64)
        self._out = (np.zeros(64), np.zeros(64), np.zeros(64))

    @property
    def waiting(self) -> float:
        """Requests queued and not yet in service."""
        return max(self.in_system - self.busy, 0.0)

    @property
    def queued(self) -> float:
        """Requests in the queue's cohorts (first tries and retries)."""
        first = sum(self._fifo[self._head : self._tail, 1].tolist())
        return float(first + sum(c[1] for c in self._retry))

    def _table(self, k: int) -> tuple[list[float], list[float], np.ndarray, np.ndarray]:
        cached = self._tables.get(k)
        if cached is None:
            t = stationary_table(k)
            busy, queue = np.ascontiguousarray(t.busy, float), np.ascontiguousarray(t.queue, float)
            cached = self._tables[k] = (busy.tolist(), queue.tolist(), busy, queue)
        return cached

    def _room(self, rows: int) -> None:
        """Make room in the FIFO's array for ``rows`` more cohorts after its tail."""
        fifo, head, tail = self._fifo, self._head, self._tail
        if tail + rows <= fifo.shape[0]:
            return
        n = tail - head
        if n + rows > fifo.shape[0]:
            grown = np.zeros((max(2 * fifo.shape[0], n + rows), 6))
            grown[:n] = fifo[head:tail]
            self._fifo = grown
        else:  # moving the cohorts to the front is enough
            fifo[:n] = fifo[head:tail].copy()
        self._head, self._tail = 0, n

    def _solve(self, total: float, servers: int, service: float) -> float:
        """Busy servers after one implicit PSFFA step from ``total`` requests in system.

        Finds the tabulated utilisation where busy servers, their departures within the
        second and the stationary queue add up to ``total``, starting from the last
        answer (the operating point moves little from one second to the next).
        """
        f = 0.5 * (self.arrival_scv + self.service_scv)
        busy_t, queue_t, _, _ = self._table(servers)
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
            self._room(1)
            self._fifo[self._tail] = (float(t), arrivals, 0.0, 1.0, work_s / arrivals, 0.0)
            self._tail += 1
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
        offered = max(work_s, 0.0) * per_size
        self.in_system = max(total - departures, 0.0)
        busy = min(busy, self.in_system)
        entering = queued_before - (self.in_system - busy)
        pool = self.busy
        if entering > _EPS:
            self._enter_service(t, entering)
            pool += entering
        else:  # a request in service stays there: the stationary split is not a preemption
            busy = max(pool - departures, 0.0)
        if pool > _EPS:  # departures take their share of the work in service
            left = min(max(1.0 - departures / pool, 0.0), 1.0)
            self._service_work *= left
            if left > 1e-12:  # InService.served, inlined as the compiled block has it
                self.in_service.log_g += math.log(left)
            else:
                self.in_service.served(left)
        self.busy = busy
        rec.add_second(per_size, offered, servers, busy, arrivals)
        self.last_departures = departures
        self.departed += departures
        if self.drains:
            self._drain_step()
        cutoff = t + 1 - self.timeout_s
        head = self._fifo[self._head].tolist() if self._head < self._tail else None
        if (head is not None and head[0] + head[2] < cutoff) or self._retry:
            self._drop_expired(cutoff)

    def advance(
        self,
        t0: int,
        t1: int,
        arrivals: FloatArray,
        work_s: FloatArray,
        servers: int,
        capacity: float,
        waiting: list[float] | None = None,
    ) -> tuple[list[float], list[float]]:
        """Advance seconds ``t0`` to ``t1 - 1`` at constant servers and capacity.

        Each second is exactly ``step``'s arithmetic, in the same order, so the state
        and records are bit for bit those of calling ``step`` once per second; without
        retries waiting or replicas draining (neither can start between two calls) it
        runs as one compiled loop instead (``fluid_kernel.advance_seconds``).

        Args:
            t0: First second.
            t1: One past the last second.
            arrivals: Requests arriving, indexed by second.
            work_s: Their total work, reference-GPU seconds, indexed by second.
            servers: Ready slots.
            capacity: Work the Ready replicas do per second, reference-GPU seconds.
            waiting: When given, requests waiting at the end of each second are appended.

        Returns:
            Requests in service at the end of each second, and departures in each.
        """
        block = (t0, t1, arrivals, work_s, servers, capacity, waiting)
        if self._retry or self.drains:
            return step_each_second(self, *block)
        return self._advance_compiled(*block)

    def _advance_compiled(
        self,
        t0: int,
        t1: int,
        arrivals: FloatArray,
        work_s: FloatArray,
        servers: int,
        capacity: float,
        waiting: list[float] | None,
    ) -> tuple[list[float], list[float]]:
        """``advance`` with no retry waiting and no replica draining, compiled."""
        n, rec, ledger = t1 - t0, self.records, self.in_service
        # Room for a cohort a second, and for the portions: each second enters at most
        # one per cohort it empties, plus one.
        self._room(n)
        rec.reserve(2 * n + self._tail - self._head, n)
        if len(self._out[0]) < n:
            self._out = (np.zeros(2 * n), np.zeros(2 * n), np.zeros(2 * n))
        up = servers > 0 and capacity > 0.0
        _, _, busy_t, queue_t = self._table(servers) if up else (0, 0, _NO_TABLE, _NO_TABLE)
        fs, ist = self._fs, self._ist  # in fluid_kernel's order of its state slots
        fs[:] = self._scalars()
        ist[:] = (self._hint, self._head, self._tail, ledger.live, rec.portions, rec.seconds)
        f = 0.5 * (self.arrival_scv + self.service_scv)
        args = (servers, capacity, busy_t, queue_t, f, self.timeout_s, fs, ist, self._fifo)
        advance_seconds(
            t0, t1, arrivals, work_s, *args, *rec.per_portion, *rec.per_second, *self._out
        )
        self._set_scalars(fs.tolist())
        self._hint, self._head, self._tail, ledger.live, rec.portions, rec.seconds = ist.tolist()
        busy_out, dep_out, waiting_out = self._out
        if waiting is not None:
            waiting.extend(waiting_out[:n].tolist())
        return busy_out[:n].tolist(), dep_out[:n].tolist()

    def mark(self) -> QueueMark | None:
        """The state a block of seconds starts from, for ``rewind`` to come back to.

        A compiled block changes only a few scalars, the FIFO's cohorts from its head
        on and records after those counted (``fluid_kernel``): all a mark keeps. The
        engine advances past decisions with one and comes back where one acts.

        Returns:
            The mark, or None when retries wait or a replica drains (those seconds are
            stepped one by one in Python, which changes more than a mark keeps).
        """
        if self._retry or self.drains:
            return None
        ledger, rec = self.in_service, self.records
        counts = (self._hint, ledger.live, rec.portions, rec.seconds)
        return QueueMark(self._scalars(), counts, self._fifo[self._head : self._tail].copy())

    def rewind(self, mark: QueueMark) -> None:
        """Come back to the state ``mark`` kept: as if the seconds since were not advanced."""
        self._set_scalars(mark.scalars)
        rec = self.records
        self._hint, self.in_service.live, rec.portions, rec.seconds = mark.counts
        rows = mark.cohorts.shape[0]
        if rows > self._fifo.shape[0]:
            self._fifo = np.zeros((2 * rows, 6))
        self._fifo[:rows] = mark.cohorts  # where they sit in the array does not matter
        self._head, self._tail = 0, rows

    def _scalars(self) -> tuple[float, ...]:
        """The scalar state, in the order of ``fluid_kernel``'s ``fs``."""
        return (
            self.in_system,
            self.busy,
            self._queued_work,
            self._service_work,
            self.departed,
            self.in_service.log_g,
            self.dropped,
            self.last_departures,
        )

    def _set_scalars(self, values: Sequence[float]) -> None:
        """Set the scalar state from ``values``, in the order ``_scalars`` gives."""
        (
            self.in_system,
            self.busy,
            self._queued_work,
            self._service_work,
            self.departed,
            self.in_service.log_g,
            self.dropped,
            self.last_departures,
        ) = values

    def _enter_service(self, t: int, entering: float) -> None:
        """Move ``entering`` requests into service: retries first, then the FIFO's head."""
        rec, log_g = self.records, self.in_service.log_g
        left, done = entering, 0.0
        retry = bool(self._retry)
        while left > _EPS:
            if retry:
                if not self._retry:
                    retry = False
                    continue
                c = self._retry[0]
            elif self._head < self._tail:
                c = self._fifo[self._head].tolist()
            else:
                break
            take = min(c[1], left)
            span = (c[3] - c[2]) * take / c[1]
            arrived = c[0] + c[2] + 0.5 * span
            starts = t + (done + 0.5 * take) / entering
            if retry:
                rec.retried.add(rec.portions)
            rec.add_portion(t, take, max(starts - arrived, 0.0) + c[5], c[4], log_g)
            self._queued_work -= take * c[4]
            self._service_work += take * c[4]
            c[1] -= take
            c[2] += span
            left -= take
            done += take
            if retry:
                if c[1] <= _EPS:
                    self._retry.popleft()
            else:
                self._fifo[self._head, 1:3] = c[1:3]
                if c[1] <= _EPS:
                    self._head += 1
        if self._head >= self._tail and not self._retry:
            self._queued_work = 0.0

    def _drop_expired(self, cutoff: float) -> None:
        dropped = 0.0
        for c in self._retry:
            gone = self._expire(c, cutoff)
            if gone is None:
                break
            dropped += gone
        while self._retry and self._retry[0][1] <= _EPS:
            self._retry.popleft()
        fifo = self._fifo
        for row in range(self._head, self._tail):
            c = fifo[row].tolist()
            gone = self._expire(c, cutoff)
            if gone is None:
                break
            fifo[row, 1:3] = c[1:3]
            dropped += gone
        while self._head < self._tail and fifo[self._head, 1] <= _EPS:
            self._head += 1
        if self._head >= self._tail and not self._retry:
            self._queued_work = 0.0
        self.in_system = max(self.in_system - dropped, 0.0)
        self.busy = min(self.busy, self.in_system)
        self.dropped += dropped

    def _expire(self, c: list[float], cutoff: float) -> float | None:
        """Drop what of cohort ``c`` (changed in place) arrived before ``cutoff``.

        Returns:
            The requests dropped, or None when none of it is that old.
        """
        if c[0] + c[2] >= cutoff:
            return None
        width = c[3] - c[2]
        share = 1.0 if width <= _EPS else min((cutoff - c[0] - c[2]) / width, 1.0)
        gone = c[1] * share
        c[1] -= gone
        c[2] += width * share
        self._queued_work -= gone * c[4]
        return gone

    # ------------------------------------------------------- replicas that stop
    def _leave_service(self, requests: float) -> tuple[list[int], list[float], float]:
        """Take ``requests`` of those in service out of the shared pool.

        Returns:
            The portions and requests taken from each, and their mean work per request.
        """
        if self.busy <= _EPS or requests <= _EPS:
            return [], [], 0.0
        share = min(requests / self.busy, 1.0)
        size = self._service_work / self.busy
        idx, amounts = self.in_service.take(share)
        gone = share * self.busy
        self.busy -= gone
        self.in_system = max(self.in_system - gone, 0.0)
        self._service_work *= 1.0 - share
        return idx, amounts, size

    def interrupt(self, t: int, requests: float) -> None:
        """A Ready replica stopped (GPU lost, crash): its ``requests`` in service retry once.

        Args:
            t: The current second.
            requests: Requests it was serving.
        """
        idx, amounts, _ = self._leave_service(requests)
        self._retry_or_drop(t, idx, amounts)

    def start_drain(self, key: int, requests: float, slot_speed: float) -> bool:
        """A Ready replica was deleted: it takes no new work and finishes ``requests``.

        They finish at the replica's own speed, in proportion to what is left each
        second (the exponential service model), until ``stop_drain``. A replica with
        fewer than ``DRAINED`` requests left is drained and listed in ``drained``.

        Args:
            key: Identifies the replica (its pod uid).
            requests: Requests it was serving.
            slot_speed: Work one of its slots does per second, reference-GPU seconds.

        Returns:
            Whether it has anything left to drain.
        """
        idx, amounts, size = self._leave_service(requests)
        drain = Draining(idx, amounts, size / max(slot_speed, 1e-12))
        if drain.total < DRAINED:
            return False
        self.drains[key] = drain
        self.draining += drain.total
        return True

    def _drain_step(self) -> None:
        draining = 0.0
        for key, d in list(self.drains.items()):
            d.left *= d.decay
            left = d.requests
            if left < DRAINED:  # what is left completes: it is in the records already
                del self.drains[key]
                self.drained.append(key)
            else:
                draining += left
        self.draining = draining

    def stop_drain(self, t: int, key: int) -> None:
        """The deleted replica ``key`` is gone (grace over, GPU lost): its requests retry."""
        d = self.drains.pop(key, None)
        if d is not None:
            self.draining = max(self.draining - d.requests, 0.0)
            self._retry_or_drop(t, d.idx, [x * d.left for x in d.taken])

    def _retry_or_drop(self, t: int, idx: list[int], amounts: list[float]) -> None:
        """Interrupted requests leave the records; first tries queue again, retries drop."""
        rec = self.records
        removed = self.in_service.remove(idx, amounts)
        # The portions' fields as Python numbers, read once (not an array lookup each).
        sizes, steps, waits = (
            column[idx].tolist() for column in (rec.size_s, rec.step, rec.wait_s)
        )
        n = work = arrived = 0.0
        for i, x, size, step, wait in zip(idx, removed, sizes, steps, waits, strict=True):
            if i in rec.retried:
                self.dropped_interrupted += x
                self.dropped += x
            else:
                n += x
                work += x * size
                arrived += x * (step + 0.5 - wait)
        if n > _EPS:
            since = max(t + 0.5 - arrived / n, 0.0)
            self._retry.append([float(t), n, 0.0, 1.0, work / n, since])
            self._queued_work += work
            self.in_system += n
            self.retried += n
        elif n > 0.0:  # a negligible remainder: dropped, so it is still counted once
            self.dropped += n

    def finish(self) -> float:
        """End the run: what is queued or in service is in flight, not served.

        Returns:
            Requests in flight, taken out of the records.
        """
        idx, amounts = self.in_service.take(1.0)
        in_flight = sum(self.in_service.remove(idx, amounts))
        for d in self.drains.values():
            in_flight += sum(self.in_service.remove(d.idx, [x * d.left for x in d.taken]))
        self.drains.clear()
        self.busy = self.draining = 0.0
        return in_flight + self.queued


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
