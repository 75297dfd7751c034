"""Serving: LLM cost figures, capacity, latency under and over load, the oracle's need."""

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.errors import ConfigError
from gpuscale.metrics.signal import Signal
from gpuscale.scaling.policy import Decision, Observation
from gpuscale.scaling.static import StaticPolicy, StaticState
from gpuscale.sim.cluster import ClusterConfig, ColdStart
from gpuscale.sim.engine import Scenario, simulate
from gpuscale.sim.fixed import serve_fixed
from gpuscale.sim.fluid import FluidQueue, residual_arrival_scv
from gpuscale.sim.llm import TENSOR_PARALLEL, step_model
from gpuscale.sim.queueing import erlang_c, shaped_latency_cdf, stationary_attainment
from gpuscale.sim.serving import (
    ServingConfig,
    llm_work_seconds,
    relative_speed,
    required_replicas,
)
from gpuscale.sim.workload import RequestProfile, Workload
from tests.support.policystate import Stateless


def poisson(rate: np.ndarray | float, seconds: int, service_s: float, seed: int = 0) -> Workload:
    rng = np.random.default_rng(seed)
    a = rng.poisson(np.broadcast_to(rate, (seconds,))).astype(float)
    return Workload("poisson", a, a * service_s)


def exact_erlang_c(k: int, a: float) -> float:
    b = 1.0
    for n in range(1, k + 1):
        b = a * b / (n + a * b)
    rho = a / k
    return b / (1 - rho * (1 - b)) if rho < 1 else 1.0


def test_llm_cost_is_decode_share_plus_prefill_of_the_step_model():
    model = step_model("H100")
    ctx, gen = np.array([1024.0]), np.array([256.0])
    batch = model.max_batch(1280.0)
    step = float(model.decode_step_s(batch, batch * (1024 + 128)))
    expected = 256 * step / batch + float(model.prefill_cost_s(1024.0))
    assert llm_work_seconds(ctx, gen, "H100")[0] == pytest.approx(expected, rel=1e-9)


def test_llm_cost_grows_with_tokens_and_differs_by_gpu():
    ctx = np.array([100, 1000, 1000])
    gen = np.array([10, 10, 500])
    h100 = llm_work_seconds(ctx, gen, "H100")
    assert np.all(np.diff(h100) > 0)
    assert np.all(llm_work_seconds(ctx, gen, "A100") > h100)
    assert relative_speed("H100") == 1.0
    # Splitwise's A100 decodes 1.5x and prefills 2.6x slower than its H100.
    assert 0.4 < relative_speed("A100") < 0.7 < 1.0 < relative_speed("H200")
    assert relative_speed("L4") < relative_speed("A100")


def test_gpu_without_llm_step_figures_is_a_config_error_listing_choices():
    with pytest.raises(ConfigError, match="one of H100, A100, H200"):
        llm_work_seconds(np.array([1]), np.array([1]), "B300")


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [({"slots_per_replica": 0}, "slots_per_replica"), ({"slo_quantile": 1.0}, "slo_quantile")],
)
def test_bad_serving_config_is_a_config_error(kwargs, key):
    with pytest.raises(ConfigError, match=f"serving.{key}"):
        ServingConfig(**kwargs)


def test_llm_config_batches_requests():
    cfg = ServingConfig.for_llm()
    assert cfg.slots_per_replica == 64
    assert cfg.gpus_per_replica == TENSOR_PARALLEL == 2
    assert ServingConfig().gpus_per_replica == 1
    assert ServingConfig.for_llm(slots=8, model_bytes=1e9).model_bytes == 1e9


def test_served_throughput_scales_with_ready_replicas():
    wl = poisson(20.0, 600, 1.0)  # 20 requests/s, 1 GPU-second each: needs 20 replicas
    done = {}
    for replicas in (4, 8):
        q = FluidQueue(timeout_s=1e6)
        for t in range(wl.duration_s):
            q.step(t, wl.arrivals[t], wl.work_s[t], replicas, float(replicas))
        done[replicas] = q.departed / wl.duration_s
    assert done[4] == pytest.approx(4.0, rel=0.02)
    assert done[8] == pytest.approx(8.0, rel=0.02)


