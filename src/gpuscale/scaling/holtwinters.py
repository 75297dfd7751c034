"""The additive, damped Holt-Winters model the forecaster fits, as plain numbers.

``scaling.forecast`` keeps every model it can use as numbers in the policy's
state, because the live controller persists that state. This module holds the
Holt-Winters one: statsmodels' ``ExponentialSmoothing`` fits it at refit time
(``fit``), its parameters and components are stored (``FittedModel``), and
between refits each closed bucket advances it by one step of the recursions
(``advance``), a few multiplications, so that no decision refits.

Each closed bucket is also scored against what the model forecast for it one
bucket earlier, and the squared errors are kept as running sums, forgotten with
a half-life of a season; their variance is a line in the forecast level
(``scaling.calibration.error_variance``), which sets the width of the model's
band (``spread``). A refit replays the recursions over the stored buckets from
the fitted initial state, so the sums restart from the errors the new model
would have made, and the same replay gives the forecasts the backtest scores
(``fit``'s second answer).
"""

import logging
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuscale.scaling.calibration import Backtest, error_variance
from gpuscale.scaling.state import JsonState

logger = logging.getLogger(__name__)

ERROR_HALF_LIFE_SEASONS = 1.0
"""The scored errors' weight halves over this many seasons (a day by default).

Long enough that the sums hold a whole season's levels, night and peak, at
comparable weight; short enough that the errors of a model refitted since, or
of a season that changed, take over within a few days.
"""


@dataclass(frozen=True, slots=True)
class FittedModel(JsonState):
    """The seasonal model's parameters and components, and its scored errors.

    Attributes:
        alpha: Smoothing of the level.
        beta: Smoothing of the trend.
        gamma: Smoothing of the seasonal indices.
        phi: Damping of the trend.
        level: Level after bucket ``k``, in the demand's unit.
        trend: Trend after bucket ``k``, per bucket.
        season: Seasonal index of each bucket of the season (bucket index modulo
            its length).
        k: The newest bucket the model has advanced over (an index of ``bucket_s``).
        sigma: Deviation of the errors scored when fitted, in the demand's unit.
        at: When it was fitted, seconds.
        err: Weighted sums ``(w, w x, w e^2, w x^2, w x e^2)`` of the scored errors;
            None in a model stored before errors were scored (``sigma`` is then read).
        pending: ``(bucket, forecast)`` made for the next bucket, scored when it
            closes; None before the first.
    """

    alpha: float
    beta: float
    gamma: float
    phi: float
    level: float
    trend: float
    season: tuple[float, ...]
    k: int
    sigma: float
    at: float
    err: tuple[float, ...] | None = None
    pending: tuple[int, float] | None = None


def working(fit: FittedModel) -> dict[str, Any]:
    """A mutable copy of a fitted model for ``advance`` (the stored one never changes).

    Returns:
        The model's fields, its season and sums as lists.
    """
    return {
        "alpha": fit.alpha,
        "beta": fit.beta,
        "gamma": fit.gamma,
        "phi": fit.phi,
        "level": fit.level,
        "trend": fit.trend,
        "season": list(fit.season),
        "k": fit.k,
        "sigma": fit.sigma,
        "at": fit.at,
        "err": None if fit.err is None else list(fit.err),
        "pending": fit.pending,
    }


def frozen(work: Mapping[str, Any]) -> FittedModel:
    """The stored form of ``working``'s copy.

    Returns:
        The model.
    """
    err, pending = work["err"], work["pending"]
    return FittedModel(
        alpha=work["alpha"],
        beta=work["beta"],
        gamma=work["gamma"],
        phi=work["phi"],
        level=work["level"],
        trend=work["trend"],
        season=tuple(work["season"]),
        k=work["k"],
        sigma=work["sigma"],
        at=work["at"],
        err=None if err is None else tuple(err),
        pending=None if pending is None else (pending[0], pending[1]),
    )


def forget_per_bucket(period: int) -> float:
    """The scored errors' weight kept per bucket (``ERROR_HALF_LIFE_SEASONS``).

    Returns:
        A factor in (0, 1).
    """
    return float(0.5 ** (1.0 / (ERROR_HALF_LIFE_SEASONS * period)))


