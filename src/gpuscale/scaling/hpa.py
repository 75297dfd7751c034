"""Kubernetes HPA (autoscaling/v2) on a per-pod GPU metric: the baseline most users already run.

A user who scales GPU inference today typically points an HPA at
``DCGM_FI_DEV_GPU_UTIL`` through prometheus-adapter: a ``Pods`` metric with an
``AverageValue`` target. This module reproduces what the controller does with
it, defaults included (``pkg/controller/podautoscaler``: ``replica_calculator.go``
and ``horizontal.go``), so the simulator compares gpuscale with the real thing.

After the replica calculator the controller takes one of two paths:

* No ``spec.behavior`` (``HpaConfig(behavior=None)``, the default, as in most
  manifests and in KEDA's default ScaledObject): ``normalizeDesiredReplicas``,
  here ``reconcile_legacy``.
* ``spec.behavior`` set (``HpaConfig(behavior=DEFAULT_BEHAVIOR)`` for the
  autoscaling/v2 defaults): ``normalizeDesiredReplicasWithBehaviors``, written
  once in ``baseline.reconcile`` because KEDA's HPA uses it too.

In the calculator:

* Samples are truncated milli-values (``int(value * 1000)``) and the average
  over pods is an integer division, as in ``GetMetricUsageRatio``.
* For a ``Pods`` metric ``groupPods`` gets an empty resource name, so only
  *Pending* pods are "unready": a pod that is not Ready but reports the metric
  counts like a ready one. ``PodStatus`` has no phase, so a pod that is not
  Ready and has no sample is taken to be Pending (a GPU pod that has not started
  has no DCGM series). ``readiness="resource"`` applies the CPU rule instead.
* Unready pods count as 0 when the ratio says scale up and are ignored
  otherwise; Ready pods without a sample ("missing") count as 0 on scale-up and
  as exactly the target on scale-down; after that rebalancing nothing changes if
  the new ratio is within tolerance or flips direction.
* A target at 0 replicas disables a real HPA; the ``ScalingPolicy`` contract
  wants bounds kept, so this restores ``min_replicas`` ("below minReplicas").
"""

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, cast

from gpuscale.errors import require
from gpuscale.metrics.signal import Signal
from gpuscale.scaling.baseline import HpaBehavior, check_bounds, hold, reconcile
from gpuscale.scaling.policy import PROMETHEUS_QUERY, Decision, Observation, PodStatus
from gpuscale.scaling.recommendations import HpaState, prune, remembered
from gpuscale.scaling.state import KeepsState

logger = logging.getLogger(__name__)

Readiness = Literal["pods", "resource"]

DEFAULT_BEHAVIOR = HpaBehavior()
"""autoscaling/v2 default ``spec.behavior`` (``GenerateHPAScaleUpRules``/``...DownRules``): up
+4 pods or +100 % per 15 s, whichever is more; down -100 % per 15 s after 300 s stabilisation."""

SCALE_UP_LIMIT_FACTOR = 2
"""``scaleUpLimitFactor`` in ``horizontal.go``: the legacy path at most doubles per sync."""

SCALE_UP_LIMIT_MINIMUM = 4
"""``scaleUpLimitMinimum`` in ``horizontal.go``: the legacy path may always reach 4."""


