"""The reconcile loop: every sync period, for each target, status -> signals -> policy -> /scale.

One sync reads each target's ``/scale`` and pods, builds the policy's
``Observation`` with the same ``scaling.observe`` the simulator calls, asks the
fail-safe whether the data can be trusted, runs the unchanged policy (or holds),
bounds the result, writes it through ``/scale``, persists the policy's
``State`` in an annotation on the target and records an Event. Targets are
reconciled concurrently and each in isolation: an exception in one (a 403, an
API server hiccup, a policy bug) is logged, counted and leaves the others
untouched.

With an elector (``control.lease.LeaseElector``) only the replica holding the
Lease acts; the others keep renewing their claim every ``retry_period_s`` and do
nothing else. A replica that gains the lease reloads every target's state from
its annotation, so it carries on where the previous leader stopped.

Time comes from ``clock`` and waiting from ``wait`` (seams: tests run the loop on a
fake clock). Every decision is logged at INFO with the inputs that drove it; the
JSON log format carries them as structured fields (``decision``).
"""

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any

from gpuscale.control import failsafe, remediate
from gpuscale.control.kubecall import KubeForbiddenError, KubeUnavailableError
from gpuscale.control.kubernetes import TargetRef
from gpuscale.control.seams import STATE_KEY, Actuator, Elector, Outcome, Settings, inputs, label
from gpuscale.control.server import ControllerMetrics, HealthState
from gpuscale.control.targets import TargetRuntime
from gpuscale.metrics.signal import MetricsSource, MetricsUnavailable
from gpuscale.scaling.observe import observe
from gpuscale.scaling.policy import Observation, ScalingPolicy, TargetStatus
from gpuscale.scaling.state import PolicyState, StateError

logger = logging.getLogger(__name__)