def advance(fit: dict[str, Any], k: int, y: float, forget: float, score: bool = True) -> None:
    """One step of the additive, damped Holt-Winters recursions for bucket ``k``.

    Before it, bucket ``k`` is scored against the forecast made for it while bucket
    ``k - 1`` was the newest (``fit["pending"]``), into ``fit["err"]`` (weighted sums
    ``[w, w x, w e^2, w x^2, w x e^2]`` of the forecast ``x`` and its error ``e``, each
    older one weighted ``forget`` less), unless ``score`` is False; and the forecast
    for bucket ``k + 1`` is made as ``scaling.forecast`` makes it from bucket ``k``'s
    mean. ``fit`` is ``working``'s mutable form.
    """
    season: list[float] = fit["season"]
    pending = fit["pending"]
    err = fit["err"]
    if score and err is not None and pending is not None and int(pending[0]) == k:
        x, e = max(float(pending[1]), 0.0), y - float(pending[1])
        e2 = e * e
        for i, add in enumerate((1.0, x, e2, x * x, x * e2)):
            err[i] = forget * err[i] + add
    level, trend, phi = fit["level"], fit["trend"], fit["phi"]
    if err is not None:
        ahead = seasonal_at(season, level, trend, phi, fit["k"], k + 1)
        fit["pending"] = (k + 1, ahead + y - seasonal_at(season, level, trend, phi, fit["k"], k))
    p = k % len(season)
    a, b, g = fit["alpha"], fit["beta"], fit["gamma"]
    new_level = a * (y - season[p]) + (1 - a) * (level + phi * trend)
    fit["trend"] = b * (new_level - level) + (1 - b) * phi * trend
    season[p] = g * (y - level - phi * trend) + (1 - g) * season[p]
    fit["level"], fit["k"] = new_level, k


def seasonal_at(
    season: Sequence[float], level: float, trend: float, phi: float, k_last: int, k: int
) -> float:
    """A model's forecast for bucket ``k``, from its components after bucket ``k_last``.

    Returns:
        The forecast, in the demand's unit.
    """
    h = max(k - k_last, 0)
    damp = sum(phi**j for j in range(1, h + 1)) if phi < 1 else float(h)
    return level + damp * trend + season[k % len(season)]


def spread(
    err: Sequence[float] | None,
    sigma: float,
    alpha: float,
    point: float,
    steps: int,
    min_sigma_ratio: float,
) -> float:
    """The deviation of the model's error at ``point``, ``steps`` buckets ahead.

    The scored errors' variance line at the forecast level (or, for a model stored
    before errors were scored, its residuals' one deviation), floored at
    ``min_sigma_ratio`` of the level, widened with the steps as the level's
    smoothing lets each new bucket's error through.

    Returns:
        The deviation, in the demand's unit.
    """
    floor = min_sigma_ratio * abs(point)
    if err is not None:
        var0, var1 = error_variance(err)
        deviation = math.sqrt(var0 + var1 * max(point, 0.0))
    else:
        deviation = sigma
    return max(deviation, floor) * math.sqrt(1 + (steps - 1) * alpha**2)


def _fitted_params(means: Sequence[float], period: int) -> Mapping[str, Any]:
    """The additive, damped model's parameters, as statsmodels fits them to ``means``."""
    from statsmodels.tsa.holtwinters import ExponentialSmoothing  # slow import, only when fitting

    with warnings.catch_warnings():  # convergence chatter from the optimiser
        warnings.simplefilter("ignore")
        model = ExponentialSmoothing(
            list(means),
            trend="add",
            damped_trend=True,
            seasonal="add",
            seasonal_periods=period,
            initialization_method="heuristic",
        )
        return model.fit().params  # type: ignore[no-any-return]