@dataclass(frozen=True, slots=True)
class HpaConfig:
    """An HPA with one ``Pods`` metric and an ``AverageValue`` target; controller defaults.

    Each field's unit is in its ``metadata["unit"]`` (empty for names and choices).

    Attributes:
        metric: Per-pod series to average (label ``pod``).
        target_average_value: Target per-pod value, in the metric's unit.
        tolerance: ``--horizontal-pod-autoscaler-tolerance``: no change within ±10 %.
        sync_period_s: ``--horizontal-pod-autoscaler-sync-period``.
        behavior: ``spec.behavior``; None (the default) runs the legacy path.
        downscale_stabilization_s: ``--horizontal-pod-autoscaler-downscale-stabilization``.
        readiness: ``pods`` (the controller's rule for a Pods metric) or ``resource`` (CPU's).
        cpu_initialization_period_s: ``--horizontal-pod-autoscaler-cpu-initialization-period``.
        initial_readiness_delay_s: ``--horizontal-pod-autoscaler-initial-readiness-delay``.
        metric_window_s: Sample window assumed by the ``resource`` rule.
        min_replicas: ``minReplicas`` (at least 1 for a Pods metric).
        max_replicas: ``maxReplicas``.
    """

    metric: str = field(default="DCGM_FI_DEV_GPU_UTIL", metadata={"unit": ""})
    target_average_value: float = field(default=70.0, metadata={"unit": "metric unit"})
    tolerance: float = field(default=0.1, metadata={"unit": "ratio"})
    sync_period_s: float = field(default=15.0, metadata={"unit": "s"})
    behavior: HpaBehavior | None = field(default=None, metadata={"unit": ""})
    downscale_stabilization_s: float = field(default=300.0, metadata={"unit": "s"})
    readiness: Readiness = field(default="pods", metadata={"unit": ""})
    cpu_initialization_period_s: float = field(default=300.0, metadata={"unit": "s"})
    initial_readiness_delay_s: float = field(default=30.0, metadata={"unit": "s"})
    metric_window_s: float = field(default=30.0, metadata={"unit": "s"})
    min_replicas: int = field(default=1, metadata={"unit": "replicas"})
    max_replicas: int = field(default=100, metadata={"unit": "replicas"})

    def __post_init__(self) -> None:
        def check(ok: bool, key: str, fix: str) -> None:
            require(ok, f"HpaConfig.{key}={getattr(self, key)!r}", "out of range", fix)

        check(bool(self.metric), "metric", "name a per-pod series")
        check(self.target_average_value > 0, "target_average_value", "use a positive target")
        check(0 <= self.tolerance < 1, "tolerance", "use 0..1")
        check(self.sync_period_s > 0, "sync_period_s", "use > 0 s")
        check(0 <= self.downscale_stabilization_s <= 3600, "downscale_stabilization_s", "0..3600")
        check(self.readiness in ("pods", "resource"), "readiness", "use 'pods' or 'resource'")
        check(self.min_replicas >= 1, "min_replicas", "use 1 or more (KEDA scales to zero)")
        check_bounds("HpaConfig", self.min_replicas, self.max_replicas)
        if self.behavior is not None:
            self.behavior.validate("HpaConfig.behavior")


@dataclass(frozen=True, slots=True)
class Proposal:
    """What a replica calculator recommends, with the numbers that led to it.

    Attributes:
        replicas: Recommended replica count.
        usage: Observed value per pod (Pods/AverageValue) or in total (Value), metric unit.
        ratio: Usage over target (before any rebalancing).
        note: Which rule decided, for the decision's reason.
    """

    replicas: int
    usage: float
    ratio: float
    note: str


def milli(value: float) -> int:
    """A sample as the metrics APIs carry it: truncated milli-units.

    Returns:
        ``int(value * 1000)``, milli-units of the metric.
    """
    return int(value * 1000)


Tolerance = float | tuple[float, float]
"""One tolerance both ways, or (scale-down, scale-up) as ``behavior``'s ``tolerance`` sets them."""


def _within(ratio: float, tolerance: Tolerance) -> bool:
    down, up = (tolerance, tolerance) if isinstance(tolerance, float | int) else tolerance
    return (1.0 - down) <= ratio <= (1.0 + up)


def tolerances(tolerance: float, behavior: HpaBehavior | None) -> Tolerance:
    """The calculator's tolerance: ``behavior``'s per-direction ones where set.

    Returns:
        ``tolerance``, or (scale-down, scale-up) fractions.
    """
    return tolerance if behavior is None else behavior.tolerances(tolerance)


