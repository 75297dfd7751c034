"""The one decision step: what a policy sees and what is done about it, in the simulator and live.

A policy proven in the simulator is only the policy users get if everything
around it is the same too: how its view is built, when the data is judged unfit
and the target held, how its wish is bounded, which pods are deleted and when
its memory moves on. ``DecisionStep.run`` is all of that, once:

1. read the target's status (``Workload.status``) and the time (the clock);
2. build the ``Observation`` (``scaling.observe``) on the policy's declared signal
   path, ``delay_s`` in the past;
3. judge it (``scaling.failsafe``): missing, non-finite or stale data, or a source
   that did not answer, holds the replicas and the policy's state (a policy with
   its own answer to missing data, ``FallsBack``, gives it instead, bounded);
4. ask the policy; bound its answer (step limits, then [min, max]); a scale-in
   further needs every Ready pod's series fresh, or it holds naming the stale pods;
5. act, in this order: delete the pods the policy asked to replace (its
   ``Decision.delete``; each is recreated by its ReplicaSet, the count kept); on a
   scale-in, mark the pods that should go with ``pod-deletion-cost`` so whole GPU
   nodes empty (``scaling.placement``; ``StepSettings.placement``); set the
   replicas; then remediate: delete at most one pod whose GPU the exporter's
   series show broken (``scaling.remediate``), never below ``min_replicas``, and
   cordon its node where asked.

The simulator's engine and the live controller differ only in what they pass:
the ``MetricsSource`` (the in-process store or ring, or Prometheus), the clock
(simulated seconds or the wall), the ``Workload`` (the simulated cluster or the
Kubernetes ``/scale`` and pods) and the settings of the target. The step does no
I/O of its own: it calls those. What it did comes back as a ``StepOutcome`` for
the caller to log, count and record.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

from gpuscale.metrics.signal import MetricsSource, MetricsUnavailable, NewestByLabel, Signal
from gpuscale.scaling import failsafe, placement, remediate
from gpuscale.scaling.observe import Observer
from gpuscale.scaling.policy import (
    FallsBack,
    Forecast,
    Observation,
    ScalingPolicy,
    SignalPath,
    TargetStatus,
)
from gpuscale.scaling.state import PolicyState

S = TypeVar("S", bound=PolicyState)

Cause = Literal["replace", "remediate"]
REPLACE: Cause = "replace"
"""A deletion the policy asked for (``Decision.delete``)."""
REMEDIATE: Cause = "remediate"
"""A deletion remediation chose (``scaling.remediate``)."""


class Workload(Protocol):
    """The scaled workload as one step reads and changes it (an actuator bound to one target)."""

    def status(self, *, node_slots: bool) -> TargetStatus:
        """``spec.replicas`` and the live pods; with ``node_slots``, each node's room."""
        ...

    def scale(self, replicas: int) -> None:
        """Set ``spec.replicas``."""
        ...

    def delete_pod(self, name: str) -> None:
        """Delete one pod; its ReplicaSet recreates it, so the replica count is kept."""
        ...

    def set_deletion_costs(self, costs: Mapping[str, int | None]) -> None:
        """Set (None: remove) the named pods' ``controller.kubernetes.io/pod-deletion-cost``."""
        ...

    def cordon(self, node: str) -> None:
        """Mark a node unschedulable."""
        ...


@dataclass(frozen=True, slots=True)
class StepSettings:
    """How a target is stepped, beyond its policy.

    Attributes:
        min_replicas: Lower bound of every count set.
        max_replicas: Upper bound of every count set.
        up_step: Most replicas added in one step; None for no limit.
        down_step: Most replicas removed in one step; None for no limit.
        stale_after_s: A signal whose newest sample is older than this holds, seconds.
        step_s: Resolution of history range reads, seconds (the source's sample period
            on the Prometheus path; the direct path samples at its own interval).
        remediate: Delete a pod whose GPU is broken (one per step, never below min).
        cordon: With ``remediate``, also cordon that pod's node.
        namespace: The namespace whose GPU series remediation reads.
        placement: Before a scale-in, mark the pods to go (``scaling.placement``):
            those on unhealthy GPUs, those still loading, then those on the nodes
            serving the fewest pods, so whole nodes empty for the cluster autoscaler.
    """

    min_replicas: int
    max_replicas: int
    up_step: int | None = None
    down_step: int | None = None
    stale_after_s: float = 60.0
    step_s: float = 15.0
    remediate: bool = False
    cordon: bool = False
    namespace: str = ""
    placement: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.min_replicas <= self.max_replicas:
            raise ValueError(
                f"StepSettings: need 0 <= min_replicas <= max_replicas, got "
                f"{self.min_replicas} and {self.max_replicas}"
            )
        if not self.stale_after_s > 0 or not self.step_s > 0:
            raise ValueError("StepSettings: stale_after_s and step_s must be > 0")


