"""Demand forecasts a scaling policy can afford on every decision.

A GPU replica takes tens of seconds to minutes to become Ready, so a policy
that only reacts is a cold start late on every rise. This module forecasts the
workload's demand (whatever quantity the policy sums, e.g. requests in flight
plus queued) at ``now + horizon`` with an upper prediction bound, from the
history the policy sees, and keeps everything it learns in a ``ForecastState``
within the policy's state, as plain numbers:

* Demand is averaged into buckets of ``bucket_s`` seconds (``ingest``); the
  state keeps at most ``seasons_kept`` seasons of closed buckets.
* Once two full seasons exist, an additive Holt-Winters model with a damped
  trend (statsmodels ``ExponentialSmoothing``) is fitted to the buckets, every
  ``refit_s`` seconds at most (``refit``). Its smoothing parameters, level,
  trend and seasonal indices are stored. Between refits each closed bucket
  advances the stored model by one step of the Holt-Winters recursions (a few
  multiplications), so no decision refits.
* Each closed bucket is also scored against what this module forecast for it
  one bucket earlier (the model's forecast shifted by the recent error, as
  below), and the squared errors are kept as running sums, forgotten with a
  half-life of one season. Their variance is a line in the forecast level
  (``error_variance``): counts of requests scatter more at the peak than at
  night, so one deviation for the whole season would be too wide at night and
  too narrow at the peak. A refit replays the recursions over the stored
  buckets from the fitted initial state, so the sums restart from the errors the
  new model would have made.
* Before that (short history) the fallback is a least-squares line through
  the raw points of the last ``trend_window_s`` seconds; only the part of its
  slope beyond ``SLOPE_T`` standard errors is extrapolated.

The seasonal forecast for ``now + h`` is the model's forecast for the bucket
holding that time, shifted by the model's error on the recent points (so a
level the model has not caught up with yet persists over the horizon). The
upper bound is the ``quantile`` of a normal error with the deviation of
those scored errors at the forecast level, widened with the horizon.
"""

import logging
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Any

from gpuscale.errors import require
from gpuscale.scaling.linefit import fit_line
from gpuscale.scaling.policy import Forecast, Series
from gpuscale.scaling.state import JsonState

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ForecastConfig:
    """How demand is bucketed, modelled and bounded.

    Attributes:
        bucket_s: Bucket length of the seasonal model, seconds.
        season_s: Season length (a day by default), seconds; a whole number of buckets.
        seasons_kept: Seasons of buckets kept in the state (the model is fitted on them).
        refit_s: The seasonal model is refitted at most this often, seconds.
        trend_window_s: Window of the fallback line, seconds.
        quantile: The upper bound's quantile, 0.5 to 1.
        min_sigma_ratio: Floor of the error deviation, as a share of the recent mean.
        max_rise_ratio: The fallback line may rise (or fall) at most this share of the
            window's mean between now and the horizon: a start-up backlog or a burst's
            edge is a steep line that must not be extrapolated without bound.
    """

    bucket_s: float = field(default=300.0, metadata={"unit": "s"})
    season_s: float = field(default=86400.0, metadata={"unit": "s"})
    seasons_kept: int = field(default=3, metadata={"unit": "seasons"})
    refit_s: float = field(default=3600.0, metadata={"unit": "s"})
    trend_window_s: float = field(default=600.0, metadata={"unit": "s"})
    quantile: float = field(default=0.9, metadata={"unit": "ratio"})
    min_sigma_ratio: float = field(default=0.05, metadata={"unit": "ratio"})
    max_rise_ratio: float = field(default=0.5, metadata={"unit": "ratio"})

    def __post_init__(self) -> None:
        def check(ok: bool, key: str, fix: str) -> None:
            require(ok, f"ForecastConfig.{key}={getattr(self, key)!r}", "out of range", fix)

        check(self.bucket_s >= 1, "bucket_s", "use at least 1 s")
        m = self.season_s / self.bucket_s
        check(m >= 2 and abs(m - round(m)) < 1e-9, "season_s", "use a multiple (>= 2) of bucket_s")
        check(self.seasons_kept >= 2, "seasons_kept", "use 2 or more (the model needs two)")
        check(self.refit_s > 0, "refit_s", "use > 0 s")
        check(self.trend_window_s > 0, "trend_window_s", "use > 0 s")
        check(0.5 <= self.quantile < 1, "quantile", "use 0.5 to 1 (e.g. 0.9)")
        check(self.min_sigma_ratio >= 0, "min_sigma_ratio", "use 0 or more")
        check(self.max_rise_ratio >= 0, "max_rise_ratio", "use 0 or more")

    @property
    def period(self) -> int:
        """Buckets per season."""
        return round(self.season_s / self.bucket_s)


