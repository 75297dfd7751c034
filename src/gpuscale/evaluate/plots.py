"""Figures for the HTML report, rendered off-screen and embedded as base64 PNG.

A table says which policy won; the timelines say why: a baseline that lags
the demand, overshoots, flaps or drops requests shows it at a glance. To make
that glance honest, every policy's figure uses the same y range for the same
quantity (``shared_scales``), replica axes tick at whole replicas, and each
injected fault is drawn where it acted on every panel. The figures are drawn on
matplotlib's ``Figure`` directly (no pyplot, no GUI backend, no global state),
so rendering is safe in workers and tests.
"""

import base64
import io
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from gpuscale.evaluate.results import Evaluation, FaultWindow
from gpuscale.sim.outcome import FloatArray, RunResult

logger = logging.getLogger(__name__)

DPI = 100
"""Pixels per inch of the embedded PNGs."""

POLICY_FIGSIZE = (16.0, 10.0)
"""Inches: 1,600 px wide at ``DPI``, the report's full width."""

TRADEOFF_FIGSIZE = (16.0, 5.0)
"""Inches, the same width as the timelines."""

FAULT_COLOR = "tab:red"
_HEADROOM = 1.05


@dataclass(frozen=True, slots=True)
class Scales:
    """Y ranges shared by every policy's timelines, one per quantity.

    Attributes:
        rate: Requests per second panel, (low, high).
        replicas: Replicas panel, (low, high).
        latency: Latency panel, seconds, (low, high).
        log_latency: Whether the latency panel is logarithmic.
    """

    rate: tuple[float, float]
    replicas: tuple[float, float]
    latency: tuple[float, float]
    log_latency: bool


def _finite_max(arrays: Sequence[FloatArray], default: float) -> float:
    values = [float(np.nanmax(a)) for a in arrays if a.size and np.isfinite(a).any()]
    return max(values, default=default)


def shared_scales(results: Sequence[RunResult], slo_latency_s: float) -> Scales:
    """The y ranges that fit every run, so the same height means the same value.

    Returns:
        The ranges; latency is logarithmic when every latency shown is positive.
    """
    timelines = [r.timeline for r in results]
    rate = _finite_max([a for t in timelines for a in (t.demand_rps, t.capacity_rps)], 1.0)
    replicas = _finite_max(
        [a for t in timelines for a in (t.desired_replicas, t.ready_replicas, t.allocated_gpus)],
        1.0,
    )
    latencies = np.concatenate(
        [np.concatenate([t.p50_latency_s, t.p99_latency_s]) for t in timelines] or [np.empty(0)]
    )
    finite = latencies[np.isfinite(latencies)]
    high = max(float(finite.max()) if finite.size else 0.0, slo_latency_s) * _HEADROOM
    positive = finite.size > 0 and float(finite.min()) > 0
    if positive:
        low = min(float(finite.min()), slo_latency_s) / _HEADROOM
        latency = (low, high)
    else:
        latency = (0.0, high)
    return Scales(
        rate=(0.0, rate * _HEADROOM),
        replicas=(0.0, max(1.0, np.ceil(replicas * _HEADROOM))),
        latency=latency,
        log_latency=positive,
    )


