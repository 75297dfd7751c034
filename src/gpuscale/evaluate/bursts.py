"""When a burst starts, and how long each policy takes to serve within the SLO again.

A forecast cannot see a flash crowd coming, so for such demand the question is
not whether a policy misses the SLO at the onset (every policy does until new
replicas are Ready) but how soon it is back within it. This module finds the
onsets in a run's demand and measures that recovery from its timeline, the
same for every policy: the onsets depend only on the trace and seed.

* An onset is a timeline row whose arrival rate is more than ``ONSET_FACTOR``
  times the median of the ``BASE_S`` before it, when the row before it was not;
  onsets closer than ``BASE_S`` to the previous one belong to the same burst.
* Recovery is the time from the onset to the start of the first ``HOLD_S`` from
  which the share of arrivals served within the SLO is back to the target, or to
  the share of the ``BASE_S`` before the onset when that was lower (a trace whose
  ceiling is below the target); 0 when the SLO was never missed; the time to the
  end of the judged span when it never recovers (a lower bound).
"""

import numpy as np

from gpuscale.sim.outcome import Timeline

ONSET_FACTOR = 2.0
"""A burst: the arrival rate above this multiple of the recent median."""

BASE_S = 300.0
"""The recent median is over this many seconds before the row."""

HOLD_S = 60.0
"""Back within the SLO: the target attainment held over this many seconds."""


def onsets(timeline: Timeline, start_s: float, end_s: float) -> list[int]:
    """Rows where a burst starts, within ``[start_s, end_s)``.

    Returns:
        Row indices, oldest first.
    """
    t = np.asarray(timeline.time_s, dtype=np.float64)
    rate = np.asarray(timeline.demand_rps, dtype=np.float64)
    if t.size < 2:
        return []
    step = float(t[1] - t[0])
    back = max(round(BASE_S / step), 1)
    out: list[int] = []
    above_before = False
    for i in range(back, t.size):
        base = float(np.median(rate[i - back : i]))
        above = base > 0 and rate[i] > ONSET_FACTOR * base
        new = above and not above_before and start_s <= t[i] < end_s
        if new and (not out or t[i] - t[out[-1]] >= BASE_S):
            out.append(i)
        above_before = above
    return out


def recovery_s(timeline: Timeline, row: int, target: float, end_s: float) -> float:
    """Seconds from the burst at ``row`` until the SLO share holds ``target`` again.

    Returns:
        Seconds; the span to ``end_s`` when it never does.
    """
    t = np.asarray(timeline.time_s, dtype=np.float64)
    step = float(t[1] - t[0]) if t.size > 1 else 1.0
    arrived = np.asarray(timeline.demand_rps, dtype=np.float64) * step
    within = np.asarray(timeline.within_slo, dtype=np.float64)
    hold = max(round(HOLD_S / step), 1)
    last = int(np.searchsorted(t, end_s))
    back = max(row - max(round(BASE_S / step), 1), 0)
    due_before = float(arrived[back:row].sum())
    if due_before > 0:  # never ask for more than the run gave before the burst
        target = min(target, float(within[back:row].sum()) / due_before)
    for j in range(row, max(last - hold + 1, row)):
        got, due = float(within[j : j + hold].sum()), float(arrived[j : j + hold].sum())
        if due <= 0 or got / due >= target:
            return float(t[j] - t[row])
    return float(end_s - t[row])


def mean_recovery_s(
    timeline: Timeline, start_s: float, end_s: float, target: float
) -> float | None:
    """The mean recovery over the bursts that start in ``[start_s, end_s)``.

    Returns:
        Seconds, or None when there is no burst (or no per-row SLO counts).
    """
    if np.asarray(timeline.within_slo).size != np.asarray(timeline.time_s).size:
        return None
    rows = onsets(timeline, start_s, end_s)
    if not rows:
        return None
    return float(np.mean([recovery_s(timeline, r, target, end_s) for r in rows]))
