"""Hybrid scaling: the predictive plan, or what the load needs now, whichever is larger.

A forecast cannot see a flash crowd, and a reactive rule is a cold start late
on every rise; taking the larger of the two keeps the forecast's lead and the
reaction's floor. The reactive need reads signals that track capacity, never
``DCGM_FI_DEV_GPU_UTIL`` (near 100 % as soon as one sequence decodes):

* demand: requests in flight, plus the queue at the share of a cold start a
  service takes and the queue's growth times the service time
  (``backlog_demand``), over ``per_replica``;
* SM activity, as a saturation guard: while the mean ``DCGM_FI_PROF_SM_ACTIVE``
  of the healthy Ready pods is above ``sm_target``, their sum over it (a pod
  still loading its model has no sample and is not counted); off where the queue
  may wait long enough to absorb the guard's headroom until new replicas arrive
  (``sm_guard``);
* TTFT, when ``ttft_metric`` names a workload-level series: above
  ``ttft_slo_s``, the healthy Ready count times TTFT over its SLO.

The forecast learns the requests in flight, fitted only since the queue last
held requests (while it does, in flight is bounded by the pods). Health
(``scaling.health``): a Ready pod whose GPU fell off the bus, had a fatal XID or
a double-bit ECC error, is throttled or straggles is not capacity; one replica
is added for each such pod so that the healthy count meets the need, and the
pod is named in ``Decision.delete`` (``replace``) so that it is replaced by a
new pod. Scale-in follows ``predictive`` (only when observed load agrees, never
while it rises, after the stabilisation window, in small steps a cool-down
apart) and never happens while requests queue beyond ordinary queueing (with
``queue_wait_s`` set: while the queue's expected wait exceeds it); the observed
load it agrees with leaves out such saturated times (``served_since``), when the
count in flight is the pods' capacity draining a backlog. Scale-out is fast but
bounded.

Told the attainment it must reach (``target_attainment``), the policy also holds a
floor learned online from the bursts its demand has shown (``scaling.headroom``):
the headroom its own history calls for at that share of requests, in place of a
``per_replica`` chosen per trace.
"""

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from types import MappingProxyType
from typing import NamedTuple

from gpuscale.errors import require
from gpuscale.extras import require_library
from gpuscale.metrics.signal import Signal
from gpuscale.scaling import headroom, health, recurrence
from gpuscale.scaling.demand import recent_view, smooth
from gpuscale.scaling.health import HealthConfig, HealthState
from gpuscale.scaling.kpa import window_average
from gpuscale.scaling.policy import PROMETHEUS_QUERY, Decision, Observation, Series
from gpuscale.scaling.predictive import (
    PredictiveConfig,
    PredictiveState,
    Sizing,
    agree,
    cold_start_s,
    demand_or_hold,
    horizon_s,
    last_scale_in,
    per_replica_sizing,
    plan,
    settle,
)
from gpuscale.scaling.service_time import Interval, service_time_s
from gpuscale.scaling.state import KeepsState

logger = logging.getLogger(__name__)

GROWTH_S = 60.0
"""The queue's growth rate is read over this many seconds."""

SATURATED_SHARE = 0.01
"""Queued requests above this share of those in service: the pods are saturated."""

TTFT = "ttft"
"""Key of the optional TTFT series in ``Observation.series``."""

ARRIVALS = "arrivals"
"""Key of the optional received-requests counter in ``Observation.series``."""

STANDING_DOWN_PACE_PERCENT = 100.0
"""Scale-in pace while the learned floor stands down between bursts on a period: the
HPA's default (all the excess at once). ``scale_down_percent`` holds capacity for bursts
that may come at any time; one whose time is known is held by the floor, which stands
again one horizon before the burst is due."""


