"""Predictive scaling: provision now for the demand one cold start from now.

A GPU replica asked for now serves only after its cold start (and a node's
provisioning when no node is free), so this policy sizes the workload for an
upper quantile of the demand forecast at ``now + horizon``
(``scaling.forecast``). The horizon is measured, not assumed: the
``cold_start_quantile`` of the workload's own pods' ``created_at`` to
``ready_at`` times (``default_cold_start_s`` until a pod has been seen starting;
pods created already Ready, as at a warm start, give no sample), plus
``node_provision_s`` when the plan exceeds ``fast_capacity`` replicas, the
replicas the always-up nodes hold. Node provisioning is a parameter because
the ``Observation`` does not say whether a node is free.

It scales out on the forecast. Like AWS predictive scaling it scales in only
when the observed load agrees: never below what the highest demand of the last
``scale_in_window_s`` needs, never while the observed load rises
(``rising``; such a hold is not recorded as a recommendation), never within
``scale_in_window_s`` of its first decision (its history does not cover the
window yet), never below the highest recommendation of the last
``stabilization_window_s``, and by at most ``scale_down_percent`` (at least one
replica) per decision. Each scale-out adds at most
``max(scale_up_pods, scale_up_percent of current)`` replicas.

Demand is the summed ``metrics`` (requests in flight plus queued, by default);
``per_replica`` is the demand one replica should carry. Signals come through
Prometheus, queried at each decision, like HPA's.
"""

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypeVar

from gpuscale.errors import require
from gpuscale.extras import require_library
from gpuscale.metrics.signal import Signal
from gpuscale.scaling import forecast as fc
from gpuscale.scaling.baseline import check_bounds, clamp, hold, summed_series
from gpuscale.scaling.demand import recent_view, rising, smooth
from gpuscale.scaling.nodes import fewest_nodes, held_by, known_slots
from gpuscale.scaling.policy import (
    PROMETHEUS_QUERY,
    Decision,
    Forecast,
    Observation,
    PodStatus,
    Series,
)
from gpuscale.scaling.state import JsonState, KeepsState

logger = logging.getLogger(__name__)

DEMAND_METRICS = ("gpuscale_serving_requests_in_flight", "gpuscale_serving_queue_requests")
"""Requests in flight on the pods plus requests queued for the deployment."""


