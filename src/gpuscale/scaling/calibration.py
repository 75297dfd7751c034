"""Forecast errors: their variance by level, a calibrated band, and backtest scores.

A policy plans for the upper bound of its demand forecast, so a band that is too
narrow costs requests and one too wide costs GPUs. This module turns a model's
own errors into its band, and scores models against each other on the history
they have seen, so that ``scaling.forecast`` uses the one whose bound is best:

* ``error_variance``: the errors' variance as a line in the forecast level
  (counts of requests scatter more at the peak than at night);
* the seasonal-naive model (``naive_point``: the mean of the same bucket on the
  earlier seasons kept) and its calibrated band (``naive_backtest``): the
  errors divided by that line's deviation, and the empirical quantile of those
  ratios the policy's quantile asks for, not a normal guess;
* ``Backtest``: forecasts and their upper bounds made with a rolling origin, and
  their pinball loss at the quantile (the loss whose expectation the true
  quantile minimises), which ranks the candidates.

It loads no numpy: the live controller imports the forecaster, and its path
stays free of the scientific stack (import-linter checks it).
"""

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuscale.scaling.state import JsonState

MIN_ERRORS = 30
"""A calibrated band needs at least this many scored errors.

At a quantile of 0.9 that leaves three above it: fewer, and the empirical
quantile is one or two errors' luck.
"""


def error_variance(sums: Sequence[float]) -> tuple[float, float]:
    """The scored errors' variance as a line in the forecast level: ``var0 + var1 x level``.

    Weighted least squares of the squared errors on the level, with neither
    coefficient negative: where the errors do not grow with the level the line is
    flat (their mean square); where it would cross zero above level 0, it goes
    through the origin (a variance proportional to the level, as Poisson counts
    have).

    Args:
        sums: ``[w, w x, w e^2, w x^2, w x e^2]`` over the scored forecasts ``x``
            and their errors ``e``.

    Returns:
        (``var0``, the variance at level 0; ``var1``, its growth per unit of level).
    """
    w, sx, sy, sxx, sxy = (float(v) for v in sums)
    if w <= 0:
        return 0.0, 0.0
    mean_x, mean_y = sx / w, sy / w
    spread = sxx / w - mean_x * mean_x
    slope = (sxy / w - mean_x * mean_y) / spread if spread > 1e-12 * (sxx / w) else 0.0
    if slope <= 0:
        return mean_y, 0.0
    var0 = mean_y - slope * mean_x
    if var0 < 0:
        return 0.0, sxy / sxx
    return var0, slope


def add_error(sums: list[float], x: float, e: float, sign: float = 1.0) -> None:
    """Add one forecast ``x`` and its error ``e`` to ``error_variance``'s sums (-1: remove)."""
    x = max(x, 0.0)
    e2 = e * e
    for i, add in enumerate((1.0, x, e2, x * x, x * e2)):
        sums[i] += sign * add