@dataclass(frozen=True, slots=True)
class HybridConfig(PredictiveConfig):
    """``PredictiveConfig`` plus the reactive signals and health thresholds.

    Attributes:
        sm_metric: Per-pod SM activity series (a ratio, 0 to 1).
        sm_target: Mean SM activity of the healthy Ready replicas above which they are
            saturated and the need is their summed activity over this target. A guard,
            not a level: an LLM server's SMs are about a third active with one sequence
            decoding and about 0.85 at a full batch, so a lower target would hold a
            fleet far above its load.
        ttft_metric: Workload-level TTFT series (seconds, e.g. a p95 recording rule); None
            when the server exports none.
        ttft_slo_s: The TTFT objective.
        health: When a Ready pod is not counted as capacity.
        replace_sick: Name sick pods in ``Decision.delete`` so they are replaced.
        replace_after_s: A throttled or straggling pod is replaced only when it has
            been so this long, seconds.
        backlog_metric: The queued part of the demand (one of ``metrics``); None counts
            the queue in full.
        panic_ratio: When the newest demand sample needs this many times the Ready
            replicas, the reactive need reads it unsmoothed (Knative's panic threshold,
            200 %): a burst must not wait for ``smoothing_s`` to fill.
        queue_wait_s: A queue whose expected wait stays under this is ordinary queueing
            of a busy fleet: it neither holds a scale-in nor cuts the forecast's fit
            window. The wait is Little's law on the fleet's completion rate: queued x
            service time / in service. A share of the wait the SLO allows a request
            (``gpuscale evaluate`` sets a quarter of it). None: any queue above
            ``SATURATED_SHARE`` of those in service counts, as it does while the
            service time is unknown.
        service_window_s: The service time is Little's law on the fleet:
            requests-in-service seconds over the Ready pods' completions, over the
            newest decision intervals that hold ``service_completions``, looking back at
            most this far (Prometheus's customary ``[5m]`` rate window).
        service_completions: Completions, and sampled requests in service, the
            estimate needs: a count of N varies by about 1 / sqrt(N) (Poisson), so 100
            read the service time within about 10 %, where one 15 s interval of 20
            pods serving 40 s requests holds about 7 completions and varies by a third
            or more.
        wait_budget_s: The wait in the queue a mean request may have and still meet its
            SLO (``gpuscale evaluate``: the latency SLO less the mean service time, an
            LLM's TTFT budget). With the queue observed (``backlog_metric``), the SM
            guard is off while a queue allowed to wait this long absorbs a shortfall
            of the guard's headroom until new replicas arrive (``sm_guard``). None:
            the guard is always on.
        target_attainment: The share of requests the deployment must serve within its
            SLO. Set, the policy holds the headroom its demand's history calls for at
            that share (``scaling.headroom``): a floor learned online, with no
            per-trace knob, held once the policy has run long enough to read it
            (``headroom.history_to_read_s``: 100 minutes at 0.99), and until then
            ``per_replica``'s headroom. None: no learned floor (the policy as tuned
            by ``per_replica`` alone).
        burst_window_s: The learned floor's burst window: a burst's height is the
            mean demand over it (Knative's stable window is 60 s).
        baseline_window_s: The learned floor's baseline: the mean demand in this
            window, ending one horizon (a cold start, plus a node's provisioning
            where one is needed) before now or at the burst window's start if
            that is earlier, is the level a burst is measured against.
        burst_memory_s: The learned floor's memory: what it recorded weighs half as
            much this long after. A day, the forecast's season: a burst seen within
            the last day is expected again; one from last week no longer holds
            capacity.
        arrivals_metric: A workload-level counter of the requests that reached the
            deployment, dropped ones included (a gateway's request counter); None
            when there is none. With it, the learned floor measures a burst by the
            arrival rate times the service time: once a crowd outruns the pods and
            queued requests time out, neither the pods' count in service nor the
            queue's growth shows how high it rose.
        burst_period_intervals: How many intervals between the last bursts' onsets
            must agree (within ``burst_window_s``) before the learned floor stands
            down between bursts, expecting the next one interval after the last
            (``scaling.recurrence``); 0 holds it at every decision. While it stands
            down, a scale-in may remove all the load does not need at once
            (``STANDING_DOWN_PACE_PERCENT``), not ``scale_down_percent``, and what
            came before it stood down (the last burst, and the floor held for it)
            holds nothing: the stabilisation window and the observed peak read only
            what came since, and the plan holds for no more than the load since.
        pod_concurrency: The requests a pod's server serves at once, as configured
            (vLLM's ``--max-num-seqs`` bounded by its KV cache, Knative's
            ``containerConcurrency``, a one-at-a-time model's 1): the slots the
            target's staffing divides by. None: read from the pods, the most in
            service per Ready pod while requests queued (``pod_slots``), never
            below one, which a queue of one beside idle multi-slot pods reads low.
    """

    sm_metric: str = field(default="DCGM_FI_PROF_SM_ACTIVE", metadata={"unit": ""})
    sm_target: float = field(default=0.9, metadata={"unit": "SM active ratio per replica"})
    ttft_metric: str | None = field(default=None, metadata={"unit": ""})
    ttft_slo_s: float = field(default=2.0, metadata={"unit": "s"})
    health: HealthConfig = field(default_factory=HealthConfig, metadata={"unit": ""})
    replace_sick: bool = field(default=True, metadata={"unit": ""})
    replace_after_s: float = field(default=120.0, metadata={"unit": "s"})
    backlog_metric: str | None = field(
        default="gpuscale_serving_queue_requests", metadata={"unit": ""}
    )
    panic_ratio: float = field(default=2.0, metadata={"unit": "ratio"})
    queue_wait_s: float | None = field(default=None, metadata={"unit": "s"})
    service_window_s: float = field(default=300.0, metadata={"unit": "s"})
    service_completions: int = field(default=100, metadata={"unit": "requests"})
    wait_budget_s: float | None = field(default=None, metadata={"unit": "s"})
    target_attainment: float | None = field(default=None, metadata={"unit": "ratio"})
    burst_window_s: float = field(default=60.0, metadata={"unit": "s"})
    baseline_window_s: float = field(default=600.0, metadata={"unit": "s"})
    burst_memory_s: float = field(default=86_400.0, metadata={"unit": "s"})
    arrivals_metric: str | None = field(default=None, metadata={"unit": ""})
    burst_period_intervals: int = field(default=3, metadata={"unit": "intervals"})
    pod_concurrency: int | None = field(default=None, metadata={"unit": "requests per pod"})

    def __post_init__(self) -> None:
        PredictiveConfig.__post_init__(self)

        def check(ok: bool, key: str, fix: str) -> None:
            require(ok, f"HybridConfig.{key}={getattr(self, key)!r}", "out of range", fix)

        check(bool(self.sm_metric), "sm_metric", "name a per-pod series")
        check(0 < self.sm_target <= 1, "sm_target", "use a ratio in (0, 1]")
        check(self.ttft_slo_s > 0, "ttft_slo_s", "use > 0 s")
        check(self.panic_ratio >= 1, "panic_ratio", "use a ratio of 1 or more")
        wait = self.queue_wait_s
        check(wait is None or wait >= 0, "queue_wait_s", "use >= 0 s, or none")
        check(self.service_window_s > 0, "service_window_s", "use > 0 s")
        check(self.service_completions >= 1, "service_completions", "use 1 or more")
        budget = self.wait_budget_s
        check(budget is None or budget >= 0, "wait_budget_s", "use >= 0 s, or none")
        goal = self.target_attainment
        check(goal is None or 0 < goal < 1, "target_attainment", "use a share in (0, 1)")
        check(self.burst_window_s > 0, "burst_window_s", "use > 0 s")
        check(self.baseline_window_s > 0, "baseline_window_s", "use > 0 s")
        check(self.burst_memory_s > 0, "burst_memory_s", "use > 0 s")
        intervals = self.burst_period_intervals
        check(intervals >= 0, "burst_period_intervals", "use 0 (off) or more intervals")
        slots = self.pod_concurrency
        check(slots is None or slots >= 1, "pod_concurrency", "use 1 or more, or none")


