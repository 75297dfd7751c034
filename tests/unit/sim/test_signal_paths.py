"""Each baseline reads its signal on its real path, and the DCGM fields mean what DCGM means.

A step change in load, and the first decision whose observation shows it: HPA's
``DCGM_FI_DEV_GPU_UTIL`` waits for dcgm-exporter's collect (30 s, at 7 s past),
then Prometheus' scrape (15 s) and the HPA sync (15 s); KEDA's raw query of the
serving metrics waits only for the scrape; KPA samples concurrency itself every
second. Then ``GPU_UTIL`` against ``SM_ACTIVE`` on a batched run, and KPA's start
in panic in a whole run.
"""

import math

import numpy as np
import pytest

from gpuscale.evaluate import policies as registry
from gpuscale.metrics.signal import Signal
from gpuscale.scaling.hpa import DEFAULT_BEHAVIOR, HpaConfig, HpaPolicy
from gpuscale.scaling.keda import KedaConfig, KedaPolicy
from gpuscale.scaling.kpa import KpaConfig, KpaPolicy
from gpuscale.scaling.policy import QUEUE_PROXY, RECORDING_RULE, Decision, SignalPath
from gpuscale.sim.cluster import ClusterConfig, ColdStart
from gpuscale.sim.engine import Scenario, simulate
from gpuscale.sim.serving import ServingConfig
from gpuscale.sim.workload import Workload
from gpuscale.telemetry.activity import kernel_busy_share
from tests.support.policystate import Stateless

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"


class Probe(Stateless):
    """Reads what a real policy reads, on its declared path, and never scales."""

    def __init__(self, policy, replicas: int = 2) -> None:
        self.name = "probe"
        self.interval_s = policy.interval_s
        self.history_s = policy.history_s
        self.signals = dict(policy.signals)
        self.pod_signals = dict(policy.pod_signals)
        self.signal_path = policy.signal_path
        self.min_replicas = self.max_replicas = replicas
        self.seen = []

    def decide(self, observation, state):
        self.seen.append(observation)
        return Decision(self.max_replicas, "probe", state)


def scenario(rate: np.ndarray, serving: ServingConfig | None = None, replicas: int = 2):
    wl = Workload("step", rate.astype(float), rate.astype(float))  # 1 GPU-second each
    cluster = ClusterConfig(
        gpus_per_node=4, initial_nodes=1, max_nodes=1, cold_start=ColdStart.fixed(60.0)
    )
    return Scenario(
        wl,
        cluster,
        serving or ServingConfig(),
        slo_latency_s=30.0,
        timeout_s=600.0,
        initial_replicas=replicas,
        queue_model="fluid",  # a smooth step: the delays are read off the fluid's means
    )


def step_load(at: int, n: int = 900, rate: float = 1.2) -> np.ndarray:
    r = np.zeros(n)
    r[at:] = rate
    return r


def first_seen(probe: Probe, value) -> float:
    """The first decision time whose observation reflects the load."""
    return min(o.now for o in probe.seen if o.healthy and value(o) > 0.3)


def pod_mean(key):
    def value(o):
        v = list(o.pod_metrics.get(key, {}).values())
        return float(np.mean(v)) / (100.0 if key == GPU_UTIL else 1.0) if v else 0.0

    return value


def latest_sum(o) -> float:
    return sum(points[-1][1] for points in o.series.values() if points)


def expected_prometheus_delay(step: int, collect: bool) -> float:
    """First collect whose last second is busy, first scrape at or after, first 15 s sync."""
    seen_at = step + 1  # the queue's state after second ``step``
    if collect:  # collects at 0, 7, 37, 67, ... s; each reads its last second
        seen_at = 7 + 30 * math.ceil((seen_at - 7) / 30)
    scrape = 15 * math.ceil(seen_at / 15)
    return 15 * math.ceil(scrape / 15) - step


@pytest.mark.parametrize("step", [601, 608, 620])
def test_hpa_sees_gpu_util_after_dcgm_collect_scrape_and_sync(step):
    probe = Probe(HpaPolicy(HpaConfig()))
    simulate(scenario(step_load(step)), probe)
    delay = first_seen(probe, pod_mean(GPU_UTIL)) - step
    assert delay == expected_prometheus_delay(step, collect=True)
    assert 0 < delay <= 30 + 15 + 15


@pytest.mark.parametrize("step", [601, 608, 620])
def test_keda_sees_its_raw_query_after_the_scrape_only(step):
    probe = Probe(KedaPolicy(KedaConfig(threshold=1.0)))
    simulate(scenario(step_load(step)), probe)
    delay = first_seen(probe, latest_sum) - step
    assert delay == expected_prometheus_delay(step, collect=False)
    assert delay <= 15


def test_at_608_s_hpa_waits_for_the_next_collect_while_keda_does_not():
    hpa, keda = Probe(HpaPolicy(HpaConfig())), Probe(KedaPolicy(KedaConfig(threshold=1.0)))
    simulate(scenario(step_load(608)), hpa)
    simulate(scenario(step_load(608)), keda)
    assert first_seen(hpa, pod_mean(GPU_UTIL)) == 645.0  # collect 637, scrape and sync 645
    assert first_seen(keda, latest_sum) == 615.0  # scrape and sync 615


@pytest.mark.parametrize("step", [601, 608, 620])
def test_kpa_sees_concurrency_within_a_tick(step):
    policy = KpaPolicy(KpaConfig(target=1.0))
    assert policy.signal_path == QUEUE_PROXY
    probe = Probe(policy)
    simulate(scenario(step_load(step)), probe)
    delay = first_seen(probe, latest_sum) - step
    assert 0 < delay <= policy.interval_s  # the sample of second ``step``, at the next tick
    later = next(o for o in probe.seen if o.now == step + 20 - (step % 2))
    times = [t for t, _ in later.series["concurrency"]]
    assert times == [float(t) for t in range(int(later.now) - 60, int(later.now) + 1)]


