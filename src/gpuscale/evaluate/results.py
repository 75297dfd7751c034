"""The numbers a comparison is judged on, computed from each run's ``RunResult``.

Every policy is scored the same way here, so a table row means the same thing
for a baseline, the oracle and our own policies: GPU-hours spent, the share of
requests answered within the SLO, how busy the allocated GPUs were, latency
percentiles, drops and scale events. ``results.json`` is this module's output.
"""

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpuscale.sim.faults import SimFault
from gpuscale.sim.outcome import FaultTiming, FloatArray, RunResult

Interval = tuple[float | None, float | None]
"""A 95 % confidence interval, (low, high); None ends when unknown (one seed)."""


@dataclass(frozen=True, slots=True)
class PolicySummary:
    """One policy's score on one scenario.

    Attributes:
        gpu_hours: GPU time, hours: the Ready nodes' GPUs until each node is removed,
            or the pods' where the run did not record nodes (``Evaluation.gpu_hours_basis``).
        slo_attainment: Fraction (0-1) of arrived requests completed within the SLO;
            dropped requests count against it. None when no request arrived.
        mean_gpu_utilization: Busy fraction (0-1) averaged over allocated GPU time;
            None when no GPU was allocated.
        p50_latency_s: Median end-to-end latency of completed requests, seconds.
        p99_latency_s: 99th percentile of the same, seconds.
        requests: Requests that arrived.
        dropped_requests: Requests dropped after waiting past the timeout.
        scale_events: Changes of the desired replica count.
        parameters: The parameters the harness gave the policy, for the record.
        units: The unit of each parameter, by name.
        completed_requests: Requests served to completion.
        in_flight_requests: Requests queued or in service at the end; with the completed
            and dropped ones they add up to ``requests``.
        slo_attainment_ci95: 95 % interval of ``slo_attainment`` over seeds, [low, high]
            (None ends with one seed).
        gpu_hours_ci95: 95 % interval of ``gpu_hours`` over seeds.
        gpu_hours_at_target: GPU-hours at the target attainment: the mean over seeds of
            each seed's reading on its own cost-against-attainment curve, or, when some
            seed's curve never reaches the target, the reading on the mean curve; None
            when that never reaches it either.
        gpu_hours_at_target_ci95: Its 95 % interval from the same per-seed readings (so
            it contains the figure); None ends unless every seed's curve reaches the
            target.
        seeds_reaching_target: Seeds whose own curve reaches the target.
        gpu_hours_at_target_bound: ``"upper"`` when a seed's cheapest point (after the
            sweep's extension, ``evaluate.bracket``) still exceeds the target (or, for a
            mean-curve reading, the mean curve's), so ``gpu_hours_at_target`` and
            ``x_oracle_at_target`` only bound the cost at the target from above; None
            when they are readings.
        seeds_bounded_at_target: Seeds whose own curve gives only such a bound.
        x_oracle_at_target: The mean of the per-seed ratios of the reading to the
            oracle's (the ratio of the two headlines when a seed lacks one).
        x_oracle_at_target_ci95: Its 95 % interval from the same per-seed ratios.
        knob: The config field the sweep varied; None for a policy without one.
        knob_unit: Its unit.
        curve: The sweep's points in knob order (means over seeds, with intervals).
        allocated_gpu_hours: GPU time the pods held (``gpu_hours`` counts the nodes'
            GPUs when ``Evaluation.gpu_hours_basis`` is ``"node"``), hours; None when
            not scored.
        gpu_hours_per_seed: ``gpu_hours`` of each seed, in seed order.
        slo_attainment_per_seed: ``slo_attainment`` of each seed, in seed order.
        energy_kwh: Energy of the GPUs on Ready nodes from the warm-up on, from the
            simulated power (idle GPUs included), kWh, mean over seeds; None when not
            recorded.
        energy_kwh_ci95: Its 95 % interval.
        burst_recovery_s: Mean time from a burst's onset to the SLO held again
            (``evaluate.bursts``), seconds, mean over seeds; None without bursts.
        burst_recovery_s_ci95: Its 95 % interval.
        fault_timings: Each injected fault's time to detect and to mitigate, in the
            first seed's run with the fair parameters; empty unless the runs evaluated
            the alert catalogue.
        holds: Decisions the fail-safe held, by reason, the mean over seeds of the fair
            runs (reasons never held on left out).
        pods_replaced: Pods the policy had deleted for replacement, the mean over seeds.
        pods_remediated: Pods remediation deleted, the mean over seeds.
        ttft_within_slo: LLM traces: the share of arrived requests meeting the time to
            first token objective over the whole run, the mean over seeds; None otherwise.
        tpot_within_slo: The same for the time per output token objective.
    """

    gpu_hours: float
    slo_attainment: float | None
    mean_gpu_utilization: float | None
    p50_latency_s: float | None
    p99_latency_s: float | None
    requests: float
    dropped_requests: float
    scale_events: int
    parameters: Mapping[str, Any] = field(default_factory=dict)
    units: Mapping[str, str] = field(default_factory=dict)
    completed_requests: float = 0.0
    in_flight_requests: float = 0.0
    slo_attainment_ci95: Interval = (None, None)
    gpu_hours_ci95: Interval = (None, None)
    gpu_hours_at_target: float | None = None
    gpu_hours_at_target_ci95: Interval = (None, None)
    seeds_reaching_target: int = 0
    gpu_hours_at_target_bound: str | None = None
    seeds_bounded_at_target: int = 0
    x_oracle_at_target: float | None = None
    x_oracle_at_target_ci95: Interval = (None, None)
    knob: str | None = None
    knob_unit: str | None = None
    curve: tuple["CurvePoint", ...] = ()
    allocated_gpu_hours: float | None = None
    gpu_hours_per_seed: tuple[float, ...] = ()
    slo_attainment_per_seed: tuple[float | None, ...] = ()
    energy_kwh: float | None = None
    energy_kwh_ci95: Interval = (None, None)
    burst_recovery_s: float | None = None
    burst_recovery_s_ci95: Interval = (None, None)
    fault_timings: tuple[FaultTiming, ...] = ()
    holds: Mapping[str, float] = field(default_factory=dict)
    pods_replaced: float = 0.0
    pods_remediated: float = 0.0
    ttft_within_slo: float | None = None
    tpot_within_slo: float | None = None