def _unready_by_cpu_rule(pod: PodStatus, now: float, config: HpaConfig) -> bool:
    """The CPU readiness rule of ``groupPods`` (used only with ``readiness='resource'``)."""
    if now < pod.created_at + config.cpu_initialization_period_s:
        # Within initialisation: unready, or Ready for less than one sample window.
        return not pod.ready or (
            pod.ready_at is not None and now < pod.ready_at + config.metric_window_s
        )
    # Afterwards: ignore only a pod that is unready and has never been Ready.
    transition = pod.ready_at if pod.ready_at is not None else pod.created_at
    return not pod.ready and pod.created_at + config.initial_readiness_delay_s > transition


def group_pods(
    pods: Iterable[PodStatus], values: Mapping[str, float], now: float, config: HpaConfig
) -> tuple[int, set[str], set[str]]:
    """Sort pods as ``groupPods`` does: ready with a sample, unready, missing.

    Args:
        pods: Live pods of the target (terminating ones already excluded).
        values: Latest sample per pod name (NaN counts as absent).
        now: Decision time, seconds.
        config: Readiness mode and its periods.

    Returns:
        (count of pods whose sample is used, unready pod names, missing pod names).
    """
    return _group_and_read(pods, values, now, config)[:3]


def _group_and_read(
    pods: Iterable[PodStatus], values: Mapping[str, float], now: float, config: HpaConfig
) -> tuple[int, set[str], set[str], dict[str, int]]:
    """``group_pods``, and in the same pass each used pod's sample in milli-units.

    Returns:
        ``group_pods``' three, and {pod name: ``int(value * 1000)``} of the pods that
        are neither unready nor missing, in pod order.
    """
    ready_count = 0
    unready: set[str] = set()
    missing: set[str] = set()
    used: dict[str, int] = {}
    cpu_rule = config.readiness == "resource"
    pods = tuple(pods)
    if not cpu_rule:  # the usual case, in C-level passes: every pod has a sample
        names = [p.name for p in pods]
        samples = list(map(values.get, names))
        if None not in samples:
            present = cast(list[float], samples)
            # Nor is any sample NaN when the sum is not (a false alarm, inf - inf, only
            # takes the loop below): then each pod is counted and none skipped.
            if not math.isnan(sum(present)):
                milli = {n: int(v * 1000) for n, v in zip(names, present, strict=True)}
                return len(pods), unready, missing, milli
    for pod in pods:
        name = pod.name
        value = values.get(name)
        if value is not None and value == value:  # a sample, and not NaN
            if cpu_rule and _unready_by_cpu_rule(pod, now, config):
                unready.add(name)
            else:
                ready_count += 1
                used[name] = int(value * 1000)  # milli(), inlined
        elif pod.ready:
            missing.add(name)
        else:
            unready.add(name)  # taken as Pending
    for name in unready | missing:  # a name listed twice counts as skipped, as it did
        used.pop(name, None)
    return ready_count, unready, missing, used