ANCHOR_S = 60.0
"""The fallback line starts from the mean of this many seconds of the newest points."""


MIN_LINE_POINTS = 8
"""Fewer points than this give the fallback no slope (two minutes at a 15 s step)."""

SLOPE_T = 2.0
"""The fallback extrapolates only the part of a slope beyond this many standard errors.

About 95 % two-sided. A steady load's samples scatter, their line's slope is as
often up as down, and a chance slope times a horizon of minutes (a cold start
plus a node) moves the forecast by more than the scatter itself; without a
slope the fallback is the window's mean level. A slope past the band is shrunk
by it (soft thresholding): one picked for clearing the band overstates the rise
(on ramp, 17 points after a queue emptied read nearly five times the ramp's
slope and opened two nodes for one decision), and the extrapolated rise then
grows from 0 at the band's edge instead of jumping to a full band's worth.
"""


ERROR_HALF_LIFE_SEASONS = 1.0
"""The scored errors' weight halves over this many seasons (a day by default).

Long enough that the sums hold a whole season's levels, night and peak, at
comparable weight; short enough that the errors of a model refitted since, or
of a season that changed, take over within a few days.
"""


def _z(quantile: float) -> float:
    return NormalDist().inv_cdf(quantile)


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


@dataclass(frozen=True, slots=True)
class ForecastState(JsonState):
    """What the forecaster has learnt: closed buckets, the open one, the model.

    Attributes:
        last_t: Time of the newest point ingested, seconds; None before any.
        means: Mean of each closed bucket, oldest first (at most ``seasons_kept``
            seasons).
        k0: Bucket index of ``means[0]``.
        cur: The open bucket: ``(index, sum, count)``; None before any point.
        fit: The fitted seasonal model; None until two seasons of buckets exist.
        fits: How many times the model has been fitted.

    Every field moves with the data it has seen, so ``essential()`` is
    ``to_json()``: under any load the open bucket's sum changes at every decision.
    """

    last_t: float | None = None
    means: tuple[float, ...] = ()
    k0: int = 0
    cur: tuple[int, float, int] | None = None
    fit: FittedModel | None = None
    fits: int = 0


def _working(fit: FittedModel) -> dict[str, Any]:
    """A mutable copy of a fitted model for ``_advance`` (the stored one never changes)."""
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


def _frozen(work: Mapping[str, Any]) -> FittedModel:
    """The stored form of ``_working``'s copy."""
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


