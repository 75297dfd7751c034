"""Which queue serves a run: the fluid, or one request at a time.

The engine drives either queue through the calls of ``ServingQueue``. The fluid
(``fluid.FluidQueue``) costs the same per simulated second whatever the load; it
agrees with the per-request discrete-event run within 0.01 attainment from 64
servers up to 95 % load, but is off by 0.01-0.07 on one to sixteen servers near
saturation (``fluid``'s docstring). The per-request queue
(``requests.RequestQueue``) is exact, and costs about a microsecond per request.

``choose`` resolves ``auto`` to the per-request queue wherever it is cheap or the
fluid is not accurate enough, within a bound on the request count:

* at most ``AUTO_MAX_REQUESTS`` requests in the run, and
* a mean arrival rate of at most ``AUTO_MAX_RATE`` requests per second (there it
  costs at most ``AUTO_COST_RATIO`` times the fluid run,
  bench/bench_queue_models.py), or a peak of at most ``AUTO_FLUID_MIN_BUSY`` busy
  slots or ``AUTO_FLUID_MIN_BUSY_REPLICAS`` busy replicas (the fleet is small
  enough for the fluid to be off by more than 0.01).
"""

import logging
from collections.abc import Mapping
from typing import Literal, Protocol

import numpy as np

from gpuscale.errors import require
from gpuscale.sim.fluid import FluidQueue
from gpuscale.sim.latency import LatencyRecords, centred_mean
from gpuscale.sim.requests import RequestQueue, RequestRecords
from gpuscale.sim.workload import FloatArray, Workload

logger = logging.getLogger(__name__)

QueueModel = Literal["auto", "fluid", "requests"]
QUEUE_MODELS: tuple[str, ...] = ("auto", "fluid", "requests")

AUTO_MAX_RATE = 20.0
"""``auto`` serves requests one by one up to this mean arrival rate, requests per second.

bench/bench_queue_models.py (2 Dec 2026): the per-request run costs 6.2 us per
simulated second plus 1.10 us per request, the fluid 12.9 us per simulated second, so
at 20 requests per second 2.2x the fluid run (``AUTO_COST_RATIO``, 2.5x, at 24). The
bound was set when the fluid's block of seconds ran in Python (25.7 us per second:
1.4x at 20) and kept when it was compiled, which halved the fluid run, so that no
shared scenario changed queue model (diurnal x4, 19.1 requests per second, is served
one by one)."""

AUTO_MAX_REQUESTS = 2_000_000
"""``auto`` never serves more requests than this one by one (about 3-5 s of CPU, and
32 bytes each kept; a small fleet of short requests may cost more than 2x the fluid)."""

AUTO_FLUID_MIN_BUSY = 61.0
"""Below this many busy slots at peak (95 % of 64) the fluid may be off by over 0.01."""

AUTO_FLUID_MIN_BUSY_REPLICAS = 14.0
"""Below this many busy LLM replicas at peak the fluid's TTFT may be off by over 0.01.

bench/bench_queue_models.py: off by 0.040 on 8 replicas at 92 % (7.4 busy), by
0.006 on 16 at 92 % (14.7 busy)."""

PEAK_WINDOW_S = 60
"""Busy slots at peak: the highest mean over a centred window of this many seconds."""

AUTO_COST_RATIO = 2.5
"""What ``AUTO_MAX_RATE`` may cost at most, as a multiple of the fluid run's time.

2 until the fluid's block was compiled; see ``AUTO_MAX_RATE``."""


class _Draining(Protocol):
    @property
    def requests(self) -> float: ...


class ServingQueue(Protocol):
    """What the engine calls on a deployment's queue (see ``fluid.FluidQueue``)."""

    service_scv: float

    @property
    def busy(self) -> float:
        """Requests in service on Ready slots."""

    @property
    def waiting(self) -> float:
        """Requests queued."""

    @property
    def draining(self) -> float:
        """Requests finishing on deleted replicas."""

    @property
    def last_departures(self) -> float:
        """Requests that completed in the last second."""

    @property
    def dropped(self) -> float:
        """Requests dropped so far."""

    @property
    def retried(self) -> float:
        """Requests queued again after an interruption."""

    @property
    def drains(self) -> Mapping[int, _Draining]:
        """Deleted replicas still finishing requests, by pod uid."""

    @property
    def drained(self) -> list[int]:
        """Deleted replicas that finished, for the engine to release."""

    @property
    def records(self) -> LatencyRecords | RequestRecords:
        """What the queue recorded, for ``summary.summarise_run``."""

    def step(self, t: int, arrivals: float, work_s: float, servers: int, capacity: float) -> None:
        """Advance one second."""

    def interrupt(self, t: int, requests: float) -> None:
        """A Ready replica stopped; its requests retry once."""

    def start_drain(self, key: int, requests: float, slot_speed: float) -> bool:
        """A Ready replica was deleted; it finishes its requests."""

    def stop_drain(self, t: int, key: int) -> None:
        """A draining replica is gone; its requests retry once."""

    def finish(self) -> float:
        """End the run and return the requests in flight."""


