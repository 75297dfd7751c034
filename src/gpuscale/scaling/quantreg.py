"""A quantile-regression forecast: the upper bound fitted at the quantile itself.

The other seasonal models (``scaling.holtwinters``, the seasonal-naive model of
``scaling.calibration``) forecast a level and draw a band around it from their
errors' spread. This one regresses the demand a horizon ahead directly on what
the policy knows at the forecast's origin, and fits the bound's quantile with the
pinball loss (statsmodels ``QuantReg``, at refit time only), so the bound's width
may differ by the hour of the day and with how far the day runs above its usual
level, as the history shows, instead of following one variance line. The
regressors of the bucket at position ``at``, forecast from origin ``o = at - ahead``
(the newest closed bucket when the forecast is made):

* 1, and the seasonal-naive forecast of ``at`` (``calibration.naive_point``): the
  daily shape;
* the demand at the origin and the seasonal-naive forecast of the origin: the
  fit learns how much of the day's departure from its usual level lasts the
  horizon (and, as their coefficients need not be equal and opposite, how much of
  the current level itself);
* ``HARMONICS`` pairs of sine and cosine of the time of day at ``at``: a
  headroom that depends on the hour (a ramp that comes in busier or earlier than
  the days before) beyond what the shape says.

There is no day-of-week term: the state keeps ``seasons_kept`` days (three by
default), and a weekly pattern needs more than a week of them.

Two regressions are fitted, at 0.5 (the forecast's point) and at the quantile the
policy plans for (its bound); their coefficients are the model's state, plain
numbers the live controller persists, and a forecast between refits is two dot
products. Like the other modules of the forecaster it needs no numpy at forecast
time; statsmodels (the ``forecast`` extra) is imported only when fitting.
"""

import logging
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from gpuscale.scaling.calibration import Backtest, naive_point
from gpuscale.scaling.state import JsonState

logger = logging.getLogger(__name__)

HARMONICS = 3
"""Pairs of time-of-day sine and cosine terms among the regressors.

Three pairs resolve a shape down to about a third of a day (eight hours), the
scale of a morning lull or an evening ramp; more terms would chase the single
hours a few days of history hold, which ``naive_point`` already carries.
"""

MIN_ROWS_PER_REGRESSOR = 10
"""A fit needs this many scored buckets per regressor.

Fewer, and each coefficient of a quantile as high as 0.9 rests on one or two
buckets above the fitted plane.
"""

MAX_ITER = 2000
"""The iteratively reweighted least squares' iteration limit (statsmodels': 1000)."""


@dataclass(frozen=True, slots=True)
class QuantileModel(JsonState):
    """The fitted regressions, as numbers.

    Attributes:
        point: Coefficients of the 0.5 quantile, one per regressor (``regressors``).
        upper: Coefficients of the bound's quantile.
        q: The bound's quantile.
        ahead: The horizon it was fitted for, buckets past the origin.
        rows: How many buckets it was fitted to.
    """

    point: tuple[float, ...]
    upper: tuple[float, ...]
    q: float
    ahead: int
    rows: int

    def predict(self, x: Sequence[float]) -> tuple[float, float]:
        """The point forecast and the upper bound for one row of regressors.

        The bound is never below the point: two quantiles fitted apart may cross
        where the regressors lie outside the history.

        Returns:
            (point, bound), in the demand's unit.
        """
        point = sum(c * v for c, v in zip(self.point, x, strict=True))
        upper = sum(c * v for c, v in zip(self.upper, x, strict=True))
        return point, max(upper, point)


