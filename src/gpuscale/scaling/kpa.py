"""Knative's Pod Autoscaler (KPA): concurrency-driven, with a panic mode for surges.

Knative Serving is the other serverless baseline for inference: it scales on
observed concurrency, reacts to bursts within seconds and scales to zero. This
module reproduces the decider (``pkg/autoscaler/scaling/autoscaler.go``,
``Scale``) and the KPA reconciler's scale-to-zero gate
(``pkg/reconciler/autoscaling/kpa/scaler.go``) with the ``config-autoscaler``
defaults:

* Stable and panic averages of total concurrency over 60 s and 6 s
  (``panic-window-percentage`` 10). The windows end at the newest sample; with
  a partial window (start of data) the average covers what exists, and gaps
  count as 0, as Knative's windowed buckets do.
* ``desiredStable = ceil(stable / target)``, ``desiredPanic = ceil(panic /
  target)``, each kept within ``[floor(ready / max-scale-down-rate),
  ceil(ready x max-scale-up-rate)]`` with ``ready = max(1, ready pods)``.
* Panic starts when ``ceil(panic / target) / ready >= 2.0`` (200 %); every tick
  still over the threshold extends it; it ends on the first tick not over the
  threshold more than one stable window after the last one that was. In panic
  the count never decreases (``maxPanicPods``).
* Scale to zero: when the decider wants 0, the revision must have been active
  for a stable window; it is then marked inactive (activator in the path) and
  the last pod goes ``scale-to-zero-grace-period`` (30 s) later. Meanwhile the
  replicas are held. Until the target has had ``initial-scale`` Ready pods once,
  the count is at least ``initial-scale``.

Concurrency here is requests in flight on the pods plus requests waiting in the
queue: Knative's queue-proxy and activator count requests they hold as
concurrency too, and that is what lets it scale from zero.
"""

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from gpuscale.metrics.signal import Signal
from gpuscale.scaling.baseline import check_bounds, clamp, hold, require, summed_series
from gpuscale.scaling.policy import Decision, Observation, Series, State

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class KpaConfig:
    """``config-autoscaler`` settings of one revision; Knative's defaults.

    Attributes:
        metric: Per-pod concurrency gauge, summed over the workload.
        queue_metric: Per-deployment waiting requests added to it; None to leave out.
        target: Concurrency per pod (``container-concurrency-target-default`` 100 x
            ``container-concurrency-target-percentage`` 70 %).
        stable_window_s: ``stable-window``.
        panic_window_percentage: ``panic-window-percentage`` of the stable window.
        panic_threshold_percentage: ``panic-threshold-percentage``.
        max_scale_up_rate: ``max-scale-up-rate``.
        max_scale_down_rate: ``max-scale-down-rate``.
        scale_to_zero_grace_s: ``scale-to-zero-grace-period``.
        enable_scale_to_zero: ``enable-scale-to-zero``.
        tick_interval_s: ``tick-interval`` of the decider.
        initial_scale: ``initial-scale``.
        min_replicas: ``min-scale``.
        max_replicas: ``max-scale`` (Knative's 0 = unlimited has no meaning here).
    """

    metric: str = "gpuscale_serving_requests_in_flight"
    queue_metric: str | None = "gpuscale_serving_queue_requests"
    target: float = 70.0
    stable_window_s: float = 60.0
    panic_window_percentage: float = 10.0
    panic_threshold_percentage: float = 200.0
    max_scale_up_rate: float = 1000.0
    max_scale_down_rate: float = 2.0
    scale_to_zero_grace_s: float = 30.0
    enable_scale_to_zero: bool = True
    tick_interval_s: float = 2.0
    initial_scale: int = 1
    min_replicas: int = 0
    max_replicas: int = 100

    def __post_init__(self) -> None:
        require(self.target > 0, "KpaConfig.target", self.target, "use a concurrency > 0")
        require(
            self.stable_window_s >= 6,
            "KpaConfig.stable_window_s",
            self.stable_window_s,
            "Knative requires at least 6 s",
        )
        require(
            1 <= self.panic_window_percentage <= 100,
            "KpaConfig.panic_window_percentage",
            self.panic_window_percentage,
            "use 1..100",
        )
        require(
            self.panic_threshold_percentage >= 110,
            "KpaConfig.panic_threshold_percentage",
            self.panic_threshold_percentage,
            "Knative requires at least 110",
        )
        for key, value in (
            ("max_scale_up_rate", self.max_scale_up_rate),
            ("max_scale_down_rate", self.max_scale_down_rate),
        ):
            require(value > 1, f"KpaConfig.{key}", value, "use a rate above 1.0")
        require(
            self.scale_to_zero_grace_s >= 0,
            "KpaConfig.scale_to_zero_grace_s",
            self.scale_to_zero_grace_s,
            "use 0 or more seconds",
        )
        require(
            self.tick_interval_s > 0, "KpaConfig.tick_interval_s", self.tick_interval_s, "use > 0"
        )
        require(self.initial_scale >= 0, "KpaConfig.initial_scale", self.initial_scale, "use >= 0")
        check_bounds("KpaConfig", self.min_replicas, self.max_replicas)

    @property
    def panic_window_s(self) -> float:
        """Panic window, seconds (6 s by default)."""
        return self.stable_window_s * self.panic_window_percentage / 100


