"""The fluid queue's hot loop: many seconds at constant capacity in one call.

Between two events (a decision, a scrape, a collect, a cluster or fault event)
the engine's Ready capacity is constant, so ``FluidQueue.advance`` runs the
seconds in between here: ``FluidQueue.step`` and its ``_enter_service`` inlined
over local variables, the same arithmetic in the same order, so the queue's
state and records are bit for bit those of one ``step`` per second
(tests/unit/sim/test_fluid_advance.py). ``step_each_second`` is the plain loop,
for one second, for retries or drains, and for any other queue with ``step``.
"""

import math
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from gpuscale.sim.fluid import FluidQueue

EPS = 1e-9
"""Amounts of requests below this count as none."""


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
    arrivals: list[float],
    work_s: list[float],
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
        queue.step(t, arrivals[t], work_s[t], servers, capacity)
        busy_out.append(queue.busy)
        dep_out.append(queue.last_departures)
        if waiting is not None:
            waiting.append(queue.waiting)
    return busy_out, dep_out


def advance_block(
    q: "FluidQueue",
    t0: int,
    t1: int,
    arrivals: list[float],
    work_s: list[float],
    servers: int,
    capacity: float,
    waiting: list[float] | None = None,
) -> tuple[list[float], list[float]]:
    """``FluidQueue.advance`` with no retries or drains: ``step`` and ``_enter_service`` inlined.

    ``waiting``, when given, gets the requests waiting at the end of each second.

    Returns:
        Requests in service at the end of each second, and departures in each.
    """
    rec, ledger, fifo = q.records, q.in_service, q._fifo
    busy_rec: list[float] = []  # in service as ``step`` records it (before drops)
    after_drop: list[tuple[int, float]] = []  # (index, in service) where drops lowered it
    dep_out: list[float] = []
    r_step, r_count, r_wait, r_size = rec.step, rec.count, rec.wait_s, rec.size_s
    lg_append, n_append = ledger.lg.append, ledger.n.append
    up = servers > 0 and capacity > 0.0
    per_size = servers / capacity if up else 0.0
    f = 0.5 * (q.arrival_scv + q.service_scv)
    busy_t, queue_t = q._table(servers) if up else ([], [])
    top = len(busy_t) - 1
    # The table's top row and a full fleet, the same products at every second.
    busy_top, fq_top, full = (busy_t[top], f * queue_t[top], float(servers)) if up else (0, 0, 0)
    timeout, log = q.timeout_s, math.log
    in_system, busy_now = q.in_system, q.busy
    queued_work, service_work = q._queued_work, q._service_work
    departed, hint = q.departed, q._hint
    log_g = ledger.log_g  # kept here, written back before anything else reads it
    rec.servers.extend([servers] * (t1 - t0))
    offered, sizes = rec.offered_s.append, rec.per_size_s.append
    for t in range(t0, t1):
        a, w = arrivals[t], work_s[t]
        queued_before = in_system - busy_now
        if queued_before < 0.0:
            queued_before = 0.0
        if a > EPS:
            fifo.append([float(t), a, 0.0, 1.0, w / a, 0.0])
            queued_work += w
            queued_before += a
        total = in_system + (a if a >= 0.0 else 0.0)  # max(a, 0.0)
        if not up or total <= EPS:
            departures, busy = 0.0, 0.0
            sizes(0.0)
            offered((w if w >= 0.0 else 0.0) * 0.0)
        else:
            size = (queued_work + service_work) / total
            service = size * per_size
            if service < 1e-9:
                service = 1e-9
            # _solve, inlined
            gain = 1.0 + 1.0 / service
            if total >= busy_top * gain + fq_top:
                busy = full
            else:
                i = hint if hint < top - 1 else top - 1
                while i > 0 and busy_t[i] * gain + f * queue_t[i] > total:
                    i -= 1
                while i < top - 1 and busy_t[i + 1] * gain + f * queue_t[i + 1] <= total:
                    i += 1
                hint = i
                l0 = busy_t[i] * gain + f * queue_t[i]
                l1 = busy_t[i + 1] * gain + f * queue_t[i + 1]
                if l1 > l0:
                    x = (total - l0) / (l1 - l0)
                    x = x if x >= 0.0 else 0.0
                    x = 1.0 if x > 1.0 else x
                else:
                    x = 0.0
                busy = busy_t[i] + x * (busy_t[i + 1] - busy_t[i])
            departures = busy / service
            if total < departures:
                departures = total
            sizes(per_size)
            offered((w if w >= 0.0 else 0.0) * per_size)
        in_system = total - departures
        if in_system < 0.0:
            in_system = 0.0
        if in_system < busy:
            busy = in_system
        entering = queued_before - (in_system - busy)
        pool = busy_now
        if entering > EPS:  # _enter_service, inlined (no retries here)
            left, done = entering, 0.0
            while left > EPS and fifo:
                c = fifo[0]
                c1 = c[1]
                take = left if left < c1 else c1
                span = (c[3] - c[2]) * take / c1
                arrived = c[0] + c[2] + 0.5 * span
                wait = t + (done + 0.5 * take) / entering - arrived
                r_step.append(t)
                r_count.append(take)
                r_wait.append((wait if wait >= 0.0 else 0.0) + c[5])
                r_size.append(c[4])
                lg_append(log_g)
                n_append(take)
                queued_work -= take * c[4]
                service_work += take * c[4]
                c[1] = c1 - take
                c[2] += span
                left -= take
                done += take
                if c[1] <= EPS:
                    fifo.popleft()
            if not fifo:
                queued_work = 0.0
            pool += entering
        else:  # a request in service stays there: the stationary split is not a preemption
            busy = pool - departures
            if busy < 0.0:
                busy = 0.0
        if pool > EPS:  # departures take their share of the work in service
            x = 1.0 - departures / pool
            x = x if x >= 0.0 else 0.0
            x = 1.0 if x > 1.0 else x
            service_work *= x
            if x > 1e-12:
                log_g += log(x)
            else:
                ledger.log_g = log_g
                ledger.served(x)
                log_g = ledger.log_g
        busy_now = busy
        busy_rec.append(busy)
        departed += departures
        dep_out.append(departures)
        cutoff = t + 1 - timeout
        if fifo and fifo[0][0] + fifo[0][2] < cutoff:
            q.in_system, q.busy, q._queued_work = in_system, busy_now, queued_work
            q._drop_expired(cutoff)
            in_system, busy_now, queued_work = q.in_system, q.busy, q._queued_work
            after_drop.append((t - t0, busy_now))
        if waiting is not None:  # FluidQueue.waiting, after the drops (max(x, 0.0))
            x = in_system - busy_now
            waiting.append(0.0 if x < 0.0 else x)
    rec.busy.extend(busy_rec)
    busy_out = busy_rec
    if after_drop:  # what the engine reads: in service after the drops
        busy_out = busy_rec.copy()
        for i, b in after_drop:
            busy_out[i] = b
    rec.arrivals.extend(arrivals[t0:t1])
    q.in_system, q.busy = in_system, busy_now
    q._queued_work, q._service_work = queued_work, service_work
    q.departed, q._hint = departed, hint
    ledger.log_g = log_g
    if dep_out:
        q.last_departures = dep_out[-1]
    return busy_out, dep_out