@dataclass(frozen=True, slots=True)
class Deletion:
    """A pod the step deleted.

    Attributes:
        pod: Its name.
        cause: ``replace`` (the policy asked) or ``remediate`` (its GPU is broken).
        detail: What was seen: the policy's reason or remediation's evidence.
        gpu: The broken GPU's UUID, where remediation names one.
        node: Its node, where known ("" otherwise).
        kind: Remediation's evidence kind (``gpu_down``, ``xid``, ``dbe``, ``alert``),
            or ``replace``.
    """

    pod: str
    cause: Cause
    detail: str
    gpu: str = ""
    node: str = ""
    kind: str = REPLACE


@dataclass(frozen=True, slots=True)
class StepOutcome(Generic[S]):
    """What one step saw and did.

    Attributes:
        now: Decision time, seconds.
        status: The target's status read at the start.
        replicas: ``spec.replicas`` after the step (set, or held).
        reason: The policy's reason (with what bounded it), or why it held.
        state: The policy's state for the next step (the old one on a hold).
        held: Why the step held, or None when the policy decided.
        scaled: Whether ``spec.replicas`` was set.
        deleted: The pods deleted, in the order deleted.
        cordoned: Nodes cordoned.
        marked: The pods marked to go on a scale-in, first choice first.
        blocked: Why remediation deleted nothing although a pod's GPU is broken ("" when
            nothing was found or a pod was deleted).
        observation: What the policy saw (None when the source did not answer).
        forecast: The forecast the policy planned for (forecasting policies; None when
            it held on unfit data or has none).
    """

    now: float
    status: TargetStatus
    replicas: int
    reason: str
    state: S
    held: failsafe.Problem | None = None
    scaled: bool = False
    deleted: tuple[Deletion, ...] = ()
    cordoned: tuple[str, ...] = ()
    blocked: str = ""
    observation: Observation | None = None
    forecast: Forecast | None = None
    marked: tuple[str, ...] = ()


def freshness_signals(policy: ScalingPolicy[Any]) -> dict[str, Signal]:
    """Every signal a policy reads, keyed for hold reasons (pod signals as ``KEY by pod``).

    Returns:
        Key to Signal; a workload signal keeps its key where the two share one.
    """
    return {**{f"{k} by pod": s for k, s in policy.pod_signals.items()}, **policy.signals}


