"""A least-squares line through (time, value) points, and its slope's standard error.

``demand.rising`` (is the load rising?) and ``forecast.trend_forecast`` (the
fallback's line) both judge a slope against the scatter of the points around it;
they fit the line here, once, the same way.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LineFit:
    """The fitted line's sums.

    Attributes:
        n: Points.
        mean_t: Their mean time.
        mean_v: Their mean value.
        sxx: Sum of squared time deviations (0 when every point has one time).
        slope: Value per second (0 when ``sxx`` is 0).
        sse: Sum of squared residuals around the line.
    """

    n: int
    mean_t: float
    mean_v: float
    sxx: float
    slope: float
    sse: float

    def slope_se(self) -> float:
        """The slope's standard error; needs ``n > 2`` and ``sxx > 0``.

        Returns:
            Value per second.
        """
        return math.sqrt(self.sse / (self.n - 2) / self.sxx)


def fit_line(points: Sequence[tuple[float, float]]) -> LineFit:
    """Fit a least-squares line through ``points`` (at least one).

    Returns:
        The fit.
    """
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    sxx = sum((t - mean_t) ** 2 for t, _ in points)
    slope = sum((t - mean_t) * (v - mean_v) for t, v in points) / sxx if sxx > 0 else 0.0
    sse = sum((v - mean_v - slope * (t - mean_t)) ** 2 for t, v in points)
    return LineFit(n, mean_t, mean_v, sxx, slope, sse)
