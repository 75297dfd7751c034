"""Scaled demand keeps a trace's shape and has Poisson burstiness at the scaled rate.

Two statistics recur. Both are derived here once.

* **Per-second CV around the trend** (the measure behind issue 8's 0.445 against
  0.043): ``std(y - m) / mean(y)``, where ``m`` is the centred ``w``-second mean of
  ``y``. For Poisson counts at a locally constant rate ``lam``, ``y_t - m_t`` is
  ``(1 - 1/w) y_t`` minus ``1/w`` times ``w - 1`` other independent counts, so its
  variance is ``lam (1 - 1/w)^2 + lam (w - 1) / w^2 = lam (1 - 1/w)`` and the CV
  is ``sqrt((1 - 1/w) / lam)``, about ``1 / sqrt(lam)``.
* **Dispersion against the intended rate**: ``mean((y - mu)^2) / mean(mu)`` for
  counts drawn with means ``mu``. Poisson counts have variance ``mu``, so its
  expectation is 1; each term ``(y - mu)^2`` has variance ``2 mu^2 + mu`` (fourth
  central moment of a Poisson), so over ``n`` seconds at rates of hundreds its
  standard error is about ``sqrt(2 / n)``.
"""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.errors import ConfigError
from gpuscale.sim import generators
from gpuscale.sim.demand import (
    DEFAULT_WINDOW_S,
    RequestMarks,
    poisson_demand,
    scale_demand,
    shape_rate,
)
from gpuscale.sim.serving import llm_work_seconds
from gpuscale.sim.traces import load_trace
from gpuscale.sim.workload import Workload

TRACES = Path(__file__).resolve().parents[4] / "shared" / "traces"
CONV = TRACES / "azure_llm_2023_conv.csv"
needs_conv = pytest.mark.skipif(not CONV.is_file(), reason="shared Azure trace not present")

W = DEFAULT_WINDOW_S + 1  # odd, so the trend is centred


def trend_cv(y: np.ndarray, w: int = W) -> float:
    kernel = np.ones(w)
    trend = np.convolve(y, kernel, "same") / np.convolve(np.ones_like(y), kernel, "same")
    return float(np.std(y - trend) / np.mean(y))


def poisson_trend_cv(mean_rate: float, w: int = W) -> float:
    return math.sqrt((1.0 - 1.0 / w) / mean_rate)


def dispersion(y: np.ndarray, mu: np.ndarray) -> float:
    return float(np.mean((y - mu) ** 2) / np.mean(mu))


def per_minute(y: np.ndarray) -> np.ndarray:
    whole = y.size // 60 * 60
    return y[:whole].reshape(-1, 60).sum(axis=1)


def synthetic(seconds: int = 7_200, seed: int = 7) -> tuple[Workload, RequestMarks]:
    """Poisson counts around a 30-minute sine at 5 req/s, lognormal work (SCV 0.6)."""
    rng = np.random.default_rng(seed)
    t = np.arange(seconds)
    counts = rng.poisson(5.0 * (1.0 + 0.5 * np.sin(2 * np.pi * t / 1_800)))
    second = np.repeat(t, counts)
    sigma = math.sqrt(math.log(1.6))
    work = rng.lognormal(-(sigma**2) / 2, sigma, second.size)
    tokens = np.stack([rng.integers(1, 2_000, second.size), rng.integers(1, 500, second.size)], 1)
    tokens = tokens.astype(np.float64)
    workload = Workload(
        "synthetic",
        counts.astype(np.float64),
        np.bincount(second, weights=work, minlength=seconds),
        np.stack([np.bincount(second, weights=tokens[:, i], minlength=seconds) for i in (0, 1)], 1),
    )
    return workload, RequestMarks(second, work, tokens)


@pytest.fixture(scope="module")
def conv() -> Workload:
    return load_trace("azure-conv", traces_dir=TRACES)


# Per-second burstiness -------------------------------------------------------


