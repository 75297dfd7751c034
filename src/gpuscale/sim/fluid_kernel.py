"""The fluid queue's block of seconds at constant capacity, compiled with numba.

A 24-hour run on 100 GPUs advances the queue over tens of thousands of blocks
of one or a few seconds; in Python each block cost about 12 microseconds, most
of it in setting up locals and appending records. ``advance_seconds`` is
``FluidQueue.step`` with ``_enter_service``, ``_solve`` and ``_drop_expired``
inlined for a queue with no retries waiting and no replica draining (the only
case ``FluidQueue.advance`` hands it): the same arithmetic in the same order,
every ``min``/``max`` written as the comparison Python's builtins make, so the
state and records are bit for bit those of one ``step`` per second
(tests/unit/sim/test_fluid_advance.py compares them).

State travels in and out through small arrays instead of Python objects:

* ``fs`` (float64): in system, in service, queued work, work in service,
  departed, the in-service ledger's log survival, dropped, last departures.
* ``ist`` (int64): the solve's hint, the FIFO's head and tail, the ledger's
  first live portion, the portions and the seconds recorded.

The FIFO's rows are cohorts: [queued second, requests left, lo, hi, work per
request, seconds since arrival when queued]. The caller makes room for one new
cohort a second and, in the records, for ``2 * seconds + cohorts`` portions
(each second enters at most one portion per cohort it empties plus one) and one
row per second.
"""

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit

from gpuscale.sim.fluid_block import EPS

# State slots in ``fs`` and ``ist``.
IN_SYSTEM, BUSY, QUEUED_WORK, SERVICE_WORK, DEPARTED, LOG_G, DROPPED, LAST_DEP = range(8)
HINT, HEAD, TAIL, LIVE, PORTIONS, SECONDS = range(6)