def pods_metric_replicas(
    current: int,
    pods: Iterable[PodStatus],
    values: Mapping[str, float],
    now: float,
    config: HpaConfig,
) -> Proposal | None:
    """``calcPlainMetricReplicas``: replicas for a per-pod metric with an average target.

    Args:
        current: ``spec.replicas`` of the target.
        pods: Live pods of the target.
        values: Latest sample per pod name.
        now: Decision time, seconds.
        config: Target, tolerance and readiness rule.

    Returns:
        The proposal, or None when no pod has a usable sample (the controller errors).
    """
    pods = tuple(pods)
    if not pods:
        return None
    ready_count, unready, missing, metrics = _group_and_read(pods, values, now, config)
    if not metrics:
        return None
    target = round(config.target_average_value * 1000)
    tol = tolerances(config.tolerance, config.behavior)
    usage = sum(metrics.values()) // len(metrics)
    ratio = usage / target
    shown = usage / 1000
    scale_up_with_unready = bool(unready) and ratio > 1.0
    if not scale_up_with_unready and not missing:
        if _within(ratio, tol):
            return Proposal(current, shown, ratio, "within tolerance")
        return Proposal(math.ceil(ratio * ready_count), shown, ratio, f"{ready_count} pods")
    if missing and ratio != 1.0:
        fill = target if ratio < 1.0 else 0
        metrics.update(dict.fromkeys(missing, fill))
    if scale_up_with_unready:
        metrics.update(dict.fromkeys(unready, 0))
    new_ratio = (sum(metrics.values()) // len(metrics)) / target
    note = f"{len(missing)} missing, {len(unready)} unready; rebalanced ratio {new_ratio:.3f}"
    flips = (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio)
    if _within(new_ratio, tol) or flips:
        return Proposal(current, shown, ratio, f"{note} within tolerance or flips direction")
    replicas = math.ceil(new_ratio * len(metrics))
    if (new_ratio < 1.0 and replicas > current) or (new_ratio > 1.0 and replicas < current):
        return Proposal(current, shown, ratio, f"{note} would reverse direction")
    return Proposal(replicas, shown, ratio, note)


def external_average_value_replicas(
    status_replicas: int, usage: float, target_per_pod: float, tolerance: Tolerance
) -> Proposal:
    """``GetExternalPerPodMetricReplicas``: an External metric with an AverageValue target.

    Args:
        status_replicas: ``status.replicas`` of the target (pods that exist).
        usage: The metric's total value.
        target_per_pod: Target value per replica.
        tolerance: No change when usage / (target x replicas) is within 1 ± tolerance
            (a pair: minus the first, plus the second).

    Returns:
        ``ceil(usage / target_per_pod)`` unless within tolerance; replicas.
    """
    total = milli(usage)
    target = round(target_per_pod * 1000)
    needed = math.ceil(total / target)
    if status_replicas == 0:
        ratio = math.inf if total > 0 else 1.0
        replicas = needed if total > 0 else 0
    else:
        ratio = total / (target * status_replicas)
        replicas = status_replicas if _within(ratio, tolerance) else needed
    note = f"ceil({usage:g}/{target_per_pod:g})"
    if replicas == status_replicas:
        note = "within tolerance"
    return Proposal(replicas, usage, ratio, note)


def external_value_replicas(
    current: int, ready: int, usage: float, target: float, tolerance: Tolerance
) -> Proposal:
    """``GetExternalMetricReplicas``: an External metric with a Value target.

    Args:
        current: ``spec.replicas`` of the target.
        ready: Running and Ready pods.
        usage: The metric's total value.
        target: Target value for the whole workload.
        tolerance: No change within 1 ± tolerance (a pair: minus the first, plus the second).

    Returns:
        ``ceil(usage / target x ready)``, or ``ceil(usage / target)`` from 0; replicas.
    """
    ratio = milli(usage) / round(target * 1000)
    if current == 0:
        return Proposal(math.ceil(ratio), usage, ratio, "from zero")
    if _within(ratio, tolerance):
        return Proposal(current, usage, ratio, "within tolerance")
    return Proposal(math.ceil(ratio * ready), usage, ratio, f"{ready} ready pods")


def reconcile_legacy(
    now: float,
    current: int,
    proposal: int | None,
    *,
    min_replicas: int,
    max_replicas: int,
    downscale_stabilization_s: float,
    state: HpaState,
) -> tuple[int, str, HpaState]:
    """One sync of an HPA without ``spec.behavior``, after the replica calculator.

    ``normalizeDesiredReplicas``: the highest recommendation not older than the window
    (this one included), then at least ``minReplicas`` and at most ``maxReplicas`` and
    ``max(2 x current, 4)`` (``convertDesiredReplicasWithRules``).

    Args:
        now: Sync time, seconds.
        current: ``spec.replicas`` of the target.
        proposal: The calculator's replica count; None when the metric failed.
        min_replicas: HPA ``minReplicas``.
        max_replicas: HPA ``maxReplicas``.
        downscale_stabilization_s: The controller's downscale stabilisation window.
        state: The HPA state (only its ``recommendations`` are read).

    Returns:
        Desired replicas, a reason, and the new HPA state.
    """
    now = float(now)
    recs = remembered(state, now, current)
    cutoff = now - downscale_stabilization_s
    if current > max_replicas:
        desired, why = max_replicas, f"current {current} above max {max_replicas}"
    elif current < min_replicas:
        desired, why = min_replicas, f"current {current} below min {min_replicas}"
    elif proposal is None:
        desired, why = current, "metric unavailable, holding"
    else:
        # A recommendation is old only when it is before the cutoff.
        stabilized = max([proposal, *(r for t, r in recs if t >= cutoff)])
        recs.append((now, proposal))
        limit = max(SCALE_UP_LIMIT_FACTOR * current, SCALE_UP_LIMIT_MINIMUM)
        desired, why = stabilized, f"recommendation {proposal}, stabilised {stabilized}"
        if stabilized < min_replicas:
            desired, why = min_replicas, f"{why}, min {min_replicas}"
        elif stabilized > min(limit, max_replicas):
            desired = min(limit, max_replicas)
            limited_by = "scale-up limit max(2 x current, 4)" if limit < max_replicas else "max"
            why = f"{why}, {limited_by} {desired}"
    kept = prune(recs, now, highest_s=downscale_stabilization_s, lowest_s=None)
    return desired, f"legacy: {why}", HpaState(kept)


class HpaPolicy(KeepsState[HpaState]):
    """Kubernetes HPA v2 with one Pods metric, as a pure ``ScalingPolicy``.

    Its state is ``recommendations.HpaState``: the recommendations that can still
    matter, and with a ``behavior`` also the scale events of the longest period.
    """

    state_type = HpaState

    def __init__(self, config: HpaConfig | None = None, name: str = "hpa") -> None:
        self.config = config or HpaConfig()
        self.name = name
        self.interval_s = self.config.sync_period_s
        self.history_s = 0.0
        self.signal_path = PROMETHEUS_QUERY  # prometheus-adapter queries at each sync
        self.signals: Mapping[str, Signal] = MappingProxyType({})
        self.pod_signals: Mapping[str, Signal] = MappingProxyType(
            {self.config.metric: Signal(self.config.metric, aggregation="avg", by=("pod",))}
        )
        self.min_replicas = self.config.min_replicas
        self.max_replicas = self.config.max_replicas
        self.reads_node_slots = False

    def decide(self, observation: Observation, state: HpaState) -> Decision[HpaState]:
        """Run one HPA sync.

        Returns:
            The desired replicas, the reason with the observed average, and the new state.
        """
        cfg = self.config
        current = observation.target.desired
        values = observation.pod_metrics.get(cfg.metric, {})
        proposal = pods_metric_replicas(
            current, observation.target.pods, values, observation.now, cfg
        )
        no_data = proposal is None and cfg.min_replicas <= current <= cfg.max_replicas
        if not observation.healthy or no_data:
            why = "unhealthy" if not observation.healthy else f"no {cfg.metric} sample for any pod"
            decision = hold(observation, cfg.min_replicas, cfg.max_replicas, why, state)
            logger.debug("%s: %s", self.name, decision.reason)
            return decision
        now, recommended = observation.now, None if proposal is None else proposal.replicas
        bounds = {"min_replicas": cfg.min_replicas, "max_replicas": cfg.max_replicas}
        window = cfg.downscale_stabilization_s
        if cfg.behavior is None:
            replicas, why, new_state = reconcile_legacy(
                now, current, recommended, **bounds, downscale_stabilization_s=window, state=state
            )
        else:
            replicas, why, new_state = reconcile(
                now, current, recommended, **bounds, behavior=cfg.behavior, state=state
            )
        seen = (
            ""
            if proposal is None
            else f"avg {cfg.metric} {proposal.usage:.1f} vs {cfg.target_average_value:g} "
            f"(ratio {proposal.ratio:.2f}, {proposal.note}); "
        )
        reason = f"{seen}{why} -> {replicas}"
        logger.debug("%s: %d -> %d: %s", self.name, current, replicas, reason)
        return Decision(replicas, reason, new_state)
