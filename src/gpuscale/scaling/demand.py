"""How a policy reads the demand it observes: its mean, its rises, its window.

A sampled count of requests in flight scatters around its mean, and a policy
that reads single samples sizes for the scatter's peaks and takes a chance
positive slope for a rise. ``predictive`` and ``hybrid`` read the demand through
these functions: a trailing mean (``smooth``), a rise judged against the
samples' scatter (``rising``), and only the window a decision needs
(``recent_view``).
"""

import bisect
import dataclasses
from operator import itemgetter

from gpuscale.scaling.forecast import ForecastState
from gpuscale.scaling.linefit import fit_line
from gpuscale.scaling.policy import Observation, Series


def smooth(points: Series, window_s: float) -> Series:
    """Each point replaced by the mean of the points in the ``window_s`` up to it.

    Returns:
        (time, trailing mean) points at the same times; ``points`` when the window is 0.
    """
    if window_s <= 0 or len(points) < 2:
        return points
    out: list[tuple[float, float]] = []
    total, lo = 0.0, 0
    for n, (t, v) in enumerate(points, 1):  # n: points so far
        total += v
        edge = t - window_s
        while points[lo][0] <= edge:
            total -= points[lo][1]
            lo += 1
        out.append((t, total / (n - lo)))
    return tuple(out)


RISE_T = 2.0
"""A rise counts when its least-squares slope is this many standard errors above 0.

About 95 % two-sided: the samples of a steady load (a count of requests in flight
scatters around its mean) show a positive slope half the time, and a rule that
held every scale-in on such a slope would hold the fleet at its noise's peaks.
"""


def rising(points: Series, now: float, window_s: float) -> bool:
    """Whether the observed load rises over the window.

    Rising means a least-squares slope ``RISE_T`` standard errors above 0 and the
    newest point above the mean (a line through the points without scatter rises
    whenever its slope is positive).

    Returns:
        True when both hold over the points in ``(now - window_s, now]``.
    """
    lo = bisect.bisect_right(points, now - window_s, key=itemgetter(0))  # oldest first
    hi = bisect.bisect_right(points, now, lo=lo, key=itemgetter(0))
    recent = points[lo:hi]
    if len(recent) < 2:
        return False
    fit = fit_line(recent)
    if fit.sxx <= 0 or recent[-1][1] <= fit.mean_v or fit.slope <= 0:
        return False
    return fit.n < 3 or fit.slope >= RISE_T * fit.slope_se()


def recent_view(observation: Observation, forecast: ForecastState, history_s: float) -> Observation:
    """The observation with each series cut to what a decision reads.

    That is the last ``history_s``, and every point the forecaster has not ingested
    yet (all of them on a first decision). A caller may pass a day of points; the
    decision then costs what the window costs, not the day.

    Returns:
        The same observation with shorter series (itself when nothing is cut).
    """
    seen = forecast.last_t
    since = float(observation.now) - history_s
    if seen is None:
        return observation
    since = min(since, seen)
    cut = {}
    for key, points in observation.series.items():
        i = bisect.bisect_right(points, since, key=lambda p: p[0])
        cut[key] = points[i:] if i else points
    return dataclasses.replace(observation, series=cut)
