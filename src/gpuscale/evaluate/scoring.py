"""One run's score after the warm-up, and a sweep's scores folded into an ``Evaluation``.

A run starts from a state no real deployment is in (replicas chosen for the
first minute, empty queues), so its first ``warmup_s`` seconds are not scored:

* GPU-hours are the node pool's: every GPU on a Ready node, idle or not, from
  the node's joining until its removal (``Timeline.node_gpus``), summed over the
  rows from the warm-up on; what the pods held (``allocated_gpu_hours``) is
  kept alongside. A run without node counts is scored on its pods' GPUs.
* Attainment is the requests within the SLO that entered service from the
  warm-up on (``Timeline.within_slo``) over the requests that arrived from the
  warm-up on, up to the last drop timeout of the run (the cool-down: a request
  arriving later may still be waiting or in service when the trace ends); a
  dropped request counts against it.

Request totals (completed, dropped, in flight) are always the whole run's, so
they add up to the arrivals. ``evaluation_from_sweep`` turns every seed and knob
value into means with 95 % intervals (``stats.mean_ci``) and reads each policy's
GPU-hours at the target attainment off its curve (``evaluate.bracket.at_target``).
The searched oracle has no knob shared by the seeds: each seed's search
(``RunScore.trials``) is its curve, and its mean curve takes, for each attainment
in ``ORACLE_CURVE_BELOW`` under the target, the cheapest plan of each seed's
search that reached it.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gpuscale.evaluate import policies as registry
from gpuscale.evaluate.bracket import AtTarget, Sample, at_target
from gpuscale.evaluate.bursts import mean_recovery_s
from gpuscale.evaluate.results import CurvePoint, Evaluation, PolicySummary, histogram_quantile
from gpuscale.evaluate.stats import (
    Estimate,
    cost_at_target,
    mean_ci,
    proportion_ci,
    reading_at_target,
)
from gpuscale.sim.outcome import RunResult

if TYPE_CHECKING:
    from gpuscale.evaluate.sweep import RunSpec, SweepPlan

ORACLE_CURVE_BELOW = (0.04, 0.02, 0.01, 0.005, 0.0)
"""The searched oracle's curve: attainments this far below the target (and the target)."""

SEARCH_KNOB = ("target_attainment", "attainment the searched plan meets")
"""How the report names the searched oracle's curve variable, and its unit."""


@dataclass(frozen=True, slots=True)
class RunScore:
    """One run's numbers, small enough to return from a worker.

    Attributes:
        policy: Policy name.
        seed: The run's seed.
        knob_value: The policy's knob value; None without a knob.
        gpu_hours: Node GPU time from the warm-up on (pods' when ``nodes_counted`` is
            False), hours.
        slo_attainment: Share of requests within the SLO (from the warm-up on when
            ``from_warmup``); None when no request arrived.
        from_warmup: Whether attainment skipped the warm-up (needs per-step counts).
        allocated_gpu_hours: GPU time the pods held from the warm-up on, hours.
        nodes_counted: Whether ``gpu_hours`` counts node GPUs (the run recorded them).
        mean_gpu_utilization: Busy share of allocated GPU time, whole run; None if none.
        p50_latency_s: Median latency of completed requests, seconds.
        p99_latency_s: 99th percentile of the same, seconds.
        requests: Arrivals, whole run.
        completed_requests: Completed, whole run.
        dropped_requests: Dropped, whole run.
        in_flight_requests: Queued or in service at the end.
        scale_events: Changes of the desired replica count.
        result: The whole run, when asked for (the report's timelines).
        trials: For the searched oracle, each plan it simulated as (GPU-hours,
            attainment), scored as above; empty otherwise.
        energy_kwh: Energy of the Ready nodes' GPUs from the warm-up on (the device
            physics' power, idle GPUs included), kWh; None when not recorded.
        recovery_s: Mean time from a burst's onset to the SLO held again
            (``evaluate.bursts``), seconds; None when the run has no burst.
    """

    policy: str
    seed: int
    knob_value: float | None
    gpu_hours: float
    slo_attainment: float | None
    from_warmup: bool
    mean_gpu_utilization: float | None
    p50_latency_s: float | None
    p99_latency_s: float | None
    requests: float
    completed_requests: float
    dropped_requests: float
    in_flight_requests: float
    scale_events: int
    result: RunResult | None = None
    allocated_gpu_hours: float = 0.0
    nodes_counted: bool = False
    trials: tuple[tuple[float, float], ...] = ()
    energy_kwh: float | None = None
    recovery_s: float | None = None
    holds: tuple[tuple[str, int], ...] = ()
    pods_replaced: int = 0
    pods_remediated: int = 0
    ttft_within_slo: float | None = None
    tpot_within_slo: float | None = None