@dataclass(frozen=True, slots=True)
class CurvePoint:
    """One knob value of a policy's sweep: means over seeds and their 95 % intervals.

    Attributes:
        knob_value: The knob's value; None for a policy without a knob.
        gpu_hours: Mean GPU-hours (from the warm-up on).
        gpu_hours_ci95: Its interval, [low, high].
        slo_attainment: Mean attainment, 0 to 1; None when no request arrived.
        slo_attainment_ci95: Its interval.
    """

    knob_value: float | None
    gpu_hours: float
    gpu_hours_ci95: Interval
    slo_attainment: float | None
    slo_attainment_ci95: Interval


@dataclass(frozen=True, slots=True)
class FaultWindow:
    """When an injected fault acted, for the report's timelines.

    Attributes:
        spec: The fault as given (``thermal@300:duration=600``).
        start_s: Seconds from the run start.
        end_s: When it stopped acting, seconds; None for an instantaneous fault.
    """

    spec: str
    start_s: float
    end_s: float | None


INSTANT_FAULTS = frozenset({"ecc-dbe"})
"""Fault kinds that act at one instant (a crash and restart), drawn as a line, not a span."""


def fault_windows(faults: Sequence[SimFault], duration_s: float) -> tuple[FaultWindow, ...]:
    """When each fault acts: from its start for its duration, or to the end of the run.

    Returns:
        One window per fault; instantaneous kinds (``INSTANT_FAULTS``) have no end.
    """
    windows = []
    for f in faults:
        if f.kind in INSTANT_FAULTS:
            end: float | None = None
        elif f.duration_s is None:
            end = float(duration_s)
        else:
            end = min(f.at_s + f.duration_s, float(duration_s))
        windows.append(FaultWindow(f.spec(), f.at_s, end))
    return tuple(windows)


