"""Figures for the HTML report, rendered off-screen and embedded as base64 PNG.

A table says which policy won; the timelines say why: a baseline that lags
the demand, overshoots, flaps or drops requests shows it at a glance. The
figures are drawn on matplotlib's ``Figure`` directly (no pyplot, no GUI
backend, no global state), so rendering is safe in workers and tests.
"""

import base64
import io
import logging
from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from gpuscale.evaluate.results import Evaluation
from gpuscale.sim.outcome import FloatArray, RunResult

logger = logging.getLogger(__name__)

_DPI = 80


def _to_base64_png(figure: Figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=_DPI, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _time_axis(time_s: FloatArray) -> tuple[FloatArray, str]:
    span = float(time_s[-1] - time_s[0]) if time_s.size else 0.0
    if span > 4 * 3600:
        return time_s / 3600.0, "time (h)"
    return time_s / 60.0, "time (min)"


def _latency_panel(axes: Axes, x: FloatArray, result: RunResult, slo_latency_s: float) -> None:
    timeline = result.timeline
    axes.plot(x, timeline.p50_latency_s, label="p50", linewidth=0.8)
    axes.plot(x, timeline.p99_latency_s, label="p99", linewidth=0.8)
    axes.axhline(slo_latency_s, color="black", linestyle="--", linewidth=0.8, label="SLO")
    finite = timeline.p99_latency_s[np.isfinite(timeline.p99_latency_s)]
    if finite.size and float(finite.min()) > 0:
        axes.set_yscale("log")
    axes.set_ylabel("latency (s)")


def policy_figure(result: RunResult, slo_latency_s: float) -> str:
    """Four stacked timelines of one run: demand vs capacity, replicas, utilisation, latency.

    Args:
        result: The run.
        slo_latency_s: Drawn as a line on the latency panel, seconds.

    Returns:
        The figure as base64-encoded PNG.
    """
    timeline = result.timeline
    x, xlabel = _time_axis(timeline.time_s)
    figure = Figure(figsize=(10, 8))
    top, replicas, util, latency = figure.subplots(4, 1, sharex=True)
    top.plot(x, timeline.demand_rps, label="demand", linewidth=0.8)
    top.plot(x, timeline.capacity_rps, label="ready capacity", linewidth=0.8)
    top.set_ylabel("requests/s")
    replicas.plot(x, timeline.desired_replicas, label="desired", linewidth=0.8)
    replicas.plot(x, timeline.ready_replicas, label="ready", linewidth=0.8)
    replicas.plot(x, timeline.allocated_gpus, label="allocated GPUs", linewidth=0.8)
    replicas.set_ylabel("replicas")
    util.plot(x, timeline.gpu_utilization * 100.0, linewidth=0.8, label="GPU utilisation")
    util.set_ylim(0, 105)
    util.set_ylabel("GPU util (%)")
    _latency_panel(latency, x, result, slo_latency_s)
    latency.set_xlabel(xlabel)
    for axes in (top, replicas, util, latency):
        axes.grid(visible=True, alpha=0.3)
        axes.legend(loc="upper right", fontsize="small")
    figure.suptitle(result.policy)
    return _to_base64_png(figure)


def tradeoff_figure(evaluation: Evaluation) -> str:
    """GPU-hours against SLO attainment, one point per policy.

    Returns:
        The figure as base64-encoded PNG.
    """
    figure = Figure(figsize=(6, 4))
    axes = figure.subplots()
    for name, summary in evaluation.policies.items():
        attainment = summary.slo_attainment
        if attainment is None:
            continue
        axes.scatter(summary.gpu_hours, attainment * 100.0)
        axes.annotate(name, (summary.gpu_hours, attainment * 100.0), fontsize="small")
    axes.set_xlabel("GPU-hours")
    axes.set_ylabel("within SLO (%)")
    axes.grid(visible=True, alpha=0.3)
    return _to_base64_png(figure)


def all_figures(evaluation: Evaluation, results: Sequence[RunResult]) -> dict[str, str]:
    """Every figure of the report.

    Returns:
        Title to base64 PNG: the trade-off first, then one per policy.
    """
    figures = {"GPU-hours vs SLO attainment": tradeoff_figure(evaluation)}
    for result in results:
        figures[result.policy] = policy_figure(result, evaluation.slo_latency_s)
        logger.debug("rendered figure for %s", result.policy)
    return figures
