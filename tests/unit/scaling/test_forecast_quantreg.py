"""The quantile-regression forecast: its bound's coverage, its backtest, its choice."""

import dataclasses
import json
import math

import numpy as np
import pytest

from gpuscale.scaling import forecast as fc
from gpuscale.scaling import quantreg
from tests.support.forecast import feed


def coverage(model, means, first, period, seasons, ahead):
    """The share of the buckets from ``first`` at or below the model's bound, and how many."""
    hits = n = 0
    for at in range(first, len(means)):
        origin = at - ahead
        row = quantreg.regressors(means, 0, period, seasons, at, means[origin], origin)
        hits += means[at] <= model.predict(row)[1]
        n += 1
    return hits / n, n


@pytest.mark.parametrize("q", [0.9, 0.98])
def test_the_bound_covers_its_quantile_of_a_skewed_noise_on_new_seasons(q):
    # A stepped daily shape (none of the time-of-day terms) plus exponential noise,
    # whose upper quantiles lie further out than a normal band of its deviation puts
    # them (at 0.98: 3.9 deviations above the mean, not 2.05).
    m, seasons, ahead = 48, 2, 2
    rng = np.random.default_rng(11)
    k = np.arange(80 * m)
    values = 20.0 + 5.0 * ((k % m) // 6) + rng.exponential(3.0, k.size)
    means = values.tolist()
    fitted = 40 * m
    model, _ = quantreg.fit(means[:fitted], 0, m, seasons, ahead, q)
    assert model is not None
    assert model.q == q
    share, n = coverage(model, means, fitted, m, seasons, ahead)
    # Each new bucket is at or below the bound with the probability the fitted plane
    # covers; that probability errs from q by the fit's sampling error, whose variance
    # is about q (1 - q) x regressors / rows, and the n buckets add a binomial
    # q (1 - q) / n. Four deviations of both bound the share.
    p = len(model.upper)
    sd = math.sqrt(q * (1 - q) * (1 / n + p / model.rows))
    assert abs(share - q) <= 4 * sd, (share, sd)


def test_the_bound_is_the_upper_quantile_and_the_point_the_median():
    m, seasons, ahead = 48, 2, 1
    rng = np.random.default_rng(3)
    k = np.arange(30 * m)
    values = 50.0 + 10.0 * ((k % m) // 8) + rng.normal(0.0, 2.0, k.size)
    model, _ = quantreg.fit(values.tolist(), 0, m, seasons, ahead, 0.9)
    share_point, n = coverage(
        quantreg.QuantileModel(model.point, model.point, 0.5, ahead, model.rows),
        values.tolist(),
        m + ahead,
        m,
        seasons,
        ahead,
    )
    share_upper, _ = coverage(model, values.tolist(), m + ahead, m, seasons, ahead)
    # In sample, a fitted quantile plane has about q of the rows at or below it: at
    # most as many regressors as it interpolates sit on it.
    p = len(model.upper)
    assert abs(share_point - 0.5) <= p / n
    assert abs(share_upper - 0.9) <= p / n


def test_the_backtest_scores_the_newest_season_out_of_sample():
    m, seasons, ahead = 120, 2, 2
    rng = np.random.default_rng(5)
    k = np.arange(3 * m)
    means = (30.0 + 10.0 * ((k % m) // 15) + rng.normal(0.0, 2.0, k.size)).tolist()
    # Two seasons: the season before the newest has no earlier one for its regressors,
    # so there is nothing to fit the held-out model to.
    model, scored = quantreg.fit(means[: 2 * m], 0, m, seasons, ahead, 0.9)
    assert model is not None
    assert scored is None
    model, scored = quantreg.fit(means, 0, m, seasons, ahead, 0.9)
    assert scored is not None
    assert sorted(scored.bound) == list(range(2 * m, 3 * m))
    # Too few rows for its regressors: no model, no backtest.
    few, none = quantreg.fit(means[: m + 50], 0, m, seasons, ahead, 0.9)
    assert few is None
    assert none is None


def test_its_backtest_beats_seasonal_naive_where_the_spread_follows_the_hour():
    auto = fc.ForecastConfig(bucket_s=60.0, season_s=4 * 3600.0, refit_s=1e9, seasons_kept=4)
    m = auto.period
    k = np.arange(4 * m + 1)
    phase = 2 * math.pi * (k % m) / m
    # A flat level whose scatter swings from 0.5 to 12.5 over the day: the
    # seasonal-naive band is one variance line in the level, the same all day, so it
    # is too wide half the day and too narrow the other half; the regression's bound
    # has a time-of-day term that follows the swing.
    scale = 0.5 + 6.0 * (1.0 + np.sin(phase))
    values = 40.0 + np.random.default_rng(1).normal(0.0, 1.0, k.size) * scale
    losses = {}
    for model in ("seasonal-naive", "quantile-regression"):
        cfg = dataclasses.replace(auto, model=model)
        state, now = feed(cfg, values)
        state = fc.refit(state, now, cfg, horizon_s=cfg.bucket_s)
        losses.update(state.losses)
    assert losses["quantile-regression"] < losses["seasonal-naive"], losses
    # Scored on the same buckets, as ``auto`` scores its candidates; ``auto`` itself
    # leaves the regression out (``scaling.forecast``'s docstring says why).
    chosen, _ = feed(auto, values)
    chosen = fc.refit(chosen, now, auto, horizon_s=auto.bucket_s)
    assert chosen.quantreg is None
    assert "quantile-regression" not in dict(chosen.losses)
    assert dict(chosen.losses)["seasonal-naive"] == pytest.approx(losses["seasonal-naive"])
    f = fc.forecast(state, ((now, float(values[-1])),), now, cfg.bucket_s, cfg)
    assert f.model == "quantile-regression"
    assert f.upper >= f.mean >= 0.0
    assert fc.ForecastState.from_json(json.loads(json.dumps(state.to_json()))) == state


def test_held_to_it_the_forecaster_fits_only_it():
    cfg = fc.ForecastConfig(
        bucket_s=60.0, season_s=3 * 3600.0, refit_s=1e9, model="quantile-regression"
    )
    m = cfg.period
    rng = np.random.default_rng(2)
    k = np.arange(3 * m + 1)
    values = 50.0 + 5.0 * ((k % m) // 10) + rng.normal(0.0, 2.0, k.size)
    state, now = feed(cfg, values)
    state = fc.refit(state, now, cfg, horizon_s=cfg.bucket_s)  # on three seasons
    assert state.model == "quantile-regression"
    assert state.quantreg is not None
    assert state.fit is None
    assert state.naive is None
    assert [name for name, _ in state.losses] == ["quantile-regression"]
    f = fc.forecast(state, ((now, float(values[-1])),), now, 2 * cfg.bucket_s, cfg)
    assert f.model == "quantile-regression"
    # Beyond a season ahead there is no seasonal-naive regressor: the fallback line.
    far = fc.forecast(state, ((now, float(values[-1])),), now, 2 * cfg.season_s, cfg)
    assert far.model == "trend"