def sm_guard(cfg: HybridConfig, reach_s: float | None) -> float | None:
    """The mean SM activity above which the Ready pods count as saturated, if any.

    ``sm_target`` keeps ``1 / sm_target - 1`` of headroom (11 % at 0.9) for a rise the
    queue would reveal only once new replicas are a horizon (``reach_s``) away. A queue
    allowed to wait ``wait_budget_s`` absorbs a shortfall of ``wait_budget_s /
    reach_s`` of the capacity for that long: each queued request waits at most that
    share of the horizon. When that covers the whole headroom, the guard protects
    nothing the queue's terms do not, and is off.

    Returns:
        ``sm_target``, or None when the budget covers its headroom.
    """
    if cfg.wait_budget_s is None or reach_s is None or reach_s <= 0:
        return cfg.sm_target
    covered = cfg.wait_budget_s / reach_s >= 1.0 / cfg.sm_target - 1.0
    return None if covered else cfg.sm_target


def reactive_need(
    observation: Observation,
    points: Series,
    sick: Mapping[str, str],
    cfg: HybridConfig,
    guard: float | None,
    size: Sizing | None = None,
    offered: float | None = None,
) -> tuple[int, str]:
    """Replicas the load needs now, from demand, SM activity and TTFT.

    Args:
        observation: Pods, their metrics and the workload's series.
        points: The demand points (``backlog_demand``).
        sick: Ready pods that are not capacity, with the reason.
        cfg: The policy's parameters.
        guard: ``sm_guard``'s target (None: SM activity sets no need).
        size: Replicas for the demand; None: at ``per_replica``.
        offered: The load arriving (arrival rate times service time), where known:
            the demand is at least that, since requests that time out in the queue
            leave the count in service and the queue's growth short of it.

    Returns:
        (healthy replicas needed, a note with each signal's need).
    """
    demand = points[-1][1] if offered is None else max(points[-1][1], offered)
    by_demand = (per_replica_sizing(cfg.per_replica) if size is None else size)(demand)
    healthy = [p.name for p in observation.target.pods if p.ready and p.name not in sick]
    sm = observation.pod_metrics.get(health.SM, {})
    busy = [v for name in healthy if (v := sm.get(name)) is not None and not math.isnan(v)]
    # SM activity is a saturation signal, not a level: an LLM server's SMs stay about
    # a third active with one sequence decoding, so sum / target would hold a fleet far
    # above its load. It raises the need only while the pods run hotter than the target.
    hot = guard is not None and bool(busy) and sum(busy) > guard * len(busy)
    by_sm = math.ceil(sum(busy) / guard - 1e-9) if hot and guard is not None else 0
    note = f"demand {demand:.2f} -> {by_demand}, SM {sum(busy):.2f} -> {by_sm}"
    if guard is None:
        note += " (guard off)"
    need = max(by_demand, by_sm)
    ttft = observation.latest(TTFT) if cfg.ttft_metric is not None else None
    if ttft is not None and not math.isnan(ttft) and ttft > cfg.ttft_slo_s:
        by_ttft = math.ceil(max(len(healthy), 1) * ttft / cfg.ttft_slo_s)
        note += f", TTFT {ttft:.2f} s > {cfg.ttft_slo_s:g} s -> {by_ttft}"
        need = max(need, by_ttft)
    return need, note