@dataclass(frozen=True, slots=True)
class PredictiveConfig:
    """Settings of ``predictive`` (``hybrid`` extends them); each unit is in ``metadata``.

    Attributes:
        metrics: Workload-level series whose sum is the demand.
        per_replica: Demand one replica should carry (in the metrics' unit).
        interval_s: Decision period.
        forecast: Bucketing, seasonal model, refit schedule and quantile.
        default_cold_start_s: The cold start assumed until pods have been seen starting.
        cold_start_quantile: Quantile of the measured cold starts used as the horizon.
        cold_starts_kept: Most recent cold starts kept in the state.
        node_provision_s: Added to the horizon for replicas beyond ``fast_capacity``.
        fast_capacity: Replicas the always-up nodes hold; None: every replica fits.
        node_size: Replicas one node holds. Above 1 the fleet moves in whole nodes
            (``whole_nodes``): where the node pool serves this workload alone, a node's
            GPUs are paid for while any pod runs on it, so a scale-out fills the nodes
            it opens and a scale-in that does not empty a node saves nothing. 1: off.
        smoothing_s: Demand is read as its trailing mean over this window (Knative's
            stable window is 60 s): a sampled count of requests in flight scatters
            around its mean, and a plan or a peak read off single samples holds
            replicas for that scatter, which ``per_replica``'s headroom already covers.
            0 reads the samples as they are.
        scale_in_window_s: Scale-in never goes below what this window's peak demand needs.
        rise_window_s: Window over which the observed load is judged rising.
        stabilization_window_s: Scale-in never goes below a recommendation this recent.
        scale_up_pods: Replicas a scale-out may add per decision (or ``scale_up_percent``).
        scale_up_percent: Percent of the current replicas a scale-out may add.
        scale_down_percent: Percent of the current replicas a scale-in may remove (min 1).
        scale_in_cooldown_s: No scale-in within this long of the last one: a deleted pod
            drains for its termination grace (30 s by default in Kubernetes), and
            scale-ins that overlap within one grace remove many pods at once. With
            ``scale_down_percent`` it also holds capacity between bursts that recur
            within minutes (docs/predictive.md).
        min_replicas: Lower bound.
        max_replicas: Upper bound.
    """

    metrics: tuple[str, ...] = field(default=DEMAND_METRICS, metadata={"unit": ""})
    per_replica: float = field(default=0.7, metadata={"unit": "requests per replica"})
    interval_s: float = field(default=15.0, metadata={"unit": "s"})
    forecast: fc.ForecastConfig = field(default_factory=fc.ForecastConfig, metadata={"unit": ""})
    default_cold_start_s: float = field(default=60.0, metadata={"unit": "s"})
    cold_start_quantile: float = field(default=0.9, metadata={"unit": "ratio"})
    cold_starts_kept: int = field(default=50, metadata={"unit": "pods"})
    node_provision_s: float = field(default=0.0, metadata={"unit": "s"})
    fast_capacity: int | None = field(default=None, metadata={"unit": "replicas"})
    node_size: int = field(default=1, metadata={"unit": "replicas per node"})
    smoothing_s: float = field(default=60.0, metadata={"unit": "s"})
    scale_in_window_s: float = field(default=300.0, metadata={"unit": "s"})
    rise_window_s: float = field(default=120.0, metadata={"unit": "s"})
    stabilization_window_s: float = field(default=120.0, metadata={"unit": "s"})
    scale_up_pods: int = field(default=8, metadata={"unit": "replicas"})
    scale_up_percent: float = field(default=100.0, metadata={"unit": "%"})
    scale_down_percent: float = field(default=5.0, metadata={"unit": "%"})
    scale_in_cooldown_s: float = field(default=60.0, metadata={"unit": "s"})
    min_replicas: int = field(default=1, metadata={"unit": "replicas"})
    max_replicas: int = field(default=100, metadata={"unit": "replicas"})

    def __post_init__(self) -> None:
        name = type(self).__name__

        def check(ok: bool, key: str, fix: str) -> None:
            require(ok, f"{name}.{key}={getattr(self, key)!r}", "out of range", fix)

        check(bool(self.metrics), "metrics", "name at least one series")
        check(self.per_replica > 0, "per_replica", "use a demand > 0")
        check(self.interval_s > 0, "interval_s", "use > 0 s")
        check(self.default_cold_start_s >= 0, "default_cold_start_s", "use 0 or more seconds")
        check(0.5 <= self.cold_start_quantile <= 1, "cold_start_quantile", "use 0.5 to 1")
        check(self.cold_starts_kept >= 1, "cold_starts_kept", "use 1 or more")
        check(self.node_provision_s >= 0, "node_provision_s", "use 0 or more seconds")
        check(self.fast_capacity is None or self.fast_capacity >= 0, "fast_capacity", "use >= 0")
        check(self.node_size >= 1, "node_size", "use 1 or more replicas per node")
        windows = ("smoothing_s", "scale_in_window_s", "rise_window_s", "stabilization_window_s")
        for key in (*windows, "scale_in_cooldown_s"):
            check(0 <= getattr(self, key) <= 3600, key, "use 0..3600 seconds")
        check(self.scale_up_pods >= 1, "scale_up_pods", "use 1 or more")
        check(self.scale_up_percent > 0, "scale_up_percent", "use a percentage > 0")
        check(0 < self.scale_down_percent <= 100, "scale_down_percent", "use (0, 100]")
        check_bounds(name, self.min_replicas, self.max_replicas)

    @property
    def history_s(self) -> float:
        """History each decision needs: the longest window read, seconds."""
        f = self.forecast
        peak = self.scale_in_window_s + self.smoothing_s  # its first point's mean looks back
        return max(f.trend_window_s, f.bucket_s, peak, self.rise_window_s)

    @property
    def fills_nodes(self) -> bool:
        """Whether the fleet moves in whole nodes (``whole_nodes``), reading each node's room."""
        return self.node_size > 1


