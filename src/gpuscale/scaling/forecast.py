"""Demand forecasts a scaling policy can afford on every decision.

A GPU replica takes tens of seconds to minutes to become Ready, so a policy
that only reacts is a cold start late on every rise. This module forecasts the
workload's demand (whatever quantity the policy sums, e.g. requests in flight
plus queued) at ``now + horizon`` with an upper prediction bound, from the
history the policy sees, and keeps everything it learns in a ``ForecastState``
within the policy's state, as plain numbers:

* Demand is averaged into buckets of ``bucket_s`` seconds (``ingest``); the
  state keeps at most ``seasons_kept`` seasons of closed buckets.
* Once two full seasons exist, the seasonal models are fitted to the buckets,
  every ``refit_s`` seconds at most (``refit``), and between refits no decision
  fits anything:

  - ``holt-winters``: an additive Holt-Winters model with a damped trend
    (``scaling.holtwinters``; statsmodels fits it). Each closed bucket advances
    it by one step of its recursions. Its forecast for ``now + h`` is its
    forecast for the bucket holding that time, shifted by its error on the
    recent points (so a level it has not caught up with yet persists over the
    horizon); its upper bound is the ``quantile`` of a normal error with the
    deviation of its scored errors at the forecast level, widened with the
    horizon.
  - ``seasonal-naive``: the mean of the same bucket on the earlier seasons kept.
    It has no level to catch up with and nothing to extrapolate, so a level that
    moves from day to day under a stable daily shape costs it less than a model
    that tracks the level and trend. Its upper bound is calibrated on its own
    backtested errors (``scaling.calibration``): the configured quantile of the
    errors over their deviation at the forecast level, not a normal guess.
  - ``quantile-regression``: the demand a horizon ahead regressed on the
    seasonal-naive forecasts, the demand now and the time of day, fitted at
    0.5 and at ``quantile`` by the pinball loss (``scaling.quantreg``), so the
    bound is the fitted quantile itself rather than a band around a level.

* Which of Holt-Winters and seasonal-naive forecasts is chosen by backtest
  (``model: auto``): at each refit, each model forecasts the newest season's
  buckets with a rolling origin, the policy's horizon ahead, and the one whose
  bounds have the smaller pinball loss at ``quantile`` is used until the next
  refit (Holt-Winters on a tie). Each bound is scored as a policy plans for it:
  never below the demand at its origin, since a policy that also reacts does
  not plan below what it sees. Holt-Winters is scored with the parameters it
  gets from the seasons before the scored one (out of sample), so it is a
  candidate only once three seasons are stored. ``model`` may also name one
  model. The quantile regression is scored the same way when ``model`` names it
  (out of sample, once the buckets before the newest season give it
  ``quantreg.MIN_ROWS_PER_REGRESSOR`` rows per regressor), but ``auto`` leaves it
  out: offered to the backtest on four days of GenTD26's LoRA log
  (``bench/bench_seasonal.py``), it was chosen at some refits and ``hybrid``
  then needed more GPU-hours at the target attainment (three seeds: 1,876
  against 1,834). Its bounds lay below seasonal-naive's in the quiet hours,
  where a policy's minimum capacity makes them free, and no lower at the peaks:
  the pinball loss does not rank it as the policy's cost does.
* Before that (short history) the fallback is a least-squares line through
  the raw points of the last ``trend_window_s`` seconds; only the part of its
  slope beyond ``SLOPE_T`` standard errors is extrapolated.
"""

import logging
import math
from dataclasses import dataclass, field, replace
from statistics import NormalDist

from gpuscale.errors import require
from gpuscale.scaling import calibration, holtwinters, quantreg
from gpuscale.scaling.calibration import Calibration
from gpuscale.scaling.holtwinters import FittedModel
from gpuscale.scaling.linefit import fit_line
from gpuscale.scaling.policy import Forecast, Series
from gpuscale.scaling.quantreg import QuantileModel
from gpuscale.scaling.state import JsonState

logger = logging.getLogger(__name__)