def queue_growth(backlog: Series, now: float) -> float:
    """How fast the queue grew over the last ``GROWTH_S``, requests per second (>= 0).

    Returns:
        The rise from the window's first point to its last over their time apart.
    """
    recent = [(t, q) for t, q in backlog if t > now - GROWTH_S]
    if len(recent) < 2 or recent[-1][0] <= recent[0][0]:
        return 0.0
    return max((recent[-1][1] - recent[0][1]) / (recent[-1][0] - recent[0][0]), 0.0)


def backlog_demand(
    total: Series, backlog: Series | None, service: float | None, now: float, horizon_s: float
) -> tuple[Series, str]:
    """The demand the reactive need sees: in service, the queue's share, and its growth.

    While requests queue, those in flight are bounded by the Ready pods and hide how
    much more arrives. Two terms, both in requests in flight, restore it:

    * the backlog: each queued request needs a slot for one service time out of the
      cold start (``horizon_s``) before new replicas arrive to drain it, so it counts
      at ``service time / horizon_s`` (at most 1);
    * the excess arrivals: the queue's growth rate times the service time (Little's
      law on what the pods cannot take).

    ``service`` is ``service_time_s``'s; unknown (None), the queue counts in full.

    Returns:
        The demand points (the newest with both terms) and a note.
    """
    if not backlog or not total or service is None or horizon_s <= 0:
        return total, ""
    weight = min(service / horizon_s, 1.0)
    growth = queue_growth(backlog, now) * service
    weighed = weigh_backlog(total, backlog, weight)
    t, v = weighed[-1]
    note = f", queue x{weight:.2f} + growth {growth:.1f}" if backlog[-1][1] > 0 else ""
    return (*weighed[:-1], (t, v + growth)), note


def steady_demand(
    total: Series, backlog: Series | None, ready: int, cfg: HybridConfig
) -> tuple[Series, Series, Series]:
    """The requests in service, sampled and smoothed, and the demand the need reads.

    The demand is the smoothed requests in service plus the queue as sampled: a queue
    is a burst's edge, not scatter. Like Knative's panic mode, when the newest sample
    needs ``panic_ratio`` times the Ready replicas, the newest point is that sample.

    Returns:
        (in service as sampled, in service smoothed, demand) points.
    """
    samples = weigh_backlog(total, backlog, 0.0)
    points = smooth(samples, cfg.smoothing_s)
    queued = dict(backlog or ())
    demand = [(t, v + queued.get(t, 0.0)) for t, v in points]
    if demand and total[-1][1] / cfg.per_replica >= cfg.panic_ratio * max(ready, 1):
        demand[-1] = total[-1]
    return samples, points, tuple(demand)


def last_saturated(
    in_service: Series, backlog: Series | None, service: float | None, cfg: HybridConfig
) -> float | None:
    """The newest time at which requests were queued beyond ordinary queueing.

    A queue is beyond it when above ``SATURATED_SHARE`` of those in service and, with
    ``queue_wait_s`` set and the service time known, when its expected wait (queued x
    service time / in service) exceeds ``queue_wait_s``.

    Returns:
        Seconds, or None when the queue stayed (nearly) empty.
    """
    if not backlog:
        return None
    serving = dict(in_service)
    bound = None  # queued per request in service beyond which the wait is long
    if cfg.queue_wait_s is not None and service is not None and service > 0:
        bound = cfg.queue_wait_s / service
    for t, q in reversed(backlog):
        busy = serving.get(t, 0.0)
        if q > SATURATED_SHARE * busy and q > 0 and (bound is None or q > bound * busy):
            return float(t)
    return None


def served_since(points: Series, since: float | None, smoothing_s: float) -> Series:
    """The smoothed load in service that scale-in must agree with: none of it saturated.

    While requests queue beyond ordinary queueing (``last_saturated``), the pods'
    in-flight count is their capacity draining the backlog, not the load; once the
    backlog is gone, that peak would hold the fleet for ``scale_in_window_s``. So the
    points whose trailing mean (``smoothing_s``) covers a saturated second are left
    out, as the forecast's fit window leaves them out.

    Returns:
        The points after ``since`` plus ``smoothing_s``, or the newest point when none
        is (``points`` as they are when nothing queued).
    """
    return points if since is None else read_after(points, since, smoothing_s)