class DecisionStep(Generic[S]):
    """One policy's step on one target, on one source.

    Built once per target (and per run in the simulator): what the source can do
    beyond the base protocol is found here, once.

    Args:
        policy: The policy (its signals already scoped to the target).
        source: Where its signals are read.
        settings: The target's bounds, freshness and remediation.
        path: The signal path the caller honours for this policy (its delay).
        health_source: Where remediation reads the GPU series (default: ``source``; the
            simulator's direct path samples the policy's signals elsewhere).
    """

    def __init__(
        self,
        policy: ScalingPolicy[S],
        source: MetricsSource,
        settings: StepSettings,
        path: SignalPath,
        *,
        health_source: MetricsSource | None = None,
    ) -> None:
        self.policy = policy
        self.source = source
        self.health_source = source if health_source is None else health_source
        self.settings = settings
        self.path = path
        step_s = path.interval_s if path.source == "direct" else settings.step_s
        self._observer = Observer(source, policy, delay_s=path.delay_s, step_s=step_s)
        self._fresh_signals = freshness_signals(policy)
        self._per_pod: NewestByLabel | None = source if isinstance(source, NewestByLabel) else None
        self._falls_back: FallsBack[S] | None = policy if isinstance(policy, FallsBack) else None

    def run(self, workload: Workload, clock: Callable[[], float], state: S) -> StepOutcome[S]:
        """Observe, judge, decide, bound and act once.

        Args:
            workload: The target, to read and change.
            clock: The time now, seconds (read after the status).
            state: The policy's state from the previous step.

        Returns:
            What was seen and done.

        Raises:
            Whatever ``workload`` raises (the caller's to handle); a source that does
            not answer is a hold, never an exception.
        """
        policy, cfg = self.policy, self.settings
        status = workload.status(node_slots=policy.reads_node_slots)
        now = clock()
        at = now - self.path.delay_s
        obs: Observation | None = None
        problem: failsafe.Problem | None = None
        try:
            obs = self._observer.observe(status, now)
            problem = failsafe.check_values(obs, policy.signals, policy.pod_signals)
            if problem is None:
                problem = failsafe.check_fresh(
                    self.source, self._fresh_signals, at, cfg.stale_after_s
                )
        except MetricsUnavailable as exc:
            problem = failsafe.unavailable(exc)
        delete: tuple[str, ...] = ()
        forecast: Forecast | None = None
        if (problem is not None or obs is None) and self._falls_back is not None:
            problem = problem or failsafe.Problem(failsafe.MISSING, "no observation")
            fallback = self._falls_back.fall_back(status, now, state)
            replicas, _ = self._bound(status.desired, fallback.replicas)
            held = replicas == status.desired  # reads as any hold; a fallback says why
            reason = f"hold: {problem}" if held else f"fallback: {problem}; {fallback.reason}"
            new_state = fallback.state
        elif problem is not None or obs is None:
            problem = problem or failsafe.Problem(failsafe.MISSING, "no observation")
            replicas = failsafe.hold(status.desired, cfg.min_replicas, cfg.max_replicas)
            reason, new_state = f"hold: {problem}", state
        else:
            decision = policy.decide(obs, state)
            replicas, why = self._bound(status.desired, decision.replicas)
            reason = f"{decision.reason}; {why}" if why else decision.reason
            new_state, delete, forecast = decision.state, decision.delete, decision.forecast
            if replicas < status.desired:
                problem = self._partial_view(status, at)
                if problem is not None:
                    replicas = failsafe.hold(status.desired, cfg.min_replicas, cfg.max_replicas)
                    reason, new_state, delete = f"hold: {problem}", state, ()
        deleted: list[Deletion] = []
        if delete:
            live = {p.name for p in status.pods}
            deleted = [
                Deletion(name, REPLACE, "the policy replaces it", node=_node(status, name))
                for name in delete
                if name in live
            ]
        for d in deleted:
            workload.delete_pod(d.pod)
        scaled = replicas != status.desired
        marked: tuple[str, ...] = ()
        if scaled and replicas < status.desired and cfg.placement:
            gone = {d.pod for d in deleted}
            marked = self._mark_victims(workload, status, replicas, at, gone)
        if scaled:
            workload.scale(replicas)
        cordoned: tuple[str, ...] = ()
        blocked = ""
        if cfg.remediate and (problem is None or problem.reason != failsafe.UNAVAILABLE):
            gone = {d.pod for d in deleted} | set(marked)  # a pod the scale-in takes is gone
            fix, blocked = self._remediate(status, at, gone)
            if fix is not None:
                workload.delete_pod(fix.pod)
                deleted.append(fix)
                if cfg.cordon and fix.node:
                    workload.cordon(fix.node)
                    cordoned = (fix.node,)
        return StepOutcome(
            now,
            status,
            replicas,
            reason,
            new_state,
            held=problem,
            scaled=scaled,
            deleted=tuple(deleted),
            cordoned=cordoned,
            blocked=blocked,
            observation=obs,
            forecast=forecast,
            marked=marked,
        )

    def _bound(self, current: int, wanted: int) -> tuple[int, str]:
        """``wanted`` within the target's step limits and bounds, and why it changed."""
        cfg = self.settings
        return failsafe.bound(
            current,
            wanted,
            cfg.min_replicas,
            cfg.max_replicas,
            up_step=cfg.up_step,
            down_step=cfg.down_step,
        )

    def _mark_victims(
        self, workload: Workload, status: TargetStatus, replicas: int, at: float, gone: set[str]
    ) -> tuple[str, ...]:
        """Choose the pods a scale-in to ``replicas`` takes, and mark them with costs.

        The pods deleted this step are replaced by unscheduled pods, which the
        ReplicaSet deletes first; the rest of the cut is chosen among the others.
        """
        pods = [p for p in status.pods if p.name not in gone]
        remove = len(status.pods) - replicas - len(gone)
        if remove <= 0:
            return ()
        try:
            findings = remediate.find(self.health_source, self.settings.namespace, at)
        except MetricsUnavailable:
            findings = []  # placement without health: the rest of the order still holds
        victims = placement.choose_victims(pods, remove, {f.pod for f in findings})
        costs = placement.deletion_costs(pods, victims)
        if costs:
            workload.set_deletion_costs(costs)
        return tuple(v.name for v in victims)

    def _partial_view(self, status: TargetStatus, at: float) -> failsafe.Problem | None:
        """Why a scale-in may not go ahead: some Ready pod's series are stale."""
        if self._per_pod is None:
            return None
        ready = [p.name for p in status.pods if p.ready]
        try:
            return failsafe.check_fresh_pods(
                self._per_pod, self._fresh_signals, at, self.settings.stale_after_s, ready
            )
        except MetricsUnavailable as exc:
            return failsafe.unavailable(exc)

    def _remediate(
        self, status: TargetStatus, at: float, gone: set[str]
    ) -> tuple[Deletion | None, str]:
        """The pod remediation deletes this step, or why none although one is sick."""
        try:
            findings = remediate.find(self.health_source, self.settings.namespace, at)
        except MetricsUnavailable as exc:
            return None, f"skipped: {exc}"
        findings = [f for f in findings if f.pod not in gone]
        pick, blocked = remediate.choose(findings, status, self.settings.min_replicas)
        if pick is None:
            return None, blocked
        node = _node(status, pick.pod) or pick.node
        return Deletion(pick.pod, REMEDIATE, pick.evidence, pick.gpu, node, pick.kind), ""


def _node(status: TargetStatus, pod: str) -> str:
    """The node a pod of ``status`` runs on ("" where unknown)."""
    for p in status.pods:
        if p.name == pod:
            return p.node
    return ""
