"""The loop's seams and records: what it needs from the cluster, how it runs, what it did.

``Actuator`` and ``Elector`` are the two protocols the loop is written against
(``control.kubernetes.KubeActuator`` and ``control.lease.LeaseElector`` implement
them); ``Settings`` is how it runs; ``Outcome`` is what one reconcile did, and is
also the structured record of the decision log line.
"""

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpuscale.control.kubecall import WriteGuard
from gpuscale.control.kubernetes import TargetRef
from gpuscale.control.targets import TargetRuntime
from gpuscale.scaling.policy import Forecast, Observation, TargetStatus

logger = logging.getLogger(__name__)

STATE_REWRITE_S = 60.0
"""A state whose only change is time passing is rewritten at most this often, seconds."""


@dataclass(frozen=True, slots=True)
class SavedState:
    """What the stored policy state holds now, as last written or read.

    The store holds ``{"policy": name, "state": <the state's JSON>}`` per target.

    Attributes:
        text: The stored JSON, keys sorted.
        essential: The state's decision-relevant JSON when written (None when read).
        at: When it was written, seconds (-inf when read at start).
    """

    text: str
    essential: str | None
    at: float


class Actuator(Protocol):
    """What the loop needs from the cluster (``control.kubernetes.KubeActuator``)."""

    def status(self, ref: TargetRef, *, node_slots: bool = False) -> TargetStatus:
        """``/scale`` and the target's live pods; with ``node_slots``, their nodes' room."""
        ...

    def scale(self, ref: TargetRef, replicas: int) -> None:
        """Set ``spec.replicas`` through ``/scale``."""
        ...

    def load_state(self, ref: TargetRef) -> dict[str, Any]:
        """The target's stored policy state ({} when there is none)."""
        ...

    def save_state(self, ref: TargetRef, state: Mapping[str, Any]) -> None:
        """Store the target's policy state."""
        ...

    def record_event(
        self, ref: TargetRef, reason: str, message: str, *, warning: bool = False
    ) -> None:
        """Record an Event on the target."""
        ...

    def delete_pod(self, namespace: str, name: str) -> None:
        """Delete one pod."""
        ...

    def set_deletion_cost(self, namespace: str, name: str, cost: int | None) -> None:
        """Annotate a pod's ``controller.kubernetes.io/pod-deletion-cost`` (None removes it)."""
        ...

    def cordon(self, node: str) -> None:
        """Mark a node unschedulable."""
        ...

    def guard_writes(self, guard: WriteGuard | None) -> None:
        """Check ``guard`` before every write from now on (each retry included)."""
        ...


class Elector(Protocol):
    """Leader election (``control.lease.LeaseElector``)."""

    def try_acquire_or_renew(self) -> bool:
        """Whether this replica holds the lease now."""
        ...

    def valid_for(self) -> float:
        """Seconds this replica may still act on its last renewal (<= 0: not leading)."""
        ...

    def release(self) -> object:
        """Give the lease up."""
        ...


class Catalog(Protocol):
    """Where the targets come from when they live in the cluster (``scalers.ClusterScalers``)."""

    def runtimes(self) -> list[TargetRuntime]:
        """The targets to reconcile this sync."""
        ...

    def report(self, done: Sequence[tuple[TargetRuntime, "Outcome"]], now: float) -> None:
        """Write what this sync did back to the objects the targets come from."""
        ...


class OwnerCheck(Protocol):
    """Finds another autoscaler of a target (``owners.OtherAutoscalers``)."""

    def begin_sync(self) -> None:
        """Forget what the last sync listed."""
        ...

    def owner_of(self, ref: TargetRef) -> str:
        """The other autoscaler scaling ``ref`` ("" when none)."""
        ...