def _advance_seconds(
    t0: int,
    t1: int,
    arrivals: np.ndarray,
    work_s: np.ndarray,
    servers: int,
    capacity: float,
    busy_t: np.ndarray,
    queue_t: np.ndarray,
    f: float,
    timeout: float,
    fs: np.ndarray,
    ist: np.ndarray,
    fifo: np.ndarray,
    p_step: np.ndarray,
    p_count: np.ndarray,
    p_wait: np.ndarray,
    p_size: np.ndarray,
    p_lg: np.ndarray,
    p_n: np.ndarray,
    s_per_size: np.ndarray,
    s_offered: np.ndarray,
    s_servers: np.ndarray,
    s_busy: np.ndarray,
    s_arrivals: np.ndarray,
    out_busy: np.ndarray,
    out_dep: np.ndarray,
    out_wait: np.ndarray,
) -> None:
    """Seconds ``t0`` to ``t1 - 1``; see the module docstring for the arguments' layout.

    ``out_busy`` gets the requests in service at the end of each second after the
    drops (what the engine reads), ``out_dep`` the departures in each, ``out_wait``
    the requests waiting at its end.
    """
    in_system, busy_now = fs[IN_SYSTEM], fs[BUSY]
    queued_work, service_work = fs[QUEUED_WORK], fs[SERVICE_WORK]
    departed, log_g, dropped = fs[DEPARTED], fs[LOG_G], fs[DROPPED]
    hint, head, tail, live = ist[HINT], ist[HEAD], ist[TAIL], ist[LIVE]
    np_, ns = ist[PORTIONS], ist[SECONDS]
    up = servers > 0 and capacity > 0.0
    per_size = servers / capacity if up else 0.0
    top = busy_t.size - 1
    busy_top = fq_top = full = 0.0
    if up:
        busy_top, fq_top, full = busy_t[top], f * queue_t[top], float(servers)
    departures = 0.0
    for t in range(t0, t1):
        a, w = arrivals[t], work_s[t]
        queued_before = in_system - busy_now
        if queued_before < 0.0:
            queued_before = 0.0
        if a > EPS:
            fifo[tail, 0] = float(t)
            fifo[tail, 1] = a
            fifo[tail, 2] = 0.0
            fifo[tail, 3] = 1.0
            fifo[tail, 4] = w / a
            fifo[tail, 5] = 0.0
            tail += 1
            queued_work += w
            queued_before += a
        total = in_system + (a if a >= 0.0 else 0.0)
        offered = w if w >= 0.0 else 0.0
        if not up or total <= EPS:
            departures, busy = 0.0, 0.0
            s_per_size[ns] = 0.0
            s_offered[ns] = offered * 0.0
        else:
            size = (queued_work + service_work) / total
            service = size * per_size
            if service < 1e-9:
                service = 1e-9
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
            s_per_size[ns] = per_size
            s_offered[ns] = offered * per_size
        in_system = total - departures
        if in_system < 0.0:
            in_system = 0.0
        if in_system < busy:
            busy = in_system
        entering = queued_before - (in_system - busy)
        pool = busy_now
        if entering > EPS:  # _enter_service (no retries here)
            left, done = entering, 0.0
            while left > EPS and head < tail:
                c1 = fifo[head, 1]
                take = left if left < c1 else c1
                span = (fifo[head, 3] - fifo[head, 2]) * take / c1
                arrived = fifo[head, 0] + fifo[head, 2] + 0.5 * span
                wait = t + (done + 0.5 * take) / entering - arrived
                p_step[np_] = t
                p_count[np_] = take
                p_wait[np_] = (wait if wait >= 0.0 else 0.0) + fifo[head, 5]
                p_size[np_] = fifo[head, 4]
                p_lg[np_] = log_g
                p_n[np_] = take
                np_ += 1
                queued_work -= take * fifo[head, 4]
                service_work += take * fifo[head, 4]
                fifo[head, 1] = c1 - take
                fifo[head, 2] += span
                left -= take
                done += take
                if fifo[head, 1] <= EPS:
                    head += 1
            if head >= tail:
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
                log_g += math.log(x)
            else:  # InService.served: nothing is left in service
                live, log_g = np_, 0.0
        busy_now = busy
        s_busy[ns] = busy
        s_servers[ns] = servers
        s_arrivals[ns] = a
        ns += 1
        departed += departures
        cutoff = t + 1 - timeout
        if head < tail and fifo[head, 0] + fifo[head, 2] < cutoff:  # _drop_expired
            gone_all = 0.0
            for r in range(head, tail):
                if fifo[r, 0] + fifo[r, 2] >= cutoff:
                    break
                width = fifo[r, 3] - fifo[r, 2]
                if width <= EPS:
                    share = 1.0
                else:
                    share = (cutoff - fifo[r, 0] - fifo[r, 2]) / width
                    share = 1.0 if share > 1.0 else share
                gone = fifo[r, 1] * share
                fifo[r, 1] -= gone
                fifo[r, 2] += width * share
                queued_work -= gone * fifo[r, 4]
                gone_all += gone
            while head < tail and fifo[head, 1] <= EPS:
                head += 1
            if head >= tail:
                queued_work = 0.0
            in_system = in_system - gone_all
            if in_system < 0.0:
                in_system = 0.0
            if in_system < busy_now:
                busy_now = in_system
            dropped += gone_all
        out_busy[t - t0] = busy_now
        out_dep[t - t0] = departures
        x = in_system - busy_now
        out_wait[t - t0] = 0.0 if x < 0.0 else x
    fs[IN_SYSTEM], fs[BUSY] = in_system, busy_now
    fs[QUEUED_WORK], fs[SERVICE_WORK] = queued_work, service_work
    fs[DEPARTED], fs[LOG_G], fs[DROPPED] = departed, log_g, dropped
    if t1 > t0:
        fs[LAST_DEP] = departures
    ist[HINT], ist[HEAD], ist[TAIL], ist[LIVE] = hint, head, tail, live
    ist[PORTIONS], ist[SECONDS] = np_, ns


# Compiled once per machine and cached beside this file (``cache=True``), so a new
# process loads it instead of compiling (about a second the first time).
advance_seconds: Callable[..., Any] = njit(cache=True)(_advance_seconds)