def read_after(points: Series, since: float, smoothing_s: float) -> Series:
    """The smoothed points whose trailing mean (``smoothing_s``) lies wholly after ``since``.

    A point whose mean reaches back before ``since`` still carries what came before it:
    a saturated second (``served_since``), or the last burst between bursts on a period
    (``Floor.calm_since``).

    Returns:
        Those points, or the newest point when none is.
    """
    return tuple(p for p in points if p[0] - smoothing_s > since) or points[-1:]


def weigh_backlog(total: Series, backlog: Series | None, weight: float) -> Series:
    """The demand with its queued part counted at ``weight``.

    Returns:
        (time, value) points of ``total`` less ``1 - weight`` of the backlog at each time.
    """
    if not backlog or weight >= 1.0:
        return total
    queued = dict(backlog)
    return tuple((t, v - (1.0 - weight) * queued.get(t, 0.0)) for t, v in total)


class Floor(NamedTuple):
    """``learned_floor``'s answer: what it recorded and what it holds."""

    bursts: tuple[float, ...]
    levels: tuple[tuple[int, float], ...]
    offered: tuple[tuple[float, float], ...]
    onsets: tuple[float, ...]
    replicas: int
    note: str
    cap: float | None
    calm_since: float | None = None
    """While it stands down between bursts that recur on a period: since when (the last
    onset plus the lead, when the capacity the burst called for served). None while it
    stands."""
    beyond: float | None = None
    """Since when the load has risen beyond every recorded ratio (None: it has not)."""


def _share_sized(size: Sizing, share: float, demand: float) -> int:
    """Replicas for ``share`` of ``demand``."""
    return size(demand * share)


def learned_floor(
    demand: float,
    cfg: HybridConfig,
    state: "HybridState",
    now: float,
    size: Sizing | None = None,
    lead_s: float | None = None,
) -> Floor:
    """Record the newest burst ratio and demand, and read the floor at ``target_attainment``.

    The demand is the load offered (arrivals times service time where the caller has
    both, else what the reactive need reads), kept in the state for the burst and
    baseline windows. Both histograms (burst ratios and demand levels, each reading
    weighted by its demand: request-weighted, as the SLO is) decay by half every
    ``burst_memory_s``. The floor is the ratio quantile times the level, capped by
    the demand quantile: after a burst, while the level is still high, the ratio
    alone would hold a multiple of the burst. A rise beyond every ratio recorded has
    left the baseline behind (a load that returns at once after a dip): from then
    until the ratio is back within its quantile, the quantile is also applied to the
    burst window's load now, under the same cap. Either demand is sized at its
    ``headroom.lead_share`` (the lead over the lead and ``wait_budget_s``): the share of
    a burst what stands must serve for each request's wait to stay within the budget
    until capacity asked for at the burst's start serves. Where the bursts recur on a period
    (``scaling.recurrence``, ``burst_period_intervals``), the floor stands only from
    one lead time before the next is due until one lead after it has come, and says
    since when it stands down (``Floor.calm_since``).

    Args:
        demand: The load offered now.
        cfg: The policy's parameters.
        state: The previous state (``bursts``, ``levels``, ``offered`` and ``onsets``).
        now: The decision's time, seconds.
        size: Replicas for the floor's demand (``headroom.floor_replicas``); None:
            at ``per_replica``.
        lead_s: How long a replica asked for now takes to serve (``horizon_s``): a
            burst is measured over it (``headroom.baseline_end``); None: over the
            burst window alone.

    Returns:
        The new histograms, the demand kept, the onsets, the floor in replicas (0
        while it stands down), a note for the reason while it stands down or is
        measured from the load now, the demand quantile that caps it (None while
        nothing is recorded), and since when the load has risen beyond its history.
    """
    lead = 0.0 if lead_s is None else lead_s
    span = max(cfg.burst_window_s, lead) + cfg.baseline_window_s
    bursts, levels = state.bursts, state.levels
    if state.offered and now > state.offered[-1][0]:
        factor = 0.5 ** ((now - state.offered[-1][0]) / cfg.burst_memory_s)
        bursts, levels = headroom.forget(bursts, factor), headroom.forget_levels(levels, factor)
    offered = (*(p for p in state.offered if p[0] > now - span), (now, demand))
    windows = (cfg.burst_window_s, cfg.baseline_window_s, lead)
    seen = headroom.burst_ratio(offered, now, *windows)
    share = cfg.target_attainment if cfg.target_attainment is not None else 1.0
    beyond = state.beyond_since
    # The history before this reading counts in it (the decay scales every bin
    # alike, so its quantiles are the previous decision's).
    usual_before = headroom.quantile(bursts, share)
    timed_before = recurrence.onset_threshold(usual_before, headroom.level_quantile(levels, share))
    if seen is not None:
        ratio, burst, _ = seen
        top = headroom.highest(bursts)
        if top is not None and ratio > top:
            beyond = now if beyond is None else beyond
        elif beyond is not None and (usual_before is None or ratio <= usual_before):
            beyond = None
        bursts = headroom.record(bursts, ratio, burst)
        levels = headroom.record_level(levels, burst, burst)
    level = headroom.level(offered, now, *windows)
    cap = headroom.level_quantile(levels, share)
    sized = per_replica_sizing(cfg.per_replica) if size is None else size
    if cfg.wait_budget_s is not None and lead > 0:
        # What stands carries a burst until capacity asked for at its start serves, and
        # its requests may wait the budget meanwhile: the floor holds that share of it.
        sized = partial(_share_sized, sized, headroom.lead_share(lead, cfg.wait_budget_s))
    floor = headroom.floor_replicas(bursts, share, level, sized, cap)
    usual = headroom.quantile(bursts, share)
    note = ""
    if beyond is not None and seen is not None and usual is not None:
        # A rise beyond every ratio its history recorded leaves the baseline behind (a
        # load returning at once after an outage's dip): until the rise is back within
        # the usual range, the usual headroom is measured from the load now.
        demand_now = usual * seen[1] if cap is None else min(usual * seen[1], cap)
        floor = max(floor, sized(demand_now))
        note = f", rise beyond its recorded bursts since {beyond:.0f} s: floor at {demand_now:.2f}"
    onsets = state.onsets
    if cfg.burst_period_intervals > 0:
        threshold = recurrence.onset_threshold(usual, cap)
        onsets = recurrence.record_onset(
            onsets,
            now,
            window_average(offered, cfg.burst_window_s),
            window_average(offered[:-1], cfg.burst_window_s) if len(offered) > 1 else None,
            threshold,
            cfg.baseline_window_s,
            None if seen is None else seen[0],
            newly_timed=timed_before is None,
        )
        tolerance = cfg.burst_window_s
        every = recurrence.period(onsets, cfg.burst_period_intervals, tolerance)
        rise = cfg.burst_window_s
        if not recurrence.stands(now, onsets, every, lead, tolerance, rise):
            due = onsets[-1] + (every or 0.0)
            note = f", learned floor {floor} down: bursts every {every:.0f} s, next {due:.0f}"
            calm = onsets[-1] + lead
            return Floor(bursts, levels, offered, onsets, 0, note, cap, calm, beyond=beyond)
    return Floor(bursts, levels, offered, onsets, floor, note, cap, beyond=beyond)


