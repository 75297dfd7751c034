"""Faults injected into a simulated run: what GPU fleets actually do to a deployment.

A policy that looks good on a healthy fleet can still fail its users when a GPU
drops off the bus or a fan dies, so every evaluation can add faults. Each one
acts through the same paths as in production: the device physics changes (the
telemetry shows it) and the cluster loses or restarts a pod (the deployment
status shows it). Policies are never told directly.

* ``gpu-lost``: XID 79; the replica's pod fails and the GPU is gone until
  replaced (after ``duration`` seconds, or never); its series vanish.
* ``thermal``: a cooling failure raises the GPU's equilibrium temperature by
  ``extra_c``; once hot it throttles and its capacity falls; cleared after
  ``duration``.
* ``ecc-dbe``: a double-bit ECC error (XID 48) crashes the replica's container,
  which cold-starts again on the same GPU.
* ``straggler``: the replica serves at ``factor`` of its speed (a noisy neighbour,
  a degraded link), for ``duration`` or for good.
"""

import logging
import re
from dataclasses import dataclass, field
from typing import Literal, cast, get_args

import numpy as np

from gpuscale.errors import ConfigError
from gpuscale.sim.cluster import Cluster, Pod
from gpuscale.telemetry.physics import FleetPhysics

logger = logging.getLogger(__name__)

FaultKind = Literal["gpu-lost", "thermal", "ecc-dbe", "straggler"]
KINDS: tuple[str, ...] = get_args(FaultKind)
FORMS = (
    "KIND@SECONDS[:replica=N][:duration=SECONDS][:factor=F][:extra_c=C], KIND one of "
    + ", ".join(KINDS)
    + ', e.g. "gpu-lost@600", "thermal@300:duration=600", "straggler@120:factor=0.3"'
)
_SPEC = re.compile(r"^(?P<kind>[a-z-]+)@(?P<at>[^:]+)(?P<opts>(:[^:]*)*)$")


@dataclass(frozen=True, slots=True)
class SimFault:
    """One fault at one time.

    Attributes:
        kind: ``gpu-lost``, ``thermal``, ``ecc-dbe`` or ``straggler``.
        at_s: Seconds from the run start.
        replica: Which Ready replica (0 = oldest); None picks one with the run's seed.
        duration_s: How long it lasts (until the GPU is replaced for ``gpu-lost``);
            None for the rest of the run.
        factor: Speed left to a straggler, 0 to 1.
        extra_c: Equilibrium temperature rise of a thermal fault, Celsius.
    """

    kind: FaultKind
    at_s: float
    replica: int | None = None
    duration_s: float | None = None
    factor: float = 0.5
    extra_c: float = 35.0

    def spec(self) -> str:
        """The fault in ``parse_sim_fault`` syntax.

        Returns:
            A spec that parses back to this fault.
        """
        parts = [f"{self.kind}@{self.at_s:g}"]
        if self.replica is not None:
            parts.append(f"replica={self.replica}")
        if self.duration_s is not None:
            parts.append(f"duration={self.duration_s:g}")
        if self.factor != 0.5:
            parts.append(f"factor={self.factor:g}")
        if self.extra_c != 35.0:
            parts.append(f"extra_c={self.extra_c:g}")
        return ":".join(parts)


def _bad(spec: str, why: str) -> ConfigError:
    return ConfigError(f"--fault {spec!r}: {why}; use {FORMS}")


def _number(spec: str, key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _bad(spec, f"{key}={text!r} is not a number") from None
    if not np.isfinite(value) or value < 0:
        raise _bad(spec, f"{key}={text!r} must be a non-negative number")
    return value


def parse_sim_fault(spec: str) -> SimFault:
    """Parse a fault spec such as ``thermal@300:duration=600``.

    Raises:
        ConfigError: The spec is malformed; the message names it and the accepted forms.

    Returns:
        The fault.
    """
    m = _SPEC.match(spec.strip())
    if m is None:
        raise _bad(spec, "expected KIND@SECONDS")
    kind = m.group("kind")
    if kind not in KINDS:
        raise _bad(spec, f"unknown fault kind {kind!r}")
    at = _number(spec, "at", m.group("at"))
    opts: dict[str, float] = {}
    for item in filter(None, m.group("opts").split(":")):
        key, sep, value = item.partition("=")
        if not sep or key not in ("replica", "duration", "factor", "extra_c") or key in opts:
            raise _bad(spec, f"option {item!r} is unknown or repeated")
        opts[key] = _number(spec, key, value)
    replica = opts.get("replica")
    if replica is not None and replica != int(replica):
        raise _bad(spec, f"replica={replica:g} must be a whole number")
    factor = opts.get("factor", 0.5)
    if not 0.0 < factor <= 1.0:
        raise _bad(spec, f"factor={factor:g} must be in (0, 1]")
    return SimFault(
        cast("FaultKind", kind),
        at,
        None if replica is None else int(replica),
        opts.get("duration"),
        factor,
        opts.get("extra_c", 35.0),
    )


@dataclass(frozen=True, slots=True)
class AppliedFault:
    """A fault as it happened, for reports and tests.

    Attributes:
        fault: The fault.
        at_s: When it was applied, seconds.
        pod: Name of the pod hit, or None when there was none.
        slot: GPU slot hit, or -1.
    """

    fault: SimFault
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

    faults: tuple[SimFault, ...]
    seed: int = 0
    applied: list[AppliedFault] = field(default_factory=list)
    _pending: list[SimFault] = field(default_factory=list)
    _ends: list[tuple[float, str, int, Pod | None]] = field(default_factory=list)
    _rng: np.random.Generator = field(init=False)
    _next: float = float("inf")

    def __post_init__(self) -> None:
        self._pending = sorted(self.faults, key=lambda f: f.at_s)
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
            _, kind, index, pod = end
            if kind == "thermal":
                physics.clear_thermal(index)
            elif kind == "straggler" and pod is not None:
                cluster.set_speed(pod, 1.0)
            acted = True
        while self._pending and self._pending[0].at_s <= now:
            self._apply(self._pending.pop(0), now, cluster, physics)
            acted = True
        self._update_next()
        return acted

    def _target(self, fault: SimFault, cluster: Cluster) -> Pod | None:
        pods = cluster.ready_pods() or cluster.held_pods()
        if not pods:
            return None
        if fault.replica is None:
            return pods[int(self._rng.integers(len(pods)))]
        return pods[fault.replica % len(pods)]

    def _apply(self, fault: SimFault, now: float, cluster: Cluster, physics: FleetPhysics) -> None:
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
            physics.inject_xid(dev, 79, now)
            cluster.fail_gpu(slot, now, replace_after=fault.duration_s)
        elif fault.kind == "thermal":
            physics.inject_thermal(dev, fault.extra_c)
            if end is not None:
                self._ends.append((end, "thermal", dev, None))
        elif fault.kind == "ecc-dbe":
            physics.inject_ecc_dbe(dev, now)
            if pod is not None:
                cluster.restart_pod(pod, now)
        elif pod is not None:  # straggler
            cluster.set_speed(pod, fault.factor)
            if end is not None:
                self._ends.append((end, "straggler", dev, pod))
        name = pod.name if pod is not None else None
        logger.info("t=%.0f: fault %s hit pod %s (GPU slot %d)", now, fault.spec(), name, slot)
        self.applied.append(AppliedFault(fault, now, name, slot))
