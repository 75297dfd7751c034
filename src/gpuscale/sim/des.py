"""The per-request discrete-event reference for the fluid serving model.

The engine's fluid queue (``fluid.FluidQueue``) is an approximation; this module
is the thing it approximates, one request at a time, so tests can show the two
agree on small cases. ``draw_requests`` is shared with the engine's per-request
queue (``requests.RequestQueue``), which must give the same latencies on a fixed
fleet with the same seed. It is exact FCFS M/G/k with reneging: requests arrive spread
uniformly within each second of the workload, each draws its work from a gamma
distribution with the second's mean and the configured squared coefficient of
variation, and takes the earliest free server; a request whose wait would pass
the timeout is dropped instead. Costs O(n log k) for n requests, so keep it to
small cases (up to a few hundred thousand requests).
"""

import heapq
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpuscale.sim.workload import FloatArray, Workload


@dataclass(frozen=True, slots=True)
class DesRun:
    """Per-request outcome of a discrete-event run.

    Attributes:
        requests: Requests that arrived.
        dropped: Requests dropped after waiting past the timeout.
        arrival_s: Arrival time of each served request, seconds.
        latency_s: End-to-end latency of each served request, seconds.
        slo_s: The latency objective the run was scored against, seconds.
    """

    requests: int
    dropped: int
    arrival_s: FloatArray
    latency_s: FloatArray
    slo_s: float

    @property
    def completed(self) -> int:
        """Requests served."""
        return int(self.latency_s.size)

    @property
    def within_slo(self) -> int:
        """Served requests with latency at most the SLO."""
        return int(np.count_nonzero(self.latency_s <= self.slo_s))

    @property
    def mean_latency_s(self) -> float:
        """Mean latency of served requests, seconds (NaN when none)."""
        return float(self.latency_s.mean()) if self.latency_s.size else float("nan")

    @property
    def attainment(self) -> float:
        """Share of arrived requests served within the SLO."""
        return self.within_slo / self.requests if self.requests else 1.0


def _work_per_request(
    rng: np.random.Generator, mean: FloatArray, service_scv: float, work_q: FloatArray | None
) -> FloatArray:
    if work_q is not None:  # the measured shape: one equal-probability point per request
        return np.asarray(mean * work_q[rng.integers(0, work_q.size, mean.size)], dtype=float)
    if service_scv <= 0.0:
        return mean.copy()
    shape = 1.0 / service_scv
    return np.asarray(rng.gamma(shape, mean / shape), dtype=float)


@dataclass(frozen=True, slots=True)
class RequestDraw:
    """The requests of a workload, drawn once per seed.

    Attributes:
        arrival_s: Arrival time of each request, seconds, non-decreasing.
        work_s: Work of each request, reference-GPU seconds.
        first: Index of the first request of each second, and the request count
            after the last (length ``duration_s + 1``).
    """

    arrival_s: FloatArray
    work_s: FloatArray
    first: npt.NDArray[np.int64]


def draw_requests(
    workload: Workload, rng: np.random.Generator, service_scv: float = 1.0
) -> RequestDraw:
    """Draw each request of ``workload``: its arrival time and its work.

    Fractional per-second arrivals are rounded stochastically; a second's requests
    arrive uniformly within it; each draws its work from the measured shape
    (``profile.work_q``) scaled to the second's mean, or else from a gamma with
    ``service_scv`` (deterministic at 0).

    Returns:
        The requests in arrival order.
    """
    a = np.asarray(workload.arrivals, dtype=float)
    whole = np.floor(a)
    counts = (whole + (rng.random(a.size) < a - whole)).astype(np.int64)
    second = np.repeat(np.arange(a.size), counts)
    arrival = np.sort(second + rng.random(second.size))
    second = np.minimum(np.floor(arrival).astype(np.int64), max(a.size - 1, 0))
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(a > 0, workload.work_s / a, 0.0)[second]
    work_q = workload.profile.work_q if workload.profile is not None else None
    work = _work_per_request(rng, mean, service_scv, work_q)
    first = np.searchsorted(second, np.arange(a.size + 1)).astype(np.int64)
    return RequestDraw(arrival, work, first)


def simulate_requests(
    workload: Workload,
    *,
    replicas: int,
    slo_s: float,
    timeout_s: float,
    speed: float = 1.0,
    slots: int = 1,
    service_scv: float = 1.0,
    seed: int = 0,
) -> DesRun:
    """Serve every request of ``workload`` on ``replicas`` equal Ready replicas, FCFS.

    Args:
        workload: Demand; fractional arrivals are rounded stochastically per second.
        replicas: Ready replicas throughout the run.
        slo_s: Latency objective to score against, seconds.
        timeout_s: A request that would wait longer is dropped.
        speed: Work each replica does per second, reference-GPU seconds.
        slots: Requests a replica serves at once, each at ``speed / slots``.
        service_scv: Squared coefficient of variation of work per request (gamma),
            used when the workload has no ``profile``; with one, work is drawn from
            its measured shape (``profile.work_q``).
        seed: Seeds arrival times and work.

    Returns:
        The per-request outcome.
    """
    drawn = draw_requests(workload, np.random.default_rng(seed), service_scv)
    arrival = drawn.arrival_s
    service = drawn.work_s * slots / speed
    servers = [0.0] * max(replicas * slots, 0)
    latency = np.empty(arrival.size)
    served = np.zeros(arrival.size, dtype=bool)
    if servers:
        for i in range(arrival.size):
            t = arrival[i]
            start = max(t, servers[0])
            if start - t > timeout_s:
                continue
            heapq.heapreplace(servers, start + service[i])
            latency[i] = start - t + service[i]
            served[i] = True
    return DesRun(
        int(arrival.size),
        int(arrival.size - served.sum()),
        arrival[served],
        latency[served],
        float(slo_s),
    )