def test_throttled_capacity_serves_slower():
    wl = poisson(3.0, 3600, 1.0)
    full = serve_fixed(wl, replicas=4, slo_s=3.0, timeout_s=600.0, speed=1.0)
    slow = serve_fixed(wl, replicas=4, slo_s=3.0, timeout_s=600.0, speed=0.85)
    assert slow.mean_latency_s > full.mean_latency_s * 1.5
    assert slow.attainment < full.attainment - 0.1


def test_underloaded_requests_meet_the_slo():
    wl = poisson(2.0, 3600, 0.2)  # 10 % load on 4 replicas
    run = serve_fixed(wl, replicas=4, slo_s=2.0, timeout_s=30.0)
    assert run.dropped == pytest.approx(0.0, abs=1e-6)
    assert run.mean_latency_s == pytest.approx(0.2, rel=0.05)
    assert run.attainment == pytest.approx(1 - math.exp(-2.0 / 0.2), abs=0.01)


def test_overload_grows_the_queue_and_times_requests_out():
    wl = poisson(10.0, 1200, 1.0)  # 10 requests/s on 5 replicas: twice the capacity
    q = FluidQueue(timeout_s=20.0)
    waiting = []
    for t in range(wl.duration_s):
        q.step(t, wl.arrivals[t], wl.work_s[t], 5, 5.0)
        waiting.append(q.waiting)
    assert waiting[10] < waiting[19]
    # The queue fills up to a timeout's worth of arrivals and stays there.
    assert np.mean(waiting[100:]) == pytest.approx(10.0 * 20.0, rel=0.05)
    arrived = float(wl.arrivals.sum())
    assert q.dropped / arrived == pytest.approx(0.5, abs=0.03)
    run = serve_fixed(wl, replicas=5, slo_s=5.0, timeout_s=20.0)
    assert run.dropped / run.requests == pytest.approx(0.5, abs=0.03)
    assert run.attainment < 0.05
    assert 15.0 < run.mean_latency_s < 22.0


def test_no_replicas_means_requests_wait_then_drop():
    wl = Workload("w", np.full(100, 2.0), np.full(100, 2.0))
    q = FluidQueue(timeout_s=10.0)
    for t in range(100):
        q.step(t, 2.0, 2.0, 0, 0.0)
    assert q.departed == 0.0
    assert q.waiting == pytest.approx(20.0, abs=2.0)
    assert q.dropped == pytest.approx(200.0 - q.waiting, abs=1e-6)
    assert serve_fixed(wl, replicas=0, slo_s=1.0, timeout_s=10.0).within_slo == 0.0


def test_constant_rate_gives_the_exact_mmk_mean_wait():
    k, lam, s = 4, 3.6, 1.0
    q = FluidQueue(timeout_s=1e6, arrival_scv=1.0)
    for t in range(3000):
        q.step(t, lam, lam * s, k, float(k))
    expected_wait = exact_erlang_c(k, lam * s) / (k / s - lam)
    assert q.records.wait_s[-1] == pytest.approx(expected_wait, rel=1e-3)
    assert q.busy == pytest.approx(lam * s, rel=1e-6)


@pytest.mark.parametrize("k", [1, 4, 64, 65, 200, 2000])
@pytest.mark.parametrize("rho", [0.3, 0.8, 0.95, 0.999])
def test_erlang_c_matches_the_exact_recursion(k, rho):
    assert float(erlang_c(k, rho * k)) == pytest.approx(exact_erlang_c(k, rho * k), rel=1e-3)


def test_residual_arrival_variability_tells_counts_from_rates():
    assert residual_arrival_scv(poisson(20.0, 3600, 1.0)) < 0.1
    smooth = Workload("s", np.full(3600, 20.0), np.full(3600, 20.0))
    assert residual_arrival_scv(smooth) == 1.0


def scenario(wl: Workload, **kw) -> Scenario:
    return Scenario(
        workload=wl,
        cluster=ClusterConfig(cold_start=ColdStart.fixed(30.0)),
        serving=ServingConfig(**kw),
        slo_latency_s=4.0,
        timeout_s=60.0,
    )


