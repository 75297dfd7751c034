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
queued. A missing result holds the replicas (our fail-safe rule) unless the
query is marked optional, as a pasted trigger's ``ignoreNullValues: true`` (KEDA's
default) marks it: an empty result then reads as 0, as it does in KEDA.

Two parts of a ScaledObject change that picture, each only when given:

* ``idleReplicaCount``: the idle floor (``min_replicas``) is below the active one
  (``active_min_replicas``, KEDA's ``minReplicaCount``): inactive past the cooldown
  goes down to the idle count, activity goes straight back to the active floor.
* ``fallback``: after more than ``failure_threshold`` HPA syncs in a row without a
  reading, the HPA is fed ``threshold x replicas`` (``/ ready`` for ``Value``), as
  KEDA's metrics adapter does (``pkg/fallback``), so it heads for the fallback
  replicas through its own behaviour. This is the one case where missing data may
  scale in: the user asked for it. The decision step calls ``fall_back`` where
  it would hold.
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
from gpuscale.scaling.policy import PROMETHEUS_QUERY, Decision, Observation, TargetStatus
from gpuscale.scaling.recommendations import HpaState
from gpuscale.scaling.state import CLOCK, JsonState, KeepsState

logger = logging.getLogger(__name__)

DEFAULT_QUERY = (
    Signal("gpuscale_serving_requests_in_flight", aggregation="sum"),
    Signal("gpuscale_serving_queue_requests", aggregation="sum"),
)
"""``sum(gpuscale_serving_requests_in_flight) + sum(gpuscale_serving_queue_requests)``."""


FallbackBehavior = Literal[
    "static", "currentReplicas", "currentReplicasIfHigher", "currentReplicasIfLower"
]


@dataclass(frozen=True, slots=True)
class KedaFallback:
    """A ScaledObject's ``fallback``: replicas to head for while the trigger fails.

    Attributes:
        failure_threshold: Failed reads in a row tolerated; one more starts the fallback.
        replicas: Replicas to head for.
        behavior: ``static`` (``replicas``), ``currentReplicas`` (stay), or the
            current count if higher or lower than ``replicas``.
    """

    failure_threshold: int = field(metadata={"unit": "reads"})
    replicas: int = field(metadata={"unit": "replicas"})
    behavior: FallbackBehavior = field(default="static", metadata={"unit": ""})

    def __post_init__(self) -> None:
        for key in ("failure_threshold", "replicas"):
            require(
                getattr(self, key) >= 0,
                f"KedaFallback.{key}={getattr(self, key)!r}",
                "out of range",
                "use 0 or more",
            )

    def target(self, current: int) -> int:
        """The replica count the fallback heads for from ``current``."""
        if self.behavior == "currentReplicas":
            return current
        if self.behavior == "currentReplicasIfHigher":
            return max(current, self.replicas)
        if self.behavior == "currentReplicasIfLower":
            return min(current, self.replicas)
        return self.replicas


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
        active_min_replicas: With ``idleReplicaCount``: KEDA's ``minReplicaCount``, the
            floor while active (``min_replicas`` is then the idle count). None: no idle
            count, ``min_replicas`` is ``minReplicaCount``.
        fallback: ``fallback``; None: a failing trigger holds the replicas.

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
    active_min_replicas: int | None = field(default=None, metadata={"unit": "replicas"})
    fallback: KedaFallback | None = field(default=None, metadata={"unit": ""})

    def __post_init__(self) -> None:
        def check(ok: bool, key: str, fix: str, problem: str = "out of range") -> None:
            require(ok, f"KedaConfig.{key}={getattr(self, key)!r}", problem, fix)

        if self.active_min_replicas is not None:
            check(
                self.min_replicas < self.active_min_replicas <= self.max_replicas,
                "active_min_replicas",
                "keep the idle count (min_replicas) below it, and it at most max_replicas",
            )

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
    def floor_when_active(self) -> int:
        """The least replicas while the trigger is active: KEDA's ``minReplicaCount``."""
        return self.min_replicas if self.active_min_replicas is None else self.active_min_replicas

    @property
    def idles(self) -> bool:
        """Whether an inactive trigger takes the target down to ``min_replicas``."""
        return self.active_min_replicas is not None or self.min_replicas == 0

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
        failures: HPA syncs in a row that found no reading (``fallback`` counts them).

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
    failures: int = 0


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

    def _proposal(self, target: TargetStatus, value: float) -> Proposal:
        cfg = self.config
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
        if value is None and all(t.optional for t in cfg.terms):
            value = 0.0  # ignoreNullValues: an empty result is a reading of 0
        if value is None:
            return self.fall_back(observation.target, now, st)
        st = replace(st, failures=0)
        if due(st.last_poll, cfg.polling_interval_s, now, self.interval_s):
            active = value > cfg.activation_threshold
            last_active = now if active else st.last_active
            st = replace(st, last_poll=now, last_active=last_active, active=active)
            if active and current <= cfg.min_replicas and (cfg.idles or current == 0):
                replicas = max(cfg.floor_when_active, 1)
                why = f"activated: {value:g} > activation {cfg.activation_threshold:g}"
                return self._done(current, replicas, why, st)
            if not active and current > cfg.min_replicas and cfg.idles:
                if last_active is None:
                    cooled = float(now if st.created_at is None else st.created_at)
                    cooled += cfg.initial_cooldown_period_s
                else:
                    cooled = last_active + cfg.cooldown_period_s
                if cooled < now:
                    why = f"inactive ({value:g} <= {cfg.activation_threshold:g}) past cooldown"
                    return self._done(current, cfg.min_replicas, why, st)
        hpa_on = current > cfg.min_replicas if cfg.idles else current > 0
        if hpa_on and due(st.last_hpa, cfg.hpa_sync_period_s, now, self.interval_s):
            proposal = self._proposal(observation.target, value)
            return self._sync(observation.target, now, proposal, f"value {value:g}", st)
        return self._done(current, current, f"value {value:g}; no loop due", st)

    def _sync(
        self, target: TargetStatus, now: float, proposal: Proposal, seen: str, st: KedaState
    ) -> Decision[KedaState]:
        """One sync of KEDA's HPA on the calculator's ``proposal``."""
        cfg = self.config
        current = target.desired
        bounds = {"min_replicas": max(cfg.floor_when_active, 1), "max_replicas": cfg.max_replicas}
        if cfg.behavior is None:
            window = cfg.downscale_stabilization_s
            replicas, why, hpa = reconcile_legacy(
                now,
                current,
                proposal.replicas,
                **bounds,
                downscale_stabilization_s=window,
                state=st.hpa,
            )
        else:
            replicas, why, hpa = reconcile(
                now, current, proposal.replicas, **bounds, behavior=cfg.behavior, state=st.hpa
            )
        st = replace(st, last_hpa=now, hpa=hpa)
        reason = (
            f"hpa: {seen} vs {cfg.metric_type} {cfg.threshold:g} "
            f"-> {proposal.replicas} ({proposal.note}); {why}"
        )
        return self._done(current, replicas, reason, st)

    def fall_back(self, target: TargetStatus, now: float, state: KedaState) -> Decision[KedaState]:
        """What KEDA does when the trigger gives no reading: hold, or its ``fallback``.

        Each HPA sync without a reading counts a failure; once more than
        ``failure_threshold`` are counted, the HPA is fed the value that asks for the
        fallback's replicas (``threshold x replicas``, divided by the ready pods for a
        ``Value`` target) and applies its behaviour to it. With no fallback, no pods
        ready for a ``Value`` target, or at zero replicas (no HPA), it holds; without a
        fallback the state is kept, as on any hold.

        Args:
            target: The target's status.
            now: Decision time, seconds.
            state: The policy's state.

        Returns:
            The decision and the state with the failure counted.
        """
        cfg, current = self.config, target.desired
        fallback = cfg.fallback
        hpa_on = current > cfg.min_replicas if cfg.idles else current > 0
        due_now = due(state.last_hpa, cfg.hpa_sync_period_s, now, self.interval_s)
        if fallback is None or not hpa_on or not due_now:  # a plain hold: state kept
            return self._done(current, current, "query returned no data; holding", state)
        st = state if state.created_at is not None else replace(state, created_at=now)
        st = replace(st, failures=st.failures + 1, last_hpa=now)
        if st.failures <= fallback.failure_threshold:
            why = f"query returned no data ({st.failures} in a row); holding"
            return self._done(current, current, why, st)
        wanted = fallback.target(current)
        if cfg.metric_type == "Value" and target.ready == 0:
            return self._done(current, current, "no data, and no ready pod to fall back on", st)
        per = target.ready if cfg.metric_type == "Value" else 1
        value = cfg.threshold * wanted / per
        proposal = self._proposal(target, value)
        seen = f"fallback {fallback.behavior} {wanted} after {st.failures} failed reads"
        return self._sync(target, now, proposal, seen, st)