def _replay(
    params: Mapping[str, Any],
    means: Sequence[float],
    k0: int,
    period: int,
    ahead: int,
    z: float,
    min_sigma_ratio: float,
    first: int,
) -> tuple[dict[str, Any], Backtest]:
    """A fitted model from its initial state, replayed over the buckets; its backtest.

    The same recursions as ``scaling.forecast.ingest``, scoring each bucket after
    the first season (the heuristic start fits that one); the bounds are recorded
    for the buckets from position ``first`` on.

    Returns:
        The model's working form after the newest bucket, and the bounds made
        ``ahead`` buckets earlier for the buckets from ``first``.
    """
    season = [0.0] * period
    for i, s0 in enumerate(params["initial_seasons"]):
        season[(k0 + i) % period] = float(s0)
    work: dict[str, Any] = {
        "alpha": float(params["smoothing_level"]),
        "beta": float(params["smoothing_trend"]),
        "gamma": float(params["smoothing_seasonal"]),
        "phi": float(params["damping_trend"]),
        "level": float(params["initial_level"]),
        "trend": float(params["initial_trend"]),
        "season": season,
        "k": k0 - 1,
        "err": [0.0] * 5,
        "pending": None,
    }
    forget = forget_per_bucket(period)
    made: dict[int, tuple[float, float]] = {}  # bucket to (upper bound, origin's mean)
    backtest = Backtest()
    start = max(period, first)
    for i, y in enumerate(means):
        k = k0 + i
        if i in made:
            upper, origin = made.pop(i)
            backtest.add(i, upper, y, origin)
        # The forecast ``ahead`` buckets past bucket ``k`` once its mean is known, as
        # ``advance`` makes the next bucket's: the components before it, shifted by
        # their error on bucket ``k``.
        point = None
        if start <= i + ahead < len(means):
            lv, tr, ph, last = work["level"], work["trend"], work["phi"], work["k"]
            shift = y - seasonal_at(season, lv, tr, ph, last, k)
            point = seasonal_at(season, lv, tr, ph, last, k + ahead) + shift
        advance(work, k, y, forget, score=i >= period)
        if point is not None:  # its band from the sums that include bucket ``k``'s error
            width = spread(work["err"], 0.0, work["alpha"], point, ahead, min_sigma_ratio)
            made[i + ahead] = (point + z * width, y)
    return work, backtest


def fit(
    means: Sequence[float],
    k0: int,
    period: int,
    now: float,
    ahead: int,
    z: float,
    min_sigma_ratio: float,
) -> tuple[FittedModel, Backtest | None]:
    """Fit the model to the stored buckets; replay it for its errors and its backtest.

    The backtest scores the newest season out of sample: its parameters are fitted
    to the buckets before that season only (then replayed over all of them, each
    forecast made from the buckets before its origin). Parameters fitted to the
    buckets they are scored on flatter the model against one with nothing fitted
    (the seasonal-naive model), and the choice would follow the flattery.

    Args:
        means: The closed buckets' means, oldest first.
        k0: Bucket index of ``means[0]``.
        period: Buckets per season.
        now: Time of the fit, seconds.
        ahead: The backtest's horizon in buckets past the newest closed one.
        z: The normal quantile the model's band is drawn at.
        min_sigma_ratio: Floor of the band's deviation, as a share of the level.

    Returns:
        The model fitted to every bucket (parameters and final components), and its
        rolling-origin backtest of the newest season: for each of its buckets, the
        forecast made ``ahead`` buckets earlier and its upper bound, as
        ``scaling.forecast`` would have made them with the sums of that time, by
        the model fitted without that season; None when fewer than two seasons
        precede it (too few to fit a seasonal model to).
    """
    params = _fitted_params(means, period)
    work, _ = _replay(params, means, k0, period, ahead, z, min_sigma_ratio, len(means))
    backtest = None
    held = len(means) - period
    if held >= 2 * period:
        before = _fitted_params(means[:held], period)
        _, backtest = _replay(before, means, k0, period, ahead, z, min_sigma_ratio, held)
    err = work["err"]
    work["sigma"] = math.sqrt(err[2] / err[0]) if err[0] > 0 else 0.0
    work["at"] = float(now)
    var0, var1 = error_variance(err)
    logger.debug(
        "forecast: Holt-Winters fitted at %.0f on %d buckets, error variance %.3g + %.3g x level",
        now,
        len(means),
        var0,
        var1,
    )
    return frozen(work), backtest
