"""The simulator's closed loop: the catalogue runs in the run's store and times each fault."""

import numpy as np
import pytest

from gpuscale.alerts.catalogue import build_catalogue
from gpuscale.alerts.evaluate import window_s
from gpuscale.alerts.model import alert_names
from gpuscale.metrics.signal import Signal
from gpuscale.sim.cluster import ClusterConfig, ColdStart
from gpuscale.sim.engine import Scenario, simulate
from gpuscale.sim.faults import parse_sim_fault
from gpuscale.sim.serving import ServingConfig
from gpuscale.sim.workload import Workload
from tests.unit.sim.test_faults import Watcher

COLLECT_S = 30.0  # Scenario's default collect interval
SCRAPE_S = 15.0  # its scrape interval, and the rules' evaluation interval


def run(faults, *, load=0.5, seconds=1200, watcher=None, alerting=True):
    """Four replicas on one four-GPU node (no spare GPU), smooth demand, 60 s cold starts."""
    rate = np.full(seconds, load * 4)
    sc = Scenario(
        workload=Workload("flat", rate, rate.copy()),
        cluster=ClusterConfig(
            gpus_per_node=4, initial_nodes=1, max_nodes=1, cold_start=ColdStart.fixed(60.0)
        ),
        serving=ServingConfig(),
        slo_latency_s=5.0,
        timeout_s=120.0,
        initial_replicas=4,
        faults=tuple(parse_sim_fault(f) for f in faults),
        record_interval_s=15.0,
        queue_model="fluid",
        alerting=alerting,
    )
    policy = watcher or Watcher(replicas=4)
    return simulate(sc, policy), policy


def test_a_lost_gpu_is_detected_by_fell_off_bus_within_a_scrape_and_its_for():
    result, _ = run(["gpu-lost@600"], seconds=1200)
    (timing,) = result.fault_timings
    assert timing.kind == "gpu-lost"
    assert timing.alert == "GpuFellOffBus"
    # XID 79 reaches the exporter's count at the next collect (every 30 s), Prometheus at
    # the next scrape (15 s), and the rules run at every scrape; for: is 0 s.
    assert timing.detect_s is not None
    assert 0.0 < timing.detect_s <= COLLECT_S + SCRAPE_S


def test_a_double_bit_error_is_detected_and_mitigated_when_the_replica_restarts():
    result, _ = run(["ecc-dbe@600:replica=1"], seconds=1200)
    (timing,) = result.fault_timings
    assert timing.alert == "GpuEccDoubleBitError"
    assert timing.detect_s is not None
    assert timing.detect_s <= COLLECT_S + SCRAPE_S
    # The container cold-starts again in place: ColdStart.fixed(60) in run_faults.
    assert timing.mitigate_s == pytest.approx(60.0)


def test_a_lost_gpu_with_no_spare_is_not_mitigated():
    # Four replicas on one four-GPU node: nowhere to put a replacement.
    result, _ = run(["gpu-lost@600"], seconds=1200)
    assert result.fault_timings[0].mitigate_s is None


def test_firing_alerts_are_in_the_store_as_alerts_for_the_policies():
    watcher = Watcher(replicas=4)
    firing = Signal("ALERTS", {"alertstate": "firing"}, aggregation="max", by=("pod",))
    watcher.pod_signals = {"firing": firing}
    # A failed cooling fan on a busy GPU: it heats past GpuTemperatureHigh's 85 C and stays
    # Ready, so its pod is among those the policy observes.
    result, _ = run(["thermal@300:rise_c=40:replica=0"], seconds=900, load=0.9, watcher=watcher)
    (timing,) = result.fault_timings
    seen = {
        t: o.pod_metrics["firing"] for t, o in watcher.seen.items() if o.pod_metrics.get("firing")
    }
    assert seen
    assert timing.detect_s is not None
    # The policy reads the store through a 15 s recording rule, so it sees the alert
    # from the first decision at least 15 s after it fired.
    assert min(seen) >= 300.0 + timing.detect_s + 15.0
    assert {pod for pods in seen.values() for pod in pods} == {timing.pod}


def test_alerting_is_off_unless_asked_and_then_reports_nothing():
    result, _ = run(["gpu-lost@600"], seconds=900, alerting=False)
    assert result.fault_timings == ()
    assert Scenario.__dataclass_fields__["alerting"].default is False


def test_the_store_keeps_what_the_longest_rule_reads():
    # The SLO's 6 h burn window is the catalogue's longest range.
    assert window_s(build_catalogue()) == 6 * 3600
    assert "GpuFellOffBus" in alert_names(build_catalogue())