def test_required_replicas_is_the_fewest_that_keep_the_slo():
    rate = np.repeat([2.0, 10.0, 40.0, 0.0], 600)
    wl = Workload("steps", rate, rate * 1.0)
    sc = scenario(wl)
    need = required_replicas(wl, sc)
    assert need.shape == (2400,)
    assert need[-100:].tolist() == [0] * 100
    for t in (300, 900, 1500):
        r = int(need[t])
        goal = sc.serving.slo_quantile * (1 - math.exp(-sc.slo_latency_s / 1.0))
        assert stationary_attainment(r, rate[t], 1.0, sc.slo_latency_s) >= goal
        assert stationary_attainment(r - 1, rate[t], 1.0, sc.slo_latency_s) < goal
    assert need[300] < need[900] < need[1500]


def test_required_replicas_aims_at_the_share_the_service_shape_allows():
    # Less variable service than exponential: on an idle replica more requests meet the
    # SLO (the shifted-exponential fit of SCV 0.41 gives 0.9966 within 4 means, against
    # 1 - e^-4), so the goal is slo_quantile of that share. An exponential's share would
    # accept one replica fewer at this rate (a wait too long for 0.99 of the 0.9966).
    rate = np.full(600, 10.0)
    wl = Workload("steady", rate, rate * 1.0)
    sc = scenario(wl, service_scv=0.41)
    r = int(required_replicas(wl, sc)[300])
    best = float(shaped_latency_cdf(np.asarray(4.0), 0.0, 0.0, np.inf, 1.0, 0.41))
    assert best > 1 - math.exp(-4.0)
    goal = sc.serving.slo_quantile * best
    assert stationary_attainment(r, 10.0, 1.0, 4.0, 0.41) >= goal
    assert stationary_attainment(r - 1, 10.0, 1.0, 4.0, 0.41) < goal


def test_required_replicas_counts_batch_slots_and_gpu_speed():
    rate = np.full(600, 40.0)
    wl = Workload("llm", rate, rate * 0.05)
    batched = required_replicas(wl, scenario(wl, slots_per_replica=16))
    single = required_replicas(wl, scenario(wl))
    assert batched[300] <= single[300]
    slow = Scenario(
        wl, ClusterConfig(gpu_model="A100"), ServingConfig(), slo_latency_s=4.0, timeout_s=60.0
    )
    assert required_replicas(wl, slow)[300] > single[300]


@settings(max_examples=25, deadline=None)
@given(st.floats(0.5, 200.0), st.floats(0.05, 2.0))
def test_required_replicas_never_fall_as_demand_rises(rate, service):
    base = np.full(120, rate)
    wl_lo = Workload("lo", base, base * service)
    wl_hi = Workload("hi", base * 1.5, base * 1.5 * service)
    lo = required_replicas(wl_lo, scenario(wl_lo))[60]
    hi = required_replicas(wl_hi, scenario(wl_hi))[60]
    assert hi >= lo >= math.ceil(rate * service)


# The LLM requirement: TTFT and TPOT ------------------------------------------------------------


def steady_llm(rate: float, context: float, generated: float, seconds: int = 1_800) -> Workload:
    """A constant rate of LLM requests with lognormal prompt and output lengths."""
    rng = np.random.default_rng(1)
    ctx = np.rint(rng.lognormal(math.log(context) - 0.5, 1.0, 20_000)).clip(1)
    gen = np.rint(rng.lognormal(math.log(generated) - 0.5, 1.0, 20_000)).clip(1)
    work = llm_work_seconds(ctx, gen)
    arrivals = np.full(seconds, rate)
    tokens = np.stack([arrivals * ctx.mean(), arrivals * gen.mean()], axis=1)
    profile = RequestProfile.from_samples(work, ctx, gen)
    return Workload("steady", arrivals, arrivals * work.mean(), tokens, profile)


def llm_scenario(wl: Workload, replicas: int) -> Scenario:
    nodes = math.ceil(replicas * TENSOR_PARALLEL / 8)
    cluster = ClusterConfig(
        initial_nodes=nodes, max_nodes=max(nodes, 1), cold_start=ColdStart.fixed(30.0)
    )
    return Scenario(
        wl, cluster, ServingConfig.for_llm(), slo_latency_s=60.0, timeout_s=600.0,
        initial_replicas=replicas,
    )  # fmt: skip