def ingest(state: ForecastState, points: Series, cfg: ForecastConfig) -> ForecastState:
    """Add the points newer than those already seen to the buckets.

    A bucket closes when a point of a later bucket arrives; a bucket with no
    point repeats the previous mean. Each closed bucket advances a fitted model
    by one Holt-Winters step.

    Args:
        state: The forecaster's state (``ForecastState()`` at first).
        points: (time seconds, demand) points, oldest first.
        cfg: Bucketing and model settings.

    Returns:
        The new state.
    """
    last_t = -math.inf if state.last_t is None else state.last_t
    means: list[float] = list(state.means)
    k0 = state.k0
    # The open bucket's index, sum and count; index None while there is none.
    cur_k, cur_sum, cur_n = (None, 0.0, 0) if state.cur is None else state.cur
    fit = None if state.fit is None else _working(state.fit)
    keep, forget = cfg.period * cfg.seasons_kept, _forget(cfg)
    for t, v in points:
        if t <= last_t or math.isnan(v):
            continue
        last_t = t
        k = math.floor(t / cfg.bucket_s)
        if cur_k is None:
            cur_k, cur_sum, cur_n, k0 = k, 0.0, 0, k
        while cur_k < k:  # close the current bucket (and fill any gap after it)
            mean = cur_sum / cur_n if cur_n else (means[-1] if means else v)
            if not means:
                k0 = cur_k
            means.append(mean)
            if fit is not None:
                _advance(fit, cur_k, mean, forget)
            cur_k, cur_sum, cur_n = cur_k + 1, 0.0, 0
        cur_sum += v
        cur_n += 1
    if len(means) > keep:
        k0 += len(means) - keep
        means = means[-keep:]
    return ForecastState(
        last_t=None if last_t == -math.inf else last_t,
        means=tuple(means),
        k0=k0,
        cur=None if cur_k is None else (cur_k, cur_sum, cur_n),
        fit=state.fit if fit is None else _frozen(fit),
        fits=state.fits,
    )


def _forget(cfg: ForecastConfig) -> float:
    """The scored errors' weight kept per bucket (``ERROR_HALF_LIFE_SEASONS``)."""
    return float(0.5 ** (1.0 / (ERROR_HALF_LIFE_SEASONS * cfg.period)))


