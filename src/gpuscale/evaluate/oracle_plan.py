"""The hindsight oracle's plan inputs: the sharpened estimate, cold starts and misses.

``evaluate.oracle_search`` searches plans built from these; they live apart so
each stays small: what the oracle knows in advance (the arrivals, each pod's
cold start), how long it keeps a replica, and which seconds of a simulated plan
fell short of the goal.
"""

import math
from collections.abc import Sequence

import numpy as np

from gpuscale.scaling.oracle import OracleConfig
from gpuscale.sim.coldstart import pod_cold_starts
from gpuscale.sim.engine import Scenario
from gpuscale.sim.latency import centred_mean
from gpuscale.sim.outcome import RunResult

MAX_MARGIN = 6.4
"""The search stops growing the margin here (7.4 x the estimate)."""

SHARP_WINDOW_S = 10
"""Seconds of the short centred window ``sharpen`` scales the estimate by."""

LOCAL_MAX = 1.0
"""Most a local round may raise any second's plan, as a share of the estimate."""

LOCAL_BEFORE_S = 180
"""A missed step raises the plan from this many seconds before it (the queue built there)."""


def cold_starts_for(scenario: Scenario, required: Sequence[int], base: OracleConfig) -> np.ndarray:
    """Enough of the run's pod cold starts for any plan the search tries.

    A plan creates at most its initial replicas plus, for every rise of its planned
    requirement, the rise (each scale-down can be undone once more): twice the rises
    at ``MAX_MARGIN`` on a plan raised everywhere by ``LOCAL_MAX``, plus the bound,
    plus the initial replicas.

    Returns:
        Seconds, by pod creation order.
    """
    top = np.ceil(np.asarray(required, dtype=float) * (1.0 + LOCAL_MAX) * (1.0 + MAX_MARGIN))
    rises = float(np.clip(np.diff(top), 0.0, None).sum()) if top.size > 1 else 0.0
    bound = base.max_replicas or int(top.max(initial=1.0))
    n = scenario.initial_replicas + 2 * math.ceil(rises) + bound + 64
    return pod_cold_starts(scenario.cluster.cold_start, scenario.seed, n)


def sharpen(
    required: Sequence[int], scenario: Scenario, window_s: int = SHARP_WINDOW_S
) -> np.ndarray:
    """Scale a per-second estimate by the work of a short window over its own window.

    ``required`` plans for the rate averaged over ``serving.rate_window_s`` (60 s by
    default), which hides a burst shorter than that; the oracle knows the arrivals,
    so each second's count is multiplied by the work arriving in the centred
    ``window_s`` seconds over that in the estimate's window, and rounded up.

    Returns:
        Replicas per second.
    """
    work = scenario.workload.work_s
    wide = centred_mean(work, int(getattr(scenario.serving, "rate_window_s", 60)))
    narrow = centred_mean(work, window_s)
    ratio = np.where(wide > 0, narrow / np.maximum(wide, 1e-12), 1.0)
    return np.ceil(np.asarray(required, dtype=float) * ratio - 1e-9).astype(np.int64)


def node_hold_s(base: OracleConfig) -> float:
    """How long the search keeps a replica that is needed again (``OracleConfig.hold_s``).

    A released replica's GPUs cost until its node has stood idle ``node_keep_s``, and
    bringing it back costs a node's provisioning and a cold start, while every
    release drains pods whose long requests are retried; so a replica needed again
    within that node break-even is kept, never less than ``base.hold_s``.

    Returns:
        Seconds.
    """
    return max(base.hold_s, base.node_keep_s + base.node_lead_s + base.lead_s)


def missed_seconds(
    result: RunResult,
    goal: float,
    warmup_s: float,
    length: int,
    before_s: float = LOCAL_BEFORE_S,
) -> np.ndarray:
    """Seconds of the plan to raise: those before and in each scored step that missed ``goal``.

    A step misses when the requests served within the SLO in it fall short of
    ``goal`` times the requests that arrived in it; the queue behind it built up
    earlier, so the ``before_s`` seconds before the step are raised with it.

    Returns:
        One flag per second of the plan (``length`` seconds).
    """
    tl = result.timeline
    flags = np.zeros(length, dtype=bool)
    starts = np.asarray(tl.time_s, dtype=np.float64)
    if tl.within_slo.size != starts.size or starts.size == 0:
        return flags
    ends = np.append(starts[1:], starts[-1] + (starts[-1] - starts[-2] if starts.size > 1 else 1.0))
    arrived = np.asarray(tl.demand_rps, dtype=np.float64) * (ends - starts)
    short = (starts >= warmup_s) & (np.asarray(tl.within_slo) < goal * arrived)
    for start, end in zip(starts[short], ends[short], strict=True):
        flags[max(0, int(start - before_s)) : max(0, math.ceil(end))] = True
    return flags