def histogram_quantile(edges: FloatArray, counts: FloatArray, q: float) -> float | None:
    """Quantile of a latency histogram, interpolating linearly inside the bin.

    Args:
        edges: Bin edges, seconds (``len(counts) + 1`` of them, increasing).
        counts: Observations per bin.
        q: Quantile in [0, 1].

    Returns:
        The latency in seconds, or None when the histogram is empty.
    """
    counts = np.asarray(counts, dtype=np.float64)
    total = float(counts.sum())
    if total <= 0:
        return None
    cumulative = np.cumsum(counts)
    rank = q * total
    index = int(np.searchsorted(cumulative, rank, side="left"))
    index = min(index, len(counts) - 1)
    below = float(cumulative[index] - counts[index])
    within = (rank - below) / float(counts[index]) if counts[index] > 0 else 0.0
    low, high = float(edges[index]), float(edges[index + 1])
    if not math.isfinite(high):
        return low
    return low + (high - low) * min(max(within, 0.0), 1.0)


def summarise(
    result: RunResult,
    parameters: Mapping[str, Any] | None = None,
    units: Mapping[str, str] | None = None,
) -> PolicySummary:
    """Score one run.

    Args:
        result: What the simulator returned.
        parameters: The policy's parameters, recorded alongside.
        units: Their units, by name.

    Returns:
        The policy's summary.
    """
    requests = float(result.requests)
    gpu_seconds = float(result.gpu_seconds)
    billed = result.node_gpu_seconds if result.node_gpu_seconds > 0 else gpu_seconds
    return PolicySummary(
        gpu_hours=billed / 3600.0,
        slo_attainment=float(result.within_slo) / requests if requests > 0 else None,
        mean_gpu_utilization=(
            float(result.busy_gpu_seconds) / gpu_seconds if gpu_seconds > 0 else None
        ),
        p50_latency_s=histogram_quantile(result.latency_edges_s, result.latency_counts, 0.5),
        p99_latency_s=histogram_quantile(result.latency_edges_s, result.latency_counts, 0.99),
        requests=requests,
        dropped_requests=float(result.dropped),
        scale_events=int(result.scale_events),
        parameters=dict(parameters or {}),
        units=dict(units or {}),
        completed_requests=float(result.completed_requests),
        in_flight_requests=float(result.in_flight_requests),
        allocated_gpu_hours=gpu_seconds / 3600.0,
        fault_timings=result.fault_timings,
        holds={r: float(n) for r, n in result.holds if n},
        pods_replaced=float(result.pods_replaced),
        pods_remediated=float(result.pods_remediated),
        ttft_within_slo=None
        if requests <= 0 or result.ttft_within_slo is None
        else result.ttft_within_slo / requests,
        tpot_within_slo=None
        if requests <= 0 or result.tpot_within_slo is None
        else result.tpot_within_slo / requests,
    )


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Every policy's score on one scenario, as written to ``results.json``.

    Attributes:
        trace: Trace name or path.
        seed: Seed shared by every run.
        duration_s: Simulated seconds.
        scale: Request-rate multiplier applied to the trace.
        slo_latency_s: End-to-end latency a request must meet, seconds.
        timeout_s: Queueing time after which a request is dropped, seconds.
        faults: Fault specs injected into every run.
        policies: Policy name to its summary, in the order run.
        fault_windows: When each fault acted, in the order of ``faults``.
        ceiling: Mean attainment of an unlimited fleet over the seeds; None if not run.
        ceiling_ci95: Its 95 % interval.
        target_attainment: The attainment the curves are compared at; None without sweeps.
        seeds: Seeds each figure is the mean over (``seed`` and the ones after it).
        warmup_s: Seconds at the start of each run that are not scored.
        attainment_from_warmup: Whether attainment skipped the warm-up too (it needs
            per-step counts from the simulator); GPU-hours always do.
        gpu_hours_basis: What ``gpu_hours`` counts: ``"node"``, every GPU of a Ready
            node until the node is removed (idle time until scale-down included), or
            ``"allocated"``, the GPUs the pods held.
    """

    trace: str
    seed: int
    duration_s: float
    scale: float
    slo_latency_s: float
    timeout_s: float
    faults: tuple[str, ...]
    policies: Mapping[str, PolicySummary]
    fault_windows: tuple[FaultWindow, ...] = ()
    ceiling: float | None = None
    ceiling_ci95: Interval = (None, None)
    target_attainment: float | None = None
    seeds: int = 1
    warmup_s: float = 0.0
    attainment_from_warmup: bool = True
    gpu_hours_basis: str = "allocated"

    def to_json(self) -> dict[str, Any]:
        """The JSON document: scenario keys at the top, one object per policy.

        Returns:
            A mapping ready for ``json.dumps``; missing values are null.
        """
        return {
            "trace": self.trace,
            "seed": self.seed,
            "duration_s": self.duration_s,
            "scale": self.scale,
            "slo_latency_s": self.slo_latency_s,
            "timeout_s": self.timeout_s,
            "faults": list(self.faults),
            "fault_windows": [asdict(w) for w in self.fault_windows],
            "ceiling": self.ceiling,
            "ceiling_ci95": list(self.ceiling_ci95),
            "target_attainment": self.target_attainment,
            "seeds": self.seeds,
            "warmup_s": self.warmup_s,
            "attainment_from_warmup": self.attainment_from_warmup,
            "gpu_hours_basis": self.gpu_hours_basis,
            "policies": {name: asdict(s) for name, s in self.policies.items()},
        }

    def gpu_hours_vs(self, reference: str = "oracle") -> dict[str, float | None]:
        """Each policy's GPU-hours as a multiple of ``reference``'s.

        Returns:
            Policy name to the ratio; None when the reference is absent or spent nothing.
        """
        base = self.policies.get(reference)
        if base is None or base.gpu_hours <= 0:
            return {name: None for name in self.policies}
        return {name: s.gpu_hours / base.gpu_hours for name, s in self.policies.items()}

    def at_target_vs(self, reference: str = "oracle") -> dict[str, float | None]:
        """Each policy's GPU-hours at the target attainment as a multiple of ``reference``'s.

        Returns:
            Policy name to the ratio; None where either curve never reaches the target.
        """
        base = self.policies.get(reference)
        ref = None if base is None else base.gpu_hours_at_target
        return {
            name: s.gpu_hours_at_target / ref if ref and s.gpu_hours_at_target is not None else None
            for name, s in self.policies.items()
        }


def write_results(evaluation: Evaluation, path: Path) -> None:
    """Write ``results.json``."""
    path.write_text(json.dumps(evaluation.to_json(), indent=2, allow_nan=False) + "\n")


def load_results(path: Path) -> dict[str, Any]:
    """Read a ``results.json`` back.

    Returns:
        The parsed document.
    """
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def evaluation_from(
    *,
    trace: str,
    seed: int,
    duration_s: float,
    scale: float,
    slo_latency_s: float,
    timeout_s: float,
    faults: Sequence[str],
    runs: Sequence[tuple[RunResult, Mapping[str, Any]]],
    units: Mapping[str, Mapping[str, str]] | None = None,
    fault_windows: Sequence[FaultWindow] = (),
) -> Evaluation:
    """Score every run of one scenario.

    Args:
        trace: Trace name or path.
        seed: Seed shared by the runs.
        duration_s: Simulated seconds.
        scale: Request-rate multiplier.
        slo_latency_s: SLO latency, seconds.
        timeout_s: Drop timeout, seconds.
        faults: Fault specs.
        runs: Each run's result with the parameters its policy was given.
        units: Policy name to the units of its parameters.
        fault_windows: When each fault acted.

    Returns:
        The evaluation, policies in the order of ``runs``.
    """
    return Evaluation(
        trace=trace,
        seed=seed,
        duration_s=duration_s,
        scale=scale,
        slo_latency_s=slo_latency_s,
        timeout_s=timeout_s,
        faults=tuple(faults),
        policies={r.policy: summarise(r, p, (units or {}).get(r.policy)) for r, p in runs},
        fault_windows=tuple(fault_windows),
        gpu_hours_basis="node" if all(r.node_gpu_seconds > 0 for r, _ in runs) else "allocated",
    )
