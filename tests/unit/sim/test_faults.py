"""Faults act through the physics and the cluster, and policies see them only as telemetry."""

from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuscale.errors import ConfigError
from gpuscale.metrics.signal import Signal
from gpuscale.scaling.policy import Decision, Observation
from gpuscale.sim.cluster import Cluster, ClusterConfig, ColdStart
from gpuscale.sim.engine import Scenario, simulate
from gpuscale.sim.faults import FaultInjector, parse_sim_fault
from gpuscale.sim.serving import ServingConfig
from gpuscale.sim.workload import Workload
from gpuscale.telemetry.faults import Fault
from gpuscale.telemetry.physics import FleetPhysics, gpu_model
from tests.support.policystate import Stateless

PER_POD = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_THERMAL_VIOLATION", "DCGM_FI_DEV_XID_ERRORS")


@dataclass
class Watcher(Stateless):
    """A fake policy holding a fixed count and recording what it sees per pod."""

    replicas: int = 4
    name: str = "watcher"
    interval_s: float = 15.0
    history_s: float = 0.0
    signals: dict = field(default_factory=dict)
    pod_signals: dict = field(
        default_factory=lambda: {n: Signal(n, aggregation="max", by=("pod",)) for n in PER_POD}
    )
    min_replicas: int = 0
    max_replicas: int = 16
    seen: dict[float, Observation] = field(default_factory=dict)

    def decide(self, observation, state):
        self.seen[observation.now] = observation
        return Decision(self.replicas, "hold", state)


def run(faults, *, load=0.5, seconds=1800, gpus=4, nodes=1, replicas=4, slo=5.0, watcher=None):
    rate = np.full(seconds, load * replicas)  # smooth demand, 1 GPU-second per request
    sc = Scenario(
        workload=Workload("flat", rate, rate.copy()),
        cluster=ClusterConfig(
            gpus_per_node=gpus,
            initial_nodes=nodes,
            max_nodes=nodes,
            cold_start=ColdStart.fixed(60.0),
        ),
        serving=ServingConfig(),
        slo_latency_s=slo,
        timeout_s=120.0,
        initial_replicas=replicas,
        faults=tuple(parse_sim_fault(f) for f in faults),
        record_interval_s=15.0,
        queue_model="fluid",  # smooth demand: these check the faults on the fluid's means
    )
    policy = watcher or Watcher(replicas=replicas)
    return simulate(sc, policy), policy


@pytest.mark.parametrize(
    ("spec", "fault"),
    [
        ("gpu-lost@600", Fault("gpu-lost", 600.0)),
        ("thermal@300:duration=600", Fault("thermal", 300.0, duration_s=600.0)),
        ("ecc-dbe@900:replica=2", Fault("ecc-dbe", 900.0, replica=2)),
        ("straggler@120:factor=0.3", Fault("straggler", 120.0, factor=0.3)),
        ("thermal@0:rise_c=50", Fault("thermal", 0.0, rise_c=50.0)),
        ("thermal@0:extra_c=50", Fault("thermal", 0.0, rise_c=50.0)),  # old spelling
        (" gpu-lost@1.5:duration=60 ", Fault("gpu-lost", 1.5, duration_s=60.0)),
    ],
)
def test_good_fault_specs_parse(spec, fault):
    assert parse_sim_fault(spec) == fault


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("gpu-lost", "expected KIND@SECONDS"),
        ("melt@5", "unknown fault kind 'melt'"),
        ("thermal@soon", "at='soon' is not a number"),
        ("straggler@5:factor=2", "factor must be in (0, 1]"),
        ("thermal@5:bogus=1", "'bogus=1' is not one of"),
        ("gpu-lost@5:replica=1.5", "replica=1.5 must be a whole number"),
        ("xid@5:code=13", "the simulator (gpuscale evaluate) cannot inject xid faults"),
        ("row-remap@5", "the simulator (gpuscale evaluate) cannot inject row-remap faults"),
        ("gpu-lost@5:gpu=1", "gpu=N does not apply to the simulator"),
    ],
)
def test_bad_fault_specs_are_config_errors_naming_the_spec_and_the_simulator_forms(spec, problem):
    with pytest.raises(ConfigError) as err:
        parse_sim_fault(spec)
    message = str(err.value)
    assert message.startswith(f"--fault {spec!r}: {problem}")
    assert "straggler@SECONDS[:replica=N][:factor=F][:duration=SECONDS]" in message
    assert "xid@SECONDS" not in message
    assert "\n" not in message


def test_injector_rejects_a_fault_built_for_the_exporter():
    with pytest.raises(ConfigError, match="cannot inject row-remap"):
        FaultInjector((Fault("row-remap", 5.0),))


@given(
    st.sampled_from(["gpu-lost", "thermal", "ecc-dbe", "straggler"]),
    st.integers(0, 10**6),
    st.one_of(st.none(), st.integers(0, 64)),
    st.one_of(st.none(), st.integers(1, 10**5)),
    st.integers(1, 100),
)
def test_fault_specs_round_trip(kind, at, replica, duration, pct):
    span = None if duration is None or kind == "ecc-dbe" else float(duration)
    factor = pct / 100 if kind == "straggler" else 0.5
    fault = Fault(kind, float(at), replica=replica, duration_s=span, factor=factor)
    assert parse_sim_fault(fault.spec()) == fault


