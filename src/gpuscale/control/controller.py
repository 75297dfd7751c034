"""The reconcile loop: every sync period, for each target, status -> signals -> policy -> /scale.

One sync runs each target's decision step (``scaling.step.DecisionStep``), the
same step the simulator runs: it reads the target's ``/scale`` and pods, builds
the policy's ``Observation``, holds on data the fail-safe finds unfit, runs the
unchanged policy, bounds the result, deletes the pods the policy replaces and,
with ``remediate``, a pod on a broken GPU, and writes ``/scale``
(``seams.KubeWorkload``). Around the step the loop persists the policy's state
in the controller's own ConfigMap, one key per target (only when a
decision-relevant part changed, or once a minute), records Events and logs the
decision. Targets are
reconciled concurrently and each in isolation: an exception in one (a 403, an
API server hiccup, a policy bug) is logged, counted and leaves the others
untouched.

The targets come from the config file, or from the cluster's GPUScaler objects
(``catalog``, ``control.scalers.ClusterScalers``): then the catalog is asked for
the targets before each sync (a deleted object's targets are dropped, their
replicas left as they are; a new policy kind starts from its first state) and
told the outcomes after it, to write each object's status. With ``owners``
(``control.owners.OtherAutoscalers``) a target another autoscaler (an HPA, a
ScaledObject) already scales is only read: no ``/scale`` write, one Warning Event
per episode.

With an elector (``control.lease.LeaseElector``) only the replica holding the
Lease acts; the others keep renewing their claim every ``retry_period_s`` and do
nothing else. A replica that gains the lease reloads every target's state from
the ConfigMap, so it carries on where the previous leader stopped.

Time comes from ``clock`` and waiting from ``wait`` (seams: tests run the loop on a
fake clock). Every decision is logged with the inputs that drove it, and the JSON
log format carries them as structured fields (``decision``): a change (replicas
read or set, a hold ending) at INFO, a hold starting or changing cause at WARNING, a
sync that decides as the one before at DEBUG, so a steady target writes one line
per change, and one Event (``SuccessfulRescale``, ``MetricsUnhealthy``,
``MetricsHealthy``) per scale or hold episode.
"""

import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any

