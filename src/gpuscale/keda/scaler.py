"""The decision behind every KEDA call: the controller's reconcile, with KEDA's HPA as the writer.

``gpuscale autoscale`` runs, per target, ``Controller.reconcile``: the one decision
step (status, signals, fail-safe, policy, bounds), the policy's state loaded from
and saved to the workload through ``Actuator.load_state``/``save_state``, the
decision logged with its inputs, Events recorded. The KEDA scaler runs that same
method on the target a ScaledObject's metadata names (``keda.metadata``), one
``Controller`` per ScaledObject, with one difference: KEDA's HPA writes
``/scale``, so the actuator's ``scale`` does nothing here (``HpaWrites``) and the
decision travels back to KEDA as a metric instead.

The metric is chosen so that the HPA's own arithmetic lands on the decision. KEDA
gives an external scaler's metric an ``AverageValue`` target (the default trigger
``metricType``), and for an external metric with an average-value target the HPA
computes ``ceil(value / target)`` replicas, unless ``value / (target x current)``
is within its tolerance of 1 (default 0.1), where it keeps the current count
(``GetExternalPerPodMetricReplicas`` in Kubernetes' replica calculator). With the
target 1, the value ``desired`` gives exactly ``desired``; for a scale-in, any
value in ``(desired - 1, desired]`` does too, and ``metric_value`` sends the
lowest that KEDA's millesimal quantities carry, so a scale-in escapes the
tolerance band as often as it can. A scale-out by 10 % or less is still inside
the default band: docs/keda-scaler.md says how to set the HPA's tolerance to 0.

A ScaledObject is decided at most once per ``sync_period_s``: KEDA asks
``IsActive`` and ``GetMetrics`` in pairs, from its polling loop and from its
metrics adapter, and a policy's state must move on once per decision, as in the
controller.
"""

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuscale.control.controller import Controller
from gpuscale.control.kubecall import WriteGuard
from gpuscale.control.kubernetes import TargetRef
from gpuscale.control.seams import Actuator, Settings
from gpuscale.control.server import ControllerMetrics
from gpuscale.control.targets import TargetRuntime, close_sources
from gpuscale.errors import GpuscaleError
from gpuscale.keda.metadata import target_runtime
from gpuscale.metrics.signal import MetricsSource
from gpuscale.scaling.policy import TargetStatus

logger = logging.getLogger(__name__)

METRIC_NAME = "gpuscale-desired-replicas"
"""The one metric the scaler serves (KEDA prefixes it with ``s<trigger index>-``)."""

TARGET_SIZE = 1
"""The metric's average-value target: one unit per replica."""

QUANTUM = 0.001
"""The finest step of a KEDA metric value (it formats values with three decimals)."""


def metric_value(desired: int, current: int) -> float:
    """The metric value whose HPA reading, against ``TARGET_SIZE``, is ``desired`` replicas.

    Args:
        desired: The policy's bounded decision.
        current: ``spec.replicas`` when it decided.

    Returns:
        ``desired``, or for a scale-in ``desired - 1 + QUANTUM`` (the same ceiling, the
        ratio to the current count as far from 1 as it can be), in replicas.
    """
    if 0 < desired < current:
        return desired - 1 + QUANTUM
    return float(desired)


class HpaWrites:
    """The cluster as the KEDA scaler acts on it: KEDA's HPA, not gpuscale, writes ``/scale``.

    Everything else (status reads, the policy's state, Events, remediation's pod
    deletions) goes to the wrapped actuator unchanged.

    Args:
        actuator: The cluster (``control.kubernetes.KubeActuator``).
    """

    def __init__(self, actuator: Actuator) -> None:
        self.actuator = actuator

    def status(self, ref: TargetRef, *, node_slots: bool = False) -> TargetStatus:
        """The wrapped actuator's status.

        Returns:
            ``/scale`` and the target's pods.
        """
        return self.actuator.status(ref, node_slots=node_slots)

    def scale(self, ref: TargetRef, replicas: int) -> None:
        """Nothing: the HPA KEDA made reads the decision from the metric and writes it."""
        logger.debug("%s: %d replicas left to KEDA's HPA", ref, replicas)

    def load_state(self, ref: TargetRef) -> dict[str, Any]:
        """The wrapped actuator's saved state.

        Returns:
            The state's JSON ({} when none).
        """
        return self.actuator.load_state(ref)

    def save_state(self, ref: TargetRef, state: Mapping[str, Any]) -> None:
        """Save the state as the controller does."""
        self.actuator.save_state(ref, state)

    def record_event(
        self, ref: TargetRef, reason: str, message: str, *, warning: bool = False
    ) -> None:
        """Record an Event, except a rescale: the HPA records its own when it writes."""
        if reason != "SuccessfulRescale":
            self.actuator.record_event(ref, reason, message, warning=warning)

    def delete_pod(self, namespace: str, name: str) -> None:
        """Delete one pod (remediation, a policy's replacement)."""
        self.actuator.delete_pod(namespace, name)

    def cordon(self, node: str) -> None:
        """Cordon a node (remediation)."""
        self.actuator.cordon(node)

    def set_deletion_cost(self, namespace: str, name: str, cost: int | None) -> None:
        """Mark a pod for the HPA's scale-in (placement): its ReplicaSet reads the cost."""
        self.actuator.set_deletion_cost(namespace, name, cost)

    def guard_writes(self, guard: WriteGuard | None) -> None:
        """Pass the write guard on."""
        self.actuator.guard_writes(guard)


