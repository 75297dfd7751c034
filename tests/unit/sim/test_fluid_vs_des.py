"""The fluid queue agrees with a per-request discrete-event run on small cases.

Tolerances (stated here and in gpuscale.sim.fluid's docstring): mean end-to-end
latency within 10 % relative, SLO attainment within 0.05 absolute, and the share
of requests dropped within 0.02 absolute. Cases: Poisson arrivals at 50 %, 70 %
and 90 % load on 4 to 16 servers, service times from deterministic to exponential
(squared coefficient of variation 0 to 1; the discrete-event run draws gamma
service times, the fluid fits a shifted exponential), LLM-style batch slots, a
150 % burst, a 300 % burst with and without timeouts, and steady overload with
timeouts. Each fluid
run sees the same per-second counts the discrete-event run spreads into requests.
Outside the stated regime (arrivals well under one per second on one or two slow
servers) the fluid errs high, which the last test pins down.

Where the fluid is off by more than 0.01 (up to 16 servers),
the engine does not use it: ``Scenario.queue_model="auto"`` takes the per-request
queue, which is the discrete-event run (tests/unit/sim/test_requests.py). The
last tests check that ``auto`` does so on every such grid case and on LLM fleets
of up to 8 replicas, where the fluid's TTFT is off by up to 0.15.
"""

import numpy as np
import pytest

from gpuscale.sim.des import simulate_requests
from gpuscale.sim.fixed import serve_fixed
from gpuscale.sim.queue_model import choose
from gpuscale.sim.workload import RequestProfile, Workload

MEAN_REL = 0.10
ATTAIN_ABS = 0.05
DROP_ABS = 0.02


def counts(rate: np.ndarray, service_s: float, seed: int) -> Workload:
    a = np.random.default_rng(seed).poisson(rate).astype(float)
    return Workload("case", a, a * service_s)


def compare(
    wl: Workload,
    *,
    replicas: int,
    slo_s: float,
    timeout_s: float,
    slots: int = 1,
    scv: float = 1.0,
):
    kw = dict(replicas=replicas, slo_s=slo_s, timeout_s=timeout_s, slots=slots, service_scv=scv)
    fluid = serve_fixed(wl, **kw)
    des = simulate_requests(wl, seed=11, **kw)
    assert fluid.requests == des.requests
    assert fluid.mean_latency_s == pytest.approx(des.mean_latency_s, rel=MEAN_REL)
    assert fluid.attainment == pytest.approx(des.attainment, abs=ATTAIN_ABS)
    assert fluid.dropped / fluid.requests == pytest.approx(des.dropped / des.requests, abs=DROP_ABS)
    return fluid, des


@pytest.mark.parametrize("load", [0.5, 0.7, 0.9])
@pytest.mark.parametrize(
    ("replicas", "service_s", "slo_s"), [(4, 1.0, 3.0), (8, 0.5, 1.5), (16, 0.1, 0.3)]
)
def test_poisson_arrivals_agree(load, replicas, service_s, slo_s):
    lam = load * replicas / service_s
    seconds = int(np.clip(150_000 / lam, 1800, 12 * 3600))  # enough requests to average
    rate = np.full(seconds, lam)
    compare(counts(rate, service_s, seed=1), replicas=replicas, slo_s=slo_s, timeout_s=120.0)


@pytest.mark.parametrize("scv", [0.0, 0.25, 0.58])
@pytest.mark.parametrize(("load", "replicas", "slo_s"), [(0.8, 8, 1.5), (0.9, 4, 3.0)])
def test_less_variable_service_times_agree(scv, load, replicas, slo_s):
    service_s = 4.0 / replicas
    lam = load * replicas / service_s
    rate = np.full(int(150_000 / lam), lam)
    wl = counts(rate, service_s, seed=7)
    compare(wl, replicas=replicas, slo_s=slo_s, timeout_s=120.0, scv=scv)


def test_batched_llm_replicas_agree():
    rate = np.full(2 * 3600, 0.8 * 2 / 0.05)  # 2 replicas x 16 slots, 50 ms of GPU each
    _, des = compare(counts(rate, 0.05, 2), replicas=2, slo_s=1.5, timeout_s=120.0, slots=16)
    assert des.mean_latency_s > 0.05 * 16 * 0.95  # a slot runs at 1/16 of the GPU


@pytest.mark.parametrize(("peak", "seconds"), [(1.5, 120), (3.0, 60)])
def test_burst_agrees(peak, seconds):
    rate = np.full(2400, 0.5 * 8 / 0.5)
    rate[1200 : 1200 + seconds] = peak * 8 / 0.5
    _, des = compare(counts(rate, 0.5, 3), replicas=8, slo_s=1.5, timeout_s=600.0)
    assert des.attainment < 0.9  # the burst really hurt


def test_burst_with_timeouts_agrees():
    rate = np.full(2400, 0.5 * 8 / 0.5)
    rate[1200:1260] = 3.0 * 8 / 0.5
    _, des = compare(counts(rate, 0.5, 4), replicas=8, slo_s=1.5, timeout_s=10.0)
    assert des.dropped > 0


@pytest.mark.parametrize("slo_s", [1.5, 12.0])
def test_steady_overload_with_timeouts_agrees(slo_s):
    rate = np.full(3600, 1.3 * 8 / 0.5)
    _, des = compare(counts(rate, 0.5, 5), replicas=8, slo_s=slo_s, timeout_s=10.0)
    assert des.dropped / des.requests == pytest.approx(1 - 1 / 1.3, abs=0.02)


