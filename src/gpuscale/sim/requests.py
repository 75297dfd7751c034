"""The deployment's request queue, one request at a time, with a fleet that changes.

The fluid queue (``fluid.py``) is fast at any scale but an approximation, off by
0.01-0.07 attainment on one to four servers near saturation. This queue is exact:
it is the discrete-event FCFS queue of ``des.py`` in front of a number of slots
that changes each second, driven by the engine through the same calls as the
fluid (``engine.py``), so small fleets and high load are simulated exactly
wherever the request count keeps it fast enough (``queue_model.choose``).

* The requests are drawn once, when the queue is built, by ``des.draw_requests``:
  arrival times uniform within each second of the workload, work from the
  measured shape or a gamma. For a fixed fleet a run is the same as
  ``des.simulate_requests`` with the same seed; every policy run with the same
  seed sees the same requests.
* A request takes the earliest free slot (FCFS); its service time is its work
  times the mean slot's seconds per unit of work when it starts. A request whose
  wait passes ``timeout_s`` is dropped (a retry's wait counts from its retry, as
  the fluid's does; its latency from its first arrival).
* Slots are anonymous: on replicas of mixed speed (a straggler, GPU clocks)
  every request is served at their mean speed, where the fluid widens its
  service variability instead. Slots added are free at the start of the second;
  when slots go, idle ones go first, and a busy slot that should go retires when
  its request completes.
* A replica that stops (``interrupt``) or is deleted (``start_drain``) takes its
  share of the requests in service, picked at random: a failed replica's are
  retried once, ahead of the queue, keeping their arrival time; a deleted
  replica's finish at their own times, until ``stop_drain`` retries the rest.
  A retry interrupted again is dropped. Every arrival ends once: completed,
  dropped, or in flight when the run ends (``finish``).

Latencies are exact; ``summarise_requests`` scores them against the same SLO(s)
as the fluid's records (``summary.summarise_run`` chooses).
"""

import heapq
import math
from array import array
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from gpuscale.sim.des import draw_requests
from gpuscale.sim.workload import FloatArray, Workload


@dataclass(slots=True)
class RequestRecords:
    """Per request and per second, what the queue did.

    Attributes:
        arrival_s: Arrival time of each request, seconds.
        start_s: When each request last entered service, seconds (NaN: never, or
            its service did not complete).
        end_s: When each completed, seconds (NaN: not completed).
        context: Prompt tokens of each request (LLM profiles), else None.
        busy: Requests in service on Ready slots at the end of each second.
        arrivals: Requests arriving, per second.
        servers: Ready slots, per second.
        retried: Requests queued again after an interruption.
    """

    arrival_s: FloatArray
    start_s: "array[float]"
    end_s: "array[float]"
    context: FloatArray | None = None
    busy: list[float] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    servers: list[int] = field(default_factory=list)
    retried: set[int] = field(default_factory=set)


class Drain:
    """Requests finishing on a deleted replica, as a heap of (end, request)."""

    __slots__ = ("heap",)

    def __init__(self, heap: list[tuple[float, int]]) -> None:
        self.heap = heap

    @property
    def requests(self) -> float:
        """Requests still in service on the replica."""
        return float(len(self.heap))


_NAN = math.nan


