"""The seasonal-naive model, its calibrated band, and the choice of model by backtest."""

import json
import math

import numpy as np
import pytest

from gpuscale.errors import ConfigError
from gpuscale.scaling import calibration, holtwinters
from gpuscale.scaling import forecast as fc
from tests.support.forecast import feed


def test_seasonal_naive_forecasts_a_periodic_series_and_carries_a_persistent_error():
    cfg = fc.ForecastConfig(bucket_s=60.0, season_s=3600.0, model="seasonal-naive")
    m = cfg.period

    def shape(k):
        return 5.0 + (k % m) % 7 * 3.0

    # An exact period: every forecast is the shape, with no error to carry.
    values = [shape(k) for k in range(4 * m)]
    state, now = feed(cfg, values)
    assert state.model == "seasonal-naive"
    assert state.fit is None  # no Holt-Winters fit when it is not asked for
    assert state.naive.rho == 0.0
    for j in range(m):
        f = fc.forecast(state, ((now, values[-1]),), now, j * cfg.bucket_s, cfg)
        assert f.model == "seasonal-naive"
        assert f.mean == pytest.approx(shape(4 * m - 1 + j))
        assert f.upper >= f.mean
    # Lifted by 0, 10, 20 and 30 on four seasons. Three seasons kept: a forecast
    # averages the two before its bucket's season (the next season's buckets: seasons
    # 3 and 2, lifted 30 and 20), as the calibration's forecasts of the newest stored
    # season did. Each season's error (its lift less the mean of the two before, 15)
    # lasts the season, so the backtest carries all of it (rho 1): the forecast is
    # 25 + 15, where a level that rises 10 a season goes next.
    values = [shape(k) + 10.0 * (k // m) for k in range(4 * m)]
    state, now = feed(cfg, values)
    assert state.naive.rho == pytest.approx(1.0)
    for j in range(1, m - 1):
        f = fc.forecast(state, ((now, values[-1]),), now, j * cfg.bucket_s, cfg)
        assert f.mean == pytest.approx(shape(4 * m - 1 + j) + 40.0)


def test_naive_point_averages_at_most_the_seasons_asked():
    means = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert calibration.naive_point(means, 6, 2, 2) == pytest.approx((5.0 + 3.0) / 2)
    assert calibration.naive_point(means, 6, 2, 5) == pytest.approx((5.0 + 3.0 + 1.0) / 3)
    assert calibration.naive_point(means, 7, 2, 2) == pytest.approx((6.0 + 4.0) / 2)
    assert calibration.naive_point(means, 1, 2, 2) is None


def test_the_calibrated_bound_covers_its_quantile_of_held_out_demand():
    # Demand that scatters as counts do (deviation sqrt(level), level 5 to 95 over
    # the season), one sample per bucket. Three seasons fitted, then the state held
    # still and the next season's buckets drawn afresh, R times each.
    cfg = fc.ForecastConfig(bucket_s=60.0, season_s=4 * 3600.0, refit_s=1e9, model="seasonal-naive")
    m, q, seeds, draws = cfg.period, cfg.quantile, 10, 50

    def level(k):
        return 50.0 + 45.0 * math.sin(2 * math.pi * k / m)

    shares = []
    for seed in range(seeds):
        rng = np.random.default_rng(100 + seed)

        def sample(k, size=None, rng=rng):
            return level(k) + math.sqrt(level(k)) * rng.standard_normal(size)

        values = [sample(k) for k in range(3 * m + 1)]
        state, now = feed(cfg, values)
        state = fc.refit(state, now, cfg)  # calibrated on the newest season's errors
        assert state.naive is not None
        assert state.naive.errors == m
        hits = 0
        for j in range(1, m + 1):
            f = fc.forecast(state, ((now, values[-1]),), now, j * cfg.bucket_s, cfg)
            assert f.model == "seasonal-naive"
            hits += int(np.sum(sample(3 * m + j, draws) <= f.upper))
        shares.append(hits / (m * draws))
    # Each seed's coverage varies with its calibration (an empirical quantile of m
    # errors: variance about q(1 - q) / (m + 2)), with its points (m buckets) and with
    # the draws (m x draws); over the seeds the mean's deviation is about 0.009, and
    # three of them bound it. A normal band on the errors' deviation would also be
    # near q here: the point is that the empirical one is, without assuming it.
    sd = math.sqrt(q * (1 - q) * (1 / (m + 2) + 1 / m + 1 / (m * draws)) / seeds)
    assert abs(float(np.mean(shares)) - q) <= 3 * sd


def choose(values, cfg):
    state, now = feed(cfg, values)
    return fc.refit(state, now, cfg, horizon_s=cfg.bucket_s)


def test_the_backtest_chooses_holt_winters_for_a_new_trend_and_naive_for_a_steady_shape():
    cfg = fc.ForecastConfig(bucket_s=60.0, season_s=4 * 3600.0, refit_s=1e9, seasons_kept=4)
    m = cfg.period
    k = np.arange(4 * m)
    shape = 30.0 * np.sin(2 * math.pi * k / m)
    for seed in range(3):
        rng = np.random.default_rng(seed)
        noise = rng.normal(0.0, 4.0, k.size)
        # A rise of 0.3 a bucket through the newest season, which no earlier season had:
        # the mean of earlier seasons misses it by more each bucket, and carrying its
        # error on the origin bucket forward still misses the rise over the horizon;
        # Holt-Winters' trend extrapolates it.
        rising = choose(50.0 + np.where(k > 3 * m, 0.3 * (k - 3 * m), 0.0) + shape + noise, cfg)
        assert rising.model == "holt-winters", rising.losses
        # The same shape, steady: Holt-Winters' forecast is shifted by its error on the
        # newest bucket, so it errs by two buckets' noise (variance 2 x 16), where the
        # mean of three seasons errs by (1 + 1/3) x 16 (and there is no error to carry).
        steady = choose(50.0 + shape + noise, cfg)
        assert steady.model == "seasonal-naive", steady.losses
        losses = dict(steady.losses)
        assert losses["seasonal-naive"] < losses["holt-winters"]


def test_a_fixed_model_is_used_without_a_backtest_choice():
    cfg = fc.ForecastConfig(bucket_s=60.0, season_s=3600.0, refit_s=1e9, model="holt-winters")
    rng = np.random.default_rng(5)
    # Three closed seasons: the newest is scored by a model fitted to the two before.
    values = 50.0 + rng.normal(0.0, 4.0, 3 * cfg.period + 1)
    state = choose(values, cfg)
    assert state.model == "holt-winters"
    assert state.naive is None
    assert [name for name, _ in state.losses] == ["holt-winters"]


def test_the_chosen_models_state_is_plain_json():
    cfg = fc.ForecastConfig(bucket_s=60.0, season_s=3600.0, refit_s=1800.0)
    rng = np.random.default_rng(2)
    k = np.arange(3 * cfg.period)
    state, _ = feed(
        cfg, 50.0 + 20.0 * np.sin(2 * math.pi * k / cfg.period) + rng.normal(0, 3, k.size)
    )
    assert state.model in ("holt-winters", "seasonal-naive")
    assert state.quantreg is None  # not a candidate of ``auto``
    assert state.naive is not None
    assert state.fit is not None
    assert fc.ForecastState.from_json(json.loads(json.dumps(state.to_json()))) == state


def test_a_state_stored_before_models_were_chosen_forecasts_with_its_fit():
    cfg = fc.ForecastConfig(bucket_s=60.0, season_s=3600.0, refit_s=1800.0)
    rng = np.random.default_rng(4)
    state, now = feed(cfg, 50.0 + rng.normal(0.0, 2.0, 3 * cfg.period))
    data = state.to_json()
    for key in ("naive", "model", "at", "losses"):
        del data[key]
    old = fc.ForecastState.from_json(data)
    assert old.fitted_at == old.fit.at
    f = fc.forecast(old, ((now, 50.0),), now, cfg.bucket_s, cfg)
    assert f.model == "seasonal"
    assert not fc.refit_due(old, now, cfg)  # its fit's time still keeps the schedule


def test_an_unknown_model_is_a_one_line_error():
    with pytest.raises(ConfigError) as info:
        fc.ForecastConfig(model="prophet")
    assert str(info.value) == (
        "ForecastConfig.model='prophet': unknown model; "
        "use one of auto, holt-winters, seasonal-naive, quantile-regression"
    )


def test_pinball_loss_weighs_a_shortfall_by_the_quantile():
    assert calibration.pinball(10.0, 8.0, 0.9) == pytest.approx(1.8)
    assert calibration.pinball(8.0, 10.0, 0.9) == pytest.approx(0.2)
    ordered = sorted(np.random.default_rng(0).normal(size=101).tolist())
    assert calibration.quantile(ordered, 0.9) == pytest.approx(float(np.quantile(ordered, 0.9)))


def test_the_backtest_scores_a_bound_no_lower_than_the_demand_at_its_origin():
    backtest = calibration.Backtest()
    backtest.add(0, 3.0, 10.0, current=7.0)  # a hybrid plan never goes below what it sees
    backtest.add(1, 12.0, 10.0, current=7.0)
    backtest.add(2, -1.0, 0.0)
    assert backtest.bound == {0: (7.0, 10.0), 1: (12.0, 10.0), 2: (0.0, 0.0)}
    assert backtest.loss(0.9, [0]) == pytest.approx(0.9 * 3.0)


def test_holt_winters_is_scored_out_of_sample_on_the_newest_season_only():
    cfg = fc.ForecastConfig(bucket_s=60.0, season_s=3600.0, refit_s=1e9)
    m = cfg.period
    rng = np.random.default_rng(7)
    k = np.arange(4 * m)
    values = 50.0 + 20.0 * np.sin(2 * math.pi * k / m) + rng.normal(0.0, 3.0, k.size)
    state, _ = feed(cfg, values[: 2 * m + 1])
    # Two seasons: nothing before the newest to fit Holt-Winters to, so only the
    # seasonal-naive model is scored, and chosen.
    assert [name for name, _ in state.losses] == ["seasonal-naive"]
    assert state.model == "seasonal-naive"
    means = [float(v) for v in values[: 3 * m]]
    _, scored = holtwinters.fit(means, 0, m, 0.0, 1, 1.28, 0.05)
    assert scored is not None
    assert sorted(scored.bound) == list(range(2 * m, 3 * m))
    _, too_few = holtwinters.fit(means[: 3 * m - 1], 0, m, 0.0, 1, 1.28, 0.05)
    assert too_few is None