class KubeWorkload:
    """One target behind the decision step's ``Workload`` protocol: reads, and writes unless dry.

    Args:
        actuator: The cluster.
        ref: The target.
        dry_run: Read only: writes are skipped (the step's outcome still says what it
            would have done).
    """

    def __init__(self, actuator: Actuator, ref: TargetRef, *, dry_run: bool = False) -> None:
        self.actuator, self.ref, self.dry_run = actuator, ref, dry_run

    def status(self, *, node_slots: bool) -> TargetStatus:
        """``/scale`` and the live pods; with ``node_slots``, their nodes' room.

        Returns:
            The status.
        """
        return self.actuator.status(self.ref, node_slots=node_slots)

    def scale(self, replicas: int) -> None:
        """Write ``/scale`` (not in a dry run)."""
        if not self.dry_run:
            self.actuator.scale(self.ref, replicas)

    def delete_pod(self, name: str) -> None:
        """Delete a pod of the target (not in a dry run); its ReplicaSet recreates it."""
        if not self.dry_run:
            self.actuator.delete_pod(self.ref.namespace, name)

    def set_deletion_costs(self, costs: Mapping[str, int | None]) -> None:
        """Annotate the target's pods' deletion costs (not in a dry run), before ``/scale``."""
        logger.info(
            "%s: pod-deletion-cost%s %s",
            label(self.ref),
            " (dry run, not written)" if self.dry_run else "",
            ", ".join(
                f"{name}={cost if cost is not None else 'removed'}" for name, cost in costs.items()
            ),
        )
        if not self.dry_run:
            for name, cost in costs.items():
                self.actuator.set_deletion_cost(self.ref.namespace, name, cost)

    def cordon(self, node: str) -> None:
        """Cordon a node (not in a dry run)."""
        if not self.dry_run:
            self.actuator.cordon(node)


@dataclass(frozen=True, slots=True)
class Settings:
    """How the loop runs.

    Attributes:
        sync_period_s: Seconds between syncs (an HPA's ``--horizontal-pod-autoscaler-sync-period``).
        retry_period_s: Seconds between lease renewals (client-go's ``RetryPeriod``).
        dry_run: Decide and log, but write nothing to the cluster.
        workers: Targets reconciled concurrently.
        write_margin_s: With leader election, a write is sent only while the last
            renewal is good for longer than this (at least one API request's timeout),
            seconds.
    """

    sync_period_s: float = 15.0
    retry_period_s: float = 2.0
    dry_run: bool = False
    workers: int = 8
    write_margin_s: float = 3.0


@dataclass(slots=True)
class Outcome:
    """What one reconcile of one target did (also the structured log record).

    Attributes:
        target: ``namespace/kind/name``.
        policy: Policy name.
        current: ``spec.replicas`` read, or None when the read failed.
        replicas: What was set (or held); None when nothing was decided.
        reason: The policy's reason, or why it held or failed.
        held: The fail-safe reason when the decision held, else None.
        error: The error reason label when the reconcile failed, else None.
        ready: Ready pods.
        starting: Pods not Ready yet.
        inputs: Latest value of each signal, per-pod values of each pod signal.
        remediation: What remediation did or would do, "" when nothing.
        dry_run: Whether writes were skipped.
        duration_s: Time the reconcile took.
        scaled: Whether ``spec.replicas`` was changed (or would be, in a dry run).
        owned_by: The other autoscaler that scales the target ("" when none): then
            nothing was decided and nothing written.
        forecast: The demand forecast a forecasting policy planned for, else None.
    """

    target: str
    policy: str
    current: int | None = None
    replicas: int | None = None
    reason: str = ""
    held: str | None = None
    error: str | None = None
    ready: int = 0
    starting: int = 0
    inputs: dict[str, Any] = field(default_factory=dict)
    remediation: str = ""
    dry_run: bool = False
    duration_s: float = 0.0
    scaled: bool = False
    owned_by: str = ""
    forecast: Forecast | None = None


def label(ref: TargetRef) -> str:
    """The ``target`` label of a target: ``namespace/kind/name``.

    Returns:
        The label value.
    """
    return f"{ref.namespace}/{ref.kind}/{ref.name}"


def inputs(obs: Observation) -> dict[str, Any]:
    """The values that drove a decision, small enough for a log line.

    Returns:
        Each signal's latest value, and each per-pod signal's values (at most 32 pods);
        non-finite values as None (JSON has no NaN).
    """
    out: dict[str, Any] = {k: (v[-1][1] if v else None) for k, v in obs.series.items()}
    for key, per_pod in obs.pod_metrics.items():
        out[f"{key} by pod"] = {p: v for p, v in sorted(per_pod.items())[:32]}
    return {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in out.items()
    }