def test_a_recording_rule_path_reads_prometheus_its_delay_late():
    probe = Probe(HpaPolicy(HpaConfig()))
    probe.signal_path = RECORDING_RULE
    simulate(scenario(step_load(608)), probe)
    assert first_seen(probe, pod_mean(GPU_UTIL)) == 645.0 + 15.0  # the rule's 15 s


def test_signal_path_rejects_nonsense():
    with pytest.raises(ValueError, match="source"):
        SignalPath("graphite")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="interval_s"):
        SignalPath("direct", interval_s=0.0)


def _llm_readings(in_flight_per_replica: float) -> tuple[float, float]:
    """Mean GPU_UTIL (%) and SM_ACTIVE of a steady batched run at this concurrency."""
    slots, replicas = 64, 2
    serving = ServingConfig(slots_per_replica=slots)
    # A request holds a slot for work x slots seconds: m = rate x slots / replicas.
    rate = np.full(900, in_flight_per_replica * replicas / slots)
    probe = Probe(HpaPolicy(HpaConfig()), replicas)
    probe.pod_signals = {
        "util": Signal(GPU_UTIL, aggregation="avg", by=("pod",)),
        "sm": Signal(SM_ACTIVE, aggregation="avg", by=("pod",)),
    }
    simulate(scenario(rate, serving, replicas), probe)
    late = [o for o in probe.seen if o.now >= 600]
    util = np.mean([v for o in late for v in o.pod_metrics["util"].values()])
    sm = np.mean([v for o in late for v in o.pod_metrics["sm"].values()])
    return float(util), float(sm)


def test_gpu_util_is_time_a_kernel_runs_while_sm_active_tracks_the_batch():
    light_util, light_sm = _llm_readings(3.0)
    heavy_util, heavy_sm = _llm_readings(45.0)
    # Three sequences in a 64-slot batch: some kernel runs ~95 % of the time ...
    assert light_util == pytest.approx(100 * float(kernel_busy_share(3.0, 64)), abs=3.0)
    assert light_util > 90.0
    # ... while the SMs are mostly idle: one-sequence decode levels.
    assert light_sm < 0.5
    # Fifteen times the load: GPU_UTIL cannot rise, SM_ACTIVE follows the batch fill.
    assert heavy_util >= 99.0
    assert heavy_sm > light_sm + 0.2
    assert heavy_util - light_util < 10.0


def test_one_slot_serving_reads_its_duty_cycle_on_both_fields():
    probe = Probe(HpaPolicy(HpaConfig()))
    probe.pod_signals["sm"] = Signal(SM_ACTIVE, aggregation="avg", by=("pod",))
    simulate(scenario(np.full(900, 1.2)), probe)  # 60 % of two one-slot replicas
    late = [o for o in probe.seen if o.now >= 600]
    util = np.mean([v for o in late for v in o.pod_metrics[GPU_UTIL].values()])
    sm = np.mean([v for o in late for v in o.pod_metrics["sm"].values()])
    assert util == pytest.approx(60.0, abs=3.0)
    assert sm == pytest.approx(0.95 * 0.60, abs=0.04)  # compute-bound, one at a time


def test_kpa_starts_in_panic_in_a_run_and_holds_its_pods_for_a_stable_window():
    cfg = KpaConfig(target=1.0, min_replicas=1, max_replicas=8)
    sc = scenario(np.zeros(300), replicas=4)
    result = simulate(sc, KpaPolicy(cfg, "kpa"))
    desired = result.timeline.desired_replicas
    times = result.timeline.time_s
    assert desired[times < 60].min() == 4  # no load, yet no drop inside the stable window
    assert desired[-1] < 4  # then it scales in


def test_registry_offers_each_path_and_signal_variant():
    fair = registry.FairInputs(
        min_replicas=1,
        max_replicas=40,
        static_replicas=10,
        target_utilization=0.7,
        per_replica=44.8,
        lead_s=60.0,
        hold_s=90.0,
        node_lead_s=0.0,
        fast_capacity=8,
        node_size=8,
        node_keep_s=600.0,
        wait_budget_s=4.0,
        pod_concurrency=64,
    )
    cfg = {name: registry.get(name).fair(fair) for name in registry.names()}
    assert cfg["hpa"].behavior is None
    assert cfg["hpa"].metric == GPU_UTIL
    assert cfg["hpa-behavior"].behavior == DEFAULT_BEHAVIOR
    assert cfg["hpa-behavior"].metric == GPU_UTIL
    assert (cfg["hpa-sm"].metric, cfg["hpa-sm"].target_average_value) == (SM_ACTIVE, 0.7)
    assert cfg["hpa-sm"].behavior is None
    assert cfg["keda"].behavior is None  # KEDA's HPA has no spec.behavior by default
    assert cfg["keda-sm"].terms == (Signal(SM_ACTIVE, aggregation="sum"),)
    assert cfg["keda-util"].terms == (Signal(GPU_UTIL, aggregation="sum"),)
    assert cfg["keda-util"].threshold == pytest.approx(70.0)
    defaults = registry.default_names()
    assert {"static", "hpa", "hpa-sm", "keda", "kpa", "oracle"} <= set(defaults)
    assert "hpa-behavior" not in defaults
    assert "keda-sm" not in defaults
    assert registry.choose(()) == defaults
    assert registry.choose(("keda-sm",)) == ("keda-sm",)
