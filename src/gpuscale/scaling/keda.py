"""KEDA with a Prometheus trigger: scale to zero on idle, and an HPA in between.

KEDA is what users reach for when they want GPU inference to scale to zero. It
runs two loops, both reproduced here:

* The operator polls the scaler every ``pollingInterval`` (30 s). A trigger is
  *active* when the query's value is above ``activationThreshold``. Active and
  at 0 replicas: scale to ``max(minReplicaCount, 1)``. Inactive, above 0 and
  ``minReplicaCount`` 0: scale to 0 once ``lastActiveTime + cooldownPeriod`` is
  in the past (or, never active, ``creation + initialCooldownPeriod``). On a
  query error with no fallback configured it does nothing. (KEDA's
  ``scale_scaledobjects.go``, ``RequestScale`` and ``scaleToZeroOrIdle``.)
* Above 0, the HPA KEDA created does the rest every sync period (15 s): an
  External metric with an ``AverageValue`` target equal to the threshold, so
  ``desired = ceil(value / threshold)`` outside the tolerance. KEDA sets
  ``spec.behavior`` on that HPA only when the ScaledObject gives
  ``advanced.horizontalPodAutoscalerConfig.behavior``; without it (the default,
  ``behavior=None``) the controller runs its legacy path (``max(2 x current, 4)``
  per sync, 300 s downscale stabilisation), ``hpa.reconcile_legacy``; with it,
  ``baseline.reconcile``. Neither is a copy.

Signal path: KEDA's Prometheus scaler sends the raw query at each poll and each
HPA sync (``signal_path = PROMETHEUS_QUERY``: no recording rule in between);
what it reads is as old as the scraped series.

The default query is the workload's total demand, requests in flight plus
queued. A missing result holds the replicas (our fail-safe rule); note that
KEDA's Prometheus scaler itself defaults to ``ignoreNullValues: true``, which
would read an empty result as 0.
"""

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Literal

from gpuscale.errors import require
from gpuscale.metrics.signal import Signal
from gpuscale.scaling.baseline import (
    HpaBehavior,
    check_bounds,
    clamp,
    hold,
    reconcile,
    summed_latest,
)
from gpuscale.scaling.hpa import (
    Proposal,
    external_average_value_replicas,
    external_value_replicas,
    reconcile_legacy,
    tolerances,
)
from gpuscale.scaling.policy import PROMETHEUS_QUERY, Decision, Observation
from gpuscale.scaling.recommendations import HpaState
from gpuscale.scaling.state import CLOCK, JsonState, KeepsState

logger = logging.getLogger(__name__)

