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
from matplotlib.ticker import FuncFormatter, MaxNLocator

from gpuscale.evaluate.results import Evaluation, FaultWindow
from gpuscale.sim.outcome import FloatArray, RunResult

logger = logging.getLogger(__name__)

DPI = 100
"""Pixels per inch of the embedded PNGs."""

POLICY_FIGSIZE = (16.0, 12.0)
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


ATTAINMENT_WINDOW_S = 60.0
"""Width of the windows the attainment panel sums requests over, seconds."""


def attainment_per_window(
    time_s: FloatArray, completed: FloatArray, within: FloatArray, window_s: float
) -> tuple[FloatArray, FloatArray]:
    """The share of requests served within the SLO in each window, percent.

    Returns:
        (window start times, percent; NaN where no request was served in the window).
    """
    if completed.size != time_s.size or within.size != time_s.size or not time_s.size:
        return np.zeros(0), np.zeros(0)
    bins = np.floor((time_s - time_s[0]) / window_s).astype(np.int64)
    served = np.bincount(bins, weights=completed)
    good = np.bincount(bins, weights=within)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(served > 0, 100.0 * good / served, np.nan)
    return time_s[0] + np.arange(served.size) * window_s, share


def policy_figure(
    result: RunResult,
    slo_latency_s: float,
    scales: Scales | None = None,
    faults: Sequence[FaultWindow] = (),
    *,
    target_attainment: float | None = None,
    llm: bool = False,
) -> Figure:
    """Five stacked timelines of one run, demand to the share within the SLO.

    Demand against ready capacity, replicas, GPU utilisation, latency, and the share
    of requests served within the SLO each minute.

    The figure has no title: the report heads it with the policy's name.

    Args:
        result: The run.
        slo_latency_s: Drawn as a line on the latency panel, seconds, unless ``llm``.
        scales: Y ranges shared with the other policies' figures (default: this run's).
        faults: Drawn on every panel: a shaded span, or a dotted line when instantaneous.
        target_attainment: Drawn on the attainment panel.
        llm: An LLM trace: a request meets the SLO on its time to first token and
            time per output token, each against its own idle times, so no single
            end-to-end latency is the SLO and none is drawn; the attainment panel
            shows the share meeting both.

    Returns:
        The figure.
    """
    scales = scales or shared_scales([result], slo_latency_s)
    timeline = result.timeline
    per_unit, xlabel = _time_unit(timeline.time_s)
    x = timeline.time_s / per_unit
    figure = Figure(figsize=POLICY_FIGSIZE, layout="constrained")
    top, replicas, util, latency, within = figure.subplots(5, 1, sharex=True)
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
    if not llm:
        latency.axhline(slo_latency_s, color="black", linestyle="--", linewidth=0.8, label="SLO")
    if scales.log_latency:
        latency.set_yscale("log")
    latency.set_ylim(*scales.latency)
    latency.set_ylabel("end-to-end latency (s)" if llm else "latency (s)")
    start, share = attainment_per_window(
        timeline.time_s, timeline.completed, timeline.within_slo, ATTAINMENT_WINDOW_S
    )
    objective = "TTFT and TPOT" if llm else "latency"
    within.plot(start / per_unit, share, linewidth=0.8, label=f"{objective} within SLO")
    if target_attainment is not None:
        within.axhline(
            target_attainment * 100.0, color="black", linestyle="--", linewidth=0.8, label="target"
        )
    within.set_ylim(0, 105)
    within.set_ylabel("within SLO (%/min)")
    within.set_xlabel(xlabel)
    if x.size:
        within.set_xlim(float(x[0]), float(x[-1]))
    for axes in (top, replicas, util, latency, within):
        _draw_faults(axes, faults, per_unit, label=axes is top)
        axes.grid(visible=True, alpha=0.3)
        axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    return figure


SHORTFALL_FLOOR = 1e-4
"""The smallest shortfall (1 - attainment) the cost plot draws: 99.99 % within SLO."""