def _to_base64_png(figure: Figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _time_unit(time_s: FloatArray) -> tuple[float, str]:
    """Seconds per x unit and the axis label: hours beyond four hours, else minutes."""
    span = float(time_s[-1] - time_s[0]) if time_s.size else 0.0
    if span > 4 * 3600:
        return 3600.0, "time (h)"
    return 60.0, "time (min)"


def _draw_faults(axes: Axes, faults: Sequence[FaultWindow], per_unit: float, label: bool) -> None:
    for window in faults:
        name = f"fault {window.spec}" if label else None
        start = window.start_s / per_unit
        if window.end_s is None:
            axes.axvline(start, color=FAULT_COLOR, linestyle=":", linewidth=1.2, label=name)
        else:
            end = window.end_s / per_unit
            axes.axvspan(start, end, color=FAULT_COLOR, alpha=0.12, linewidth=0, label=name)


def policy_figure(
    result: RunResult,
    slo_latency_s: float,
    scales: Scales | None = None,
    faults: Sequence[FaultWindow] = (),
) -> Figure:
    """Four stacked timelines of one run: demand vs capacity, replicas, utilisation, latency.

    The figure has no title: the report heads it with the policy's name.

    Args:
        result: The run.
        slo_latency_s: Drawn as a line on the latency panel, seconds.
        scales: Y ranges shared with the other policies' figures (default: this run's).
        faults: Drawn on every panel: a shaded span, or a dotted line when instantaneous.

    Returns:
        The figure.
    """
    scales = scales or shared_scales([result], slo_latency_s)
    timeline = result.timeline
    per_unit, xlabel = _time_unit(timeline.time_s)
    x = timeline.time_s / per_unit
    figure = Figure(figsize=POLICY_FIGSIZE, layout="constrained")
    top, replicas, util, latency = figure.subplots(4, 1, sharex=True)
    top.plot(x, timeline.demand_rps, label="demand", linewidth=0.8)
    top.plot(x, timeline.capacity_rps, label="ready capacity", linewidth=0.8)
    top.set_ylabel("requests/s")
    top.set_ylim(*scales.rate)
    replicas.plot(x, timeline.desired_replicas, label="desired", linewidth=0.8)
    replicas.plot(x, timeline.ready_replicas, label="ready", linewidth=0.8)
    replicas.plot(x, timeline.allocated_gpus, label="allocated GPUs", linewidth=0.8)
    replicas.set_ylabel("replicas")
    replicas.set_ylim(*scales.replicas)
    replicas.yaxis.set_major_locator(MaxNLocator(integer=True))
    util.plot(x, timeline.gpu_utilization * 100.0, linewidth=0.8, label="GPU utilisation")
    util.set_ylim(0, 105)
    util.set_ylabel("GPU util (%)")
    latency.plot(x, timeline.p50_latency_s, label="p50", linewidth=0.8)
    latency.plot(x, timeline.p99_latency_s, label="p99", linewidth=0.8)
    latency.axhline(slo_latency_s, color="black", linestyle="--", linewidth=0.8, label="SLO")
    if scales.log_latency:
        latency.set_yscale("log")
    latency.set_ylim(*scales.latency)
    latency.set_ylabel("latency (s)")
    latency.set_xlabel(xlabel)
    if x.size:
        latency.set_xlim(float(x[0]), float(x[-1]))
    for axes in (top, replicas, util, latency):
        _draw_faults(axes, faults, per_unit, label=axes is top)
        axes.grid(visible=True, alpha=0.3)
        axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    return figure


def tradeoff_figure(evaluation: Evaluation) -> Figure:
    """GPU-hours against SLO attainment: each policy's sweep as a curve, on one plot.

    Each curve joins the means over seeds of one policy's knob values in order of
    cost, with the 95 % intervals as error bars; the fair parameters' point is a
    larger marker. The
    target attainment and the ceiling (an unlimited fleet) are horizontal lines.

    Returns:
        The figure.
    """
    figure = Figure(figsize=TRADEOFF_FIGSIZE, layout="constrained")
    axes = figure.subplots()
    for name, summary in evaluation.policies.items():
        points = sorted(
            (c for c in summary.curve if c.slo_attainment is not None), key=lambda c: c.gpu_hours
        )
        color = None
        if len(points) > 1:
            x = np.array([c.gpu_hours for c in points])
            y = np.array([c.slo_attainment for c in points], dtype=np.float64) * 100.0
            drawn = axes.errorbar(
                x,
                y,
                xerr=_half_widths([c.gpu_hours_ci95 for c in points]),
                yerr=_half_widths([c.slo_attainment_ci95 for c in points]) * 100.0,
                marker="o",
                markersize=3,
                capsize=2,
                label=name,
            )
            color = drawn.lines[0].get_color()
        attainment = summary.slo_attainment
        if attainment is None:
            continue
        axes.scatter(summary.gpu_hours, attainment * 100.0, s=60, zorder=3, color=color)
        axes.annotate(name, (summary.gpu_hours, attainment * 100.0), fontsize="small")
    if evaluation.target_attainment is not None:
        axes.axhline(
            evaluation.target_attainment * 100.0, color="black", linestyle="--", label="target"
        )
    if evaluation.ceiling is not None:
        axes.axhline(evaluation.ceiling * 100.0, color="grey", linestyle=":", label="ceiling")
    axes.set_xlabel("GPU-hours")
    axes.set_ylabel("within SLO (%)")
    axes.set_ylim(top=101.0)  # a 95 % interval may reach past 100 % with few seeds
    axes.grid(visible=True, alpha=0.3)
    if axes.get_legend_handles_labels()[0]:
        axes.legend(loc="lower right", fontsize="small")
    return figure


def _half_widths(intervals: Sequence[tuple[float | None, float | None]]) -> FloatArray:
    """Half-widths of intervals for error bars (0 where an end is unknown)."""
    return np.array(
        [0.0 if lo is None or hi is None else (hi - lo) / 2.0 for lo, hi in intervals],
        dtype=np.float64,
    )


TRADEOFF_TITLE = "GPU-hours vs SLO attainment"


def figures(evaluation: Evaluation, results: Sequence[RunResult]) -> dict[str, Figure]:
    """Every figure of the report, the policies' on shared scales.

    Returns:
        Title to figure: the trade-off first, then one per policy, titled by its name.
    """
    scales = shared_scales(results, evaluation.slo_latency_s)
    out = {TRADEOFF_TITLE: tradeoff_figure(evaluation)}
    for result in results:
        out[result.policy] = policy_figure(
            result, evaluation.slo_latency_s, scales, evaluation.fault_windows
        )
    return out


def all_figures(evaluation: Evaluation, results: Sequence[RunResult]) -> dict[str, str]:
    """Every figure of the report as base64 PNG (see ``figures``).

    Returns:
        Title to base64 PNG.
    """
    rendered = {}
    for title, figure in figures(evaluation, results).items():
        rendered[title] = _to_base64_png(figure)
        logger.debug("rendered figure %s", title)
    return rendered