HOLT_WINTERS = "holt-winters"
SEASONAL_NAIVE = "seasonal-naive"
QUANTILE_REGRESSION = "quantile-regression"
MODELS = ("auto", HOLT_WINTERS, SEASONAL_NAIVE, QUANTILE_REGRESSION)
"""``ForecastConfig.model``'s values: the backtest's choice, or one model throughout."""


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
        model: The seasonal model: ``auto`` (Holt-Winters or seasonal-naive, the one
            with the better backtest at each refit), ``holt-winters``,
            ``seasonal-naive`` or ``quantile-regression``.
    """

    bucket_s: float = field(default=300.0, metadata={"unit": "s"})
    season_s: float = field(default=86400.0, metadata={"unit": "s"})
    seasons_kept: int = field(default=3, metadata={"unit": "seasons"})
    refit_s: float = field(default=3600.0, metadata={"unit": "s"})
    trend_window_s: float = field(default=600.0, metadata={"unit": "s"})
    quantile: float = field(default=0.9, metadata={"unit": "ratio"})
    min_sigma_ratio: float = field(default=0.05, metadata={"unit": "ratio"})
    max_rise_ratio: float = field(default=0.5, metadata={"unit": "ratio"})
    model: str = field(default="auto", metadata={"unit": ""})

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
        require(
            self.model in MODELS,
            f"ForecastConfig.model={self.model!r}",
            "unknown model",
            f"use one of {', '.join(MODELS)}",
        )

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


def _z(quantile: float) -> float:
    return NormalDist().inv_cdf(quantile)


@dataclass(frozen=True, slots=True)
class ForecastState(JsonState):
    """What the forecaster has learnt: closed buckets, the open one, the model.

    Attributes:
        last_t: Time of the newest point ingested, seconds; None before any.
        means: Mean of each closed bucket, oldest first (at most ``seasons_kept``
            seasons).
        k0: Bucket index of ``means[0]``.
        cur: The open bucket: ``(index, sum, count)``; None before any point.
        fit: The fitted Holt-Winters model; None until two seasons of buckets exist
            (or while ``model`` is ``seasonal-naive``).
        fits: How many times the models have been fitted.
        naive: The seasonal-naive model's calibrated band; None until fitted.
        quantreg: The quantile regression's coefficients; None until fitted (or
            while it is not asked for).
        model: The model that forecasts until the next refit (``holt-winters``,
            ``seasonal-naive`` or ``quantile-regression``); None before the first fit
            (and in a state stored before models were chosen, which forecasts with
            ``fit``).
        at: When the models were last fitted, seconds; None before (or in a state
            stored before it was kept: ``fit.at``).
        losses: The backtest's pinball loss of each model scored at the last refit,
            ``(model, loss)``, in the demand's unit.

    Every field moves with the data it has seen, so ``essential()`` is
    ``to_json()``: under any load the open bucket's sum changes at every decision.
    """

    last_t: float | None = None
    means: tuple[float, ...] = ()
    k0: int = 0
    cur: tuple[int, float, int] | None = None
    fit: FittedModel | None = None
    fits: int = 0
    naive: Calibration | None = None
    quantreg: QuantileModel | None = None
    model: str | None = None
    at: float | None = None
    losses: tuple[tuple[str, float], ...] = ()

    @property
    def fitted_at(self) -> float | None:
        """When the models were last fitted, seconds; None before."""
        if self.at is not None:
            return self.at
        return None if self.fit is None else self.fit.at


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
    fit = None if state.fit is None else holtwinters.working(state.fit)
    keep, forget = cfg.period * cfg.seasons_kept, holtwinters.forget_per_bucket(cfg.period)
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
                holtwinters.advance(fit, cur_k, mean, forget)
            cur_k, cur_sum, cur_n = cur_k + 1, 0.0, 0
        cur_sum += v
        cur_n += 1
    if len(means) > keep:
        k0 += len(means) - keep
        means = means[-keep:]
    return replace(
        state,
        last_t=None if last_t == -math.inf else last_t,
        means=tuple(means),
        k0=k0,
        cur=None if cur_k is None else (cur_k, cur_sum, cur_n),
        fit=state.fit if fit is None else holtwinters.frozen(fit),
    )


def refit_due(state: ForecastState, now: float, cfg: ForecastConfig) -> bool:
    """Whether the seasonal models should be (re)fitted now.

    Returns:
        True when two seasons of buckets exist and the last fit is ``refit_s`` old.
    """
    if len(state.means) < 2 * cfg.period:
        return False
    at = state.fitted_at
    return at is None or now - at >= cfg.refit_s


def backtest_steps(horizon_s: float, cfg: ForecastConfig) -> int:
    """Buckets from a forecast's origin (the newest closed bucket) to its bucket.

    A decision falls anywhere in the open bucket, one past the newest closed one,
    so the bucket holding ``now + h`` lies ``1 + h / bucket_s`` buckets past it on
    average.

    Returns:
        At least 1, at most a season.
    """
    return min(max(round(1 + horizon_s / cfg.bucket_s), 1), cfg.period)


def refit(
    state: ForecastState, now: float, cfg: ForecastConfig, horizon_s: float = 0.0
) -> ForecastState:
    """Fit the seasonal models to the stored buckets and choose the one to use.

    Args:
        state: The forecaster's state, with two seasons of buckets or more.
        now: Time of the fit, seconds.
        cfg: Model settings; ``model`` says which are fitted and whether one is chosen.
        horizon_s: The policy's horizon, seconds: the backtest scores forecasts this
            far ahead.

    Returns:
        The new state: the models fitted, ``model`` the backtest's choice (or the
        configured one), ``fits`` + 1.
    """
    means, m = state.means, cfg.period
    ahead = backtest_steps(horizon_s, cfg)
    fit, naive, qr = state.fit, state.naive, state.quantreg
    scored: dict[str, calibration.Backtest] = {}
    if cfg.model in ("auto", HOLT_WINTERS):
        z = _z(cfg.quantile)
        fit, held_out = holtwinters.fit(means, state.k0, m, now, ahead, z, cfg.min_sigma_ratio)
        if held_out is not None:
            scored[HOLT_WINTERS] = held_out
    if cfg.model in ("auto", SEASONAL_NAIVE):
        naive, scored[SEASONAL_NAIVE] = calibration.naive_backtest(
            means, m, cfg.seasons_kept - 1, ahead, cfg.quantile, cfg.min_sigma_ratio
        )
    if cfg.model == QUANTILE_REGRESSION:
        seasons = cfg.seasons_kept - 1  # as many as the seasonal-naive forecasts average
        qr, held_out = quantreg.fit(means, state.k0, m, seasons, ahead, cfg.quantile)
        if held_out is not None:
            scored[QUANTILE_REGRESSION] = held_out
    # All are scored on the same buckets, those of the newest season that each had a
    # bound for: there seasonal-naive averages as many seasons as it does live, and its
    # band is calibrated on a season of errors, as it is live.
    newest = set(range(len(means) - m, len(means)))
    common = sorted(newest.intersection(*(set(b.bound) for b in scored.values())))
    losses = {name: b.loss(cfg.quantile, common) for name, b in scored.items()}
    model = cfg.model
    if model == "auto":
        # Holt-Winters unscored (fewer than two seasons before the newest to fit it
        # to) is no candidate while seasonal-naive has a calibrated band.
        hw, sn = losses.get(HOLT_WINTERS, math.inf), losses[SEASONAL_NAIVE]
        model = SEASONAL_NAIVE if naive is not None and sn < hw else HOLT_WINTERS
    logger.info(
        "forecast: refit at %.0f on %d buckets, backtest %d buckets at +%d: %s -> %s",
        now,
        len(means),
        len(common),
        ahead,
        ", ".join(f"{name} {loss:.4g}" for name, loss in losses.items()),
        model,
    )
    return replace(
        state,
        fit=fit,
        naive=naive,
        quantreg=qr,
        model=model,
        at=float(now),
        fits=state.fits + 1,
        losses=tuple((name, float(loss)) for name, loss in losses.items()),
    )


def update(
    state: ForecastState,
    points: Series,
    now: float,
    cfg: ForecastConfig,
    horizon_s: float = 0.0,
) -> ForecastState:
    """Ingest new points and refit when due: the one call a policy makes per decision.

    Args:
        state: The forecaster's state.
        points: (time seconds, demand) points, oldest first.
        now: Decision time, seconds.
        cfg: Model settings.
        horizon_s: The policy's horizon, seconds (the backtest's, at a refit).

    Returns:
        The new state.
    """
    st = ingest(state, points, cfg)
    return refit(st, now, cfg, horizon_s) if refit_due(st, now, cfg) else st


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
    """Demand at ``now + horizon_s``: the chosen seasonal model once fitted, else the line.

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
    model = state.model or (HOLT_WINTERS if state.fit is not None else None)
    recent = _recent(points, now, min(cfg.bucket_s, cfg.trend_window_s))
    k_then = math.floor((now + horizon_s) / cfg.bucket_s)
    if recent and model == SEASONAL_NAIVE and state.naive is not None:
        seasons = cfg.seasons_kept - 1  # as many as the calibration's forecasts averaged
        naive = state.naive
        point = calibration.naive_point(state.means, k_then - state.k0, cfg.period, seasons)
        k_now = math.floor(now / cfg.bucket_s)
        here = calibration.naive_point(state.means, k_now - state.k0, cfg.period, seasons)
        if point is not None and here is not None:  # else a horizon past a season: the line
            # The share of the recent error the backtest found still there at the horizon.
            point += naive.rho * (sum(v for _, v in recent) / len(recent) - here)
            upper = naive.upper(point, cfg.min_sigma_ratio)
            return Forecast(max(point, 0.0), max(upper, 0.0), "seasonal-naive", horizon_s)
    if recent and model == QUANTILE_REGRESSION and state.quantreg is not None:
        k_now = math.floor(now / cfg.bucket_s)
        row = quantreg.regressors(
            state.means,
            state.k0,
            cfg.period,
            cfg.seasons_kept - 1,
            k_then - state.k0,
            sum(v for _, v in recent) / len(recent),
            k_now - state.k0,
        )
        if row is not None:  # else a horizon past a season: the line
            point, upper = state.quantreg.predict(row)
            return Forecast(max(point, 0.0), max(upper, 0.0), "quantile-regression", horizon_s)
    fit = state.fit
    if not recent or model != HOLT_WINTERS or fit is None:
        return trend_forecast(points, now, horizon_s, cfg, average_s)
    k_now = math.floor(now / cfg.bucket_s)
    at = holtwinters.seasonal_at
    error = sum(v for _, v in recent) / len(recent) - at(
        fit.season, fit.level, fit.trend, fit.phi, fit.k, k_now
    )
    point = at(fit.season, fit.level, fit.trend, fit.phi, fit.k, k_then) + error
    steps = max(k_then - fit.k, 1)
    # A fit stored before errors were scored has no sums: its residuals' one deviation.
    spread = holtwinters.spread(fit.err, fit.sigma, fit.alpha, point, steps, cfg.min_sigma_ratio)
    upper = point + _z(cfg.quantile) * spread
    return Forecast(max(point, 0.0), max(upper, 0.0), "seasonal", horizon_s)
