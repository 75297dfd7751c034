"""What one simulated run produces: a timeline and request totals.

The engine writes these; the evaluation harness turns them into GPU-hours,
SLO attainment and plots. Nothing here depends on how the run was computed.
"""

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

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