def test_copying_keeps_trace_noise_while_poisson_demand_has_poisson_cv():
    workload, marks = synthetic()
    target = poisson_trend_cv(100 * workload.arrivals.mean())
    copied = workload.scaled(100.0)
    drawn = poisson_demand(workload, 100.0, seed=0, marks=marks)
    # Copying keeps the trace's own CV, sqrt(100) = 10x the Poisson value at 100x the rate.
    assert trend_cv(copied.arrivals) > 8 * target
    # The std of n = 7,200 residuals has a relative standard error of 1/sqrt(2n) = 0.8 %;
    # the straight lines of the rate deviate little from a 61 s mean on a 30-minute sine.
    # 5 % is 6 standard errors.
    assert trend_cv(drawn.arrivals) == pytest.approx(target, rel=0.05)


@needs_conv
def test_azure_conv_at_scale_100_has_poisson_per_second_cv(conv):
    before = conv.scaled(100.0)
    after = load_trace("azure-conv", traces_dir=TRACES, scale=100.0, seed=0)
    target = poisson_trend_cv(100 * conv.arrivals.mean())  # 0.0425
    assert target == pytest.approx(0.0425, abs=5e-4)
    assert trend_cv(before.arrivals) == pytest.approx(0.444, abs=0.002)  # issue 8's 0.445
    # Sampling: 1/sqrt(2 x 3,502) = 1.2 % relative. The rate's corners at minute
    # centres, where a 61 s mean cuts them, add variance that the trace's minute-to-
    # minute swings (CV 0.22) set: measured here at about 5 % of the CV. 12 % covers both.
    assert trend_cv(after.arrivals) == pytest.approx(target, rel=0.12)
    assert trend_cv(before.arrivals) > 9 * trend_cv(after.arrivals)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_counts_are_poisson_around_the_intended_rate(seed):
    workload, marks = synthetic()
    drawn = poisson_demand(workload, 100.0, seed=seed, marks=marks)
    mu = 100.0 * shape_rate(workload.arrivals)
    # Expectation 1, standard error sqrt(2 / 7,200) = 1.7 %; 4 standard errors.
    assert dispersion(drawn.arrivals, mu) == pytest.approx(1.0, abs=4 * math.sqrt(2 / 7_200))
    # Copies of the trace are over-dispersed by the scale itself.
    assert dispersion(workload.scaled(100.0).arrivals, mu) > 50


def test_generators_already_sample_poisson_at_the_scaled_rate():
    workload = generators.generate("ramp", scale=100.0, seed=3)
    mu = 100.0 * generators.ramp_rate(np.arange(workload.duration_s, dtype=np.float64))
    assert dispersion(workload.arrivals, mu) == pytest.approx(1.0, abs=4 * math.sqrt(2 / 3_600))


# Shape and mean --------------------------------------------------------------

# Per-minute shape. The rate spreads each minute's requests by its hat function:
# 3/4 stay in the minute and 1/8 go to each neighbour, so the expected scaled minute
# is 100 (x[i-1] + 6 x[i] + x[i+1]) / 8. Were minutes independent (the worst case for
# a trace whose minutes are not anti-correlated), its correlation with x[i] would be
# 6 / sqrt(38) = 0.973; Poisson noise (0.55 % of a minute at scale 100, against
# shape swings of 10-20 %) lowers it by under 0.001. Hence the bound 0.97.
SHAPE_BOUND = 0.97


def test_per_minute_shape_of_a_synthetic_trace_is_kept():
    workload, marks = synthetic()
    drawn = poisson_demand(workload, 100.0, seed=0, marks=marks)
    r = np.corrcoef(per_minute(workload.arrivals), per_minute(drawn.arrivals))[0, 1]
    assert r >= SHAPE_BOUND


@needs_conv
def test_per_minute_shape_of_azure_conv_is_kept(conv):
    drawn = load_trace("azure-conv", traces_dir=TRACES, scale=100.0, seed=1)
    r = np.corrcoef(per_minute(conv.arrivals), per_minute(drawn.arrivals))[0, 1]
    assert r >= SHAPE_BOUND


