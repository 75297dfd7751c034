"""From a run's levels, kept once per block of seconds, to the per-row timeline it reports.

Nothing changes the Ready replicas, the GPUs held or the capacity inside one of the
engine's blocks of seconds, so the engine keeps those levels once per block; here they
are expanded to seconds and added up per timeline row (``Scenario.record_interval_s``).
"""

import math
from collections.abc import Sequence

import numpy as np

from gpuscale.sim.latency import LatencySummary
from gpuscale.sim.outcome import FloatArray, Timeline
from gpuscale.sim.workload import Workload


def per_second(
    starts: Sequence[int], levels: Sequence[tuple[float, ...]], n: int
) -> tuple[FloatArray, ...]:
    """Each level at every second: each block's level repeated over its seconds.

    Args:
        starts: Each block's first second, ascending, from 0.
        levels: Each block's levels (the same fields in each).
        n: Seconds in the run.

    Returns:
        One float array of ``n`` seconds per field of ``levels``, in their order.
    """
    bounds = np.array([*starts, n], dtype=np.int64)
    lengths = bounds[1:] - bounds[:-1]
    return tuple(
        np.repeat(np.array(column, dtype=float), lengths) for column in zip(*levels, strict=True)
    )


def row_timeline(
    workload: Workload,
    record_s: int,
    summary: LatencySummary,
    demand: FloatArray,
    seconds: dict[str, FloatArray],
) -> Timeline:
    """The run's timeline: each row's mean of the per-second levels, or its last value.

    Args:
        workload: The run's trace.
        record_s: Seconds per row.
        summary: The latency summary, with its per-row columns.
        demand: Requests arriving each second (as the queue counted them).
        seconds: Per-second ``ready``, ``held`` (GPUs), ``busy`` (GPUs), ``capacity``,
            ``desired``, ``nodes`` (node GPUs) and ``power`` (watts).

    Returns:
        The timeline, one row per ``record_s`` seconds.
    """
    n = workload.duration_s
    rows = max(math.ceil(n / record_s), 1)
    row = np.arange(n) // record_s

    def total(x: np.ndarray) -> np.ndarray:
        return np.bincount(row, weights=x, minlength=rows)[:rows]

    secs = np.maximum(total(np.ones(n)), 1.0)
    arr, wrk = total(workload.arrivals), total(workload.work_s)
    mean_work = workload.mean_service_s() or 1.0
    per_req = np.where(arr > 0, wrk / np.maximum(arr, 1e-12), mean_work)
    alloc = total(seconds["held"])
    last = np.minimum((np.arange(rows) + 1) * record_s, n) - 1
    with np.errstate(invalid="ignore", divide="ignore"):
        util = np.where(alloc > 0, total(seconds["busy"]) / alloc, 0.0)
    return Timeline(
        time_s=np.arange(rows, dtype=float) * record_s,
        demand_rps=total(demand) / secs,
        capacity_rps=total(seconds["capacity"]) / secs / per_req,
        desired_replicas=seconds["desired"][last].astype(float),
        ready_replicas=total(seconds["ready"]) / secs,
        allocated_gpus=alloc / secs,
        gpu_utilization=np.clip(util, 0.0, 1.0),
        p50_latency_s=summary.p50_s,
        p99_latency_s=summary.p99_s,
        completed=summary.row_completed,
        within_slo=summary.row_within_slo,
        node_gpus=total(seconds["nodes"]) / secs,
        power_w=total(seconds["power"]) / secs,
    )