def test_sparse_arrivals_on_two_slow_servers_err_high_within_25_percent():
    rate = np.full(12 * 3600, 0.5 * 2 / 5.0)  # 0.2 requests/s, 5 s each
    wl = counts(rate, 5.0, 6)
    fluid = serve_fixed(wl, replicas=2, slo_s=15.0, timeout_s=600.0)
    des = simulate_requests(wl, replicas=2, slo_s=15.0, timeout_s=600.0, seed=11)
    assert des.mean_latency_s <= fluid.mean_latency_s <= 1.25 * des.mean_latency_s


# The grid of issue 8: service from the measured GenTD26 shape (the shared trace's
# model_predict_ms when present, else a gamma with its SCV 0.41) and exponential, SLO
# at twice the mean, 1 to 64 servers, 50-95 % load. 60,000 requests per case: the
# binomial standard error of an attainment is sqrt(p(1-p)/n) <= 0.002, but near
# saturation successive requests' latencies are correlated over about
# 1/(1-sqrt(rho))^2 service times (about 1,500 at 95 % on one server), which
# inflates the discrete-event run's noise to about 0.01-0.05 at 95 % load on few
# servers; so 95 % is asserted only on 64 servers. Tolerances: 0.01 where the
# fluid meets it (64 servers to 90 %, 16 to 70 %, 2 and 4 at 50 %); elsewhere the measured
# gap (150,000 requests; see gpuscale.sim.fluid) plus a margin for this sample.
def _profile() -> tuple[RequestProfile, bool]:
    from gpuscale.sim.traces import GENTD26_PREDICT_FILE, read_gentd26_service, resolve_traces_dir

    path = resolve_traces_dir() / GENTD26_PREDICT_FILE
    if path.is_file():
        return read_gentd26_service(path), True
    gamma = np.random.default_rng(0).gamma(1 / 0.41, 0.41, 6000)
    return RequestProfile.from_samples(gamma), False


PROFILE, MEASURED = _profile()
GRID_TOL = {1: (0.02, 0.035, 0.035), 2: (0.01, 0.025, 0.03), 4: (0.01, 0.02, 0.025)}


def _grid_tol(replicas: int, load: float) -> float:
    if replicas == 64:
        return 0.01 if load <= 0.9 else 0.015  # 95 %: +0.007 measured, +0.011 here
    if replicas == 16 and load <= 0.7:
        return 0.01
    if replicas == 16:
        return 0.025
    return GRID_TOL[replicas][(0.5, 0.7, 0.9).index(load)]


@pytest.mark.parametrize("shape", ["measured", "exponential"])
@pytest.mark.parametrize(
    ("load", "replicas"),
    [(ld, k) for k in (1, 2, 4, 16, 64) for ld in (0.5, 0.7, 0.9)] + [(0.95, 64)],
)
def test_service_shape_grid_agrees(shape, load, replicas):
    if shape == "measured" and not MEASURED:
        # the grid's tolerances are the gaps measured on GenTD26's own service times
        pytest.skip("GenTD26's model_predict_ms absent: the measured shape's tolerances need it")
    lam = load * replicas
    seconds = int(max(60_000 / lam, 1800))
    a = np.random.default_rng(1).poisson(np.full(seconds, lam)).astype(float)
    wl = Workload("case", a, a, profile=PROFILE if shape == "measured" else None)
    kw = dict(replicas=replicas, slo_s=2.0, timeout_s=120.0)
    fluid = serve_fixed(wl, **kw)
    des = simulate_requests(wl, seed=11, **kw)
    assert fluid.attainment == pytest.approx(des.attainment, abs=_grid_tol(replicas, load))


@pytest.mark.parametrize(
    ("load", "replicas"),
    [(ld, k) for k in (1, 2, 4, 16, 64) for ld in (0.5, 0.7, 0.9, 0.95)],
)
def test_auto_serves_requests_one_by_one_wherever_the_fluid_is_off_by_over_001(load, replicas):
    lam = load * replicas
    a = np.random.default_rng(1).poisson(np.full(86_400, lam)).astype(float)  # a whole day
    wl = Workload("case", a, a, profile=PROFILE)
    fluid_within_001 = replicas == 64  # measured within 0.01 to 95 % (gpuscale.sim.fluid)
    if not fluid_within_001:
        assert choose("auto", wl) == "requests"


# LLM fleets (test_serving.steady_llm's requests, 1,024-token prompts, 256 out): at 80-91 %
# load an engine run's TTFT attainment, fluid against per-request, measured 0.967/1.000 and
# 0.715/0.868 on 2 replicas, 0.934/0.989 on 4 and 0.956/0.996 on 8; 0.994/1.000 on 16
# (bench/bench_queue_models.py, one hour each).
@pytest.mark.parametrize(("replicas", "rate"), [(2, 3.2), (2, 3.6), (4, 7.0), (8, 14.4)])
def test_auto_serves_small_llm_fleets_request_by_request(replicas, rate):
    from gpuscale.sim.llm import step_model
    from gpuscale.sim.serving import ServingConfig, llm_work_seconds, replica_slots

    rng = np.random.default_rng(1)
    ctx = np.rint(rng.lognormal(np.log(1024) - 0.5, 1.0, 20_000)).clip(1)
    gen = np.rint(rng.lognormal(np.log(256) - 0.5, 1.0, 20_000)).clip(1)
    work = llm_work_seconds(ctx, gen)
    a = np.full(86_400, rate)
    wl = Workload("llm", a, a * work.mean(), profile=RequestProfile.from_samples(work, ctx, gen))
    slots = replica_slots(ServingConfig.for_llm(), "H100", wl)
    assert slots == step_model("H100").max_batch(float(ctx.mean() + gen.mean())) or slots == 64
    assert choose("auto", wl, slots=slots) == "requests"