def arrival_rate(counter: Series | None) -> float | None:
    """Requests received per second over the counter's newest scrape interval.

    Returns:
        The rate, or None with fewer than two points or across a counter reset.
    """
    if not counter or len(counter) < 2:
        return None
    (t0, c0), (t1, c1) = counter[-2], counter[-1]
    if t1 <= t0 or c1 < c0:
        return None
    return (c1 - c0) / (t1 - t0)


def pod_slots(seen: float, in_service: Series, backlog: Series | None, ready: int) -> float:
    """The requests a pod serves at once, as the most seen per Ready pod while requests queued.

    While requests queue, every Ready pod's slots are full, so in service over Ready
    pods reads the slots; a pod just Ready and not yet full reads fewer, never more,
    so the most seen is the estimate.

    Args:
        seen: The most seen so far (0: none yet).
        in_service: The requests in service as sampled.
        backlog: The queue as sampled.
        ready: Ready pods now.

    Returns:
        The new estimate (``seen`` when nothing queues now).
    """
    if not backlog or not in_service or ready <= 0:
        return seen
    busy, queued = in_service[-1][1], backlog[-1][1]
    if queued > SATURATED_SHARE * busy and queued > 0:
        return max(seen, 1.0, busy / ready)
    return seen


def replace(
    sick: Mapping[str, str], cfg: HybridConfig, state: "HybridState", now: float
) -> tuple[str, ...]:
    """The sick pods to delete now, so that their replacements land on other GPUs.

    A pod judged ``lost``, ``xid`` or ``dbe`` is deleted once (its GPU is broken until
    repaired); a throttled pod or a straggler only when it stays so for
    ``replace_after_s``, since heat and slow neighbours often pass.

    Returns:
        Pod names, sorted.
    """
    if not cfg.replace_sick:
        return ()
    seen = state.sick_since
    out = []
    for name, why in sick.items():
        since = seen.get(name, now)
        if why in ("throttled", "straggler") and now - since < cfg.replace_after_s:
            continue
        if name not in state.replaced:
            out.append(name)
    return tuple(sorted(out))