def test_shape_rate_sums_to_the_trace_and_follows_its_minutes():
    counts = np.repeat([60.0, 0.0, 600.0, 60.0], 60) / 60.0
    counts = np.r_[counts, np.full(17, 2.0)]  # a partial last block
    rate = shape_rate(counts)
    assert rate.sum() == pytest.approx(counts.sum())
    assert rate.min() >= 0.0
    assert rate[29] == pytest.approx(1.0)  # held flat before the first centre
    assert rate[149] > rate[89]  # climbs from the empty minute toward the busy one


@needs_conv
@pytest.mark.parametrize("seed", [0, 1])
def test_mean_rate_is_scale_times_the_trace_within_sampling_error(conv, seed):
    drawn = load_trace("azure-conv", traces_dir=TRACES, scale=100.0, seed=seed)
    expected = 100.0 * conv.arrivals.sum()
    # The total is Poisson with mean 100 x 19,366 (the rate sums to the trace exactly),
    # sd sqrt(1,936,600) = 1,392; 4 sd either side.
    assert abs(drawn.arrivals.sum() - expected) <= 4 * math.sqrt(expected)


def test_work_and_token_totals_are_scale_times_the_trace_within_sampling_error():
    workload, marks = synthetic()
    drawn = poisson_demand(workload, 100.0, seed=5, marks=marks)
    # Each trace request is drawn Poisson(100) times in expectation, so a total of
    # marks v has mean 100 sum(v) and variance 100 sum(v^2) (compound Poisson); 4 sd.
    for drawn_total, values in (
        (drawn.work_s.sum(), marks.work_s),
        (drawn.tokens[:, 0].sum(), marks.tokens[:, 0]),
        (drawn.tokens[:, 1].sum(), marks.tokens[:, 1]),
    ):
        assert abs(drawn_total - 100 * values.sum()) <= 4 * math.sqrt(100 * (values**2).sum())


# Requests --------------------------------------------------------------------


def test_work_follows_the_drawn_requests_not_a_copy_of_the_second():
    # One request a second, alternately heavy (10 s) and light (0.1 s).
    seconds = 3_600
    work = np.where(np.arange(seconds) % 2 == 0, 10.0, 0.1)
    workload = Workload("alt", np.ones(seconds), work)
    copied = workload.scaled(100.0)
    drawn = poisson_demand(workload, 100.0, seed=0)
    per_request = drawn.work_s / drawn.arrivals
    # Copying makes each second all-heavy or all-light.
    assert set(np.round(copied.work_s / copied.arrivals, 6)) == {10.0, 0.1}
    # Drawn: a mean of about 100 requests, half heavy: 5.05 with sd 4.95/sqrt(100) = 0.5.
    assert per_request.mean() == pytest.approx(5.05, abs=0.05)
    assert per_request.std() == pytest.approx(0.495, rel=0.1)
    assert np.all(drawn.work_s <= 10.0 * drawn.arrivals + 1e-9)
    assert np.all(drawn.work_s >= 0.1 * drawn.arrivals - 1e-9)


def test_requests_come_from_the_blocks_that_carry_the_rate():
    # Every request of minute b has work b + 1, so a second's mean work shows its source.
    seconds = 600
    counts = np.full(seconds, 3.0)
    minute = np.arange(seconds) // 60
    workload = Workload("blocks", counts, counts * (minute + 1.0))
    drawn = poisson_demand(workload, 50.0, seed=2)
    mean_work = drawn.work_s / drawn.arrivals
    centre = minute * 60 + 29.5
    lower = np.where(np.arange(seconds) >= centre, minute, minute - 1).clip(0, 9) + 1.0
    assert np.all(mean_work >= lower - 1e-9)
    assert np.all(mean_work <= lower + 1.0 + 1e-9)
    # At a minute's centre every request comes from that minute.
    assert mean_work[centre.astype(int)[::60] + 1] == pytest.approx(np.arange(1, 11), abs=0.02)


