"""The headroom a demand's own history calls for: a floor learned from its bursts.

A forecast follows the level; a reactive rule follows a rise a cold start late.
Neither holds capacity for a burst that arrives faster than a pod starts, and a
per-replica knob tuned per trace only buys such headroom everywhere at once. What
a deployment can learn instead is how far its demand has jumped above its recent
level within one burst window: at each decision, the mean of the demand offered
(``hybrid`` passes what its reactive need reads: in service, the queue at its
weight and its growth, never a backlog that grows only while pods are short) over the
last ``burst_window_s`` over its mean in the ``baseline_window_s`` before that
window (a naive forecast made one burst window ago; a mean, since the lowest point
of a noisy window would read noise as a burst). Those ratios go into a histogram,
each weighted by that window's demand (a request-weighted record, as the SLO is), and
the floor is the ratio at the target attainment's quantile times the level now:
the capacity that, had it stood at every past decision, would have held the burst
windows for that share of the requests. The level is the lower of that window's
mean and the demand now: during a burst the level it started from (not the burst
again), and after one the demand as it decays (not the burst's tail in the mean).

With no burst in its history the ratio stays near one and the floor under the
reactive need; after one burst the floor holds capacity for its like, as a
static fleet sized for it would, but scaled to the level of the moment. The
histogram is bounded (``RATIO_EDGES``), so its state stays small however long the
history.
"""

import math
from collections.abc import Sequence

from gpuscale.scaling.policy import Series

RATIO_EDGES: tuple[float, ...] = tuple(2.0 ** (k / 8.0) for k in range(41))
"""Upper edges of the ratio histogram's bins: eighths of a doubling, 1 to 32 (a ratio
above 32 counts in the last bin)."""


def burst_ratio(
    points: Series, now: float, burst_window_s: float, baseline_window_s: float
) -> tuple[float, float] | None:
    """The mean over the last burst window against the mean of the window before it.

    A mean, not the window's peak: the peak of a few noisy samples reads their
    scatter as a burst, and the floor would hold it at every decision.

    Args:
        points: Demand as (time, value) points, oldest first.
        now: The decision's time, seconds.
        burst_window_s: The burst window, seconds.
        baseline_window_s: The window before it whose mean is the baseline, seconds.

    Returns:
        (ratio, the burst window's mean demand); None until at least half the baseline window
        has points, or while their mean is zero.
    """
    edge = now - burst_window_s
    recent = [v for t, v in points if t > edge]
    before = [(t, v) for t, v in points if edge - baseline_window_s < t <= edge]
    if not recent or not before or before[0][0] > edge - baseline_window_s / 2.0:
        return None  # less than half the baseline window seen: no level to measure against
    base = sum(v for _, v in before) / len(before)
    if base <= 0:
        return None
    burst = max(sum(recent) / len(recent), 0.0)
    return burst / base, burst


def level(
    points: Series, now: float, burst_window_s: float, baseline_window_s: float
) -> float | None:
    """The level a floor scales: the baseline window's mean, or the demand now if lower.

    Returns:
        The level, or None without points.
    """
    if not points:
        return None
    edge = now - burst_window_s
    window = [v for t, v in points if edge - baseline_window_s < t <= edge]
    latest = points[-1][1]
    return min(sum(window) / len(window), latest) if window else latest


def record(weights: Sequence[float], ratio: float, weight: float) -> tuple[float, ...]:
    """The histogram with one more ratio counted at ``weight``.

    Args:
        weights: Weight per ``RATIO_EDGES`` bin (empty: none yet).
        ratio: The burst ratio.
        weight: Its weight (the burst window's demand).

    Returns:
        The new weights, one per bin.
    """
    out = list(weights) or [0.0] * len(RATIO_EDGES)
    index = next((i for i, edge in enumerate(RATIO_EDGES) if ratio <= edge), len(out) - 1)
    out[index] += weight
    return tuple(out)


def quantile(weights: Sequence[float], share: float) -> float | None:
    """The ratio below which ``share`` of the recorded weight lies (a bin's upper edge).

    Returns:
        The ratio, or None while nothing is recorded.
    """
    total = sum(weights)
    if total <= 0:
        return None
    running = 0.0
    for edge, w in zip(RATIO_EDGES, weights, strict=True):
        running += w
        if running >= share * total - 1e-12:
            return edge
    return RATIO_EDGES[-1]


def floor_replicas(
    weights: Sequence[float], share: float, level: float | None, per_replica: float
) -> int:
    """Replicas the learned headroom holds: the quantile ratio times the level.

    Returns:
        The floor, 0 while nothing is recorded or the level is unknown.
    """
    ratio = quantile(weights, share)
    if ratio is None or level is None or level <= 0:
        return 0
    return math.ceil(ratio * level / per_replica - 1e-9)