def regressors(
    means: Sequence[float],
    k0: int,
    period: int,
    seasons: int,
    at: int,
    level: float,
    origin: int,
) -> list[float] | None:
    """The regressors of the bucket at position ``at``, forecast from ``origin``.

    Args:
        means: Closed buckets' means, oldest first.
        k0: Bucket index of ``means[0]``.
        period: Buckets per season.
        seasons: The seasonal-naive forecasts average at most this many seasons.
        at: Position (in ``means``) of the bucket forecast; may be past the newest.
        level: The demand at the origin (the origin bucket's mean, or live, the mean
            of the newest points).
        origin: Position of the origin bucket.

    Returns:
        ``[1, naive(at), level, naive(origin), sin, cos, ...]``; None when either
        seasonal-naive forecast has no earlier season.
    """
    shape = naive_point(means, at, period, seasons)
    usual = naive_point(means, origin, period, seasons)
    if shape is None or usual is None:
        return None
    phase = 2 * math.pi * ((k0 + at) % period) / period
    row = [1.0, shape, level, usual]
    for j in range(1, HARMONICS + 1):
        row += [math.sin(j * phase), math.cos(j * phase)]
    return row


def _rows(
    means: Sequence[float], k0: int, period: int, seasons: int, ahead: int, stop: int
) -> tuple[list[int], list[list[float]]]:
    """The positions before ``stop`` that have regressors, and those regressors."""
    at_list: list[int] = []
    rows: list[list[float]] = []
    for at in range(period + ahead, min(stop, len(means))):
        origin = at - ahead
        row = regressors(means, k0, period, seasons, at, means[origin], origin)
        if row is not None:
            at_list.append(at)
            rows.append(row)
    return at_list, rows


def _coefficients(rows: list[list[float]], ys: list[float], q: float) -> tuple[float, ...]:
    """The coefficients statsmodels' ``QuantReg`` fits at quantile ``q``."""
    from statsmodels.regression.quantile_regression import QuantReg  # slow import: fits only

    with warnings.catch_warnings():  # iteration-limit and collinearity chatter
        warnings.simplefilter("ignore")
        fitted = QuantReg(ys, rows).fit(q=q, max_iter=MAX_ITER)
    return tuple(float(c) for c in fitted.params)


def _fit_rows(
    means: Sequence[float],
    k0: int,
    period: int,
    seasons: int,
    ahead: int,
    q: float,
    stop: int,
) -> QuantileModel | None:
    """Both regressions fitted to the buckets before position ``stop``."""
    at_list, rows = _rows(means, k0, period, seasons, ahead, stop)
    if not rows or len(rows) < MIN_ROWS_PER_REGRESSOR * len(rows[0]):
        return None
    ys = [means[at] for at in at_list]
    point, upper = _coefficients(rows, ys, 0.5), _coefficients(rows, ys, q)
    return QuantileModel(point, upper, q, ahead, len(rows))


def fit(
    means: Sequence[float], k0: int, period: int, seasons: int, ahead: int, q: float
) -> tuple[QuantileModel | None, Backtest | None]:
    """Fit the model to the stored buckets; backtest it on the newest season.

    The backtest is out of sample, as Holt-Winters' (``holtwinters.fit``): the
    newest season's bounds come from the model fitted to the buckets before that
    season, each from its own origin ``ahead`` buckets earlier.

    Args:
        means: The closed buckets' means, oldest first.
        k0: Bucket index of ``means[0]``.
        period: Buckets per season.
        seasons: The seasonal-naive regressors average at most this many seasons.
        ahead: Buckets between a forecast's origin and its bucket.
        q: The bound's quantile.

    Returns:
        (the model fitted to every bucket, None with too few; its backtest of the
        newest season, None while the buckets before it are too few to fit).
    """
    model = _fit_rows(means, k0, period, seasons, ahead, q, len(means))
    held = len(means) - period
    before = _fit_rows(means, k0, period, seasons, ahead, q, held)
    backtest = None
    if before is not None:
        backtest = Backtest()
        for at in range(held, len(means)):
            origin = at - ahead
            row = regressors(means, k0, period, seasons, at, means[origin], origin)
            if row is not None:
                backtest.add(at, before.predict(row)[1], means[at], means[origin])
    if model is not None:
        logger.debug(
            "forecast: quantile regression fitted on %d buckets at +%d, q%g %s",
            model.rows,
            ahead,
            q,
            ", ".join(f"{c:.3g}" for c in model.upper),
        )
    return model, backtest