from gpuscale.control.kubecall import KubeForbiddenError, KubeUnavailableError, NotLeaderError
from gpuscale.control.kubernetes import TargetRef
from gpuscale.control.seams import (
    STATE_REWRITE_S,
    Actuator,
    Catalog,
    Elector,
    KubeWorkload,
    Outcome,
    OwnerCheck,
    SavedState,
    Settings,
    inputs,
    label,
)
from gpuscale.control.server import ControllerMetrics, HealthState
from gpuscale.control.targets import TargetRuntime
from gpuscale.metrics.signal import MetricsSource
from gpuscale.scaling import failsafe
from gpuscale.scaling.policy import ScalingPolicy
from gpuscale.scaling.state import PolicyState, StateError
from gpuscale.scaling.step import REMEDIATE, DecisionStep, StepOutcome, StepSettings

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
        catalog: Where targets come from when they are GPUScaler objects in the
            cluster: asked for the targets before each sync and told the outcomes
            after it (``targets`` is then only the starting list).
        owners: Finds another autoscaler on a target; such a target is left alone.
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
        catalog: Catalog | None = None,
        owners: OwnerCheck | None = None,
    ) -> None:
        self.targets = list(targets)
        self.catalog = catalog
        self.owners = owners
        self._owned: set[TargetRef] = set()
        self.source = source
        self.actuator = actuator
        self.settings = settings or Settings()
        self.metrics = metrics or ControllerMetrics()
        self.elector = elector
        self.clock = clock
        self.health = health or HealthState(3 * max(self.settings.sync_period_s, 10.0))
        self.leader = elector is None
        self._states: dict[TargetRef, PolicyState] = {}
        self._saved: dict[TargetRef, SavedState] = {}
        self._holding: dict[TargetRef, str] = {}
        self._steps: dict[TargetRef, DecisionStep[Any]] = {}
        self._reported: set[str] = set()
        # Per target label: (replicas read, replicas set, hold reason) last logged.
        self._last: dict[str, tuple[int | None, int | None, str | None]] = {}
        self._gained = threading.Event()  # set by the renewal, cleared by the loop

    # ------------------------------------------------------------------ loop
    def run(self, stop: threading.Event, wait: Callable[[float], bool] | None = None) -> None:
        """Sync every period until ``stop`` is set; release the lease on the way out.

        With an elector, the Lease is renewed on its own thread every retry period,
        whatever a sync's length (a slow API server cannot starve the renewal), and
        every write checks first that the last renewal is still good for longer than a
        write may take (``_guard``).

        Args:
            stop: Ends the loop.
            wait: Waits up to the given seconds, returns True when it should stop
                (default ``stop.wait``). A seam for fake clocks: with it, the Lease is
                renewed by the loop itself between syncs instead of on a thread.
        """
        keeper: threading.Thread | None = None
        done = threading.Event()
        if self.elector is not None:
            self.actuator.guard_writes(self._guard)
            if wait is None:
                keeper = threading.Thread(
                    target=self._keep_lease, args=(done,), name="lease", daemon=True
                )
                keeper.start()
        wait = wait or stop.wait
        next_sync = self.clock()
        try:
            while not stop.is_set():
                if keeper is None:
                    self.check_leader()
                self._reload_if_gained()
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
            done.set()
            if keeper is not None:
                keeper.join(timeout=self.settings.retry_period_s + 15.0)
            if self.elector is not None and self.leader:
                self.leader = False
                if self.elector.release():
                    logger.info("released the leader lease")
                else:
                    logger.warning("could not release the leader lease; it expires on its own")

    def _keep_lease(self, done: threading.Event) -> None:
        """Renew (or try to take) the Lease every retry period until ``done``."""
        while not done.is_set():
            self.check_leader()
            done.wait(self.settings.retry_period_s)

    def _guard(self, what: str) -> None:
        """Refuse a write unless the Lease's last renewal outlasts it (``KubeCall.guard``).

        Raises:
            NotLeaderError: Less than ``write_margin_s`` is left before the renew
                deadline: a standby may take the Lease before the write lands.
        """
        if self.elector is None:
            return
        left = self.elector.valid_for()
        if left <= self.settings.write_margin_s:
            if self.leader:
                self.leader = False
                self.metrics.leader.set(0)
                logger.warning("lost the leader lease; stopped writing until it is regained")
            raise NotLeaderError(
                f"{what} not sent: the leader lease may lapse before it lands "
                f"(a write may take {self.settings.write_margin_s:g} s)"
            )

    def _reload_if_gained(self) -> None:
        """After gaining the Lease, forget cached states (the stored ones are the truth)."""
        if self._gained.is_set():
            self._gained.clear()
            self._states.clear()
            self._saved.clear()

    def check_leader(self) -> bool:
        """Renew or try to take the lease; on gaining it, have cached states reloaded.

        Returns:
            Whether this replica leads now.
        """
        if self.elector is None:
            self.metrics.leader.set(1)
            return True
        self.actuator.guard_writes(self._guard)
        try:
            leading = self.elector.try_acquire_or_renew()
        except Exception as exc:  # noqa: BLE001 - a failed renewal must stop us acting, not crash
            logger.warning("leader election failed: %s", exc)
            leading = False
        if leading and not self.leader:
            logger.info("became the leader; reloading every target's state")
            self._gained.set()
        elif self.leader and not leading:
            logger.warning("lost the leader lease; stopped writing until it is regained")
        self.leader = leading
        self.metrics.leader.set(1 if leading else 0)
        return leading

    def sync(self) -> list[Outcome]:
        """Reconcile every target once, concurrently; one failure stays with its target.

        Returns:
            One outcome per target, in config order.
        """
        start = time.perf_counter()
        if self.catalog is not None:
            self._adopt(self.catalog.runtimes())
        if self.owners is not None:
            self.owners.begin_sync()
        workers = max(1, min(self.settings.workers, len(self.targets)))
        if workers == 1:
            outcomes = [self.reconcile(t) for t in self.targets]
        else:
            with ThreadPoolExecutor(workers, thread_name_prefix="reconcile") as pool:
                outcomes = list(pool.map(self.reconcile, self.targets))
        if self.catalog is not None:
            self.catalog.report(list(zip(self.targets, outcomes, strict=True)), self.clock())
        self.metrics.sync_duration.set(time.perf_counter() - start)
        return outcomes

    def _adopt(self, targets: list[TargetRuntime]) -> None:
        """Take the catalog's targets: forget the ones gone, reset state on a new policy kind.

        A target whose GPUScaler was deleted is no longer reconciled and its replicas
        stay where they are; one whose policy kind changed starts from the new
        policy's first state; any other spec change keeps the state.
        """
        before = {rt.ref: rt for rt in self.targets}
        now = {rt.ref for rt in targets}
        for ref in before:
            if ref not in now:
                logger.info(
                    "%s: its GPUScaler is gone; no longer scaled (replicas left as they are)",
                    label(ref),
                )
                self._forget(ref)
        for rt in targets:
            previous = before.get(rt.ref)
            if previous is not None and previous.policy.name != rt.policy.name:
                logger.info(
                    "%s: policy changed from %s to %s; starting from its first state",
                    label(rt.ref),
                    previous.policy.name,
                    rt.policy.name,
                )
                self._steps.pop(rt.ref, None)
                if rt.ref in self._states:  # not reloaded: the saved one is the old policy's
                    self._states[rt.ref] = rt.policy.initial_state()
        self.targets = list(targets)

    def _forget(self, ref: TargetRef) -> None:
        for cache in (self._states, self._saved, self._holding, self._steps):
            cache.pop(ref, None)
        self._owned.discard(ref)

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
        except NotLeaderError as exc:
            self._fail(out, "not_leader", exc, once=True)
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
        if self._owned_elsewhere(rt, out):
            return
        workload = KubeWorkload(self.actuator, rt.ref, dry_run=self.settings.dry_run)
        state = self._state(rt)
        result = self._step(rt).run(workload, self.clock, state)
        status, now = result.status, result.now
        out.current, out.ready, out.starting = status.desired, status.ready, status.starting
        self.metrics.current.labels(out.target).set(status.desired)
        self.metrics.ready.labels(out.target).set(status.ready)
        problem = result.held
        if result.observation is not None:
            self.metrics.last_read.labels(out.target).set(now)
            out.inputs = inputs(result.observation)
        if problem is not None and problem.reason == failsafe.UNAVAILABLE:
            self.metrics.errors.labels(out.target, "metrics_unavailable").inc()
        out.replicas, out.reason, out.scaled = result.replicas, result.reason, result.scaled
        out.forecast = result.forecast
        if problem is not None:
            out.held = problem.reason
            self._hold(rt, out, problem)
        else:
            self._recover(rt, out)
        self.metrics.desired.labels(out.target).set(result.replicas)
        self._keep_state(rt, result.state, now)
        if result.scaled and not self.settings.dry_run:
            message = f"New size: {result.replicas}; reason: {out.reason}"
            self._event(rt, "SuccessfulRescale", message)
        out.remediation = self._report_deletions(rt, result)

    def _owned_elsewhere(self, rt: TargetRuntime, out: Outcome) -> bool:
        """Whether another autoscaler scales the target; then only read its replicas.

        One Warning Event (and one WARNING line) per episode: when the other
        autoscaler appears, not at every sync while it stays.
        """
        owner = self.owners.owner_of(rt.ref) if self.owners is not None else ""
        if not owner:
            if rt.ref in self._owned:
                self._owned.discard(rt.ref)
                logger.info(
                    "%s: no other autoscaler scales it now; %s in control",
                    out.target,
                    rt.policy.name,
                )
            return False
        out.owned_by = owner
        out.current = self.actuator.status(rt.ref).desired
        out.reason = f"not scaling: {owner} scales this target"
        if rt.ref not in self._owned:
            self._owned.add(rt.ref)
            message = (
                f"{owner} already scales this {rt.ref.kind}; gpuscale ({rt.owner or 'config'}) "
                "will not write /scale while it does: delete one of the two"
            )
            logger.warning("%s: %s", out.target, message)
            self._event(rt, "OwnedByOtherAutoscaler", message, warning=True)
        return True

    def _step(self, rt: TargetRuntime) -> DecisionStep[Any]:
        """The target's decision step, built once (the source's capabilities found once)."""
        step = self._steps.get(rt.ref)
        if step is None or step.policy is not rt.policy:
            spec = rt.spec
            settings = StepSettings(
                spec.min_replicas,
                spec.max_replicas,
                up_step=spec.max_scale_up_step,
                down_step=spec.max_scale_down_step,
                stale_after_s=spec.metrics.stale_after_seconds,
                step_s=spec.metrics.step_seconds,
                remediate=spec.remediate,
                cordon=spec.cordon,
                namespace=rt.ref.namespace,
                placement=spec.placement,
            )
            source = self.source if rt.source is None else rt.source
            step = self._steps[rt.ref] = DecisionStep(
                rt.policy, source, settings, rt.policy.signal_path
            )
        return step

    # ------------------------------------------------------------------ state
    def _state(self, rt: TargetRuntime) -> PolicyState:
        if rt.ref not in self._states:
            saved = self.actuator.load_state(rt.ref)
            self._states[rt.ref] = self._saved_state(rt, saved)
            self._saved[rt.ref] = SavedState(json.dumps(saved, sort_keys=True), None, -math.inf)
        return self._states[rt.ref]

    def _saved_state(self, rt: TargetRuntime, saved: Mapping[str, Any]) -> PolicyState:
        """The stored state, or a fresh one (with a warning) if unusable."""
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

    def _keep_state(self, rt: TargetRuntime, state: PolicyState, now: float) -> None:
        """Keep the state; store it when a decision-relevant field changed.

        A state whose only change is time passing (``PolicyState.essential`` unchanged)
        is written at most once per ``STATE_REWRITE_S``: each write is an etcd write
        and a watch event for every watcher of the ConfigMap.
        """
        self._states[rt.ref] = state
        if self.settings.dry_run:
            return
        text = json.dumps({"policy": rt.policy.name, "state": state.to_json()}, sort_keys=True)
        essential = json.dumps(state.essential(), sort_keys=True)
        last = self._saved.get(rt.ref)
        if last is not None and text == last.text:
            return
        if last is not None and essential == last.essential and now - last.at < STATE_REWRITE_S:
            return
        self.actuator.save_state(rt.ref, json.loads(text))
        self.metrics.state_writes.labels(label(rt.ref)).inc()
        self._saved[rt.ref] = SavedState(text, essential, now)

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
        message = f"holding replicas at {out.current}, never scaling in: {problem}"
        if rt.ref not in self._holding:  # one Event when a hold starts, whatever its reasons
            self._event(rt, "MetricsUnhealthy", message, warning=True)
        self._holding[rt.ref] = message

    def unhealthy(self, ref: TargetRef) -> str | None:
        """Why the target's metrics are unfit now, as its ``MetricsUnhealthy`` Event said.

        What a ``MetricsHealthy`` status condition reports: the latest sync's hold
        message while a hold goes on, None while the policy is in control.

        Returns:
            E.g. ``holding replicas at 2, never scaling in: metrics unavailable: connect:
            ...``, or None.
        """
        return self._holding.get(ref)

    def _recover(self, rt: TargetRuntime, out: Outcome) -> None:
        self.metrics.metrics_healthy.labels(out.target).set(1)
        if self._holding.pop(rt.ref, None) is not None:  # the decision line says so in the log
            self._event(rt, "MetricsHealthy", f"metrics healthy again; {out.policy} in control")

    # ------------------------------------------------------------ deletions
    def _report_deletions(self, rt: TargetRuntime, result: StepOutcome[Any]) -> str:
        """Log, count and record an Event for each pod the step deleted.

        Returns:
            What remediation and replacement did or would do, "" when nothing.
        """
        target = label(rt.ref)
        if not result.deleted and result.blocked:
            if not result.blocked.startswith("skipped"):  # once per pod at WARNING
                key = f"{target} blocked {result.blocked.split(' ', 2)[1]}"
                level = logging.DEBUG if key in self._reported else logging.WARNING
                self._reported.add(key)
                logger.log(level, "%s: not remediating: %s", target, result.blocked)
                return f"blocked: {result.blocked}"
            return result.blocked
        notes = []
        for d in result.deleted:
            where = f" (node {d.node})" if d.node else ""
            if d.cause == REMEDIATE:
                what = f"pod {d.pod} on GPU {d.gpu}{where}: {d.detail}"
                self.metrics.remediations.labels(target, d.kind).inc()
                event, reason = "UnhealthyGPUPodDeleted", f"deleted {what}"
                if d.node and d.node in result.cordoned:
                    reason += f"; cordoned node {d.node}"
            else:
                what = f"pod {d.pod}{where}: {rt.policy.name} replaces it (not capacity)"
                self.metrics.replacements.labels(target).inc()
                event, reason = "SickPodReplaced", f"deleted {what}"
            if self.settings.dry_run:
                logger.warning("%s: dry run: would delete %s", target, what)
                notes.append(f"dry run: would delete {what}")
                continue
            logger.warning("%s: %s", target, reason)
            self._event(rt, event, reason, warning=True)
            notes.append(reason)
        return "; ".join(notes)

    # ---------------------------------------------------------------- logging
    def _log(self, out: Outcome) -> None:
        """One line per decision change: a hold (starting, or with a new cause) at WARNING.

        A decision like the target's previous one (the same replicas read and set,
        the same hold or none) is logged at DEBUG: a steady state, or a steady hold
        through an outage, writes one line, not one per sync.
        """
        if out.error is not None:
            self._last.pop(out.target, None)  # the next decision is news again
            return  # reported by _fail
        key = (out.current, out.replicas, out.held)
        if self._last.get(out.target) == key:
            level = logging.DEBUG
        else:
            level = logging.WARNING if out.held is not None else logging.INFO
        self._last[out.target] = key
        record = asdict(out)
        prefix = "dry run: " if out.dry_run else ""
        logger.log(
            level,
            "%s%s: %s -> %s (%s)",
            prefix,
            out.target,
            out.current,
            out.replicas,
            out.reason,
            extra={"decision": record},
        )