@dataclass(frozen=True, slots=True)
class ColdStarts(JsonState):
    """The workload's measured cold starts.

    Attributes:
        samples: ``created_at`` to ``ready_at`` of the newest pods seen starting,
            seconds, oldest first (at most ``cold_starts_kept``).
        seen: Live pods already counted, sorted.
    """

    samples: tuple[float, ...] = ()
    seen: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PredictiveState(JsonState):
    """What ``predictive`` (and ``hybrid``, which extends it) remembers.

    Attributes:
        forecast: The forecaster's buckets and fitted model.
        cold: Measured cold starts and the pods seen.
        recs: ``(time s, replicas)`` recommendations of the stabilisation window.
        started_at: The first decision, seconds; None before it.
        last_in: The last scale-in, seconds; None before the first.

    ``essential()`` is ``to_json()``: the forecaster's open bucket changes at every
    decision, so no field of it is mere time-keeping.
    """

    forecast: fc.ForecastState = field(default_factory=fc.ForecastState)
    cold: ColdStarts = field(default_factory=ColdStarts)
    recs: tuple[tuple[float, int], ...] = ()
    started_at: float | None = None
    last_in: float | None = None


P = TypeVar("P", bound=PredictiveState)

Sizing = Callable[[float], int]
"""Replicas for a load (requests in service on average)."""


def per_replica_sizing(per_replica: float) -> Sizing:
    """Replicas at ``per_replica`` requests each: the load over it, rounded up."""
    return lambda load: math.ceil(load / per_replica - 1e-9)


def cold_start_s(
    pods: tuple[PodStatus, ...], state: ColdStarts, cfg: PredictiveConfig
) -> tuple[float, ColdStarts]:
    """The workload's cold start: an upper quantile of its pods' measured start times.

    Args:
        pods: Live pods (each Ready pod's start is recorded once).
        state: The cold-start state (``samples`` seconds, ``seen`` pod names).
        cfg: Default, quantile and how many samples to keep.

    Returns:
        (cold start seconds, new cold-start state).
    """
    samples = list(state.samples)
    seen = set(state.seen)
    live = {p.name for p in pods}
    added = False
    if not live <= seen:  # a pod not counted yet: count those Ready, in the pods' order
        for pod in pods:
            if pod.ready_at is not None and pod.name not in seen:
                seen.add(pod.name)
                added = True
                if pod.ready_at > pod.created_at:
                    samples.append(pod.ready_at - pod.created_at)
    samples = samples[-cfg.cold_starts_kept :]
    if not added and seen <= live:  # no pod started or left (most decisions): as it was
        kept = len(samples) == len(state.samples)
        new = state if kept else ColdStarts(tuple(samples), state.seen)
    else:
        new = ColdStarts(tuple(samples), tuple(sorted(seen & live)))
    if not samples:
        return cfg.default_cold_start_s, new
    ordered = sorted(samples)
    index = max(math.ceil(cfg.cold_start_quantile * len(ordered)) - 1, 0)
    return ordered[index], new


def horizon_s(cold_s: float, replicas: int, cfg: PredictiveConfig) -> float:
    """How far ahead ``replicas`` must be asked for: the cold start, plus a node's wait.

    The node's provisioning counts when the replicas exceed ``fast_capacity``. A
    measured cold start already holds a node's wait when pods waited for one, so the
    provisioning is added only while the cold start is shorter than it.

    Returns:
        Seconds.
    """
    grows = cfg.fast_capacity is not None and replicas > cfg.fast_capacity
    if grows and cold_s < cfg.node_provision_s:
        return cold_s + cfg.node_provision_s
    return cold_s