def quantile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted values, interpolated linearly between order statistics.

    numpy's default method; written out because this module stays off numpy.

    Returns:
        The quantile (0 for no values).
    """
    if not ordered:
        return 0.0
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (pos - lo) * (ordered[hi] - ordered[lo])


def pinball(actual: float, bound: float, q: float) -> float:
    """The pinball (quantile) loss of ``bound`` as the ``q`` quantile of ``actual``.

    Returns:
        ``q`` times the shortfall where ``actual`` is above the bound, ``1 - q`` times
        the excess where it is below, in the demand's unit.
    """
    gap = actual - bound
    return q * gap if gap >= 0 else (q - 1) * gap


@dataclass(slots=True)
class Backtest:
    """A model's rolling-origin forecasts of stored buckets, each with its upper bound.

    Attributes:
        bound: Bucket position (in the stored buckets) to ``(upper bound, actual mean)``.
    """

    bound: dict[int, tuple[float, float]] = field(default_factory=dict)

    def add(self, at: int, upper: float, actual: float, current: float = 0.0) -> None:
        """Record the bound planned for the bucket at ``at``: the upper bound, as used.

        Only the bound is scored, and as the policy plans for it: at least the demand
        at the forecast's origin (``current``, the mean of the newest bucket then),
        since a policy that also reacts (``hybrid``) never plans below the demand it
        sees, so a bound below it costs nothing; and never below 0.
        """
        self.bound[at] = (max(upper, current, 0.0), actual)

    def loss(self, q: float, at: Sequence[int]) -> float:
        """Mean pinball loss of the bounds at the positions ``at`` (all recorded).

        Returns:
            The loss, in the demand's unit; NaN for no positions.
        """
        if not at:
            return math.nan
        return sum(pinball(self.bound[i][1], self.bound[i][0], q) for i in at) / len(at)


@dataclass(frozen=True, slots=True)
class Calibration(JsonState):
    """The seasonal-naive model's fitted numbers: its error's persistence and its band.

    The band is ``point + z x sqrt(var0 + var1 x point)``.

    Attributes:
        var0: Its errors' variance at level 0, in the demand's unit squared.
        var1: The variance's growth per unit of level.
        floor: The deviation's floor, in the demand's unit (``min_sigma_ratio`` of
            the errors' mean forecast level).
        z: The configured quantile of its errors divided by that deviation.
        errors: How many backtested errors it was calibrated on.
        rho: The share of the recent error the forecast carries to its horizon
            (``persistence``).
    """

    var0: float
    var1: float
    floor: float
    z: float
    errors: int
    rho: float = 0.0

    def upper(self, point: float, min_sigma_ratio: float) -> float:
        """The upper bound at ``point``, its deviation floored at ``min_sigma_ratio`` of it.

        Returns:
            The bound, in the demand's unit.
        """
        deviation = math.sqrt(self.var0 + self.var1 * max(point, 0.0))
        return point + self.z * max(deviation, min_sigma_ratio * abs(point), self.floor)


def naive_point(means: Sequence[float], at: int, period: int, seasons: int) -> float | None:
    """The seasonal-naive forecast of position ``at``: its bucket's mean on earlier seasons.

    Args:
        means: Closed buckets' means, oldest first.
        at: Position of the bucket forecast (may be past the newest).
        period: Buckets per season.
        seasons: At most this many earlier seasons are averaged.

    Returns:
        The mean of ``means[at - period]``, ``means[at - 2 period]``, ... (the newest
        ``seasons`` that exist); None when none does.
    """
    found = [
        means[i]
        for i in range(at - period, max(at - (seasons + 1) * period, -1), -period)
        if i < len(means)
    ]
    return sum(found) / len(found) if found else None


def _deviation(sums: Sequence[float], x: float, min_sigma_ratio: float) -> float:
    """The deviation of an error at forecast ``x`` from ``error_variance``'s line.

    Floored at ``min_sigma_ratio`` of ``x`` and of the errors' mean forecast level:
    where the line goes through the origin (Poisson-like counts), a forecast of
    nothing (a night bucket) would have no deviation, and one request after it
    would read as an error of countless deviations.
    """
    var0, var1 = error_variance(sums)
    level = sums[1] / sums[0] if sums[0] > 0 else abs(x)
    floor = min_sigma_ratio * max(abs(x), level)
    return max(math.sqrt(var0 + var1 * max(x, 0.0)), floor, 1e-12)


def persistence(sxy: float, sxx: float) -> float:
    """The share of a forecast's recent error still there at the horizon, 0 to 1.

    Least squares through the origin of the error at the horizon on the error at
    the origin; clamped, since an error that flips sign or grows is not one to
    carry forward.

    Returns:
        The share (0 with no errors).
    """
    return min(max(sxy / sxx, 0.0), 1.0) if sxx > 0 else 0.0


def naive_backtest(
    means: Sequence[float], period: int, seasons: int, ahead: int, q: float, min_sigma_ratio: float
) -> tuple[Calibration | None, Backtest]:
    """The seasonal-naive model over the stored buckets: its calibration and its backtest.

    Every bucket after the first season is forecast as ``naive_point`` makes it,
    plus the share (``persistence``) of the error on the forecast's origin bucket
    (``ahead`` buckets earlier) that the errors so far carried that far: a day
    busier than the days before stays busier for a while. The band is calibrated
    on the newest season of the errors left: a forecast averages fewer seasons
    the older its bucket is, and errs more, so older errors would widen the band
    of a forecast that averages ``seasons``. In the backtest each forecast uses
    the share and the band of what was known at its origin (the band once
    ``MIN_ERRORS`` exist), each error divided by the deviation of the variance
    line through the errors before it; the calibration kept for live use takes
    the share over every pair and the newest season of errors, divided by the
    deviation of the line through all of them.

    Args:
        means: Closed buckets' means, oldest first.
        period: Buckets per season.
        seasons: The forecast averages at most this many earlier seasons.
        ahead: Buckets between a forecast's origin and its bucket.
        q: The quantile the bound is for.
        min_sigma_ratio: Floor of the deviation, as a share of the level.

    Returns:
        (the calibration, None with fewer than ``MIN_ERRORS`` errors; the backtest).
    """
    backtest = Backtest()
    n = len(means)
    naive = [naive_point(means, at, period, seasons) if at >= period else None for at in range(n)]
    miss = [0.0 if x is None else means[at] - x for at, x in enumerate(naive)]
    sxy = sxx = 0.0  # the persistence's sums over the pairs known so far
    sums = [0.0] * 5  # over the errors in the window
    ratios: list[float] = []  # sorted: each error in the window over its time's deviation
    known: list[tuple[float, float, float]] = []  # (forecast, error, ratio), from ``period``
    joined = 0  # errors of ``known`` that have joined the window
    for at in range(period, n):
        origin = at - ahead
        x0 = naive[at]
        if x0 is None:  # pragma: no cover - every position past a season has one
            continue
        if origin - ahead >= period:  # the pair that closed at this origin
            sxy += miss[origin - ahead] * miss[origin]
            sxx += miss[origin - ahead] ** 2
        carried = miss[origin] if origin >= period else 0.0
        x = x0 + persistence(sxy, sxx) * carried
        # Errors whose bucket had closed at this forecast's origin join the window,
        # and those a season older leave it.
        while joined < len(known) and period + joined <= origin:
            kx, ke, _ = known[joined]
            ratio = ke / _deviation(sums, kx, min_sigma_ratio)
            known[joined] = (kx, ke, ratio)
            bisect.insort(ratios, ratio)
            add_error(sums, kx, ke)
            joined += 1
            if joined > period:
                ox, oe, oratio = known[joined - period - 1]
                del ratios[bisect.bisect_left(ratios, oratio)]
                add_error(sums, ox, oe, sign=-1.0)
        if len(ratios) >= MIN_ERRORS:
            upper = x + quantile(ratios, q) * _deviation(sums, x, min_sigma_ratio)
            backtest.add(at, upper, means[at], means[origin])
        known.append((x, means[at] - x, 0.0))
    pairs = [(miss[at - ahead], miss[at]) for at in range(period + ahead, n)]
    rho = persistence(sum(a * b for a, b in pairs), sum(a * a for a, _ in pairs))
    newest = []
    for at in range(max(period, n - period), n):
        x0 = naive[at]
        if x0 is not None:
            x = x0 + rho * (miss[at - ahead] if at - ahead >= period else 0.0)
            newest.append((x, means[at] - x))
    if len(newest) < MIN_ERRORS:
        return None, backtest
    window = [0.0] * 5
    for x, e in newest:
        add_error(window, x, e)
    final = sorted(e / _deviation(window, x, min_sigma_ratio) for x, e in newest)
    var0, var1 = error_variance(window)
    floor = min_sigma_ratio * window[1] / window[0]
    return Calibration(var0, var1, floor, quantile(final, q), len(newest), rho), backtest