@dataclass(frozen=True, slots=True)
class HybridState(PredictiveState):
    """``predictive``'s state, and what ``hybrid`` adds: health, service time, replacements.

    Attributes:
        health: The health judge's counters (``scaling.health``).
        sick: Ready pods not counted, with the reason.
        service: The intervals of ``service_window_s`` (``service_time_s``).
        sick_since: When each sick pod was first judged so, seconds.
        replaced: Sick pods already deleted for replacement, sorted.
        bursts: The learned floor's histogram of burst ratios (``scaling.headroom``),
            weight per bin; empty while none is recorded or the floor is off.
        levels: The learned floor's histogram of demand, ``(bin, weight)`` pairs
            (``headroom.record_level``); empty while none is recorded or the floor is off.
        slots: The requests a pod serves at once: ``pod_concurrency`` where
            configured, else the most seen while requests queued (``pod_slots``); 0
            until they have.
        offered: The demand the reactive need read at each decision of the floor's
            burst and baseline windows, (time s, requests); empty when it is off.
        onsets: When the last bursts began (``scaling.recurrence``), seconds, oldest
            first; empty while none is timed or the floor is off.
        beyond_since: When the load last rose beyond every burst ratio recorded
            (``learned_floor``), seconds; None while it has not, or once the rise is back
            within the ratio's quantile at the target.

    ``essential()`` is ``to_json()``, as ``predictive``'s; the health counters and
    the service intervals also move with the load served.
    """

    health: HealthState = field(default_factory=HealthState)
    sick: Mapping[str, str] = field(default_factory=dict)
    service: tuple[Interval, ...] = ()
    sick_since: Mapping[str, float] = field(default_factory=dict)
    replaced: tuple[str, ...] = ()
    bursts: tuple[float, ...] = ()
    levels: tuple[tuple[int, float], ...] = ()
    offered: tuple[tuple[float, float], ...] = ()
    onsets: tuple[float, ...] = ()
    slots: float = 0.0
    beyond_since: float | None = None


