"""Bursts that recur on a period: when a learned floor may stand down between them.

A floor learned from bursts (``scaling.headroom``) holds their capacity at every
decision, as a static fleet sized for them would: it cannot know when the next one
comes. Many do come on a clock: a batch pipeline every half hour, a cron-driven
fan-out at the top of the hour, a report run at the same minute each cycle. When the
last few bursts started a steady interval apart, the next is expected one interval
after the last, and the floor need only stand from one lead time (what new capacity
takes to serve) before it until the burst has come. Before the lead it also allows
the burst's rise: an onset is timed on a window's mean, which crosses the threshold
up to one window after the load does.

A burst's onset is the decision at which the mean demand over the burst window
first rises through half the demand the floor holds for (the demand quantile that
caps it): a consistent point of the rise however high the burst, and one that a
baseline still raised by the last burst does not hide. The first burst sets that
threshold as it rises (before it the floor holds too little to time), so the reading
at which a threshold first stands is its onset. It must be a rise: the burst
window above its baseline (the burst ratio above 1). A slow burst's tail that
wanders back up through the threshold, noise on a falling load, stands below the
baseline it fell from and times nothing. The onsets are kept (the
last ``MAX_ONSETS``); the period is the mean of the last ``agree`` intervals when
they lie within ``tolerance_s`` of their mean. With fewer onsets, intervals that
disagree (crowds at irregular times), or the next burst overdue, the floor stands
as it does without this: being wrong costs only what the floor would have cost.
"""

from collections.abc import Sequence
from itertools import pairwise

MAX_ONSETS = 8
"""Burst onsets kept: enough for the intervals any ``agree`` setting reads."""

MIN_RATIO = 1.5
"""The least floor ratio whose bursts are timed: below it the floor holds little."""


def onset_threshold(floor_ratio: float | None, cap: float | None) -> float | None:
    """The demand an onset rises through: half what the floor holds for.

    Args:
        floor_ratio: The burst ratio the floor holds (``headroom.quantile``).
        cap: The demand quantile that caps the floor (``headroom.level_quantile``).

    Returns:
        The demand, or None while the floor holds less than ``MIN_RATIO`` times its
        level (no bursts to time) or no demand is recorded.
    """
    if floor_ratio is None or floor_ratio < MIN_RATIO or cap is None:
        return None
    return cap / 2.0


def record_onset(
    onsets: Sequence[float],
    now: float,
    demand: float | None,
    before: float | None,
    threshold: float | None,
    refractory_s: float,
    ratio: float | None = None,
    *,
    newly_timed: bool = False,
) -> tuple[float, ...]:
    """The onsets with ``now`` added when the demand rose through the threshold.

    Args:
        onsets: Earlier onsets, seconds, oldest first.
        now: The decision's time, seconds.
        demand: The burst window's mean demand now (None: unknown).
        before: That mean at the previous decision (None: unknown, counts as below).
        threshold: ``onset_threshold``'s demand (None: nothing is timed).
        refractory_s: The least time between onsets: noise about the threshold
            within one burst is not a second burst.
        ratio: The burst ratio now (``headroom.burst_ratio``): at most 1, the load is
            not above its baseline and the crossing is no onset; None: unknown (no
            baseline yet), not judged.
        newly_timed: No threshold stood at the previous decision: the floor had no
            burst to time until this reading, which is the first burst's rise, so
            the demand before counts as below the threshold. Without it the first
            burst is never timed (the threshold, half the demand quantile, rises with
            the burst that defines it, and the reading before already stands above
            it), and its period is read one burst later.

    Returns:
        The onsets, the last ``MAX_ONSETS``.
    """
    if threshold is None or demand is None or demand < threshold:
        return tuple(onsets)
    if not newly_timed and before is not None and before >= threshold:
        return tuple(onsets)
    if ratio is not None and ratio <= 1.0:
        return tuple(onsets)
    if onsets and now - onsets[-1] < refractory_s:
        return tuple(onsets)
    return (*onsets, now)[-MAX_ONSETS:]


def period(onsets: Sequence[float], agree: int, tolerance_s: float) -> float | None:
    """The bursts' period: the mean of the last ``agree`` intervals, if they agree.

    Returns:
        Seconds, or None with fewer than ``agree`` intervals, ``agree`` under 1, or
        an interval further than ``tolerance_s`` from their mean.
    """
    if agree < 1 or len(onsets) < agree + 1:
        return None
    last = onsets[-(agree + 1) :]
    gaps = [b - a for a, b in pairwise(last)]
    mean = sum(gaps) / len(gaps)
    if any(abs(g - mean) > tolerance_s for g in gaps):
        return None
    return mean


def stands(
    now: float,
    onsets: Sequence[float],
    every: float | None,
    lead_s: float,
    tolerance_s: float,
    rise_s: float = 0.0,
) -> bool:
    """Whether the floor must stand now.

    It stands without a period; from one lead time, the tolerance and the rise before
    the next expected onset until an onset is seen (so through a late burst, and for
    good if the pattern stops); and for one lead time after the last onset, while
    the replicas the burst called for come up.

    Args:
        now: The decision's time, seconds.
        onsets: The onsets, oldest first.
        every: ``period``'s answer.
        lead_s: How long new capacity takes to serve, seconds.
        tolerance_s: How early a burst may come, seconds.
        rise_s: How long a burst has risen when its onset is timed: the burst
            window's mean crosses the threshold up to one window after the load
            does, so capacity that serves only at the onset comes that late.

    Returns:
        True when the floor stands.
    """
    if every is None or not onsets:
        return True
    last = onsets[-1]
    return now >= last + every - lead_s - tolerance_s - rise_s or now <= last + lead_s