def test_marks_from_a_workload_are_exact_for_single_requests():
    workload = Workload("w", np.array([1.0, 0.0, 2.0]), np.array([3.0, 0.0, 4.0]))
    marks = RequestMarks.from_workload(workload)
    assert marks.second.tolist() == [0, 2, 2]
    assert marks.work_s.tolist() == [3.0, 2.0, 2.0]
    assert marks.tokens is None


@needs_conv
def test_real_per_request_marks_drive_per_second_work(conv):
    raw = pd.read_csv(CONV)
    stamps = pd.to_datetime(raw["TIMESTAMP"]).to_numpy(dtype="datetime64[ns]").astype(np.int64)
    second = ((stamps - stamps.min()) // 1_000_000_000).astype(np.int64)
    order = np.argsort(second, kind="stable")
    work = llm_work_seconds(raw["ContextTokens"].to_numpy(), raw["GeneratedTokens"].to_numpy())
    marks = RequestMarks(second[order], work[order])
    drawn = poisson_demand(conv, 100.0, seed=0, marks=marks)
    assert drawn.tokens is None
    total = 100 * work.sum()
    assert abs(drawn.work_s.sum() - total) <= 4 * math.sqrt(100 * (work**2).sum())
    # The mean work of a second's k drawn requests varies around the local mean with
    # variance sigma^2 / k, so k x its squared deviation from the 61 s trend, over the
    # squared mean, estimates the per-request SCV. Marks recovered from per-second
    # totals (each request its second's mean, what load_trace has today) give less.
    k = drawn.arrivals
    mu = np.divide(drawn.work_s, k, out=np.zeros_like(k), where=k > 0)
    kernel = np.ones(W)
    trend = np.convolve(drawn.work_s, kernel, "same") / np.convolve(k, kernel, "same")
    scv = float(np.mean(k * (mu - trend) ** 2) / np.mean(work) ** 2)
    coarse = poisson_demand(conv, 100.0, seed=0)
    mu_c = np.divide(
        coarse.work_s, coarse.arrivals, out=np.zeros_like(k), where=coarse.arrivals > 0
    )
    trend_c = np.convolve(coarse.work_s, kernel, "same") / np.convolve(
        coarse.arrivals, kernel, "same"
    )
    scv_c = float(np.mean(coarse.arrivals * (mu_c - trend_c) ** 2) / np.mean(work) ** 2)
    true_scv = float(np.var(work) / np.mean(work) ** 2)  # 0.32 with this work model
    # Over 3,502 seconds the estimate's relative standard error is a few percent.
    assert scv == pytest.approx(true_scv, rel=0.15)
    assert scv_c < 0.5 * true_scv  # measured: 0.08 against 0.32


def per_request_scv(drawn: Workload, mean_work: float) -> float:
    """Per-request work SCV estimated from per-second totals of drawn requests.

    The mean work of a second's ``k`` requests, drawn independently from the local
    request mix of variance ``sigma^2``, has variance ``sigma^2 / k`` around the local
    mean (the 61 s trend of work over requests), so ``k`` times its squared deviation
    has expectation ``sigma^2``; over the squared mean work that is the SCV.
    """
    k = drawn.arrivals
    mu = np.divide(drawn.work_s, k, out=np.zeros_like(k), where=k > 0)
    kernel = np.ones(W)
    trend = np.convolve(drawn.work_s, kernel, "same") / np.convolve(k, kernel, "same")
    return float(np.mean(k * (mu - trend) ** 2) / mean_work**2)


@needs_conv
def test_load_trace_draws_whole_requests_so_per_second_work_keeps_their_dispersion():
    from gpuscale.sim.traces import read_azure_llm

    _, marks = read_azure_llm(CONV)
    work = marks.work_s
    true_scv = float(np.var(work) / np.mean(work) ** 2)  # per-request SCV, 0.32 on conv
    scaled = load_trace("azure-conv", traces_dir=TRACES, scale=100.0, seed=0)
    got = per_request_scv(scaled, float(np.mean(work)))
    # Estimate over ~3,500 s: relative standard error a few percent; the local mix is
    # slightly less dispersed than the whole hour's, so allow 15 %. Each second's mean
    # request (what load_trace drew before) gives about 0.08, a quarter of it.
    assert got == pytest.approx(true_scv, rel=0.15)
    print(f"azure-conv x100: per-second work SCV {got:.3f}, per-request {true_scv:.3f}")


# Determinism, options, errors ------------------------------------------------


def test_same_seed_same_workload_and_different_seeds_differ():
    workload, marks = synthetic(seconds=1_800)
    a = poisson_demand(workload, 37.5, seed=11, marks=marks)
    b = poisson_demand(workload, 37.5, seed=11, marks=marks)
    c = poisson_demand(workload, 37.5, seed=12, marks=marks)
    assert np.array_equal(a.arrivals, b.arrivals)
    assert np.array_equal(a.work_s, b.work_s)
    assert np.array_equal(a.tokens, b.tokens)
    assert not np.array_equal(a.arrivals, c.arrivals)
    assert not np.array_equal(a.work_s, c.work_s)


@needs_conv
def test_load_trace_is_deterministic_per_seed_and_keeps_the_profile(conv):
    a = load_trace("azure-conv", traces_dir=TRACES, scale=10.0, seed=4, duration_s=900)
    b = load_trace("azure-conv", traces_dir=TRACES, scale=10.0, seed=4, duration_s=900)
    c = load_trace("azure-conv", traces_dir=TRACES, scale=10.0, seed=5, duration_s=900)
    assert np.array_equal(a.work_s, b.work_s)
    assert not np.array_equal(a.arrivals, c.arrivals)
    assert a.profile is not None
    assert conv.profile is not None
    assert np.array_equal(a.profile.work_q, conv.profile.work_q)
    assert a.tokens is not None
    assert a.tokens.shape == (900, 2)


def test_scale_demand_leaves_scale_one_and_multiplies_rates():
    workload, _ = synthetic(seconds=600)
    assert scale_demand(workload, 1.0, seed=0, counts=True) is workload
    rate = Workload("r", np.full(10, 2.5), np.full(10, 5.0))
    scaled = scale_demand(rate, 4.0, seed=0, counts=False)
    assert scaled.arrivals.tolist() == [10.0] * 10
    assert scaled.work_s.tolist() == [20.0] * 10


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scale": 0.0, "seed": 0}, "scale 0.0: must be > 0; e.g. 10"),
        ({"scale": 2.0, "seed": -1}, "seed -1: must be >= 0; e.g. 0"),
        ({"scale": 2.0, "seed": 0, "window_s": 0}, "window 0 s: must be >= 1 s; e.g. 60"),
    ],
)
def test_bad_arguments_are_one_line_config_errors(kwargs, message):
    workload, _ = synthetic(seconds=120)
    with pytest.raises(ConfigError) as caught:
        poisson_demand(workload, **kwargs)
    assert str(caught.value) == message


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(0, 30), min_size=1, max_size=400),
    scale=st.floats(0.05, 200.0),
    seed=st.integers(0, 2**32 - 1),
    window=st.integers(1, 120),
)
def test_arrivals_are_non_negative_integers_totalling_about_scale_times(
    counts, scale, seed, window
):
    arrivals = np.asarray(counts, dtype=np.float64)
    workload = Workload("h", arrivals, 0.5 * arrivals)
    drawn = poisson_demand(workload, scale, seed=seed, window_s=window)
    assert drawn.arrivals.shape == arrivals.shape
    assert np.all(drawn.arrivals >= 0)
    assert np.array_equal(drawn.arrivals, np.rint(drawn.arrivals))
    # Every request has work 0.5, so work is exactly half the arrivals.
    assert drawn.work_s == pytest.approx(0.5 * drawn.arrivals)
    # The total is Poisson with mean scale x total; 6 sd either side (p ~ 2e-9 per case).
    mean = scale * arrivals.sum()
    assert abs(drawn.arrivals.sum() - mean) <= 6 * math.sqrt(mean) + 1e-9