class HybridPolicy(KeepsState[HybridState]):
    """``max(predictive plan, reactive need)`` on healthy capacity, as a pure ``ScalingPolicy``.

    Its state is a ``HybridState``.
    """

    state_type = HybridState

    def __init__(self, config: HybridConfig | None = None, name: str = "hybrid") -> None:
        self.config = config or HybridConfig()
        self.name = name
        require_library("statsmodels", f"the {name} policy")  # its seasonal model
        self.interval_s = self.config.interval_s
        self.history_s = self.config.history_s
        self.signal_path = PROMETHEUS_QUERY
        self._keys = tuple(self.config.metrics)
        signals = {m: Signal(m, aggregation="sum") for m in self._keys}
        if self.config.ttft_metric is not None:
            signals[TTFT] = Signal(self.config.ttft_metric, aggregation="max")
        if self.config.arrivals_metric is not None:
            signals[ARRIVALS] = Signal(self.config.arrivals_metric, aggregation="sum")
        self.signals: Mapping[str, Signal] = MappingProxyType(signals)
        pod_signals = dict(health.POD_SIGNALS)
        pod_signals[health.SM] = Signal(
            self.config.sm_metric, aggregation="avg", by=("pod",), optional=True
        )
        self.pod_signals: Mapping[str, Signal] = MappingProxyType(pod_signals)
        self.min_replicas = self.config.min_replicas
        self.max_replicas = self.config.max_replicas
        self.reads_node_slots = self.config.fills_nodes

    def decide(self, observation: Observation, state: HybridState) -> Decision[HybridState]:
        """Take the larger of the plan and the reactive need, plus a replica per sick pod.

        Returns:
            The desired replicas, the reason with every input, and the new state.
        """
        cfg = self.config
        observation = recent_view(observation, state.forecast, self.history_s)
        points = demand_or_hold(self.name, observation, self._keys, state, cfg)
        if isinstance(points, Decision):
            return points
        now, current = float(observation.now), observation.target.desired
        old_health = state.health
        sick, health_state, completions = health.assess_counted(observation, old_health, cfg.health)
        ready = observation.target.ready
        backlog = None if cfg.backlog_metric is None else observation.series.get(cfg.backlog_metric)
        samples, points, now_points = steady_demand(points, backlog, ready, cfg)
        since, queued, reach, cold = None, "", None, None
        service: float | None = None
        intervals: tuple[Interval, ...] = ()
        if cfg.backlog_metric is not None:
            # Only the queue's terms read the service time.
            service, intervals = service_time_s(
                observation,
                samples,
                old_health,
                state.service,
                cfg.service_window_s,
                cfg.service_completions,
                completions,
            )
            # The forecast learns the load the pods serve, not a queue that grows only
            # while they are short; the reactive need counts the queue at its weight.
            # The queue is drained by replicas beyond the current ones: they may need a node.
            cold = cold_start_s(observation.target.pods, state.cold, cfg)
            reach = horizon_s(cold[0], current + 1, cfg)
            now_points, queued = backlog_demand(now_points, backlog, service, now, reach)
            since = last_saturated(samples, backlog, service, cfg)
        if cfg.pod_concurrency is not None:
            per_pod = float(cfg.pod_concurrency)
        else:
            per_pod = pod_slots(state.slots, samples, backlog, ready)
        started = now if state.started_at is None else state.started_at
        size, offered_now, reading = None, None, False
        if cfg.target_attainment is not None:
            # The load offered: arrivals x service time where both are known (what a
            # crowd that outruns the pods still shows).
            rate = arrival_rate(observation.series.get(ARRIVALS))
            if rate is not None and service is not None:
                offered_now = rate * service
            # The floor's quantile at the target is read only from history enough to
            # show it; until then the floor records and holds nothing, and per_replica's
            # headroom stands in for it, as it does for the policy not told a target.
            read_from = headroom.history_to_read_s(cfg.burst_window_s, cfg.target_attainment)
            reading = now - started >= read_from
            if reading and per_pod > 0 and service is not None and cfg.wait_budget_s is not None:
                # Told its target and knowing its pods' slots, the policy holds the
                # burst headroom its history calls for in the learned floor; the plan
                # and the reactive need then staff their load for its scatter alone,
                # not at per_replica, whose headroom stands in for the learned one
                # where none is known.
                staffing = (per_pod, service, cfg.wait_budget_s)
                goal = cfg.target_attainment
                size = partial(headroom.staffed_replicas, staffing=staffing, share=goal)
        learned = Floor(state.bursts, state.levels, state.offered, state.onsets, 0, "", None)
        ceiling = None
        if cfg.target_attainment is not None:
            load = now_points[-1][1] if offered_now is None else offered_now
            learned = learned_floor(load, cfg, state, now, size, reach)
            if not reading:
                note = f", learned floor held from {started + read_from:.0f} s"
                learned = learned._replace(replicas=0, note=note, calm_since=None)
            elif learned.calm_since is not None:
                # Between bursts on a period the next is not due within the plan's
                # horizon (the floor stands again one lead before it), and the fit
                # window still holds the last burst's rise and fall: the plan holds
                # for no more than the load has reached since the floor stood down.
                calm = read_after(now_points, learned.calm_since, cfg.smoothing_s)
                ceiling = max(load, *(v for _, v in calm))
            elif learned.cap is not None:
                # The demand its history calls for at the target bounds what the
                # plan holds for: a trend read on a crowd's rise would hold more than
                # the crowd reached; a demand above it now lifts the bound with it.
                ceiling = max(learned.cap, load, now_points[-1][1])
        planned, why, forecast, cold_starts, expected = plan(
            observation,
            samples,
            state,
            cfg,
            unsaturated_since=since,
            cold=cold,
            size=size,
            ceiling=ceiling,
        )
        guard = sm_guard(cfg, reach)
        need, seen = reactive_need(observation, now_points, sick, cfg, guard, size, offered_now)
        seen += queued
        proposal = max(planned, need) + len(sick)
        if learned.replicas > max(planned, need):
            seen += f", learned floor {learned.replicas}"
        seen += learned.note
        proposal = max(proposal, learned.replicas + len(sick))
        served = served_since(points, since, cfg.smoothing_s)
        calm_since = learned.calm_since
        if calm_since is not None:
            # What stood until the floor stood down was for the burst that has come:
            # neither it nor the burst's load holds the scale-in after it.
            served = read_after(served, calm_since, cfg.smoothing_s)
        proposal, up, agreed = agree(proposal, current, served, now, cfg, started, samples, size)
        # Requests queued now beyond ordinary queueing (``last_saturated``): the pods are
        # short, whatever the served load says.
        up = up or (since is not None and since >= float(points[-1][0]))
        slots = observation.target.node_slots
        # Between bursts on a period the next one is not due before the floor stands
        # again, one horizon ahead of it: what the load does not need can go at once
        # (the HPA's default pace), not at the pace that holds capacity for bursts of
        # unknown timing; the stabilization window holds only what was recommended
        # since the floor stood down, and the scale-in cooldown still applies.
        pace = STANDING_DOWN_PACE_PERCENT if calm_since is not None else None
        replicas, note, recs = settle(
            now,
            current,
            proposal,
            state,
            cfg,
            hold_in=up,
            slots=slots,
            pace_percent=pace,
            stable_since=calm_since,
        )
        unwell = f", not capacity: {dict(sorted(sick.items()))}" if sick else ""
        reason = f"plan: {why}; now: {seen}{unwell}{agreed}{note} -> {replicas}"
        logger.debug("%s: %d -> %d: %s", self.name, current, replicas, reason)
        delete = replace(sick, cfg, state, now)
        done = [n for n in state.replaced if n in sick]
        new_state = HybridState(
            forecast=forecast,
            cold=cold_starts,
            recs=recs,
            started_at=started,
            last_in=last_scale_in(state, now, current, replicas),
            health=health_state,
            sick=dict(sick),
            service=intervals,
            sick_since={n: state.sick_since.get(n, now) for n in sick},
            replaced=tuple(sorted({*done, *delete})),
            bursts=learned.bursts,
            levels=learned.levels,
            offered=learned.offered,
            onsets=learned.onsets,
            slots=per_pod,
            beyond_since=learned.beyond,
        )
        return Decision(replicas, reason, new_state, delete=delete, forecast=expected)