def test_lost_gpu_removes_its_replica_and_its_series_vanish():
    res, policy = run(["gpu-lost@600:replica=0"], gpus=4, replicas=4)
    before, after = policy.seen[585.0], policy.seen[660.0]
    util_before = before.pod_metrics["DCGM_FI_DEV_GPU_UTIL"]
    util_after = after.pod_metrics["DCGM_FI_DEV_GPU_UTIL"]
    assert "inference-00001" in util_before
    assert "inference-00001" not in util_after  # absent, not 0
    assert all("inference-00001" not in v for v in after.pod_metrics.values())
    assert after.target.ready == 3
    assert after.target.desired == 4
    assert after.target.starting == 1  # the replacement waits: no GPU is free
    tl = res.timeline
    row = 600 // 15
    assert tl.capacity_rps[row - 1] == pytest.approx(4.0)
    assert tl.capacity_rps[row + 1 :].max() == pytest.approx(3.0)
    assert tl.ready_replicas[-1] == 3


def test_replaced_gpu_takes_the_pending_replica_back():
    res, _ = run(["gpu-lost@300:replica=1:duration=600"], gpus=4, replicas=4, seconds=1500)
    tl = res.timeline
    assert tl.ready_replicas[int(600 / 15)] == 3
    # Replaced at 900, then a 60 s cold start.
    assert tl.ready_replicas[int(950 / 15)] == 3
    assert tl.ready_replicas[int(975 / 15)] == 4


def test_lost_gpu_replica_is_rescheduled_on_a_free_gpu():
    res, policy = run(["gpu-lost@300"], gpus=8, replicas=4)
    tl = res.timeline
    assert tl.ready_replicas[int(330 / 15)] == 3
    assert tl.ready_replicas[int(375 / 15)] == 4
    assert len(policy.seen[450.0].pod_metrics["DCGM_FI_DEV_GPU_UTIL"]) == 4


def test_thermal_fault_lowers_capacity_through_the_throttled_clock():
    res, policy = run(["thermal@300:replica=0:duration=900"], load=0.9, seconds=2400)
    tl = res.timeline
    base = tl.capacity_rps[int(280 / 15)]
    hot = tl.capacity_rps[int(900 / 15) : int(1200 / 15)]
    assert base == pytest.approx(4.0, rel=0.01)
    assert hot.max() < base - 0.1  # one GPU's clock fell
    assert hot.min() > base - 1.0  # only that one
    assert tl.capacity_rps[-1] == pytest.approx(base, rel=0.01)  # cooled down again
    viol = policy.seen[1200.0].pod_metrics["DCGM_FI_DEV_THERMAL_VIOLATION"]
    assert viol["inference-00001"] > 0
    assert all(v == 0 for pod, v in viol.items() if pod != "inference-00001")


def test_ecc_double_bit_error_restarts_the_replica_and_reports_xid_48():
    res, policy = run(["ecc-dbe@600:replica=3"])
    tl = res.timeline
    assert tl.ready_replicas[int(585 / 15)] == 4
    assert tl.ready_replicas[int(615 / 15)] == 3  # its container crashed and cold-starts
    assert tl.ready_replicas[int(690 / 15)] == 4
    xid = policy.seen[660.0].pod_metrics["DCGM_FI_DEV_XID_ERRORS"]
    assert xid["inference-00004"] == 48.0
    assert xid["inference-00001"] == 0.0


def test_straggler_replica_serves_slower():
    healthy, _ = run([], load=0.8, slo=2.0)
    slow, _ = run(["straggler@300:replica=0:factor=0.3"], load=0.8, slo=2.0)
    row = int(900 / 15)
    assert healthy.timeline.capacity_rps[row] == pytest.approx(4.0)
    assert slow.timeline.capacity_rps[row] == pytest.approx(3.3)
    assert slow.within_slo < healthy.within_slo
    assert np.nanmean(slow.timeline.p99_latency_s[row:]) > np.nanmean(
        healthy.timeline.p99_latency_s[row:]
    )


def test_straggler_with_duration_recovers():
    res, _ = run(["straggler@300:replica=0:factor=0.5:duration=300"])
    tl = res.timeline
    assert tl.capacity_rps[int(450 / 15)] == pytest.approx(3.5)
    assert tl.capacity_rps[int(900 / 15)] == pytest.approx(4.0)


def test_straggler_holds_its_gpus_clock_down_so_the_telemetry_shows_it():
    # One grammar, one meaning: the exporter's straggler is a clock held at
    # ``factor`` of boost; the simulator's is the same GPU state, not a hidden
    # speed the telemetry cannot see.
    cluster = Cluster(ClusterConfig(gpus_per_node=2, initial_nodes=1, max_nodes=1))
    physics = FleetPhysics([gpu_model("H100")] * cluster.n_devices)
    cluster.start(2)
    injector = FaultInjector((parse_sim_fault("straggler@10:replica=0:factor=0.4:duration=60"),))
    assert injector.step(10.0, cluster, physics)
    (hit,) = injector.applied
    dev = int(cluster.slot_phys[hit.slot])
    assert physics.clock_cap[dev] == 0.4
    assert np.count_nonzero(physics.clock_cap < 1.0) == 1
    assert injector.step(70.0, cluster, physics)
    assert physics.clock_cap[dev] == 1.0


def test_fault_with_no_replica_to_hit_is_skipped_but_a_lost_gpu_still_goes():
    cluster = Cluster(ClusterConfig(gpus_per_node=2, initial_nodes=1, max_nodes=1))
    physics = FleetPhysics([gpu_model("H100")] * cluster.n_devices)
    faults = (parse_sim_fault("straggler@10"), parse_sim_fault("gpu-lost@20"))
    injector = FaultInjector(faults)
    assert injector.next_due() == 10.0
    assert not injector.step(5.0, cluster, physics)
    assert injector.step(25.0, cluster, physics)
    skipped, lost = injector.applied
    assert (skipped.pod, skipped.slot) == (None, -1)
    assert lost.pod is None
    assert cluster.slot_broken[lost.slot]
    assert physics.lost[lost.slot]
    assert injector.next_due() == float("inf")