def plan(
    observation: Observation,
    points: Series,
    state: PredictiveState,
    cfg: PredictiveConfig,
    *,
    unsaturated_since: float | None = None,
    cold: tuple[float, ColdStarts] | None = None,
    size: Sizing | None = None,
    ceiling: float | None = None,
) -> tuple[int, str, fc.ForecastState, ColdStarts, Forecast]:
    """Replicas for the forecast's upper bound one horizon ahead.

    Args:
        observation: The decision's observation (its time and pods).
        points: The demand samples; the bound is for their mean over ``smoothing_s``.
        state: The policy state (``forecast`` and ``cold`` parts are read).
        cfg: Settings.
        unsaturated_since: When requests were last queued, seconds. While they are, the
            load served is bounded by the Ready pods, so its rise says how fast pods
            arrived, not how fast demand grew: the fallback line is fitted only to the
            points after it. None: every point.
        cold: ``cold_start_s``'s answer where the caller has it already; None: read here.
        size: Replicas for the bound; None: at ``per_replica``.
        ceiling: The most demand the bound is sized for (``hybrid``: the demand its
            history calls for at its target, or the demand now if higher); None: no limit.

    Returns:
        (replicas before bounds, a reason, the new ``forecast`` and ``cold`` states,
        the forecast planned for).
    """
    now = float(observation.now)
    if cold is None:
        cold = cold_start_s(observation.target.pods, state.cold, cfg)
    cold_s, cold_state = cold
    horizon = cold_s
    fstate = fc.update(state.forecast, points, now, cfg.forecast, horizon)
    fcfg = cfg.forecast
    if unsaturated_since is not None:
        points = tuple(p for p in points if p[0] > unsaturated_since)
    f = fc.forecast(fstate, points, now, horizon, fcfg, cfg.smoothing_s)
    sized = per_replica_sizing(cfg.per_replica) if size is None else size
    limit = math.inf if ceiling is None else ceiling
    need = sized(min(f.upper, limit))
    longer = horizon_s(cold_s, need, cfg)
    if longer > horizon:
        horizon = longer
        f = fc.forecast(fstate, points, now, horizon, fcfg, cfg.smoothing_s)
        need = max(need, sized(min(f.upper, limit)))
    capped = f" capped at {limit:.2f}" if f.upper > limit else ""
    why = (
        f"{f.model} forecast {f.mean:.2f} (q{cfg.forecast.quantile:g} {f.upper:.2f}{capped}) "
        f"at +{horizon:.0f} s -> {need}"
    )
    return need, why, fstate, cold_state, f


def settle(
    now: float,
    current: int,
    proposal: int,
    state: PredictiveState,
    cfg: PredictiveConfig,
    *,
    hold_in: bool = False,
    slots: Sequence[int] = (),
    pace_percent: float | None = None,
    stable_since: float | None = None,
) -> tuple[int, str, tuple[tuple[float, int], ...]]:
    """Bounds, the scale-in stabilisation window and the step limits.

    Args:
        now: Decision time, seconds.
        current: Desired replicas now.
        proposal: Replicas wanted (the observed peak already applied); recorded as
            this decision's recommendation.
        state: The policy state (``recs``: ``(time s, replicas)`` recommendations;
            ``last_in``: time of the last scale-in, seconds).
        cfg: Windows, steps and bounds.
        hold_in: No scale-in this time (the observed load rises). The hold is not
            recorded as a recommendation, so it does not extend the window.
        slots: Replicas each node holds (``TargetStatus.node_slots``; ``whole_nodes``).
        pace_percent: The share of the replicas a scale-in may remove this time, in
            place of ``scale_down_percent``; None: that.
        stable_since: The stabilisation window starts no earlier than this, seconds
            (the recommendations before it were for a load that has passed); None: the
            whole window.

    Returns:
        (replicas, a note, the recommendations to keep).
    """
    pace = cfg.scale_down_percent if pace_percent is None else pace_percent
    last_in = state.last_in
    cooling = last_in is not None and now - last_in < cfg.scale_in_cooldown_s
    proposal = clamp(proposal, cfg.min_replicas, cfg.max_replicas)
    cutoff = now - cfg.stabilization_window_s
    if stable_since is not None:
        cutoff = max(cutoff, stable_since)
    recs = [(t, r) for t, r in state.recs if t > cutoff]
    recs.append((now, proposal))
    note = ""
    if proposal > current:
        step = max(cfg.scale_up_pods, math.ceil(current * cfg.scale_up_percent / 100))
        replicas = min(proposal, current + step)
        if replicas < proposal:
            note = f", step limit {replicas}"
        replicas, note = whole_nodes(current, replicas, cfg, note, slots, pace)
    else:
        stable = max(r for _, r in recs)
        replicas = min(current, stable)
        if replicas < current and cfg.fills_nodes:
            replicas, note = whole_nodes(current, replicas, cfg, note, slots, pace)
        elif replicas < current:
            step = max(1, math.floor(current * pace / 100))
            replicas = max(replicas, current - step)
        if replicas < current and hold_in:
            replicas, note = current, ", no scale-in yet"
        elif replicas < current and cooling:
            replicas, note = current, ", scale-in cooling down"
        elif replicas > proposal:
            note += f", stabilised {replicas}"
    return clamp(replicas, cfg.min_replicas, cfg.max_replicas), note, tuple(recs)