def peak_busy_replicas(workload: Workload, speed: float = 1.0) -> float:
    """The most replicas the workload keeps busy, over a centred ``PEAK_WINDOW_S`` window.

    Args:
        workload: The demand.
        speed: Work one replica does per second, reference-GPU seconds.

    Returns:
        Busy replicas at peak (offered load in replicas; times slots, in slots).
    """
    if workload.duration_s == 0:
        return 0.0
    return float(centred_mean(workload.work_s, PEAK_WINDOW_S).max()) / max(speed, 1e-12)


def choose(model: str, workload: Workload, *, slots: int = 1, speed: float = 1.0) -> str:
    """The queue ``model`` names, resolving ``auto`` by the workload's size.

    Args:
        model: ``auto``, ``fluid`` or ``requests``.
        workload: The demand.
        slots: Slots per replica (batch slots; 1 for one request at a time).
        speed: Work one replica does per second, reference-GPU seconds.

    Raises:
        ConfigError: ``model`` is not one of ``QUEUE_MODELS``.

    Returns:
        ``fluid`` or ``requests``.
    """
    require(
        model in QUEUE_MODELS,
        f"scenario.queue_model={model!r}",
        "unknown queue model",
        f"use one of {', '.join(QUEUE_MODELS)}",
    )
    if model != "auto":
        return model
    total = float(workload.arrivals.sum())
    if total > AUTO_MAX_REQUESTS:
        return "fluid"
    cheap = total / max(workload.duration_s, 1) <= AUTO_MAX_RATE
    busy = peak_busy_replicas(workload, speed)
    small = busy * slots <= AUTO_FLUID_MIN_BUSY or busy <= AUTO_FLUID_MIN_BUSY_REPLICAS
    return "requests" if cheap or small else "fluid"


def build_queue(
    model: str,
    workload: Workload,
    *,
    timeout_s: float,
    service_scv: float,
    arrival_scv: float,
    seed: int,
    slots: int = 1,
    speed: float = 1.0,
) -> ServingQueue:
    """The queue for a run (``choose`` resolves ``model``).

    Args:
        model: ``auto``, ``fluid`` or ``requests``.
        workload: The run's demand.
        timeout_s: Requests waiting longer are dropped.
        service_scv: Variability of work per request (the trace's, or the config's).
        arrival_scv: The fluid's residual arrival variability.
        seed: Seeds the per-request queue's requests.
        slots: Slots per replica.
        speed: Work one replica does per second, reference-GPU seconds.

    Returns:
        The queue.
    """
    chosen = choose(model, workload, slots=slots, speed=speed)
    logger.debug("queue model %s -> %s for %s", model, chosen, workload.name)
    if chosen == "requests":
        return RequestQueue(workload, timeout_s=timeout_s, seed=seed, service_scv=service_scv)
    return FluidQueue(timeout_s=timeout_s, service_scv=service_scv, arrival_scv=arrival_scv)


def arrivals_per_second(queue: ServingQueue, workload: Workload) -> FloatArray:
    """Requests that arrived in each second of the run, as the queue saw them.

    Scoring divides the requests served within the SLO by these, so they must be the
    queue's own: the per-request queue's whole draws, not the workload's expected
    (fractional) counts, else a quiet scored window with no draw scores 0 of 0.3.

    Returns:
        One count per second of the workload.
    """
    records = queue.records
    if isinstance(records, RequestRecords):
        seconds = np.floor(records.arrival_s).astype(np.int64)
        n = workload.duration_s
        return np.bincount(np.clip(seconds, 0, n - 1), minlength=n)[:n].astype(np.float64)
    return np.asarray(workload.arrivals, dtype=np.float64)


def arrived_requests(queue: ServingQueue, workload: Workload) -> float:
    """Requests that arrived in the run: drawn whole by the per-request queue.

    Returns:
        The per-request queue's count, or the workload's (possibly fractional) sum.
    """
    records = queue.records
    if isinstance(records, RequestRecords):
        return float(records.arrival_s.size)
    return float(workload.arrivals.sum())