class Controller:
    """Reconciles every target each sync period.

    Args:
        targets: The targets from the config.
        source: Where signals are read (Prometheus in production).
        actuator: The cluster.
        settings: Loop settings.
        metrics: The controller's own series (a fresh registry when None).
        elector: Leader election; None acts always (a single replica).
        clock: Wall clock, seconds since the epoch (decision time, metric timestamps).
        health: What ``/healthz`` reads (made here when None).
    """

    def __init__(
        self,
        targets: Sequence[TargetRuntime],
        source: MetricsSource,
        actuator: Actuator,
        *,
        settings: Settings | None = None,
        metrics: ControllerMetrics | None = None,
        elector: Elector | None = None,
        clock: Callable[[], float] = time.time,
        health: HealthState | None = None,
    ) -> None:
        self.targets = list(targets)
        self.source = source
        self.actuator = actuator
        self.settings = settings or Settings()
        self.metrics = metrics or ControllerMetrics()
        self.elector = elector
        self.clock = clock
        self.health = health or HealthState(3 * max(self.settings.sync_period_s, 10.0))
        self.leader = elector is None
        self._states: dict[TargetRef, PolicyState] = {}
        self._saved: dict[TargetRef, str] = {}
        self._holding: dict[TargetRef, str] = {}
        self._reported: set[str] = set()

    # ------------------------------------------------------------------ loop
    def run(self, stop: threading.Event, wait: Callable[[float], bool] | None = None) -> None:
        """Sync every period until ``stop`` is set; release the lease on the way out.

        Args:
            stop: Ends the loop.
            wait: Waits up to the given seconds, returns True when it should stop
                (default ``stop.wait``; a seam for fake clocks).
        """
        wait = wait or stop.wait
        next_sync = self.clock()
        try:
            while not stop.is_set():
                self.check_leader()
                now = self.clock()
                if self.leader and now >= next_sync:
                    self.sync()
                    now = self.clock()
                    next_sync = max(next_sync + self.settings.sync_period_s, now)
                    if next_sync == now:  # a sync longer than the period: start the next one
                        logger.warning(
                            "sync took longer than the sync period (%.1f s)",
                            self.settings.sync_period_s,
                        )
                self.health.beat()
                self.metrics.last_sync.set(self.clock())
                pause = next_sync - now if self.leader else self.settings.sync_period_s
                if self.elector is not None:
                    pause = min(pause, self.settings.retry_period_s)
                if wait(max(pause, 0.0)):
                    break
        finally:
            if self.elector is not None and self.leader:
                self.elector.release()
                logger.info("released the leader lease")

    def check_leader(self) -> bool:
        """Renew or try to take the lease; on gaining it, forget cached states.

        Returns:
            Whether this replica leads now.
        """
        if self.elector is None:
            self.metrics.leader.set(1)
            return True
        try:
            leading = self.elector.try_acquire_or_renew()
        except Exception as exc:  # noqa: BLE001 - a failed renewal must stop us acting, not crash
            logger.warning("leader election failed: %s", exc)
            leading = False
        if leading and not self.leader:
            logger.info("became the leader; reloading every target's state")
            self._states.clear()
            self._saved.clear()
        elif self.leader and not leading:
            logger.warning("lost the leader lease; not acting until it is regained")
        self.leader = leading
        self.metrics.leader.set(1 if leading else 0)
        return leading

    def sync(self) -> list[Outcome]:
        """Reconcile every target once, concurrently; one failure stays with its target.

        Returns:
            One outcome per target, in config order.
        """
        start = time.perf_counter()
        workers = max(1, min(self.settings.workers, len(self.targets)))
        if workers == 1:
            outcomes = [self.reconcile(t) for t in self.targets]
        else:
            with ThreadPoolExecutor(workers, thread_name_prefix="reconcile") as pool:
                outcomes = list(pool.map(self.reconcile, self.targets))
        self.metrics.sync_duration.set(time.perf_counter() - start)
        return outcomes

    # -------------------------------------------------------------- one target
    def reconcile(self, rt: TargetRuntime) -> Outcome:
        """Reconcile one target; never raises.

        Returns:
            What was done and why.
        """
        out = Outcome(label(rt.ref), rt.policy.name, dry_run=self.settings.dry_run)
        start = time.perf_counter()
        try:
            self._reconcile(rt, out)
        except KubeForbiddenError as exc:
            self._fail(out, "forbidden", exc, once=True)
        except KubeUnavailableError as exc:
            self._fail(out, "kube_unavailable", exc)
        except Exception as exc:
            logger.exception("%s: reconcile failed", out.target)
            self._fail(out, "internal", exc, logged=True)
        out.duration_s = time.perf_counter() - start
        self.metrics.duration.observe(out.duration_s)
        self._log(out)
        return out

    def _fail(
        self, out: Outcome, reason: str, exc: Exception, *, once: bool = False, logged: bool = False
    ) -> None:
        out.error, out.reason = reason, f"{reason}: {exc}"
        self.metrics.errors.labels(out.target, reason).inc()
        if logged:
            return
        key = f"{out.target} {exc}"
        if once and key in self._reported:
            logger.debug("%s: %s (reported before)", out.target, exc)
            return
        self._reported.add(key)
        logger.error("%s: %s", out.target, exc)

    def _reconcile(self, rt: TargetRuntime, out: Outcome) -> None:
        spec, ref = rt.spec, rt.ref
        status = self.actuator.status(ref, node_slots=rt.policy.reads_node_slots)
        out.current, out.ready, out.starting = status.desired, status.ready, status.starting
        self.metrics.current.labels(out.target).set(status.desired)
        self.metrics.ready.labels(out.target).set(status.ready)
        state = self._state(rt)
        now = self.clock()
        at = now - rt.delay_s
        problem: failsafe.Problem | None = None
        obs: Observation | None = None
        try:
            obs = observe(
                self.source,
                rt.policy,
                status,
                now,
                delay_s=rt.delay_s,
                step_s=spec.metrics.step_seconds,
            )
            problem = failsafe.check_values(obs, rt.policy.signals, rt.policy.pod_signals)
            if problem is None:
                problem = failsafe.check_fresh(
                    self.source, rt.all_signals, at, spec.metrics.stale_after_seconds
                )
            self.metrics.last_read.labels(out.target).set(now)
            out.inputs = inputs(obs)
        except MetricsUnavailable as exc:
            problem = failsafe.Problem(failsafe.UNAVAILABLE, str(exc))
            self.metrics.errors.labels(out.target, "metrics_unavailable").inc()
        if problem is not None or obs is None:
            problem = problem or failsafe.Problem(failsafe.MISSING, "no observation")
            replicas = failsafe.hold(status.desired, spec.min_replicas, spec.max_replicas)
            out.held, out.reason, new_state = problem.reason, f"hold: {problem}", state
            self._hold(rt, out, problem)
        else:
            decision = rt.policy.decide(obs, state)
            replicas, why = failsafe.bound(
                status.desired,
                decision.replicas,
                spec.min_replicas,
                spec.max_replicas,
                up_step=spec.max_scale_up_step,
                down_step=spec.max_scale_down_step,
            )
            out.reason = f"{decision.reason}; {why}" if why else decision.reason
            new_state = decision.state
            self._recover(rt, out)
        out.replicas = replicas
        self.metrics.desired.labels(out.target).set(replicas)
        scaled = replicas != status.desired and not self.settings.dry_run
        if scaled:
            self.actuator.scale(ref, replicas)
        self._keep_state(rt, new_state)
        if scaled:
            self._event(rt, "SuccessfulRescale", f"New size: {replicas}; reason: {out.reason}")
        if spec.remediate and (problem is None or problem.reason != failsafe.UNAVAILABLE):
            out.remediation = self._remediate(rt, status, at)

    # ------------------------------------------------------------------ state
    def _state(self, rt: TargetRuntime) -> PolicyState:
        if rt.ref not in self._states:
            saved = self.actuator.load_state(rt.ref, STATE_KEY)
            self._states[rt.ref] = self._saved_state(rt, saved)
            self._saved[rt.ref] = json.dumps(saved, sort_keys=True)
        return self._states[rt.ref]

    def _saved_state(self, rt: TargetRuntime, saved: Mapping[str, Any]) -> PolicyState:
        """The state saved in the annotation, or a fresh one (with a warning) if unusable."""
        policy: ScalingPolicy[PolicyState] = rt.policy
        if not saved:
            return policy.initial_state()
        data = saved.get("state")
        if saved.get("policy") != rt.policy.name:
            problem = f"it belongs to policy {saved.get('policy')!r}, not {rt.policy.name!r}"
        elif not isinstance(data, dict):
            problem = f"key state: not an object but {type(data).__name__}"
        else:
            try:
                return policy.load_state(data)
            except StateError as exc:
                problem = str(exc)
        logger.warning(
            "%s: saved policy state ignored, starting afresh: %s", label(rt.ref), problem
        )
        return policy.initial_state()

    def _keep_state(self, rt: TargetRuntime, state: PolicyState) -> None:
        self._states[rt.ref] = state
        envelope = {"policy": rt.policy.name, "state": state.to_json()}
        text = json.dumps(envelope, sort_keys=True)
        if text != self._saved.get(rt.ref) and not self.settings.dry_run:
            self.actuator.save_state(rt.ref, STATE_KEY, json.loads(text))
            self._saved[rt.ref] = text

    def _event(
        self, rt: TargetRuntime, reason: str, message: str, *, warning: bool = False
    ) -> None:
        """Record an Event; a failure to record one is logged and counted, never fatal."""
        if self.settings.dry_run:
            return
        try:
            self.actuator.record_event(rt.ref, reason, message, warning=warning)
        except (KubeForbiddenError, KubeUnavailableError) as exc:
            target = label(rt.ref)
            self.metrics.errors.labels(target, "event").inc()
            key = f"{target} event {exc}"
            level = logging.DEBUG if key in self._reported else logging.WARNING
            self._reported.add(key)
            logger.log(level, "%s: could not record Event %s: %s", target, reason, exc)

    # -------------------------------------------------------------- fail-safe
    def _hold(self, rt: TargetRuntime, out: Outcome, problem: failsafe.Problem) -> None:
        self.metrics.holds.labels(out.target, problem.reason).inc()
        self.metrics.metrics_healthy.labels(out.target).set(0)
        if self._holding.get(rt.ref) != problem.reason:  # an Event when a hold starts, not each
            self._holding[rt.ref] = problem.reason
            logger.warning("%s: holding at %s replicas: %s", out.target, out.current, problem)
            self._event(
                rt,
                "MetricsUnhealthy",
                f"holding replicas at {out.current}, never scaling in: {problem}",
                warning=True,
            )

    def _recover(self, rt: TargetRuntime, out: Outcome) -> None:
        self.metrics.metrics_healthy.labels(out.target).set(1)
        if self._holding.pop(rt.ref, None) is not None:
            logger.info("%s: metrics healthy again; policy %s in control", out.target, out.policy)
            self._event(rt, "MetricsHealthy", f"metrics healthy again; {out.policy} in control")

    # ------------------------------------------------------------ remediation
    def _remediate(self, rt: TargetRuntime, status: TargetStatus, at: float) -> str:
        try:
            findings = remediate.find(self.source, rt.ref.namespace, at)
        except MetricsUnavailable as exc:
            return f"skipped: {exc}"
        pick, blocked = remediate.choose(findings, status, rt.spec.min_replicas)
        target = label(rt.ref)
        if pick is None:
            if blocked:  # once per pod at WARNING; every sync's record carries it too
                key = f"{target} blocked {blocked.split(' ', 2)[1]}"
                level = logging.DEBUG if key in self._reported else logging.WARNING
                self._reported.add(key)
                logger.log(level, "%s: not remediating: %s", target, blocked)
            return f"blocked: {blocked}" if blocked else ""
        pods = {p.name: p for p in status.pods}
        node = str(getattr(pods[pick.pod], "node", "") or pick.node)
        what = f"pod {pick.pod} on GPU {pick.gpu} (node {node or '?'}): {pick.evidence}"
        self.metrics.remediations.labels(target, pick.kind).inc()
        if self.settings.dry_run:
            logger.warning("%s: dry run: would delete %s", target, what)
            return f"dry run: would delete {what}"
        self.actuator.delete_pod(rt.ref.namespace, pick.pod)
        cordoned = ""
        if rt.spec.cordon and node:
            self.actuator.cordon(node)
            cordoned = f"; cordoned node {node}"
        message = f"deleted {what}{cordoned}"
        logger.warning("%s: %s", target, message)
        self._event(rt, "UnhealthyGPUPodDeleted", message, warning=True)
        return message

    # ---------------------------------------------------------------- logging
    def _log(self, out: Outcome) -> None:
        record = asdict(out)
        if out.error is not None:
            return  # reported by _fail
        prefix = "dry run: " if out.dry_run else ""
        logger.info(
            "%s%s: %s -> %s (%s)",
            prefix,
            out.target,
            out.current,
            out.replicas,
            out.reason,
            extra={"decision": record},
        )
