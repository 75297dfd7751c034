"""Knative's Pod Autoscaler (KPA): concurrency-driven, with a panic mode for surges.

Knative Serving is the other serverless baseline for inference: it scales on
observed concurrency, reacts to bursts within seconds and scales to zero. This
module reproduces the decider (``pkg/autoscaler/scaling/autoscaler.go``,
``newAutoscaler`` and ``Scale``) and the KPA reconciler
(``pkg/reconciler/autoscaling/kpa``: ``scaler.go`` ``scale`` and
``handleScaleToZero``, ``kpa.go`` ``computeActiveCondition``) with the
``config-autoscaler`` defaults (``pkg/autoscaler/config/config.go``).

Signal: the autoscaler scrapes every queue-proxy once a second
(``scrapeTickInterval``) into 1 s buckets (``BucketSize``), with no Prometheus
in between. The policy declares that path as ``signal_path = QUEUE_PROXY`` (sampled
directly every 1 s, no delay), which the engine honours. Concurrency here is requests in flight
on the pods plus requests waiting in the queue: the queue-proxy and activator
count requests they hold, which is what lets Knative scale from zero.

Decider, every ``tick-interval`` (2 s):

* Stable and panic averages over 60 s and 6 s (``panic-window-percentage``
  10), ending at the newest sample; a partial window averages what exists.
* ``ceil(stable / target)`` and ``ceil(panic / target)``, each kept within
  ``[floor(ready / max-scale-down-rate), ceil(ready x max-scale-up-rate)]``
  with ``ready = max(1, ready pods)``.
* Panic starts when ``ceil(panic / target) / ready >= 2.0`` and every tick
  over the threshold extends it; it ends on the first tick not over it more
  than a stable window after the last one that was. In panic the count never
  decreases (``maxPanicPods``).
* Start in panic: a decider created while more than one pod is Ready starts in
  panic at its creation, holding that count, so losing its metric history (a
  restart, or a new run) does not drop the revision to one pod on the first
  empty window.

Reconciler: bounds (``initial-scale`` raises ``min-scale`` until the target
has once had that many Ready pods), then the scale-to-zero gate when the
decider wants 0: while the revision is activating, keep the count (until the
progress deadline plus 30 s); while active for less than a stable window,
scale to 1; once active for a stable window, keep the count and mark it
inactive; inactive, scale to 0 after ``scale-to-zero-grace-period`` (or after
the pod retention period if longer), or at once if the activator has been in
the path (SKS proxy mode) for the grace period.
"""

import bisect
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Literal

from gpuscale.errors import require
from gpuscale.metrics.signal import Signal
from gpuscale.scaling.baseline import check_bounds, clamp, hold, summed_columns
from gpuscale.scaling.policy import QUEUE_PROXY, Decision, Observation, Series
from gpuscale.scaling.state import CLOCK, JsonState, KeepsState

logger = logging.getLogger(__name__)

SCRAPE_INTERVAL_S = 1.0
"""``scrapeTickInterval`` (``pkg/autoscaler/metrics/collector.go``): queue-proxy scrapes."""

ACTIVATION_TIMEOUT_BUFFER_S = 30.0
"""``activationTimeoutBuffer`` (``scaler.go``), added to the progress deadline."""

SCALE_UNKNOWN = -1
"""``scaleUnknown``: the reconciler leaves the scale alone."""