def whole_nodes(
    current: int,
    replicas: int,
    cfg: PredictiveConfig,
    note: str,
    slots: Sequence[int],
    pace_percent: float,
) -> tuple[int, str]:
    """Move the fleet in whole nodes of ``cfg.node_size`` replicas (1: unchanged).

    A scale-out fills every node it needs (their GPUs are paid for anyway, and the
    spare replicas absorb the next rise). A scale-in that leaves the node count as it
    is saves nothing, so it is held; one that needs fewer nodes removes whole nodes'
    replicas, ``pace_percent`` of the current replicas rounded down to whole nodes
    per decision, and at least one node.

    A node holds what ``slots`` (``TargetStatus.node_slots``) says, where it says it:
    one that lost a GPU holds a replica fewer, and filling it as if it held
    ``node_size`` would leave a pod pending that opens a node for itself alone.
    ``pace_percent`` is the pace ``settle`` chose: ``scale_down_percent`` unless it
    was given another.

    Returns:
        (replicas, the note with the rounding added).
    """
    size = cfg.node_size
    if size <= 1:
        return replicas, note
    known = known_slots(slots, size)
    nodes_now, nodes = fewest_nodes(current, known, size), fewest_nodes(replicas, known, size)
    if replicas > current:
        filled = min(held_by(nodes, known, size), cfg.max_replicas)
        return max(filled, replicas), note + (f", fills {nodes} nodes" if filled > replicas else "")
    if nodes >= nodes_now:
        return current, note + f", holds its {nodes_now} nodes"
    step = max(1, math.floor(current * pace_percent / 100 / size))
    kept = max(nodes, nodes_now - step)
    held = held_by(kept, known, size)
    return held, note + f", releases {nodes_now - kept} of {nodes_now} nodes"


def agree(
    proposal: int,
    current: int,
    points: Series,
    now: float,
    cfg: PredictiveConfig,
    started_at: float,
    samples: Series | None = None,
    size: Sizing | None = None,
) -> tuple[int, bool, str]:
    """Scale in only as far as the observed load agrees.

    Args:
        proposal: Replicas planned.
        current: Desired replicas now.
        points: The (smoothed) demand history; its peak bounds the scale-in.
        now: Decision time, seconds.
        cfg: Windows and demand per replica.
        started_at: Time of the policy's first decision, seconds.
        samples: The demand as sampled, on which a rise is judged (its scatter is
            what ``rising`` tests the slope against); None: ``points``.
        size: Replicas for the peak; None: at ``per_replica``.

    Returns:
        (proposal raised to what the observed peak needs; whether no scale-in may
        happen now, because the observed load rises or the policy has not yet seen a
        whole ``scale_in_window_s``; a note).
    """
    if proposal >= current:
        return proposal, False, ""
    seen = points if samples is None else samples
    up = rising(seen, now, cfg.rise_window_s) or now - started_at < cfg.scale_in_window_s
    edge = now - cfg.scale_in_window_s
    peak = max((v for t, v in points if t > edge), default=0.0)
    observed = (per_replica_sizing(cfg.per_replica) if size is None else size)(peak)
    if observed > proposal:
        return min(observed, current), up, f", observed peak needs {observed}"
    return proposal, up, ""


