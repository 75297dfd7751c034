"""The engine integrates the GPUs' simulated power and deletes the pods a decision names."""

from dataclasses import dataclass, field

import numpy as np

from gpuscale.scaling.policy import Decision, Observation
from gpuscale.sim.cluster import ClusterConfig, ColdStart
from gpuscale.sim.engine import Scenario, simulate
from gpuscale.sim.serving import ServingConfig
from gpuscale.sim.workload import Workload
from gpuscale.telemetry.gpus import gpu_model
from tests.support.policystate import Stateless


@dataclass
class Deleter(Stateless):
    """Keeps 2 replicas; at ``at`` asks once for the oldest Ready pod to be deleted."""

    at: float = 300.0
    name: str = "deleter"
    interval_s: float = 5.0
    history_s: float = 0.0
    signals: dict = field(default_factory=dict)
    pod_signals: dict = field(default_factory=dict)
    min_replicas: int = 0
    max_replicas: int = 4
    seen: list[Observation] = field(default_factory=list)
    victim: str | None = None

    def decide(self, observation, state):
        self.seen.append(observation)
        if observation.now >= self.at and self.victim is None:
            self.victim = next(p.name for p in observation.target.pods if p.ready)
            return Decision(2, "replace", state, delete=(self.victim,))
        return Decision(2, "hold", state)


def scenario(rate: float, seconds: int = 900) -> Scenario:
    arrivals = np.full(seconds, rate)
    return Scenario(
        workload=Workload("flat", arrivals, arrivals * 1.0),
        cluster=ClusterConfig(
            gpus_per_node=4, initial_nodes=1, max_nodes=2, cold_start=ColdStart.fixed(60.0)
        ),
        serving=ServingConfig(),
        slo_latency_s=5.0,
        timeout_s=60.0,
        initial_replicas=2,
    )


def test_a_named_pod_is_deleted_and_replaced():
    policy = Deleter()
    simulate(scenario(1.0), policy)
    later = [o for o in policy.seen if o.now >= 400.0]  # past the grace and a cold start
    names = {p.name for p in later[-1].target.pods}
    assert policy.victim is not None
    assert policy.victim not in names
    assert len(names) == 2  # the ReplicaSet replaced it
    assert all(p.ready for p in later[-1].target.pods)


def test_energy_is_the_ready_nodes_power_between_idle_and_tdp():
    # One Ready node of 4 GPUs all run: every GPU draws at least its idle power and at
    # most its TDP (the physics' bounds), so the mean lies between 4 x idle and 4 x TDP.
    idle = simulate(scenario(0.0), Deleter(at=1e9)).timeline.power_w
    busy = simulate(scenario(1.6), Deleter(at=1e9)).timeline.power_w
    model = gpu_model(ClusterConfig().gpu_model)
    assert 4 * model.idle_w * 0.95 <= float(np.mean(idle)) <= 4 * model.tdp_w
    assert float(np.mean(busy)) > float(np.mean(idle))  # power follows activity
    assert float(np.mean(busy)) <= 4 * model.tdp_w
