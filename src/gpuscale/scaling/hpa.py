"""Kubernetes HPA (autoscaling/v2) on a per-pod GPU metric: the baseline most users already run.

A user who scales GPU inference today typically points an HPA at
``DCGM_FI_DEV_GPU_UTIL`` through prometheus-adapter: a ``Pods`` metric with an
``AverageValue`` target. This module reproduces what the controller does with
it, defaults included, so the simulator compares gpuscale with the real thing.

Sources: ``pkg/controller/podautoscaler/replica_calculator.go``
(``calcPlainMetricReplicas``, ``groupPods``, ``GetExternalPerPodMetricReplicas``,
``getUsageRatioReplicaCount``) and ``horizontal.go`` (see ``baseline.reconcile``).

Faithful details worth knowing:

* Quantities are milli-values as the API carries them: each sample becomes
  ``int(value * 1000)`` (prometheus-adapter and KEDA truncate), and the average
  over pods is an integer division, as in ``GetMetricUsageRatio``.
* Pod grouping for a ``Pods`` metric: the controller calls ``groupPods`` with an
  empty resource name, so only *Pending* pods are "unready" and the CPU-only
  readiness rule does not apply; a Running pod that is not Ready but reports
  the metric counts like a ready one. ``PodStatus`` has no phase, so a pod that
  is not Ready and has no sample is taken to be Pending (a GPU pod that has not
  started has no DCGM series). ``readiness="resource"`` switches on the CPU rule
  instead (``cpu_initialization_period_s``, ``initial_readiness_delay_s``), for
  comparison.
* Unready pods count as 0 when the ratio says scale up and are ignored
  otherwise; Ready pods without a sample ("missing") count as 0 on scale-up and
  as exactly the target on scale-down; after that rebalancing nothing changes if
  the new ratio is within tolerance or flips direction.
* A target at 0 replicas disables a real HPA. The ``ScalingPolicy`` contract
  requires decisions within bounds, so this policy restores ``min_replicas``
  instead (the same as the controller's "below minReplicas" branch).
"""

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from gpuscale.metrics.signal import Signal
from gpuscale.scaling.baseline import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    HpaBehavior,
    RatePolicy,
    ScalingRules,
    SelectPolicy,
    check_bounds,
    hold,
    reconcile,
    require,
)
from gpuscale.scaling.policy import Decision, Observation, PodStatus, State

logger = logging.getLogger(__name__)

Readiness = Literal["pods", "resource"]


@dataclass(frozen=True, slots=True)
class HpaConfig:
    """An HPA with one ``Pods`` metric and an ``AverageValue`` target; controller defaults.

    Attributes:
        metric: Per-pod series to average (label ``pod``).
        target_average_value: Target per-pod value, in the metric's unit (percent here).
        tolerance: ``--horizontal-pod-autoscaler-tolerance``: no change within ±10 %.
        sync_period_s: ``--horizontal-pod-autoscaler-sync-period``.
        scale_up_policies: ``behavior.scaleUp.policies`` (default +4 pods or +100 % per 15 s).
        scale_up_select: ``behavior.scaleUp.selectPolicy``.
        scale_up_stabilization_s: ``behavior.scaleUp.stabilizationWindowSeconds``.
        scale_down_policies: ``behavior.scaleDown.policies`` (default -100 % per 15 s).
        scale_down_select: ``behavior.scaleDown.selectPolicy``.
        scale_down_stabilization_s: ``behavior.scaleDown.stabilizationWindowSeconds``.
        readiness: ``pods`` (what the controller does for a Pods metric) or ``resource``
            (the CPU readiness rule).
        cpu_initialization_period_s: ``--horizontal-pod-autoscaler-cpu-initialization-period``.
        initial_readiness_delay_s: ``--horizontal-pod-autoscaler-initial-readiness-delay``.
        metric_window_s: Sample window assumed by the ``resource`` rule, seconds.
        min_replicas: ``minReplicas`` (at least 1 for a Pods metric).
        max_replicas: ``maxReplicas``.
    """

    metric: str = "DCGM_FI_DEV_GPU_UTIL"
    target_average_value: float = 70.0
    tolerance: float = 0.1
    sync_period_s: float = 15.0
    scale_up_policies: tuple[RatePolicy, ...] = DEFAULT_SCALE_UP.policies
    scale_up_select: SelectPolicy = "Max"
    scale_up_stabilization_s: float = 0.0
    scale_down_policies: tuple[RatePolicy, ...] = DEFAULT_SCALE_DOWN.policies
    scale_down_select: SelectPolicy = "Max"
    scale_down_stabilization_s: float = 300.0
    readiness: Readiness = "pods"
    cpu_initialization_period_s: float = 300.0
    initial_readiness_delay_s: float = 30.0
    metric_window_s: float = 30.0
    min_replicas: int = 1
    max_replicas: int = 100

    def __post_init__(self) -> None:
        require(bool(self.metric), "HpaConfig.metric", self.metric, "name a per-pod series")
        require(
            self.target_average_value > 0,
            "HpaConfig.target_average_value",
            self.target_average_value,
            "use a positive per-pod target",
        )
        require(0 <= self.tolerance < 1, "HpaConfig.tolerance", self.tolerance, "use 0..1")
        require(self.sync_period_s > 0, "HpaConfig.sync_period_s", self.sync_period_s, "use > 0 s")
        require(
            self.readiness in ("pods", "resource"),
            "HpaConfig.readiness",
            self.readiness,
            "use 'pods' or 'resource'",
        )
        require(
            self.min_replicas >= 1,
            "HpaConfig.min_replicas",
            self.min_replicas,
            "a Pods-metric HPA needs at least 1 (use KEDA for scale to zero)",
        )
        check_bounds("HpaConfig", self.min_replicas, self.max_replicas)
        self.behavior.validate("HpaConfig")

    @property
    def behavior(self) -> HpaBehavior:
        """The ``spec.behavior`` these fields describe."""
        return HpaBehavior(
            ScalingRules(
                self.scale_up_policies, self.scale_up_select, self.scale_up_stabilization_s
            ),
            ScalingRules(
                self.scale_down_policies, self.scale_down_select, self.scale_down_stabilization_s
            ),
        )


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