def attainment(wl: Workload, replicas: int) -> tuple[float, float, float]:
    """Share of ended requests meeting both objectives, TTFT, and TPOT, on a fixed fleet."""
    result = simulate(llm_scenario(wl, replicas), StaticPolicy(replicas))
    ended = result.requests - result.in_flight_requests
    assert result.ttft_within_slo is not None
    assert result.tpot_within_slo is not None
    return (
        result.within_slo / ended,
        result.ttft_within_slo / ended,
        result.tpot_within_slo / ended,
    )


@pytest.mark.parametrize(
    ("context", "generated", "binding"),
    [(1_000.0, 250.0, "ttft"), (2_000.0, 25.0, "tpot")],
    ids=["conversation-like", "coding-like"],
)
def test_a_fleet_of_exactly_the_llm_requirement_meets_the_target_and_one_fewer_misses(
    context, generated, binding
):
    wl = steady_llm(40.0, context, generated)
    sc = llm_scenario(wl, 1)
    need = required_replicas(wl, sc)
    assert np.all(need == need[0])
    r, target = int(need[0]), sc.serving.slo_quantile
    both, _, _ = attainment(wl, r)
    assert both >= target
    fewer, ttft_fewer, tpot_fewer = attainment(wl, r - 1)
    assert fewer < target
    # Conversation: the queue's wait breaks TTFT first; coding (long prompts, short
    # outputs): prefills interleaved with decodes break TPOT first.
    missed = ttft_fewer if binding == "ttft" else tpot_fewer
    assert missed < target
    assert (tpot_fewer if binding == "ttft" else ttft_fewer) >= target


def test_the_llm_requirement_is_not_the_end_to_end_latency_plan():
    wl = steady_llm(40.0, 2_000.0, 25.0)
    sc = llm_scenario(wl, 1)
    e2e = dataclasses.replace(sc, serving=dataclasses.replace(sc.serving, llm_slo=None))
    # Planning on end-to-end latency ignores TPOT, which binds on coding-like requests.
    assert required_replicas(wl, sc)[0] > required_replicas(wl, e2e)[0]


# GPUs per replica ------------------------------------------------------------------------------


class GpuProbe(Stateless):
    """A static policy that records how many GPU series there are, and each pod's spread."""

    def __init__(self, replicas: int) -> None:
        self.name = "probe"
        self.interval_s = 60.0
        self.history_s = 0.0
        util = "DCGM_FI_DEV_GPU_UTIL"
        self.signals = {"series": Signal(util, aggregation="count")}
        self.pod_signals = {
            "lo": Signal(util, aggregation="min", by=("pod",)),
            "hi": Signal(util, aggregation="max", by=("pod",)),
        }
        self.min_replicas = self.max_replicas = replicas
        self.seen: list[Observation] = []

    def decide(self, observation: Observation, state: StaticState) -> Decision[StaticState]:
        self.seen.append(observation)
        return Decision(self.max_replicas, "probe", state)


def test_two_gpu_replicas_cost_two_gpus_and_each_gpu_reports_the_replicas_activity():
    wl = steady_llm(20.0, 1_000.0, 250.0, seconds=600)
    sc = llm_scenario(wl, 12)
    probe = GpuProbe(12)
    result = simulate(sc, probe)
    replica_seconds = float((result.timeline.ready_replicas * sc.record_interval_s).sum())
    assert replica_seconds == pytest.approx(12 * 600)
    assert result.gpu_seconds == pytest.approx(2 * replica_seconds)
    assert result.busy_gpu_seconds <= result.gpu_seconds
    assert np.allclose(result.timeline.allocated_gpus, 24.0)
    late = probe.seen[-1]
    assert late.series["series"][-1][1] == 24.0  # one DCGM series per GPU
    lo, hi = late.pod_metrics["lo"], late.pod_metrics["hi"]
    assert len(lo) == 12
    assert all(lo[p] == hi[p] > 0.0 for p in lo)  # both GPUs of a replica report alike
