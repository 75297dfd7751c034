"""What one simulated run produces: a timeline and request totals.

The engine writes these; the evaluation harness turns them into GPU-hours,
SLO attainment and plots. Nothing here depends on how the run was computed.
"""

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpuscale.errors import GpuscaleError

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Timeline:
    """Per-step values of a run, all arrays of the same length.

    Attributes:
        time_s: Step start, seconds from the run start.
        demand_rps: Requests arriving per second.
        capacity_rps: Requests per second the Ready replicas can serve.
        desired_replicas: The policy's latest desired count.
        ready_replicas: Replicas Ready and taking traffic.
        allocated_gpus: GPUs held by the workload (starting, ready or terminating pods).
        gpu_utilization: Busy fraction averaged over allocated GPUs (0 to 1).
        p50_latency_s: Median end-to-end latency of requests completing in the step (NaN if none).
        p99_latency_s: 99th percentile of the same (NaN if none).
        completed: Requests served that entered service in the step (empty if not
            recorded); sum over steps from a warm-up on to score without it.
        within_slo: Of those, requests within the SLO (TTFT and TPOT for LLM runs).
        node_gpus: GPUs on Ready nodes, idle or not, until each node is removed
            (empty if not recorded).
        power_w: Power drawn by the GPUs on Ready nodes, idle ones included, as the
            device physics reports it at each collect (``DCGM_FI_DEV_POWER_USAGE``),
            watts, the step's mean (empty if not recorded).
    """

    time_s: FloatArray
    demand_rps: FloatArray
    capacity_rps: FloatArray
    desired_replicas: FloatArray
    ready_replicas: FloatArray
    allocated_gpus: FloatArray
    gpu_utilization: FloatArray
    p50_latency_s: FloatArray
    p99_latency_s: FloatArray
    completed: FloatArray = field(default_factory=lambda: np.zeros(0))
    within_slo: FloatArray = field(default_factory=lambda: np.zeros(0))
    node_gpus: FloatArray = field(default_factory=lambda: np.zeros(0))
    power_w: FloatArray = field(default_factory=lambda: np.zeros(0))


@dataclass(frozen=True, slots=True)
class FaultTiming:
    """How fast one injected fault was seen and handled.

    Attributes:
        spec: The fault as specified (``gpu-lost@600``).
        kind: Its kind.
        injected_s: When it was applied, seconds.
        pod: The pod it hit (None when it found none).
        uuid: The GPU it hit.
        detect_s: Time to detect, seconds (None: no alert about that GPU fired).
        alert: The first alert that fired about it.
        mitigate_s: Time to mitigate, seconds (None: not mitigated in the run).
    """

    spec: str
    kind: str
    injected_s: float
    pod: str | None
    uuid: str | None
    detect_s: float | None
    alert: str | None
    mitigate_s: float | None


@dataclass(frozen=True, slots=True)
class RunResult:
    """The outcome of one policy on one scenario.

    Attributes:
        policy: Policy name.
        timeline: Per-step values.
        requests: Requests that arrived.
        within_slo: Requests completed with latency at most the SLO.
        dropped: Requests dropped after waiting past the timeout.
        latency_edges_s: Histogram bin edges of end-to-end latency, seconds.
        latency_counts: Completed requests per bin (len(edges) - 1).
        gpu_seconds: Allocated GPU time, seconds.
        busy_gpu_seconds: Of that, time the GPUs were busy serving.
        scale_events: Changes of the desired replica count.
        completed_requests: Requests served to completion.
        in_flight_requests: Requests queued or in service when the run ended.
        retried_requests: Requests interrupted in service (their pod was deleted past
            its grace, failed or restarted) and queued again; each is still one
            request, counted once in the totals above.
        ttft_within_slo: LLM runs: requests meeting the TTFT objective; None otherwise.
        tpot_within_slo: LLM runs: requests meeting the TPOT objective; None otherwise.
            ``within_slo`` counts the requests meeting both.
        node_gpu_seconds: GPU time of the Ready nodes, from each node's joining to its
            removal (idle time until scale-down included), seconds; at least
            ``gpu_seconds`` when recorded, 0 when not.
        fault_timings: Per injected fault, time to detect and to mitigate, when the
            run evaluated the alert catalogue (``Scenario.alerting``); else empty.
        holds: Decisions the fail-safe held, by reason (``scaling.failsafe.REASONS``):
            the same holds the live controller would make on the same data.
        pods_replaced: Pods the policy had deleted for replacement (``Decision.delete``).
        pods_remediated: Pods remediation deleted (``Scenario.remediate``).

    Every arrival ends exactly once: ``completed_requests + dropped_requests +
    in_flight_requests == requests`` (``check_conservation``).
    """

    policy: str
    timeline: Timeline
    requests: float
    within_slo: float
    dropped: float
    latency_edges_s: FloatArray
    latency_counts: FloatArray
    gpu_seconds: float
    busy_gpu_seconds: float
    scale_events: int
    completed_requests: float = 0.0
    in_flight_requests: float = 0.0
    retried_requests: float = 0.0
    ttft_within_slo: float | None = None
    tpot_within_slo: float | None = None
    node_gpu_seconds: float = 0.0
    fault_timings: tuple[FaultTiming, ...] = ()
    holds: tuple[tuple[str, int], ...] = ()
    pods_replaced: int = 0
    pods_remediated: int = 0

    @property
    def dropped_requests(self) -> float:
        """Requests dropped: waited past the timeout, or interrupted on their retry."""
        return self.dropped

    @property
    def unaccounted_requests(self) -> float:
        """Arrivals neither completed, dropped nor in flight (0 up to rounding)."""
        return self.requests - (
            self.completed_requests + self.dropped_requests + self.in_flight_requests
        )


class ConservationError(GpuscaleError):
    """A run lost or duplicated requests: a simulator bug, never a user's mistake."""


CONSERVATION_RTOL = 1e-6
"""Floating-point slack of the request totals, relative to the arrivals (plus 1e-6)."""


def check_conservation(result: RunResult) -> None:
    """Check that every arrival of ``result`` ended exactly once.

    Raises:
        ConservationError: The totals do not add up, naming each of them.
    """
    gap = result.unaccounted_requests
    if not abs(gap) <= CONSERVATION_RTOL * max(result.requests, 1.0):
        raise ConservationError(
            f"{result.policy}: {result.requests:.6f} requests arrived but "
            f"{result.completed_requests:.6f} completed + {result.dropped_requests:.6f} "
            f"dropped + {result.in_flight_requests:.6f} in flight differ by {gap:.6g}"
        )