def _advance(fit: dict[str, Any], k: int, y: float, forget: float, score: bool = True) -> None:
    """One step of the additive, damped Holt-Winters recursions for bucket ``k``.

    Before it, bucket ``k`` is scored against the forecast made for it while bucket
    ``k - 1`` was the newest (``fit["pending"]``), into ``fit["err"]`` (weighted sums
    ``[w, w x, w e^2, w x^2, w x e^2]`` of the forecast ``x`` and its error ``e``, each
    older one weighted ``forget`` less), unless ``score`` is False; and the forecast
    for bucket ``k + 1`` is made as ``forecast`` makes it from bucket ``k``'s mean.
    ``fit`` is ``_working``'s mutable form.
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
        ahead = _seasonal_at(season, level, trend, phi, fit["k"], k + 1)
        fit["pending"] = (k + 1, ahead + y - _seasonal_at(season, level, trend, phi, fit["k"], k))
    p = k % len(season)
    a, b, g = fit["alpha"], fit["beta"], fit["gamma"]
    new_level = a * (y - season[p]) + (1 - a) * (level + phi * trend)
    fit["trend"] = b * (new_level - level) + (1 - b) * phi * trend
    season[p] = g * (y - level - phi * trend) + (1 - g) * season[p]
    fit["level"], fit["k"] = new_level, k


def refit_due(state: ForecastState, now: float, cfg: ForecastConfig) -> bool:
    """Whether the seasonal model should be (re)fitted now.

    Returns:
        True when two seasons of buckets exist and the last fit is ``refit_s`` old.
    """
    if len(state.means) < 2 * cfg.period:
        return False
    return state.fit is None or now - state.fit.at >= cfg.refit_s


def refit(state: ForecastState, now: float, cfg: ForecastConfig) -> ForecastState:
    """Fit the seasonal model to the stored buckets and keep its parameters.

    Returns:
        The new state, with ``fit`` (parameters and final components) and ``fits`` + 1.
    """
    from statsmodels.tsa.holtwinters import ExponentialSmoothing  # slow import, only when fitting

    means = list(state.means)
    m, k0 = cfg.period, state.k0
    with warnings.catch_warnings():  # convergence chatter from the optimiser
        warnings.simplefilter("ignore")
        model = ExponentialSmoothing(
            means,
            trend="add",
            damped_trend=True,
            seasonal="add",
            seasonal_periods=m,
            initialization_method="heuristic",
        )
        res = model.fit()
    params = res.params
    season = [0.0] * m
    for i, s0 in enumerate(params["initial_seasons"]):
        season[(k0 + i) % m] = float(s0)
    # The fitted model from its initial state, replayed over the buckets by the same
    # recursions as ``ingest`` (its final components are statsmodels' own), scoring
    # each bucket after the first season (the heuristic start fits that one).
    fit: dict[str, Any] = {
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
    forget = _forget(cfg)
    for i, y in enumerate(means):
        _advance(fit, k0 + i, y, forget, score=i >= m)
    err = fit["err"]
    fit["sigma"] = math.sqrt(err[2] / err[0]) if err[0] > 0 else 0.0
    fit["at"] = float(now)
    var0, var1 = error_variance(err)
    logger.debug(
        "forecast: refit at %.0f on %d buckets, error variance %.3g + %.3g x level",
        now,
        len(means),
        var0,
        var1,
    )
    return replace(state, fit=_frozen(fit), fits=state.fits + 1)


def error_variance(sums: Sequence[float]) -> tuple[float, float]:
    """The scored errors' variance as a line in the forecast level: ``var0 + var1 x level``.

    Weighted least squares of the squared errors on the level (``_advance``'s sums),
    with neither coefficient negative: where the errors do not grow with the level
    the line is flat (their mean square); where it would cross zero above level 0,
    it goes through the origin (a variance proportional to the level, as Poisson
    counts have).

    Args:
        sums: ``[w, w x, w e^2, w x^2, w x e^2]`` over the scored buckets.

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


def update(state: ForecastState, points: Series, now: float, cfg: ForecastConfig) -> ForecastState:
    """Ingest new points and refit when due: the one call a policy makes per decision.

    Returns:
        The new state.
    """
    st = ingest(state, points, cfg)
    return refit(st, now, cfg) if refit_due(st, now, cfg) else st


def _seasonal_at(
    season: Sequence[float], level: float, trend: float, phi: float, k_last: int, k: int
) -> float:
    """A model's forecast for bucket ``k``, from its components after bucket ``k_last``."""
    h = max(k - k_last, 0)
    damp = sum(phi**j for j in range(1, h + 1)) if phi < 1 else float(h)
    return level + damp * trend + season[k % len(season)]


def _recent(points: Series, now: float, window_s: float) -> list[tuple[float, float]]:
    edge = now - window_s
    return [(t, v) for t, v in points if t > edge and not math.isnan(v)]


def trend_forecast(
    points: Series, now: float, horizon_s: float, cfg: ForecastConfig, average_s: float = 0.0
) -> Forecast:
    """The fallback: a least-squares line through the last ``trend_window_s`` of points.

    Args:
        points: (time seconds, demand) samples, oldest first.
        now: Decision time, seconds.
        horizon_s: How far ahead, seconds.
        cfg: Window, quantile and bounds.
        average_s: The bound is for the mean of the samples over this long at the
            horizon (as many as the last ``average_s`` holds), not for one sample:
            the prediction interval of a mean of ``k`` new samples has ``1 / k`` where
            one sample's has 1. 0: one sample.

    Returns:
        The line's value at ``now + horizon_s`` (at least 0) and its upper bound.
    """
    recent = _recent(points, now, cfg.trend_window_s)
    if not recent:
        return Forecast(0.0, 0.0, "none", horizon_s)
    n = len(recent)
    edge = now - average_s
    new = 1.0 / max(sum(1 for t, _ in recent if t > edge), 1)
    mean_v = sum(v for _, v in recent) / n
    floor = cfg.min_sigma_ratio * abs(mean_v)
    if n < MIN_LINE_POINTS:  # too few points for a slope: the level, and their spread
        anchor = now - ANCHOR_S
        newest = [v for t, v in recent if t > anchor] or [recent[-1][1]]
        level = sum(newest) / len(newest)
        spread = math.sqrt(sum((v - mean_v) ** 2 for _, v in recent) / n)
        upper = level + _z(cfg.quantile) * max(spread, floor)
        return Forecast(level, upper, "trend", horizon_s)
    fit = fit_line(recent)
    band = SLOPE_T * fit.slope_se() if fit.sxx > 0 else math.inf
    if abs(fit.slope) < band:
        # No slope the scatter cannot explain: the level, and a new point's spread.
        spread = math.sqrt(sum((v - mean_v) ** 2 for _, v in recent) / (n - 1))
        upper = mean_v + _z(cfg.quantile) * max(spread, floor) * math.sqrt(new + 1 / n)
        return Forecast(max(mean_v, 0.0), max(upper, 0.0), "trend", horizon_s)
    slope = math.copysign(abs(fit.slope) - band, fit.slope)  # only what clears the band
    x = now + horizon_s
    # Anchored on the last minute's level, not the line's value at now: a load that
    # rose and fell inside the window would otherwise keep the line high.
    anchor = now - ANCHOR_S
    last = [(t, v) for t, v in recent if t > anchor] or recent[-1:]
    last_t = sum(t for t, _ in last) / len(last)
    at_now = sum(v for _, v in last) / len(last) + slope * (now - last_t)
    bound = cfg.max_rise_ratio * abs(mean_v)
    point = at_now + min(max(slope * horizon_s, -bound), bound)
    sigma = max(math.sqrt(fit.sse / (n - 2)), floor)
    spread = sigma * math.sqrt(new + 1 / n + (x - fit.mean_t) ** 2 / fit.sxx)
    return Forecast(
        max(point, 0.0), max(point + _z(cfg.quantile) * spread, 0.0), "trend", horizon_s
    )


def forecast(
    state: ForecastState,
    points: Series,
    now: float,
    horizon_s: float,
    cfg: ForecastConfig,
    average_s: float = 0.0,
) -> Forecast:
    """Demand at ``now + horizon_s``: seasonal once fitted, else the fallback line.

    Args:
        state: The forecaster's state after ``update``.
        points: The recent raw points (the fallback's window and the recent error).
        now: Decision time, seconds.
        horizon_s: How far ahead, seconds.
        cfg: Model settings.
        average_s: The fallback bounds the mean over this long (``trend_forecast``).

    Returns:
        The forecast and its upper bound, in the demand's unit.
    """
    fit = state.fit
    if fit is None:
        return trend_forecast(points, now, horizon_s, cfg, average_s)
    recent = _recent(points, now, min(cfg.bucket_s, cfg.trend_window_s))
    if not recent:
        return trend_forecast(points, now, horizon_s, cfg, average_s)
    k_now = math.floor(now / cfg.bucket_s)
    error = sum(v for _, v in recent) / len(recent) - _seasonal_at(
        fit.season, fit.level, fit.trend, fit.phi, fit.k, k_now
    )
    k_then = math.floor((now + horizon_s) / cfg.bucket_s)
    point = _seasonal_at(fit.season, fit.level, fit.trend, fit.phi, fit.k, k_then) + error
    steps = max(k_then - fit.k, 1)
    floor = cfg.min_sigma_ratio * abs(point)
    err = fit.err
    if err is not None:
        var0, var1 = error_variance(err)
        deviation = math.sqrt(var0 + var1 * max(point, 0.0))
    else:  # a fit stored before errors were scored: its residuals' one deviation
        deviation = fit.sigma
    spread = max(deviation, floor) * math.sqrt(1 + (steps - 1) * fit.alpha**2)
    upper = point + _z(cfg.quantile) * spread
    return Forecast(max(point, 0.0), max(upper, 0.0), "seasonal", horizon_s)