@dataclass(frozen=True, slots=True)
class Desired:
    """One decision for one ScaledObject.

    Attributes:
        replicas: What the policy decided, bounded (or the held count).
        current: ``spec.replicas`` read when it decided.
        reason: The policy's reason, or why it held.
        held: The fail-safe's reason when it held, else None.
        at: When it decided, seconds since the epoch.
    """

    replicas: int
    current: int
    reason: str
    held: str | None
    at: float

    @property
    def active(self) -> bool:
        """KEDA's activity: whether the workload should have any replica."""
        return self.replicas > 0

    @property
    def value(self) -> float:
        """The metric value for KEDA (``metric_value``)."""
        return metric_value(self.replicas, self.current)


class DecisionFailedError(GpuscaleError):
    """A reconcile failed (the API server, permissions, a bug); KEDA's HPA holds meanwhile.

    Args:
        message: What failed.
        reason: The controller's error label (``kube_unavailable``, ``forbidden``, ...).
    """

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(slots=True)
class _Entry:
    """One ScaledObject: its metadata, target, controller and last decision."""

    metadata: dict[str, str]
    runtime: TargetRuntime
    controller: Controller
    lock: threading.Lock
    last: Desired | None = None


class KedaScaler:
    """Decides for every ScaledObject KEDA asks about.

    Args:
        source: Where signals are read (Prometheus in production).
        actuator: The cluster (its ``scale`` is never called: ``HpaWrites``).
        sync_period_s: A decision younger than this is reused, seconds.
        clock: Wall clock, seconds since the epoch.
        metrics: The controller's series, shared by every ScaledObject.
    """

    def __init__(
        self,
        source: MetricsSource,
        actuator: Actuator,
        *,
        sync_period_s: float = 15.0,
        clock: Callable[[], float] = time.time,
        metrics: ControllerMetrics | None = None,
    ) -> None:
        self.source = source
        self.actuator = HpaWrites(actuator)
        self.sync_period_s = sync_period_s
        self.clock = clock
        self.metrics = metrics or ControllerMetrics()
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._lock = threading.Lock()

    def check(self, name: str, namespace: str, metadata: Mapping[str, str]) -> TargetRuntime:
        """The target a ScaledObject's metadata names (built once per metadata).

        Returns:
            Its runtime target.

        Raises:
            ConfigError: The metadata is not a valid target (one line naming the key).
        """
        return self._entry(name, namespace, metadata).runtime

    def _entry(self, name: str, namespace: str, metadata: Mapping[str, str]) -> _Entry:
        key, given = (namespace, name), dict(metadata)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.metadata == given:
                return entry
        rt = target_runtime(name, namespace, given)  # outside the lock: it may be slow
        settings = Settings(sync_period_s=self.sync_period_s, workers=1)
        controller = Controller(
            [rt],
            self.source,
            self.actuator,
            settings=settings,
            metrics=self.metrics,
            clock=self.clock,
        )
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry.metadata != given:
                if entry is not None:
                    logger.info("%s/%s: trigger metadata changed; target rebuilt", namespace, name)
                    close_sources([entry.runtime])
                entry = self._entries[key] = _Entry(given, rt, controller, threading.Lock())
                return entry
        close_sources([rt])  # another thread built this key's entry first
        return entry

    def decide(self, name: str, namespace: str, metadata: Mapping[str, str]) -> Desired:
        """The ScaledObject's decision: the last one if younger than the sync period.

        Args:
            name: The ScaledObject's name.
            namespace: Its namespace.
            metadata: Its trigger's metadata.

        Returns:
            The decision.

        Raises:
            ConfigError: The metadata is not a valid target.
            DecisionFailedError: The reconcile failed.
        """
        entry = self._entry(name, namespace, metadata)
        with entry.lock:
            now = self.clock()
            last = entry.last
            if last is not None and 0 <= now - last.at < self.sync_period_s:
                return last
            out = entry.controller.reconcile(entry.runtime)
            if out.error is not None or out.replicas is None or out.current is None:
                raise DecisionFailedError(out.reason or "no decision", out.error or "internal")
            entry.last = Desired(out.replicas, out.current, out.reason, out.held, now)
            return entry.last