def _end(end: float | None, mean: float) -> float:
    """An interval's end, or the mean where the end is unknown (one seed)."""
    return mean if end is None else end


def _shortfall(attainment: FloatArray) -> FloatArray:
    return np.maximum(1.0 - attainment, SHORTFALL_FLOOR)


def tradeoff_figure(evaluation: Evaluation) -> Figure:
    """GPU-hours against SLO attainment: each policy's sweep as a curve, on one plot.

    The attainment axis is the shortfall from 100 % on a log scale, upside down
    (90 %, 99 %, 99.9 % are equally far apart, higher is better), so the band near
    the target, where policies are compared, is not squeezed into the plot's top
    edge. Each curve joins the means over seeds of one policy's knob values in order
    of cost, with the 95 % intervals as error bars; the fair parameters' point is a
    larger marker of the same colour. Policies are named in the legend, outside the
    plot, so no label covers another. The target attainment and the ceiling (an
    unlimited fleet) are horizontal lines.

    Returns:
        The figure.
    """
    figure = Figure(figsize=TRADEOFF_FIGSIZE, layout="constrained")
    axes = figure.subplots()
    lowest = 1.0
    for name, summary in evaluation.policies.items():
        points = sorted(
            (c for c in summary.curve if c.slo_attainment is not None), key=lambda c: c.gpu_hours
        )
        color = None
        if len(points) > 1:
            x = np.array([c.gpu_hours for c in points])
            y = np.array([c.slo_attainment for c in points], dtype=np.float64)
            lows = np.array(
                [_end(c.slo_attainment_ci95[0], a) for c, a in zip(points, y, strict=True)]
            )
            highs = np.array(
                [_end(c.slo_attainment_ci95[1], a) for c, a in zip(points, y, strict=True)]
            )
            mid = _shortfall(y)
            # the interval of a shortfall: the attainment's ends, swapped
            yerr = np.vstack([mid - _shortfall(highs), _shortfall(lows) - mid]).clip(min=0)
            drawn = axes.errorbar(
                x,
                mid,
                xerr=_half_widths([c.gpu_hours_ci95 for c in points]),
                yerr=yerr,
                marker="o",
                markersize=3,
                capsize=2,
                label=name,
            )
            color = drawn.lines[0].get_color()
            lowest = min(lowest, float(y.min()))
        attainment = summary.slo_attainment
        if attainment is None:
            continue
        lowest = min(lowest, attainment)
        axes.scatter(
            summary.gpu_hours,
            _shortfall(np.array([attainment]))[0],
            s=60,
            zorder=3,
            color=color,
            label=None if color is not None else name,
        )
    if evaluation.target_attainment is not None:
        axes.axhline(
            1.0 - evaluation.target_attainment, color="black", linestyle="--", label="target"
        )
    if evaluation.ceiling is not None:
        axes.axhline(
            _shortfall(np.array([evaluation.ceiling]))[0],
            color="grey",
            linestyle=":",
            label="ceiling",
        )
    axes.set_yscale("log")
    axes.set_ylim(min(max(1.0 - lowest, 0.1) * 1.5, 1.0), SHORTFALL_FLOOR / 1.5)  # upside down
    axes.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{100.0 * (1.0 - v):g}"))
    axes.set_xlabel("GPU-hours")
    axes.set_ylabel("within SLO (%), log of the shortfall")
    axes.grid(visible=True, alpha=0.3, which="both")
    if axes.get_legend_handles_labels()[0]:
        axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
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
    llm = is_llm(evaluation)
    for result in results:
        out[result.policy] = policy_figure(
            result,
            evaluation.slo_latency_s,
            scales,
            evaluation.fault_windows,
            target_attainment=evaluation.target_attainment,
            llm=llm,
        )
    return out


def is_llm(evaluation: Evaluation) -> bool:
    """Whether the requests were judged on TTFT and TPOT (an LLM trace)."""
    return any(s.ttft_within_slo is not None for s in evaluation.policies.values())


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
