"""Simulator test helpers: a recording policy, workloads and a small scenario."""

from dataclasses import dataclass, field

import numpy as np

from gpuscale.metrics.signal import Signal
from gpuscale.scaling.policy import RECORDING_RULE, Decision, Observation, SignalPath
from gpuscale.scaling.state import JsonState
from gpuscale.sim.cluster import ClusterConfig, ColdStart
from gpuscale.sim.engine import Scenario
from gpuscale.sim.serving import ServingConfig
from gpuscale.sim.workload import Workload

UTIL = Signal("DCGM_FI_DEV_GPU_UTIL", aggregation="avg", by=("pod",))


@dataclass(frozen=True, slots=True)
class CallCount(JsonState):
    """The recorder's state: how many decisions it has made."""

    calls: int = 0


@dataclass
class Recorder:
    """A fake policy: asks for a fixed count and keeps every observation it got."""

    replicas: int | list[int] = 2
    name: str = "recorder"
    interval_s: float = 5.0
    history_s: float = 0.0
    signals: dict = field(default_factory=dict)
    pod_signals: dict = field(default_factory=lambda: {"util": UTIL})
    min_replicas: int = 0
    max_replicas: int = 16
    seen: list[Observation] = field(default_factory=list)
    signal_path: SignalPath = RECORDING_RULE
    reads_node_slots: bool = False

    def initial_state(self) -> CallCount:
        return CallCount()

    def load_state(self, data) -> CallCount:
        return CallCount.from_json(data)

    def decide(self, observation, state):
        self.seen.append(observation)
        n = len(self.seen) - 1
        want = (
            self.replicas
            if isinstance(self.replicas, int)
            else self.replicas[n % len(self.replicas)]
        )
        return Decision(want, "fixed", CallCount(state.calls + 1))


def workload(rate: np.ndarray, service_s: float = 1.0, seed: int = 0) -> Workload:
    a = np.random.default_rng(seed).poisson(rate).astype(float)
    return Workload("test", a, a * service_s)


def smooth(rate: np.ndarray, service_s: float = 1.0) -> Workload:
    return Workload("smooth", rate.astype(float), rate * service_s)


def scenario(wl: Workload, **kw) -> Scenario:
    base = dict(
        workload=wl,
        cluster=ClusterConfig(
            gpus_per_node=4, initial_nodes=1, max_nodes=4, cold_start=ColdStart.fixed(60.0)
        ),
        serving=ServingConfig(),
        slo_latency_s=5.0,
        timeout_s=60.0,
        initial_replicas=2,
        queue_model="fluid",  # these check the signal path on the fluid's smooth means
    )
    base.update(kw)
    return Scenario(**base)


@dataclass
class Script:
    """A fake policy: ``plan(now)`` replicas at each decision."""

    plan: object
    name: str = "script"
    interval_s: float = 1.0
    history_s: float = 0.0
    signals: dict = field(default_factory=dict)
    pod_signals: dict = field(default_factory=dict)
    min_replicas: int = 0
    max_replicas: int = 16
    signal_path: SignalPath = RECORDING_RULE
    reads_node_slots: bool = False

    def initial_state(self) -> CallCount:
        return CallCount()

    def load_state(self, data) -> CallCount:
        return CallCount.from_json(data)

    def decide(self, observation, state):
        return Decision(int(self.plan(observation.now)), "scripted", state)