def _share(count: float | None, of: float) -> float | None:
    return None if count is None or of <= 0 else count / of


def _after(total: float, per_row: np.ndarray, lengths: np.ndarray, scored: np.ndarray) -> float:
    """The share of ``total`` that falls in the scored rows, by a per-row rate."""
    held = np.asarray(per_row, dtype=np.float64) * lengths
    whole = float(held.sum())
    return total * float(held[scored].sum()) / whole if whole > 0 else 0.0


def score_run(
    result: RunResult,
    seed: int,
    knob_value: float | None,
    warmup_s: float,
    *,
    keep: bool = False,
    cooldown_s: float = 0.0,
    target: float = 0.99,
) -> RunScore:
    """Score one run, skipping the timeline rows that start before ``warmup_s``.

    Attainment also skips the requests that arrive in the last ``cooldown_s`` (the
    scenario's drop timeout): they may still be waiting or in service when the trace
    ends, through no fault of the policy, and counting them as misses would cap every
    policy, and the ceiling, below 1. At most half the scored span is cut this way.

    Returns:
        The score.
    """
    tl = result.timeline
    starts = np.asarray(tl.time_s, dtype=np.float64)
    lengths = np.diff(
        starts, append=starts[-1] + (starts[-1] - starts[-2] if starts.size > 1 else 1.0)
    )
    scored = starts >= warmup_s
    end = float(starts[-1] + lengths[-1]) if starts.size else 0.0
    scored_end = max(end - cooldown_s, warmup_s + (end - warmup_s) / 2.0)
    judged = scored & (starts < scored_end)
    allocated = _after(float(result.gpu_seconds), tl.allocated_gpus, lengths, scored)
    nodes_counted = tl.node_gpus.size == starts.size and result.node_gpu_seconds > 0
    node = _after(result.node_gpu_seconds, tl.node_gpus, lengths, scored) if nodes_counted else 0.0
    counted = tl.within_slo.size == starts.size
    from_warmup = warmup_s <= 0 or counted
    if counted and (warmup_s > 0 or cooldown_s > 0):
        arrived = float((np.asarray(tl.demand_rps) * lengths)[judged].sum())
        got = float(np.asarray(tl.within_slo, dtype=np.float64)[judged].sum())
        attainment = got / arrived if arrived > 0 else None
    else:
        attainment = result.within_slo / result.requests if result.requests > 0 else None
    gpu_s = float(result.gpu_seconds)
    power = np.asarray(getattr(tl, "power_w", ()), dtype=np.float64)  # absent: not recorded
    energy = float((power * lengths)[scored].sum()) / 3.6e6 if power.size == starts.size else None
    recovery = mean_recovery_s(tl, warmup_s, scored_end, target) if counted else None
    return RunScore(
        policy=result.policy,
        seed=seed,
        knob_value=knob_value,
        gpu_hours=(node if nodes_counted else allocated) / 3600.0,
        slo_attainment=None if attainment is None else min(attainment, 1.0),
        from_warmup=from_warmup,
        mean_gpu_utilization=float(result.busy_gpu_seconds) / gpu_s if gpu_s > 0 else None,
        p50_latency_s=histogram_quantile(result.latency_edges_s, result.latency_counts, 0.5),
        p99_latency_s=histogram_quantile(result.latency_edges_s, result.latency_counts, 0.99),
        requests=float(result.requests),
        completed_requests=float(result.completed_requests),
        dropped_requests=float(result.dropped_requests),
        in_flight_requests=float(result.in_flight_requests),
        scale_events=int(result.scale_events),
        result=result if keep else None,
        allocated_gpu_hours=allocated / 3600.0,
        nodes_counted=nodes_counted,
        energy_kwh=energy,
        recovery_s=recovery,
        holds=result.holds,
        pods_replaced=result.pods_replaced,
        pods_remediated=result.pods_remediated,
        ttft_within_slo=_share(result.ttft_within_slo, float(result.requests)),
        tpot_within_slo=_share(result.tpot_within_slo, float(result.requests)),
    )


def mean_holds(per_run: Sequence[Mapping[str, int]]) -> dict[str, float]:
    """The fail-safe's holds by reason, the mean over runs (reasons no run held on left out).

    Returns:
        Reason to mean count.
    """
    reasons = sorted({r for run in per_run for r, n in run.items() if n})
    return {r: float(np.mean([run.get(r, 0) for run in per_run])) for r in reasons}


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known else None


def _estimate(values: Sequence[float | None]) -> Estimate | None:
    known = [v for v in values if v is not None]
    return mean_ci(known) if known else None


def _proportion(values: Sequence[float | None]) -> Estimate | None:
    # Attainments are proportions: their interval must stay within [0, 1].
    known = [v for v in values if v is not None]
    return proportion_ci(known) if known else None


