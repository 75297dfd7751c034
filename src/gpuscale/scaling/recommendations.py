"""The HPA's memory between syncs: its recent recommendations and scale events.

Kubernetes' HPA controller keeps, per HPA, the recommendations of the last
stabilisation window and the scale events of the longest rate-policy period
(``horizontal.go``: ``recommendations``, ``scaleUpEvents``, ``scaleDownEvents``).
``hpa.reconcile_legacy``, ``baseline.reconcile`` and KEDA's HPA share this state,
so it lives here once.

A recommendation is read only as the highest (downscale stabilisation) or lowest
(upscale stabilisation) within a window ending now. One followed by a later one at
least as high can never be the highest of a window again (the later one is in every
window the earlier one is in), and likewise for the lowest; so ``prune`` drops it.
A steady recommendation is then one entry whose time moves with each sync, and the
state does not grow with the window.
"""

from dataclasses import dataclass
from typing import Any

from gpuscale.scaling.state import JsonState

Stamped = tuple[tuple[float, int], ...]
"""``(time seconds, replicas)`` pairs, oldest first."""


@dataclass(frozen=True, slots=True)
class HpaState(JsonState):
    """One HPA's memory.

    Attributes:
        recommendations: ``(time s, replicas)`` of the recommendations that can still
            matter, oldest first; None before the first sync (the controller then
            records the current count as the first, ``recordInitialRecommendation``).
        scale_up_events: ``(time s, replicas added)`` within the longest period.
        scale_down_events: ``(time s, replicas removed)`` within the longest period.

    ``essential()`` leaves out the newest recommendation's time: a steady
    recommendation moves it to every sync's time and nothing else. After a restart
    that time may lag by the caller's write interval, and the newest recommendation
    then leaves the stabilisation window that much sooner; that matters only when
    the recommendations after the restart are lower. Every older entry's time is
    essential: it was written when a newer recommendation arrived.
    """

    recommendations: Stamped | None = None
    scale_up_events: Stamped = ()
    scale_down_events: Stamped = ()

    def essential(self) -> dict[str, Any]:
        """``to_json()`` with the newest recommendation's time as None.

        Returns:
            JSON data.
        """
        data = self.to_json()
        recs = data["recommendations"]
        if recs:
            recs[-1][0] = None
        return data


def remembered(state: HpaState, now: float, current: int) -> list[tuple[float, int]]:
    """The recommendations a sync starts from.

    Returns:
        The stored ones; at the first sync the current count, recorded now
        (``recordInitialRecommendation``).
    """
    if state.recommendations is None:
        return [(now, current)]
    return list(state.recommendations)


def prune(
    recs: list[tuple[float, int]], now: float, highest_s: float | None, lowest_s: float | None
) -> Stamped:
    """The recommendations a later sync may still read, oldest first.

    Args:
        recs: ``(time s, replicas)``, oldest first, this sync's included.
        now: This sync's time, seconds.
        highest_s: Window over which the highest recommendation is read, seconds;
            None when no sync reads the highest.
        lowest_s: Window over which the lowest is read, seconds; None when none does.

    Returns:
        The entries within a window that no later entry dominates for that window.
    """
    kept: list[tuple[float, int]] = []
    later_high = later_low = None
    for t, r in reversed(recs):
        for_high = highest_s is not None and t >= now - highest_s
        for_low = lowest_s is not None and t >= now - lowest_s
        if (for_high and (later_high is None or r > later_high)) or (
            for_low and (later_low is None or r < later_low)
        ):
            kept.append((t, r))
        later_high = r if later_high is None else max(later_high, r)
        later_low = r if later_low is None else min(later_low, r)
    kept.reverse()
    return tuple(kept)