@dataclass(frozen=True, slots=True)
class KpaConfig:
    """``config-autoscaler`` settings of one revision; Knative's defaults.

    Each field's unit is in its ``metadata["unit"]`` (empty for names and switches).

    Attributes:
        metric: Per-pod concurrency gauge, summed over the workload.
        queue_metric: Per-deployment waiting requests added to it; None to leave out.
        target: Concurrency per pod (``container-concurrency-target-default`` 100 x
            ``container-concurrency-target-percentage`` 70 %).
        target_utilization: ``container-concurrency-target-percentage``; a pod's total
            capacity is ``target / target_utilization`` (for burst capacity).
        target_burst_capacity: ``target-burst-capacity`` (-1: activator always in path).
        stable_window_s: ``stable-window``.
        panic_window_percentage: ``panic-window-percentage`` of the stable window.
        panic_threshold_percentage: ``panic-threshold-percentage``.
        max_scale_up_rate: ``max-scale-up-rate``.
        max_scale_down_rate: ``max-scale-down-rate``.
        scale_to_zero_grace_s: ``scale-to-zero-grace-period``.
        scale_to_zero_pod_retention_s: ``scale-to-zero-pod-retention-period``.
        enable_scale_to_zero: ``enable-scale-to-zero``.
        tick_interval_s: Decider tick (``tickInterval`` in ``multiscaler.go``).
        progress_deadline_s: ``progress-deadline`` of ``config-deployment``.
        initial_scale: ``initial-scale``.
        min_replicas: ``min-scale``.
        max_replicas: ``max-scale`` (Knative's 0 = unlimited has no meaning here).
    """

    metric: str = field(default="gpuscale_serving_requests_in_flight", metadata={"unit": ""})
    queue_metric: str | None = field(
        default="gpuscale_serving_queue_requests", metadata={"unit": ""}
    )
    target: float = field(default=70.0, metadata={"unit": "requests"})
    target_utilization: float = field(default=0.7, metadata={"unit": "ratio"})
    target_burst_capacity: float = field(default=211.0, metadata={"unit": "requests"})
    stable_window_s: float = field(default=60.0, metadata={"unit": "s"})
    panic_window_percentage: float = field(default=10.0, metadata={"unit": "%"})
    panic_threshold_percentage: float = field(default=200.0, metadata={"unit": "%"})
    max_scale_up_rate: float = field(default=1000.0, metadata={"unit": "ratio"})
    max_scale_down_rate: float = field(default=2.0, metadata={"unit": "ratio"})
    scale_to_zero_grace_s: float = field(default=30.0, metadata={"unit": "s"})
    scale_to_zero_pod_retention_s: float = field(default=0.0, metadata={"unit": "s"})
    enable_scale_to_zero: bool = field(default=True, metadata={"unit": ""})
    tick_interval_s: float = field(default=2.0, metadata={"unit": "s"})
    progress_deadline_s: float = field(default=600.0, metadata={"unit": "s"})
    initial_scale: int = field(default=1, metadata={"unit": "replicas"})
    min_replicas: int = field(default=0, metadata={"unit": "replicas"})
    max_replicas: int = field(default=100, metadata={"unit": "replicas"})

    def __post_init__(self) -> None:
        def check(ok: bool, key: str, fix: str) -> None:
            require(ok, f"KpaConfig.{key}={getattr(self, key)!r}", "out of range", fix)

        check(self.target > 0, "target", "use a concurrency > 0")
        check(0 < self.target_utilization <= 1, "target_utilization", "use a ratio in (0, 1]")
        check(
            self.target_burst_capacity >= 0 or self.target_burst_capacity == -1,
            "target_burst_capacity",
            "use 0 or more, or -1",
        )
        check(self.stable_window_s >= 6, "stable_window_s", "Knative requires at least 6 s")
        check(1 <= self.panic_window_percentage <= 100, "panic_window_percentage", "use 1..100")
        check(self.panic_threshold_percentage >= 110, "panic_threshold_percentage", "use >= 110")
        check(self.max_scale_up_rate > 1, "max_scale_up_rate", "use a rate above 1.0")
        check(self.max_scale_down_rate > 1, "max_scale_down_rate", "use a rate above 1.0")
        for key in ("scale_to_zero_grace_s", "scale_to_zero_pod_retention_s"):
            check(getattr(self, key) >= 0, key, "use 0 or more seconds")
        check(self.tick_interval_s > 0, "tick_interval_s", "use > 0 s")
        check(self.progress_deadline_s > 0, "progress_deadline_s", "use > 0 s")
        check(self.initial_scale >= 0, "initial_scale", "use 0 or more")
        check_bounds("KpaConfig", self.min_replicas, self.max_replicas)

    @property
    def panic_window_s(self) -> float:
        """Panic window, seconds (6 s by default)."""
        return self.stable_window_s * self.panic_window_percentage / 100


def window_average(points: Series, window_s: float) -> float:
    """Mean of the samples in the window ending at the newest sample.

    With one sample per second this is Knative's bucket average; at the start of
    the data it averages the partial window, as Knative does.

    Args:
        points: (time seconds, value) points, oldest first; not empty.
        window_s: Window length, seconds.

    Returns:
        The average value over ``(t_last - window_s, t_last]``, in the points' unit.
    """
    start = points[-1][0] - window_s
    values = [v for t, v in points if t > start]
    return sum(values) / len(values)


def window_mean(times: Sequence[float], values: Sequence[float], window_s: float) -> float:
    """``window_average`` of the points ``zip(times, values)``, found by bisection.

    Args:
        times: Sample times, seconds, ascending; not empty.
        values: The samples, one per time.
        window_s: Window length, seconds.

    Returns:
        The same sum over the same samples in the same order as ``window_average``.
    """
    tail = values[bisect.bisect_right(times, times[-1] - window_s) :]
    return sum(tail) / len(tail)