def window_average(points: Series, window_s: float) -> float:
    """Mean of the samples in the window ending at the newest sample.

    Args:
        points: (time seconds, value) points, oldest first; not empty.
        window_s: Window length, seconds.

    Returns:
        The average value over ``(t_last - window_s, t_last]``, in the points' unit.
    """
    start = points[-1][0] - window_s
    values = [v for t, v in points if t > start]
    return sum(values) / len(values)


class KpaPolicy:
    """Knative's KPA decider and scale-to-zero gate, as a pure ``ScalingPolicy``.

    State keys: ``panic_time`` (seconds or None), ``max_panic_pods``,
    ``active_since``, ``inactive_since`` (seconds or None) and ``initialised``.
    """

    def __init__(self, config: KpaConfig | None = None, name: str = "kpa") -> None:
        self.config = config or KpaConfig()
        self.name = name
        self.interval_s = self.config.tick_interval_s
        self.history_s = self.config.stable_window_s
        signals = {"concurrency": Signal(self.config.metric, aggregation="sum")}
        if self.config.queue_metric is not None:
            signals["queue"] = Signal(self.config.queue_metric, aggregation="sum")
        self._keys = tuple(signals)
        self.signals: Mapping[str, Signal] = MappingProxyType(signals)
        self.pod_signals: Mapping[str, Signal] = MappingProxyType({})
        self.min_replicas = self.config.min_replicas
        self.max_replicas = self.config.max_replicas

    def decide(self, observation: Observation, state: State) -> Decision:
        """Run one decider tick and the reconciler's bounds.

        Returns:
            The desired replicas, a reason with both averages, and the new state.
        """
        cfg = self.config
        now = float(observation.now)
        current = observation.target.desired
        if not observation.healthy:
            decision = hold(observation, cfg.min_replicas, cfg.max_replicas, "unhealthy", state)
            logger.info("%s: %s", self.name, decision.reason)
            return decision
        points = summed_series(observation, self._keys)
        if points is None:
            decision = hold(observation, cfg.min_replicas, cfg.max_replicas, "no data", state)
            logger.info("%s: %s", self.name, decision.reason)
            return decision
        st: dict[str, Any] = dict(state)
        ready_pods = observation.target.ready
        if current > 0 and st.get("active_since") is None:
            st["active_since"] = now
        if ready_pods >= cfg.initial_scale:
            st["initialised"] = True

        stable = window_average(points, cfg.stable_window_s)
        panic = window_average(points, cfg.panic_window_s)
        ready = float(max(1, ready_pods))
        max_up = math.ceil(cfg.max_scale_up_rate * ready)
        max_down = math.floor(ready / cfg.max_scale_down_rate)
        dspc = math.ceil(stable / cfg.target)
        dppc = math.ceil(panic / cfg.target)
        desired_stable = min(max(dspc, max_down), max_up)
        desired_panic = min(max(dppc, max_down), max_up)

        over = dppc / ready >= cfg.panic_threshold_percentage / 100
        panic_time = st.get("panic_time")
        max_panic = int(st.get("max_panic_pods", 0))
        if over:
            panic_time = now  # start, or extend
        elif panic_time is not None and panic_time + cfg.stable_window_s < now:
            panic_time, max_panic = None, 0
        desired = desired_stable
        mode = "stable"
        if panic_time is not None:
            mode = "panic"
            max_panic = max(max_panic, desired_stable, desired_panic)
            desired = max_panic
        st["panic_time"], st["max_panic_pods"] = panic_time, max_panic

        replicas, gate = self._scale_to_zero_gate(now, current, desired, st)
        if not st.get("initialised"):
            replicas = max(replicas, cfg.initial_scale)
        replicas = clamp(replicas, cfg.min_replicas, cfg.max_replicas)
        if replicas == 0:
            st["active_since"] = None
        reason = (
            f"{mode}: stable {stable:.2f} panic {panic:.2f} / target {cfg.target:g} "
            f"-> {dspc}/{dppc} pods, ready {ready_pods}, desired {desired}{gate} -> {replicas}"
        )
        logger.info("%s: %d -> %d: %s", self.name, current, replicas, reason)
        return Decision(replicas, reason, st)

    def _scale_to_zero_gate(
        self, now: float, current: int, desired: int, st: dict[str, Any]
    ) -> tuple[int, str]:
        """Hold the last pods until the revision is inactive and the grace period passed."""
        cfg = self.config
        if desired != 0 or current == 0 or cfg.min_replicas > 0:
            st["inactive_since"] = None
            return desired, ""
        if not cfg.enable_scale_to_zero:
            return 1, " (scale to zero disabled)"
        inactive_since = st.get("inactive_since")
        if inactive_since is None:
            active_since = st.get("active_since")
            if active_since is not None and now - active_since < cfg.stable_window_s:
                return current, " (active for less than the stable window)"
            st["inactive_since"] = now
            return current, " (marked inactive, grace period starts)"
        if now - inactive_since < cfg.scale_to_zero_grace_s:
            return current, f" (inactive since {inactive_since:g}, within grace)"
        st["inactive_since"] = None
        return 0, " (grace period over)"