class RequestQueue:
    """A deployment's FCFS queue of individual requests, advanced one second at a time.

    Args:
        workload: The demand; its requests are drawn here, once.
        timeout_s: A request waiting longer is dropped.
        seed: Seeds the requests and which ones a stopping replica takes.
        service_scv: Variability of work per request without a profile (gamma).
    """

    def __init__(
        self, workload: Workload, *, timeout_s: float, seed: int, service_scv: float = 1.0
    ) -> None:
        self.timeout_s = float(timeout_s)
        self.service_scv = float(service_scv)  # the engine may set it; draws are done
        # the same stream as des.simulate_requests(seed=seed); picks from a child of it
        drawn = draw_requests(workload, np.random.default_rng(seed), service_scv)
        self._rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
        n = drawn.arrival_s.size
        profile = workload.profile
        context = None
        if profile is not None and profile.context_q is not None:  # drawn after the stream
            context = profile.context_q[self._rng.integers(0, profile.context_q.size, n)]
        # 8 bytes a value: a day at tens of requests per second stays in tens of MB
        nan = array("d", [_NAN]) * n
        self.records = RequestRecords(drawn.arrival_s, nan, array("d", nan), context)
        self._arrival = array("d", drawn.arrival_s.tobytes())
        self._work = array("d", drawn.work_s.tobytes())
        self._first: list[int] = drawn.first.tolist()
        self._head = 0  # next first try waiting; first tries before it left the queue
        self._tail = 0  # requests arrived so far
        self._retry: deque[tuple[int, float]] = deque()  # (request, queued again at)
        self._inserv: list[tuple[float, int]] = []  # heap of (end, request) on Ready slots
        self._idle: list[float] = []  # heap of the times idle slots became free
        self._excess = 0  # busy slots to retire when their requests complete
        self.dropped = 0.0
        self.dropped_interrupted = 0.0
        self.retried = 0.0
        self.last_departures = 0.0
        self.drains: dict[int, Drain] = {}
        self.drained: list[int] = []

    # ------------------------------------------------------------------ state
    @property
    def busy(self) -> float:
        """Requests in service on Ready slots."""
        return float(len(self._inserv))

    @property
    def waiting(self) -> float:
        """Requests queued and not yet in service."""
        return float(self._tail - self._head + len(self._retry))

    @property
    def draining(self) -> float:
        """Requests finishing on deleted replicas."""
        return float(sum(len(d.heap) for d in self.drains.values()))

    # ------------------------------------------------------------------ step
    def _set_slots(self, t: float, servers: int) -> None:
        """Add free slots at ``t``, or take idle ones away, to make ``servers`` slots."""
        diff = servers - (len(self._inserv) + len(self._idle) - self._excess)
        if diff > 0:
            cancel = min(self._excess, diff)
            self._excess -= cancel
            self._idle.extend([t] * (diff - cancel))
            heapq.heapify(self._idle)
        elif diff < 0:
            gone = min(-diff, len(self._idle))
            if gone:  # the latest-freed go; a sorted list is a heap
                self._idle = sorted(self._idle)[: len(self._idle) - gone]
            self._excess += -diff - gone

    def step(self, t: int, arrivals: float, work_s: float, servers: int, capacity: float) -> None:
        """Advance one second: second ``t``'s requests arrive, and the queue serves.

        Args:
            t: The second being simulated.
            arrivals: Requests arriving during it (drawn already from the workload).
            work_s: Their total work (drawn already), reference-GPU seconds.
            servers: Ready slots (replicas times slots per replica).
            capacity: Work the Ready replicas do per second, reference-GPU seconds.
        """
        del arrivals, work_s  # the requests were drawn from the same workload
        end = t + 1.0
        first = self._first
        tail = first[t + 1] if t + 1 < len(first) else first[-1]
        rec = self.records
        rec.arrivals.append(float(tail - self._tail))
        rec.servers.append(servers)
        self._tail = tail
        self._set_slots(float(t), max(servers, 0))
        per_size = servers / capacity if servers > 0 and capacity > 0.0 else 0.0
        departures = self._serve(end, tail, per_size)
        idle, inserv = self._idle, self._inserv
        while inserv and inserv[0][0] < end:  # the rest of the second's completions
            e = heapq.heappop(inserv)[0]
            departures += 1
            if self._excess:
                self._excess -= 1
            else:
                heapq.heappush(idle, e)
        for key, d in list(self.drains.items()):
            while d.heap and d.heap[0][0] < end:
                heapq.heappop(d.heap)
                departures += 1
            if not d.heap:
                del self.drains[key]
                self.drained.append(key)
        self._expire(end)
        self.last_departures = float(departures)
        rec.busy.append(float(len(inserv)))

    def _serve(self, end: float, tail: int, per_size: float) -> int:
        """Start waiting requests, retries first, on slots free before ``end``.

        Returns:
            Requests that completed on a slot a waiting request then took.
        """
        arrival, work, timeout = self._arrival, self._work, self.timeout_s
        start_s, end_s = self.records.start_s, self.records.end_s
        idle, inserv, retry = self._idle, self._inserv, self._retry
        head, departures = self._head, 0
        while True:
            if retry:
                i, ready = retry[0]
            elif head < tail:
                i = head
                ready = arrival[i]
            else:
                break
            if idle and (not inserv or idle[0] <= inserv[0][0]):
                free, from_idle = idle[0], True
            elif inserv:
                free, from_idle = inserv[0][0], False
            else:
                break
            start = ready if ready > free else free
            if start >= end:
                break
            if not from_idle and self._excess:  # that slot retires
                heapq.heappop(inserv)
                departures += 1
                self._excess -= 1
                continue
            if retry:
                retry.popleft()
            else:
                head += 1
            if start - ready > timeout:
                self.dropped += 1
                continue
            done = start + work[i] * per_size
            start_s[i], end_s[i] = start, done
            if from_idle:
                heapq.heappop(idle)
                heapq.heappush(inserv, (done, i))
            else:
                heapq.heapreplace(inserv, (done, i))
                departures += 1
        self._head = head
        return departures

    def _expire(self, end: float) -> None:
        """Drop the waiting requests whose wait passes the timeout before ``end``."""
        cutoff = end - self.timeout_s
        retry = self._retry
        while retry and retry[0][1] < cutoff:
            retry.popleft()
            self.dropped += 1
        arrival, head = self._arrival, self._head
        while head < self._tail and arrival[head] < cutoff:
            head += 1
        self.dropped += head - self._head
        self._head = head

    # ------------------------------------------------------- replicas that stop
    def _take(self, requests: float) -> list[tuple[float, int]]:
        """Take a random ``requests`` (rounded stochastically) of those in service."""
        inserv = self._inserv
        whole = math.floor(requests)
        m = min(whole + int(self._rng.random() < requests - whole), len(inserv))
        if m <= 0:
            return []
        pick = set(self._rng.choice(len(inserv), m, replace=False).tolist())
        taken = [x for j, x in enumerate(inserv) if j in pick]
        self._inserv = [x for j, x in enumerate(inserv) if j not in pick]
        heapq.heapify(self._inserv)
        return taken

    def interrupt(self, t: int, requests: float) -> None:
        """A Ready replica stopped (GPU lost, crash): its ``requests`` in service retry once.

        Args:
            t: The current second.
            requests: Requests it was serving.
        """
        self._retry_or_drop(t, self._take(requests))

    def start_drain(self, key: int, requests: float, slot_speed: float) -> bool:
        """A Ready replica was deleted: it takes no new work and finishes ``requests``.

        Each finishes at the time it was given when it started (``slot_speed`` is
        the fluid's; a request here keeps its own service time).

        Args:
            key: Identifies the replica (its pod uid).
            requests: Requests it was serving.
            slot_speed: Work one of its slots does per second (unused here).

        Returns:
            Whether it has anything left to drain.
        """
        del slot_speed
        taken = self._take(requests)
        if not taken:
            return False
        heapq.heapify(taken)
        self.drains[key] = Drain(taken)
        return True

    def stop_drain(self, t: int, key: int) -> None:
        """The deleted replica ``key`` is gone (grace over, GPU lost): its requests retry."""
        d = self.drains.pop(key, None)
        if d is not None:
            self._retry_or_drop(t, d.heap)

    def _retry_or_drop(self, t: int, taken: list[tuple[float, int]]) -> None:
        """Interrupted requests did not complete; first tries queue again, retries drop."""
        start_s, end_s = self.records.start_s, self.records.end_s
        for _, i in sorted(taken, key=lambda x: self._arrival[x[1]]):
            start_s[i] = end_s[i] = _NAN
            if i in self.records.retried:
                self.dropped += 1
                self.dropped_interrupted += 1
            else:
                self.records.retried.add(i)
                self._retry.append((i, float(t)))
                self.retried += 1

    def finish(self) -> float:
        """End the run: what is queued or in service is in flight, not served.

        Returns:
            Requests in flight, taken out of the records.
        """
        start_s, end_s = self.records.start_s, self.records.end_s
        serving = list(self._inserv)
        for d in self.drains.values():
            serving.extend(d.heap)
        for _, i in serving:
            start_s[i] = end_s[i] = _NAN
        in_flight = len(serving) + self.waiting
        self._inserv, self._retry = [], deque()
        self._head = self._tail
        self.drains.clear()
        return float(in_flight)