DEFAULT_QUERY = (
    Signal("gpuscale_serving_requests_in_flight", aggregation="sum"),
    Signal("gpuscale_serving_queue_requests", aggregation="sum"),
)
"""``sum(gpuscale_serving_requests_in_flight) + sum(gpuscale_serving_queue_requests)``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class KedaConfig:
    """A ScaledObject with one Prometheus trigger; KEDA's defaults.

    Attributes:
        threshold: Trigger ``threshold``: target value per replica (required, as in KEDA).
        query_signal: The query; a tuple of Signals is their sum.
        activation_threshold: Trigger ``activationThreshold``: active when the value is above it.
        polling_interval_s: ``pollingInterval``.
        cooldown_period_s: ``cooldownPeriod``: idle time before scaling to zero.
        initial_cooldown_period_s: ``initialCooldownPeriod`` after creation.
        min_replicas: ``minReplicaCount`` (0 allows scale to zero).
        max_replicas: ``maxReplicaCount``.
        metric_type: Trigger ``metricType``: ``AverageValue`` or ``Value``.
        hpa_sync_period_s: Sync period of the HPA KEDA creates.
        tolerance: That HPA's tolerance.
        behavior: ``advanced.horizontalPodAutoscalerConfig.behavior``; None (the
            default, as upstream) leaves ``spec.behavior`` out: the legacy path.
        downscale_stabilization_s: The controller's
            ``--horizontal-pod-autoscaler-downscale-stabilization`` (legacy path).

    Each numeric field's unit is in its ``metadata["unit"]`` (the report prints it);
    the threshold's is that of the default query, requests in flight plus queued.
    """

    threshold: float = field(metadata={"unit": "requests per replica"})
    query_signal: Signal | tuple[Signal, ...] = DEFAULT_QUERY
    activation_threshold: float = field(default=0.0, metadata={"unit": "requests"})
    polling_interval_s: float = field(default=30.0, metadata={"unit": "s"})
    cooldown_period_s: float = field(default=300.0, metadata={"unit": "s"})
    initial_cooldown_period_s: float = field(default=0.0, metadata={"unit": "s"})
    min_replicas: int = field(default=0, metadata={"unit": "replicas"})
    max_replicas: int = field(default=100, metadata={"unit": "replicas"})
    metric_type: Literal["AverageValue", "Value"] = "AverageValue"
    hpa_sync_period_s: float = field(default=15.0, metadata={"unit": "s"})
    tolerance: float = field(default=0.1, metadata={"unit": "fraction"})
    behavior: HpaBehavior | None = field(default=None, metadata={"unit": ""})
    downscale_stabilization_s: float = field(default=300.0, metadata={"unit": "s"})

    def __post_init__(self) -> None:
        def check(ok: bool, key: str, fix: str, problem: str = "out of range") -> None:
            require(ok, f"KedaConfig.{key}={getattr(self, key)!r}", problem, fix)

        check(self.threshold > 0, "threshold", "use a value > 0")
        check(self.activation_threshold >= 0, "activation_threshold", "use 0 or more")
        for key in ("polling_interval_s", "hpa_sync_period_s"):
            check(getattr(self, key) > 0, key, "use a period > 0 s")
        for key in ("cooldown_period_s", "initial_cooldown_period_s"):
            check(getattr(self, key) >= 0, key, "use 0 or more seconds")
        check(
            self.metric_type in ("AverageValue", "Value"),
            "metric_type",
            "use 'AverageValue' or 'Value'",
            "unknown",
        )
        check(0 <= self.tolerance < 1, "tolerance", "use 0..1")
        check(bool(self.terms), "query_signal", "give a Signal", "empty")
        check(
            0 <= self.downscale_stabilization_s <= 3600, "downscale_stabilization_s", "use 0..3600"
        )
        check_bounds("KedaConfig", self.min_replicas, self.max_replicas)
        if self.behavior is not None:
            self.behavior.validate("KedaConfig.behavior")

    @property
    def terms(self) -> tuple[Signal, ...]:
        """The Signals whose sum is the query."""
        if isinstance(self.query_signal, Signal):
            return (self.query_signal,)
        return tuple(self.query_signal)


@dataclass(frozen=True, slots=True)
class KedaState(JsonState):
    """KEDA's memory: its two loops' times, the trigger's activity and its HPA's state.

    Attributes:
        created_at: The first decision, seconds (the ScaledObject's creation).
        last_poll: The operator's last poll, seconds; None before the first.
        last_hpa: The HPA's last sync, seconds; None before the first.
        last_active: The last poll that found the trigger active, seconds.
        active: Whether the last poll found it active; None before the first poll.
        hpa: The HPA's recommendations and scale events.

    ``essential()`` keeps of ``last_poll``, ``last_hpa`` and ``last_active`` only
    whether each is set. After a restart a lagging ``last_poll`` or ``last_hpa`` makes
    that loop due at once, one run early, as a restarted KEDA operator and HPA
    controller do. ``last_active`` moves only while ``active`` is true, and the poll
    that finds the trigger inactive changes ``active``, so the state written then
    holds the last active time exactly; only a trigger that goes idle right at a
    restart can reach zero replicas early, by at most the caller's write interval.
    """

    created_at: float | None = None
    last_poll: float | None = field(default=None, metadata=CLOCK)
    last_hpa: float | None = field(default=None, metadata=CLOCK)
    last_active: float | None = field(default=None, metadata=CLOCK)
    active: bool | None = None
    hpa: HpaState = field(default_factory=HpaState)


def due(last: float | None, period_s: float, now: float, interval_s: float) -> bool:
    """Whether a loop that last ran at ``last`` should run at ``now``.

    The slack is half the policy's decision interval: a live controller reads its
    clock after its API calls, so a call a period later can read slightly less than
    a period, and with exact slack the loop would run only every other call. Calls
    on a grid of ``interval_s`` with periods that are multiples of it are unaffected.

    Args:
        last: The loop's last run, seconds; None: never run.
        period_s: The loop's period, seconds.
        now: Decision time, seconds.
        interval_s: How often the policy is called, seconds.

    Returns:
        True when the loop runs now.
    """
    return last is None or now >= last + period_s - interval_s / 2


class KedaPolicy(KeepsState[KedaState]):
    """KEDA's operator loop and its HPA, as a pure ``ScalingPolicy``.

    ``interval_s`` is the shorter of the polling interval and the HPA sync
    period; each loop runs when its own period has passed (times in ``KedaState``).
    """

    state_type = KedaState

    def __init__(self, config: KedaConfig, name: str = "keda") -> None:
        self.config = config
        self.name = name
        self.interval_s = min(config.polling_interval_s, config.hpa_sync_period_s)
        self.history_s = self.interval_s
        self.signal_path = PROMETHEUS_QUERY  # raw PromQL at each poll: no recording rule
        self._keys = tuple(f"query_{i}" for i in range(len(config.terms)))
        self.signals: Mapping[str, Signal] = MappingProxyType(
            dict(zip(self._keys, config.terms, strict=True))
        )
        self.pod_signals: Mapping[str, Signal] = MappingProxyType({})
        self.min_replicas = config.min_replicas
        self.max_replicas = config.max_replicas
        self.reads_node_slots = False

    def _done(
        self, current: int, replicas: int, reason: str, state: KedaState
    ) -> Decision[KedaState]:
        replicas = clamp(replicas, self.min_replicas, self.max_replicas)
        logger.debug("%s: %d -> %d: %s", self.name, current, replicas, reason)
        return Decision(replicas, reason, state)

    def _proposal(self, observation: Observation, value: float) -> Proposal:
        cfg = self.config
        target = observation.target
        tol = tolerances(cfg.tolerance, cfg.behavior)
        if cfg.metric_type == "AverageValue":
            return external_average_value_replicas(len(target.pods), value, cfg.threshold, tol)
        return external_value_replicas(target.desired, target.ready, value, cfg.threshold, tol)

    def decide(self, observation: Observation, state: KedaState) -> Decision[KedaState]:
        """Run whichever of KEDA's poll and the HPA's sync is due.

        Returns:
            The desired replicas, a reason naming the query value, and the new state.
        """
        cfg = self.config
        now = float(observation.now)
        current = observation.target.desired
        st = state if state.created_at is not None else replace(state, created_at=now)
        if not observation.healthy:
            decision = hold(observation, self.min_replicas, self.max_replicas, "unhealthy", st)
            logger.debug("%s: %s", self.name, decision.reason)
            return decision
        value = summed_latest(observation, self._keys)
        if value is None:
            why = "query returned no data"
            decision = hold(observation, self.min_replicas, self.max_replicas, why, st)
            logger.debug("%s: %s", self.name, decision.reason)
            return decision
        if due(st.last_poll, cfg.polling_interval_s, now, self.interval_s):
            active = value > cfg.activation_threshold
            last_active = now if active else st.last_active
            st = replace(st, last_poll=now, last_active=last_active, active=active)
            if active and current == 0:
                replicas = max(cfg.min_replicas, 1)
                why = f"activated: {value:g} > activation {cfg.activation_threshold:g}"
                return self._done(current, replicas, why, st)
            if not active and current > 0 and cfg.min_replicas == 0:
                if last_active is None:
                    cooled = float(now if st.created_at is None else st.created_at)
                    cooled += cfg.initial_cooldown_period_s
                else:
                    cooled = last_active + cfg.cooldown_period_s
                if cooled < now:
                    why = f"inactive ({value:g} <= {cfg.activation_threshold:g}) past cooldown"
                    return self._done(current, 0, why, st)
        if current > 0 and due(st.last_hpa, cfg.hpa_sync_period_s, now, self.interval_s):
            proposal = self._proposal(observation, value)
            low, high = max(cfg.min_replicas, 1), cfg.max_replicas
            if cfg.behavior is None:
                replicas, why, hpa = reconcile_legacy(
                    now,
                    current,
                    proposal.replicas,
                    min_replicas=low,
                    max_replicas=high,
                    downscale_stabilization_s=cfg.downscale_stabilization_s,
                    state=st.hpa,
                )
            else:
                replicas, why, hpa = reconcile(
                    now,
                    current,
                    proposal.replicas,
                    min_replicas=low,
                    max_replicas=high,
                    behavior=cfg.behavior,
                    state=st.hpa,
                )
            st = replace(st, last_hpa=now, hpa=hpa)
            reason = (
                f"hpa: value {value:g} vs {cfg.metric_type} {cfg.threshold:g} "
                f"-> {proposal.replicas} ({proposal.note}); {why}"
            )
            return self._done(current, replicas, reason, st)
        return self._done(current, current, f"value {value:g}; no loop due", st)