def _interval(estimate: Estimate | None) -> tuple[float | None, float | None]:
    return (None, None) if estimate is None else (estimate.low, estimate.high)


def _at_target(
    points: Mapping[float | None, Sequence[RunScore]], seeds: Sequence[int], target: float
) -> AtTarget:
    """GPU-hours at ``target`` on the mean curve, and on each seed's own curve."""
    samples = [
        Sample(s.seed, value, s.gpu_hours, s.slo_attainment)
        for value, runs in points.items()
        for s in runs
    ]
    return at_target(samples, seeds, target)


def _cheapest_reaching(score: RunScore, goal: float) -> tuple[float, float] | None:
    """The cheapest of a search's plans whose attainment reached ``goal``, if any."""
    reached = [(c, a) for c, a in score.trials if a >= goal]
    return min(reached) if reached else None


def _searched_curve(runs: Sequence[RunScore], target: float) -> list[CurvePoint]:
    """The searched oracle's mean curve: one point per ``ORACLE_CURVE_BELOW`` attainment.

    A point is kept only when every seed's search reached its attainment.
    """
    out = []
    for below in ORACLE_CURVE_BELOW:
        goal = round(target - below, 6)
        found = [_cheapest_reaching(s, goal) for s in runs]
        if goal <= 0 or not found or any(f is None for f in found):
            continue
        costs = [f[0] for f in found if f is not None]
        reached = [f[1] for f in found if f is not None]
        hours, attainment = mean_ci(costs), proportion_ci(reached)
        out.append(
            CurvePoint(goal, hours.mean, _interval(hours), attainment.mean, _interval(attainment))
        )
    return out


def _searched_at_target(
    runs: Sequence[RunScore], curve: Sequence[CurvePoint], target: float
) -> AtTarget:
    """GPU-hours at ``target`` on the searched oracle's mean curve and each seed's search."""
    pairs = [(c.gpu_hours, c.slo_attainment) for c in curve if c.slo_attainment is not None]
    mean: float | None = None
    bound: str | None = None
    if pairs:
        mean, bound = reading_at_target([c for c, _ in pairs], [a for _, a in pairs], target)
    per_seed = {
        s.seed: cost_at_target([c for c, _ in s.trials], [a for _, a in s.trials], target)
        if s.trials
        else None
        for s in runs
    }
    return AtTarget(mean, bound, per_seed)


def _ratio_at_target(
    reach: AtTarget, oracle: AtTarget | None, seeds: Sequence[int]
) -> tuple[float | None, tuple[float | None, float | None]]:
    """A policy's cost at the target over the oracle's, and its interval.

    When every seed has both readings, the figure is the mean of the per-seed ratios
    and the interval theirs (one estimator, so the figure lies inside it); otherwise
    the ratio of the two headlines, with no interval.

    Returns:
        (ratio, its 95 % interval); (None, (None, None)) without an oracle reading.
    """
    if oracle is None:
        return None, (None, None)
    ratios = [
        mine / theirs
        for seed, mine in reach.per_seed.items()
        if mine is not None and (theirs := oracle.per_seed.get(seed))
    ]
    if ratios and len(ratios) == len(seeds):
        estimate = mean_ci(ratios)
        return estimate.mean, _interval(estimate)
    mine_headline, _ = reach.headline()
    their_headline, _ = oracle.headline()
    if mine_headline is None or their_headline is None or not their_headline.mean:
        return None, (None, None)
    return mine_headline.mean / their_headline.mean, (None, None)