Activity = Literal["activating", "active", "inactive"]


@dataclass(frozen=True, slots=True)
class KpaState(JsonState):
    """The decider's, the PodAutoscaler's and the SKS's memory.

    Attributes:
        created_at: The decider's creation (first decision), seconds; None before it.
        panic_time: When panic last started or was extended, seconds; None out of panic.
        max_panic_pods: The most pods wanted in this panic (0 out of panic).
        active: The PodAutoscaler's Active condition.
        active_changed_at: When ``active`` last changed, seconds.
        initialised: Whether the target has once had ``initial_scale`` Ready pods.
        proxy_since: Since when the activator is in the path (SKS proxy mode),
            seconds; None while the pods serve without it.

    ``essential()`` keeps of ``panic_time`` only whether it is set: every tick over
    the threshold moves it. After a restart it may lag by the caller's write
    interval, so a panic can end that much sooner; Knative's own decider, restarted,
    forgets it altogether and restarts in panic from its creation.
    """

    created_at: float | None = None
    panic_time: float | None = field(default=None, metadata=CLOCK)
    max_panic_pods: int = 0
    active: Activity = "activating"
    active_changed_at: float = 0.0
    initialised: bool = False
    proxy_since: float | None = None


class KpaPolicy(KeepsState[KpaState]):
    """Knative's KPA decider and reconciler, as a pure ``ScalingPolicy``.

    ``signal_path`` (``QUEUE_PROXY``) declares the concurrency path: the engine
    samples the summed ``signals`` every second, undelayed, not through Prometheus.
    """

    state_type = KpaState

    def __init__(self, config: KpaConfig | None = None, name: str = "kpa") -> None:
        self.config = config or KpaConfig()
        self.name = name
        self.interval_s = self.config.tick_interval_s
        self.history_s = self.config.stable_window_s
        self.signal_path = QUEUE_PROXY
        signals = {"concurrency": Signal(self.config.metric, aggregation="sum")}
        if self.config.queue_metric is not None:
            signals["queue"] = Signal(self.config.queue_metric, aggregation="sum")
        self._keys = tuple(signals)
        self.signals: Mapping[str, Signal] = MappingProxyType(signals)
        self.pod_signals: Mapping[str, Signal] = MappingProxyType({})
        self.min_replicas = self.config.min_replicas
        self.max_replicas = self.config.max_replicas
        self.reads_node_slots = False
        # Read at every tick: worked out once.
        self._panic_window_s = self.config.panic_window_s
        self._panic_ratio = self.config.panic_threshold_percentage / 100
        self._target_text = f"{self.config.target:g}"

    def decide(self, observation: Observation, state: KpaState) -> Decision[KpaState]:
        """Run one decider tick and the reconciler after it.

        Returns:
            The desired replicas, a reason with both averages, and the new state.
        """
        cfg = self.config
        now = float(observation.now)
        current = observation.target.desired
        ready_pods = observation.target.ready
        st = state
        if st.created_at is None:  # newAutoscaler: start in panic above one Ready pod
            st = KpaState(
                created_at=now,
                panic_time=now if ready_pods > 1 else None,
                max_panic_pods=ready_pods,
                active="activating",
                active_changed_at=now,
            )
        points = None if not observation.healthy else summed_columns(observation, self._keys)
        if points is None:
            why = "unhealthy" if not observation.healthy else "no data"
            decision = hold(observation, cfg.min_replicas, cfg.max_replicas, why, st)
            logger.debug("%s: %s", self.name, decision.reason)
            return decision
        desired, burst, seen, st = self._scale(now, ready_pods, points, st)
        low = cfg.min_replicas
        if cfg.initial_scale > 1 and not st.initialised:
            low = max(low, cfg.initial_scale)
        desired = min(max(desired, low), cfg.max_replicas)
        want, apply, gate = self._scale_to_zero_gate(now, desired, st)
        replicas = clamp(want if apply else current, cfg.min_replicas, cfg.max_replicas)
        st = self._update_status(now, want, ready_pods, burst, st)
        reason = f"{seen}, desired {desired}{gate} -> {replicas}"
        logger.debug("%s: %d -> %d: %s", self.name, current, replicas, reason)
        return Decision(replicas, reason, st)

    def _scale(
        self,
        now: float,
        ready_pods: int,
        points: tuple[Sequence[float], Sequence[float]],
        st: KpaState,
    ) -> tuple[int, float, str, KpaState]:
        """The decider's ``Scale``: desired pods, excess burst capacity, a reason, new state.

        ``points`` are the summed concurrency's (times, values).
        """
        cfg = self.config
        times, values = points
        stable = window_mean(times, values, cfg.stable_window_s)
        panic = window_mean(times, values, self._panic_window_s)
        ready = float(max(1, ready_pods))
        max_up = math.ceil(cfg.max_scale_up_rate * ready)
        max_down = math.floor(ready / cfg.max_scale_down_rate)
        dspc = math.ceil(stable / cfg.target)
        dppc = math.ceil(panic / cfg.target)
        desired_stable = min(max(dspc, max_down), max_up)
        desired_panic = min(max(dppc, max_down), max_up)
        over = dppc / ready >= self._panic_ratio
        panic_time, max_panic = st.panic_time, st.max_panic_pods
        if over:
            panic_time = now  # start, or extend
        elif panic_time is not None and panic_time + cfg.stable_window_s < now:
            panic_time, max_panic = None, 0
        desired, mode = desired_stable, "stable"
        if panic_time is not None:
            max_panic = max(max_panic, desired_stable, desired_panic)
            desired, mode = max_panic, "panic"
        if panic_time != st.panic_time or max_panic != st.max_panic_pods:
            st = replace(st, panic_time=panic_time, max_panic_pods=max_panic)
        if cfg.target_burst_capacity == -1:
            burst = -1.0
        elif cfg.target_burst_capacity == 0:
            burst = 0.0
        else:
            capacity = ready_pods * cfg.target / cfg.target_utilization
            burst = math.floor(capacity - cfg.target_burst_capacity - panic)
        seen = (
            f"{mode}: stable {stable:.2f} panic {panic:.2f} / target {self._target_text} "
            f"-> {dspc}/{dppc} pods, ready {ready_pods}"
        )
        return desired, burst, seen, st

    def _scale_to_zero_gate(self, now: float, desired: int, st: KpaState) -> tuple[int, bool, str]:
        """``handleScaleToZero``: the scale to want, and whether to apply it.

        Returns:
            (replicas the reconciler wants, or ``SCALE_UNKNOWN``; whether it
            patches the scale; a note for the reason).
        """
        cfg = self.config
        if desired != 0:
            return desired, True, ""
        if not cfg.enable_scale_to_zero:
            return 1, True, " (scale to zero disabled: 1)"
        since = now - st.active_changed_at
        if st.active == "activating":
            if since > cfg.progress_deadline_s + ACTIVATION_TIMEOUT_BUFFER_S:
                return 0, True, " (activation timed out)"
            return SCALE_UNKNOWN, False, " (activating: scale left alone)"
        if st.active == "active":
            if since >= cfg.stable_window_s:
                return 0, False, f" (active {since:g} s: marked inactive, scale left alone)"
            return 1, True, f" (active {since:g} s < stable window: 1)"
        retention = cfg.scale_to_zero_pod_retention_s
        if since >= max(cfg.scale_to_zero_grace_s, retention):
            return 0, True, f" (inactive {since:g} s: grace period over)"
        if retention > 0 and since < retention:
            return 0, False, f" (inactive {since:g} s < pod retention)"
        proxy = st.proxy_since
        if proxy is not None and now - proxy >= cfg.scale_to_zero_grace_s:
            return 0, True, " (activator in path for the grace period)"
        return 0, False, f" (inactive {since:g} s, within grace)"

    def _update_status(
        self, now: float, want: int, ready_pods: int, burst: float, st: KpaState
    ) -> KpaState:
        """``computeActiveCondition`` and the SKS mode, after the scale was set.

        Returns:
            The state with the PodAutoscaler's and the SKS's fields updated.
        """
        cfg = self.config
        if st.initialised:
            min_ready = max(cfg.min_replicas, 1)
        else:
            min_ready = max(cfg.min_replicas, cfg.initial_scale)
        initialised = st.initialised or ready_pods >= min_ready
        active: Activity = st.active
        if want == 0 or min_ready == 0:
            active = "inactive"
        elif want > 0 or active != "inactive":
            active = "active" if ready_pods >= min_ready else "activating"
        changed_at = now if active != st.active else st.active_changed_at
        serving = want > 0 and burst >= 0 and ready_pods > 0  # else the activator backs it
        proxy_since = None if serving else (now if st.proxy_since is None else st.proxy_since)
        if (initialised, active, changed_at, proxy_since) == (
            st.initialised,
            st.active,
            st.active_changed_at,
            st.proxy_since,
        ):  # the usual tick: nothing moved, so no new state to build
            return st
        return replace(
            st,
            initialised=initialised,
            active=active,
            active_changed_at=changed_at,
            proxy_since=proxy_since,
        )
