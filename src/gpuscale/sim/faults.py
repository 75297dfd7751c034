"""Faults injected into a simulated run: what GPU fleets actually do to a deployment.

A policy that looks good on a healthy fleet can still fail its users when a GPU
drops off the bus or a fan dies, so every evaluation can add faults. Each one
acts through the same paths as in production: the device physics changes (the
telemetry shows it) and the cluster loses or restarts a pod (the deployment
status shows it). Policies are never told directly.

* ``gpu-lost``: XID 79; the GPU is gone until replaced (after ``duration``
  seconds, or never) and its series vanish; its pod is replaced elsewhere at once
  or stays bound, never Ready, until deleted (``ClusterConfig.lost_gpu_pod``).
* ``thermal``: a cooling failure raises the GPU's equilibrium temperature by
  ``rise_c``; once hot it throttles and its capacity falls; cleared after
  ``duration``.
* ``ecc-dbe``: a double-bit ECC error (XID 48) crashes the replica's container,
  which cold-starts again on the same GPU.
* ``straggler``: the replica's GPU is held at ``factor`` of its boost clock (the
  exporter's straggler: a clock stuck low, hardware slowdown), so it serves at
  that share of its speed and its telemetry shows it, for ``duration`` or for good.
* ``metrics-down``: the metric source (Prometheus) does not answer the autoscaler
  for ``duration`` (``sim.stepping.OutageSource``; not this injector's: it touches
  neither the cluster nor the GPUs).
"""

import logging
from dataclasses import dataclass, field

import numpy as np

from gpuscale.sim.cluster import Cluster, Pod
from gpuscale.telemetry.faults import HOST_KINDS, Fault, parse_fault, validate
from gpuscale.telemetry.physics import XID_FELL_OFF_BUS, FleetPhysics

logger = logging.getLogger(__name__)

SimFault = Fault
"""The simulator's faults are ``telemetry.faults.Fault``: one grammar for every command."""


def parse_sim_fault(spec: str) -> Fault:
    """Parse a fault spec such as ``thermal@300:duration=600`` for the simulator.

    The grammar is ``telemetry.faults.parse_fault``'s; this checks in addition
    that the simulator can inject the fault (``replica=N``, no ``xid`` or
    ``row-remap``).

    Raises:
        ConfigError: The spec is malformed or names what the simulator cannot
            inject; the message names the spec and the accepted forms.

    Returns:
        The fault.
    """
    return parse_fault(spec, "simulator")


@dataclass(frozen=True, slots=True)
class AppliedFault:
    """A fault as it happened, for reports and tests.

    Attributes:
        fault: The fault.
        at_s: When it was applied, seconds.
        pod: Name of the pod hit, or None when there was none.
        slot: GPU slot hit, or -1.
    """

    fault: Fault
    at_s: float
    pod: str | None
    slot: int


@dataclass(slots=True)
class FaultInjector:
    """Applies faults to a cluster and its fleet physics when they fall due.

    Args:
        faults: The run's faults.
        seed: Picks the replica when a fault does not name one.
    """

    faults: tuple[Fault, ...]
    seed: int = 0
    applied: list[AppliedFault] = field(default_factory=list)
    _pending: list[Fault] = field(default_factory=list)
    _ends: list[tuple[float, str, int]] = field(default_factory=list)
    _rng: np.random.Generator = field(init=False)
    _next: float = float("inf")

    def __post_init__(self) -> None:
        for fault in self.faults:
            validate(fault, "simulator")
        on_fleet = (f for f in self.faults if f.kind not in HOST_KINDS)
        self._pending = sorted(on_fleet, key=lambda f: f.at_s)
        self._rng = np.random.default_rng(self.seed)
        self._update_next()

    def next_due(self) -> float:
        """Time of the next fault start or end, seconds (inf when none)."""
        return self._next

    def _update_next(self) -> None:
        times = [f.at_s for f in self._pending[:1]] + [e[0] for e in self._ends]
        self._next = min(times, default=float("inf"))

    def step(self, now: float, cluster: Cluster, physics: FleetPhysics) -> bool:
        """Apply every fault start and end due at or before ``now``.

        Returns:
            Whether anything happened.
        """
        acted = False
        for end in [e for e in self._ends if e[0] <= now]:
            self._ends.remove(end)
            _, kind, index = end
            if kind == "thermal":
                physics.clear_thermal(index)
            elif kind == "straggler":
                physics.set_clock_cap(index, 1.0)
            acted = True
        while self._pending and self._pending[0].at_s <= now:
            self._apply(self._pending.pop(0), now, cluster, physics)
            acted = True
        self._update_next()
        return acted

    def _target(self, fault: Fault, cluster: Cluster) -> Pod | None:
        pods = cluster.ready_pods() or cluster.held_pods()
        if not pods:
            return None
        if fault.replica is None:
            return pods[int(self._rng.integers(len(pods)))]
        return pods[fault.replica % len(pods)]

    def _apply(self, fault: Fault, now: float, cluster: Cluster, physics: FleetPhysics) -> None:
        pod = self._target(fault, cluster)
        slot = pod.slot if pod is not None else -1
        if slot < 0 and fault.kind == "gpu-lost":
            up = np.flatnonzero(~cluster.slot_broken & (cluster.slot_pod < 0))
            slot = int(up[0]) if up.size else -1
        if slot < 0:
            logger.warning("t=%.0f: fault %s found no GPU to hit; skipped", now, fault.spec())
            self.applied.append(AppliedFault(fault, now, None, -1))
            return
        dev = int(cluster.slot_phys[slot])
        end = None if fault.duration_s is None else now + fault.duration_s
        if fault.kind == "gpu-lost":
            physics.inject_xid(dev, XID_FELL_OFF_BUS, now)
            cluster.fail_gpu(slot, now, replace_after=fault.duration_s)
        elif fault.kind == "thermal":
            physics.inject_thermal(dev, fault.rise_c)
            if end is not None:
                self._ends.append((end, "thermal", dev))
        elif fault.kind == "ecc-dbe":
            physics.inject_ecc_dbe(dev, now)
            if pod is not None:
                cluster.restart_pod(pod, now)
        elif fault.kind == "straggler":
            physics.set_clock_cap(dev, fault.factor)
            if end is not None:
                self._ends.append((end, "straggler", dev))
        name = pod.name if pod is not None else None
        # Debug, not info: a sweep applies each fault in every one of its runs.
        logger.debug("t=%.0f: fault %s hit pod %s (GPU slot %d)", now, fault.spec(), name, slot)
        self.applied.append(AppliedFault(fault, now, name, slot))