def _within(ratio: float, tolerance: float) -> bool:
    return (1.0 - tolerance) <= ratio <= (1.0 + tolerance)


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
    ready_count = 0
    unready: set[str] = set()
    missing: set[str] = set()
    for pod in pods:
        has_sample = pod.name in values and not math.isnan(values[pod.name])
        if not pod.ready and not has_sample:
            unready.add(pod.name)  # taken as Pending
        elif not has_sample:
            missing.add(pod.name)
        elif config.readiness == "resource" and _unready_by_cpu_rule(pod, now, config):
            unready.add(pod.name)
        else:
            ready_count += 1
    return ready_count, unready, missing


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
    ready_count, unready, missing = group_pods(pods, values, now, config)
    skipped = unready | missing
    metrics = {p.name: milli(values[p.name]) for p in pods if p.name not in skipped}
    if not metrics:
        return None
    target = round(config.target_average_value * 1000)
    tol = config.tolerance
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
    status_replicas: int, usage: float, target_per_pod: float, tolerance: float
) -> Proposal:
    """``GetExternalPerPodMetricReplicas``: an External metric with an AverageValue target.

    Args:
        status_replicas: ``status.replicas`` of the target (pods that exist).
        usage: The metric's total value.
        target_per_pod: Target value per replica.
        tolerance: No change when usage / (target x replicas) is within 1 ± tolerance.

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
    current: int, ready: int, usage: float, target: float, tolerance: float
) -> Proposal:
    """``GetExternalMetricReplicas``: an External metric with a Value target.

    Args:
        current: ``spec.replicas`` of the target.
        ready: Running and Ready pods.
        usage: The metric's total value.
        target: Target value for the whole workload.
        tolerance: No change within 1 ± tolerance.

    Returns:
        ``ceil(usage / target x ready)``, or ``ceil(usage / target)`` from 0; replicas.
    """
    ratio = milli(usage) / round(target * 1000)
    if current == 0:
        return Proposal(math.ceil(ratio), usage, ratio, "from zero")
    if _within(ratio, tolerance):
        return Proposal(current, usage, ratio, "within tolerance")
    return Proposal(math.ceil(ratio * ready), usage, ratio, f"{ready} ready pods")


class HpaPolicy:
    """Kubernetes HPA v2 with one Pods metric, as a pure ``ScalingPolicy``.

    State keys: ``recommendations``, ``scale_up_events``, ``scale_down_events``
    (lists of ``[time_s, replicas]``).
    """

    def __init__(self, config: HpaConfig | None = None, name: str = "hpa") -> None:
        self.config = config or HpaConfig()
        self.name = name
        self.interval_s = self.config.sync_period_s
        self.history_s = 0.0
        self.signals: Mapping[str, Signal] = MappingProxyType({})
        self.pod_signals: Mapping[str, Signal] = MappingProxyType(
            {self.config.metric: Signal(self.config.metric, aggregation="avg", by=("pod",))}
        )
        self.min_replicas = self.config.min_replicas
        self.max_replicas = self.config.max_replicas
        self._behavior = self.config.behavior

    def decide(self, observation: Observation, state: State) -> Decision:
        """Run one HPA sync.

        Returns:
            The desired replicas, the reason with the observed average, and the new state.
        """
        cfg = self.config
        current = observation.target.desired
        if not observation.healthy:
            decision = hold(observation, cfg.min_replicas, cfg.max_replicas, "unhealthy", state)
            logger.info("%s: %s", self.name, decision.reason)
            return decision
        values = observation.pod_metrics.get(cfg.metric, {})
        proposal = pods_metric_replicas(
            current, observation.target.pods, values, observation.now, cfg
        )
        if proposal is None and cfg.min_replicas <= current <= cfg.max_replicas:
            why = f"no {cfg.metric} sample for any pod"
            decision = hold(observation, cfg.min_replicas, cfg.max_replicas, why, state)
            logger.info("%s: %s", self.name, decision.reason)
            return decision
        replicas, why, new_state = reconcile(
            observation.now,
            current,
            None if proposal is None else proposal.replicas,
            min_replicas=cfg.min_replicas,
            max_replicas=cfg.max_replicas,
            behavior=self._behavior,
            state=state,
        )
        seen = (
            ""
            if proposal is None
            else f"avg {cfg.metric} {proposal.usage:.1f} vs {cfg.target_average_value:g} "
            f"(ratio {proposal.ratio:.2f}, {proposal.note}); "
        )
        reason = f"{seen}{why} -> {replicas}"
        logger.info("%s: %d -> %d: %s", self.name, current, replicas, reason)
        return Decision(replicas, reason, new_state)