def last_scale_in(state: PredictiveState, now: float, current: int, replicas: int) -> float | None:
    """When the last scale-in happened: now if this decision scales in, else as before.

    Returns:
        Seconds, or None before the first scale-in.
    """
    if replicas < current:
        return now
    return state.last_in


def demand_or_hold(
    name: str,
    observation: Observation,
    keys: tuple[str, ...],
    state: P,
    cfg: "PredictiveConfig",
) -> Series | Decision[P]:
    """The summed demand series, or the hold decision (logged) when there is none.

    Missing or unhealthy data means hold, never scale in (DESIGN: fail safe).

    Returns:
        The demand points, or the decision to return unchanged.
    """
    points = summed_series(observation, keys) if observation.healthy else None
    if points is not None:
        return points
    why = "unhealthy" if not observation.healthy else "no demand data"
    decision = hold(observation, cfg.min_replicas, cfg.max_replicas, why, state)
    logger.debug("%s: %s", name, decision.reason)
    return decision


class PredictivePolicy(KeepsState[PredictiveState]):
    """Forecast-driven scale-out, observation-confirmed scale-in, as a pure ``ScalingPolicy``.

    Its state is a ``PredictiveState``.
    """

    state_type = PredictiveState

    def __init__(self, config: PredictiveConfig | None = None, name: str = "predictive") -> None:
        self.config = config or PredictiveConfig()
        self.name = name
        require_library("statsmodels", f"the {name} policy")  # its seasonal model
        self.interval_s = self.config.interval_s
        self.history_s = self.config.history_s
        self.signal_path = PROMETHEUS_QUERY
        self._keys = tuple(self.config.metrics)
        self.signals: Mapping[str, Signal] = MappingProxyType(
            {m: Signal(m, aggregation="sum") for m in self._keys}
        )
        self.pod_signals: Mapping[str, Signal] = MappingProxyType({})
        self.min_replicas = self.config.min_replicas
        self.max_replicas = self.config.max_replicas
        self.reads_node_slots = self.config.fills_nodes

    def decide(self, observation: Observation, state: PredictiveState) -> Decision[PredictiveState]:
        """Plan for the forecast one horizon ahead; scale in only when observed load agrees.

        Returns:
            The desired replicas, the reason with the forecast, and the new state.
        """
        cfg = self.config
        observation = recent_view(observation, state.forecast, self.history_s)
        points = demand_or_hold(self.name, observation, self._keys, state, cfg)
        if isinstance(points, Decision):
            return points
        now, current = float(observation.now), observation.target.desired
        # The forecast fits the samples (a trailing mean would lag a rise) and bounds
        # their mean over smoothing_s; the observed peak is smoothed.
        samples, points = points, smooth(points, cfg.smoothing_s)
        need, why, forecast, cold, planned = plan(observation, samples, state, cfg)
        started = now if state.started_at is None else state.started_at
        proposal, up, agreed = agree(need, current, points, now, cfg, started, samples)
        slots = observation.target.node_slots
        replicas, note, recs = settle(now, current, proposal, state, cfg, hold_in=up, slots=slots)
        reason = f"{why}{agreed}{note} -> {replicas}"
        logger.debug("%s: %d -> %d: %s", self.name, current, replicas, reason)
        new_state = PredictiveState(
            forecast, cold, recs, started, last_scale_in(state, now, current, replicas)
        )
        return Decision(replicas, reason, new_state, forecast=planned)