def evaluation_from_sweep(
    plan: "SweepPlan", runs: Sequence[tuple["RunSpec", RunScore]]
) -> tuple[Evaluation, list[RunResult]]:
    """Fold a sweep's scores into the evaluation ``results.json`` and the report show.

    Returns:
        The evaluation, and the first seed's fair runs (for the timelines).
    """
    base = plan.base
    target = plan.request.target_attainment
    seeds = plan.seeds
    ceiling = _proportion([s.slo_attainment for spec, s in runs if spec.policy == "ceiling"])
    by_point: dict[str, dict[float | None, list[RunScore]]] = {name: {} for name in plan.points}
    for spec, score in runs:
        if spec.policy in by_point:
            by_point[spec.policy].setdefault(spec.knob_value, []).append(score)
    curves: dict[str, list[CurvePoint]] = {}
    reached: dict[str, AtTarget] = {}
    for name, points in by_point.items():
        fair = points[plan.fair_value(name)]
        if any(s.trials for s in fair):  # the searched oracle: each seed's search is its curve
            curves[name] = _searched_curve(fair, target)
            reached[name] = _searched_at_target(fair, curves[name], target)
        else:
            ordered = sorted(points.items(), key=_order)
            curves[name] = [_point(value, scores) for value, scores in ordered]
            reached[name] = _at_target(points, seeds, target)
    oracle = reached.get("oracle")
    summaries = {}
    for name, points in by_point.items():
        fair = points[plan.fair_value(name)]
        searched = any(s.trials for s in fair)
        hours = mean_ci([s.gpu_hours for s in fair])
        attainment = _proportion([s.slo_attainment for s in fair])
        energy = _estimate([s.energy_kwh for s in fair])
        recovery = _estimate([s.recovery_s for s in fair])
        reach = reached[name]
        headline, bound = reach.headline()
        ratio, ratio_ci = _ratio_at_target(reach, oracle, seeds)
        knob = registry.get(name).knob
        knob_name, knob_unit = (
            SEARCH_KNOB if searched else (None, None) if knob is None else (knob.field, knob.unit)
        )
        summaries[name] = PolicySummary(
            gpu_hours=hours.mean,
            slo_attainment=None if attainment is None else attainment.mean,
            mean_gpu_utilization=_mean([s.mean_gpu_utilization for s in fair]),
            p50_latency_s=_mean([s.p50_latency_s for s in fair]),
            p99_latency_s=_mean([s.p99_latency_s for s in fair]),
            requests=float(np.mean([s.requests for s in fair])),
            dropped_requests=float(np.mean([s.dropped_requests for s in fair])),
            scale_events=round(float(np.mean([s.scale_events for s in fair]))),
            parameters=base.parameters(name),
            units=registry.get(name).fair_units(),
            completed_requests=float(np.mean([s.completed_requests for s in fair])),
            in_flight_requests=float(np.mean([s.in_flight_requests for s in fair])),
            slo_attainment_ci95=_interval(attainment),
            gpu_hours_ci95=_interval(hours),
            gpu_hours_at_target=None if headline is None else headline.mean,
            gpu_hours_at_target_bound=bound,
            seeds_bounded_at_target=reach.seeds_bounded,
            gpu_hours_at_target_ci95=_interval(headline),
            seeds_reaching_target=sum(v is not None for v in reach.per_seed.values()),
            x_oracle_at_target=ratio,
            x_oracle_at_target_ci95=ratio_ci,
            knob=knob_name,
            knob_unit=knob_unit,
            curve=tuple(curves[name]),
            allocated_gpu_hours=float(np.mean([s.allocated_gpu_hours for s in fair])),
            gpu_hours_per_seed=tuple(s.gpu_hours for s in fair),
            slo_attainment_per_seed=tuple(s.slo_attainment for s in fair),
            energy_kwh=None if energy is None else energy.mean,
            energy_kwh_ci95=_interval(energy),
            burst_recovery_s=None if recovery is None else recovery.mean,
            burst_recovery_s_ci95=_interval(recovery),
            fault_timings=next((s.result.fault_timings for s in fair if s.result), ()),
            holds=mean_holds([dict(s.holds) for s in fair]),
            pods_replaced=float(np.mean([s.pods_replaced for s in fair])),
            pods_remediated=float(np.mean([s.pods_remediated for s in fair])),
            ttft_within_slo=_mean([s.ttft_within_slo for s in fair]),
            tpot_within_slo=_mean([s.tpot_within_slo for s in fair]),
        )
    kept = [s.result for _, s in runs if s.result is not None]
    sc = base.scenario
    evaluation = Evaluation(
        trace=base.trace,
        seed=sc.seed,
        duration_s=float(sc.workload.duration_s),
        scale=base.scale,
        slo_latency_s=sc.slo_latency_s,
        timeout_s=sc.timeout_s,
        faults=base.fault_specs,
        policies=summaries,
        fault_windows=base.fault_windows,
        ceiling=None if ceiling is None else ceiling.mean,
        ceiling_ci95=_interval(ceiling),
        target_attainment=target,
        seeds=len(seeds),
        warmup_s=plan.warmup_s,
        attainment_from_warmup=all(s.from_warmup for _, s in runs),
        gpu_hours_basis="node" if all(s.nodes_counted for _, s in runs) else "allocated",
    )
    order = list(plan.points)
    return evaluation, sorted(kept, key=lambda r: order.index(r.policy))


def _order(item: tuple[float | None, list[RunScore]]) -> float:
    return -1.0 if item[0] is None else item[0]


def _point(value: float | None, scores: Sequence[RunScore]) -> CurvePoint:
    hours = mean_ci([s.gpu_hours for s in scores])
    attainment = _proportion([s.slo_attainment for s in scores])
    return CurvePoint(
        knob_value=value,
        gpu_hours=hours.mean,
        gpu_hours_ci95=_interval(hours),
        slo_attainment=None if attainment is None else attainment.mean,
        slo_attainment_ci95=_interval(attainment),
    )
