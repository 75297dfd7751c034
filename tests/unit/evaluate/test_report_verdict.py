"""The report's verdict, its footnotes for '-' cells, and the plots' scales."""

import html

import numpy as np
import pytest

from gpuscale.evaluate.plots import (
    SHORTFALL_FLOOR,
    attainment_per_window,
    policy_figure,
    tradeoff_figure,
)
from gpuscale.evaluate.report import dash_notes, render_html, table_rows, verdict
from gpuscale.evaluate.results import CurvePoint, Evaluation, PolicySummary
from gpuscale.sim.outcome import RunResult, Timeline


def summary(at_target, ci=(None, None), x=None, x_ci=(None, None), bound=None, ttft=None):
    return PolicySummary(
        gpu_hours=at_target or 10.0,
        slo_attainment=0.995,
        mean_gpu_utilization=0.5,
        p50_latency_s=1.0,
        p99_latency_s=2.0,
        requests=1000.0,
        dropped_requests=0.0,
        scale_events=3,
        slo_attainment_ci95=(0.99, 1.0),
        gpu_hours_at_target=at_target,
        gpu_hours_at_target_ci95=ci,
        gpu_hours_at_target_bound=bound,
        x_oracle_at_target=x,
        x_oracle_at_target_ci95=x_ci,
        ttft_within_slo=ttft,
        tpot_within_slo=ttft,
        curve=(
            CurvePoint(1.0, 8.0, (7.5, 8.5), 0.9, (0.88, 0.92)),
            CurvePoint(2.0, 12.0, (11.5, 12.5), 0.999, (0.998, 1.0)),
        ),
    )


def evaluation(policies, target=0.99, seeds=10):
    return Evaluation(
        trace="azure-conv",
        seed=0,
        duration_s=3600.0,
        scale=100.0,
        slo_latency_s=10.0,
        timeout_s=60.0,
        faults=(),
        policies=policies,
        target_attainment=target,
        seeds=seeds,
        ceiling=1.0,
        ceiling_ci95=(1.0, 1.0),
    )


def test_ours_cheapest_names_the_saving_against_the_cheapest_baseline():
    e = evaluation(
        {
            "static": summary(120.0),
            "hpa": summary(200.0),
            "oracle": summary(90.0, x=1.0),
            "hybrid": summary(100.0, (96.0, 104.0), 1.11, (1.07, 1.16)),
        }
    )
    text = verdict(e)
    assert text.startswith("At 99 % of requests within SLO (10 seeds), hybrid is the cheapest")
    assert "100.0 GPU-h (95 % CI 96.0 to 104.0)" in text
    assert "1.11x the oracle (1.07 to 1.16)" in text
    assert "17 % under the cheapest baseline, static (120.0 GPU-h)" in text


def test_a_baseline_cheapest_says_how_much_more_ours_costs():
    e = evaluation({"static": summary(100.0), "hybrid": summary(105.0), "oracle": summary(90.0)})
    text = verdict(e)
    assert "static is the cheapest policy: 100.0 GPU-h" in text
    assert "gpuscale's best, hybrid, costs 5 % more (105.0 GPU-h)" in text


def test_bounds_and_missing_targets_are_said_not_hidden():
    e = evaluation({"kpa": summary(100.0, bound="upper"), "hpa": summary(None)})
    assert "kpa is the cheapest policy: at most 100.0 GPU-h" in verdict(e)
    assert "no policy reaches the target" in verdict(evaluation({"hpa": summary(None)}))
    assert "No target attainment was set (1 seed)" in verdict(
        evaluation({"hpa": summary(None)}, target=None, seeds=1)
    )


def test_every_dash_in_the_table_is_explained_once_per_column():
    e = evaluation({"static": summary(100.0), "oracle": summary(90.0, x=1.0)})
    rows = table_rows(e)
    notes = dash_notes(rows)
    assert any(n.startswith("burst recovery s: - means no burst") for n in notes)
    assert any(n.startswith("TTFT ok: - means not an LLM trace") for n in notes)
    assert any(n.startswith("kWh: - means") for n in notes)
    assert len(notes) == len(set(notes))
    llm = evaluation({"static": summary(100.0, ttft=0.97)})
    assert not any(n.startswith("TTFT ok") for n in dash_notes(table_rows(llm)))
    assert "97.0%" in table_rows(llm)[0]


def test_attainment_interval_is_printed_with_both_ends():
    row = table_rows(evaluation({"static": summary(100.0)}))[0]
    assert "99.5% [99.0, 100.0]" in row


def test_attainment_per_window_sums_requests_before_dividing():
    t = np.arange(120.0)
    completed = np.where(t < 60, 1.0, 0.0)
    completed[60:] = 2.0
    within = completed.copy()
    within[:30] = 0.0  # half the first minute missed
    start, share = attainment_per_window(t, completed, within, 60.0)
    assert start.tolist() == [0.0, 60.0]
    assert share.tolist() == pytest.approx([50.0, 100.0])


def test_cost_plot_is_log_shortfall_upside_down_with_labels_in_the_legend():
    e = evaluation({"static": summary(100.0), "hybrid": summary(105.0)})
    fig = tradeoff_figure(e)
    axes = fig.axes[0]
    assert axes.get_yscale() == "log"
    low, high = axes.get_ylim()
    assert low > high  # upside down: higher attainment is up
    assert high == pytest.approx(SHORTFALL_FLOOR / 1.5)
    assert not axes.texts  # no in-plot labels to overlap
    labels = axes.get_legend_handles_labels()[1]
    assert {"static", "hybrid", "target"} <= set(labels)


def _run(policy: str) -> RunResult:
    n = 20
    t = np.arange(n) * 10.0
    timeline = Timeline(
        time_s=t,
        demand_rps=np.full(n, 5.0),
        capacity_rps=np.full(n, 6.0),
        desired_replicas=np.full(n, 2.0),
        ready_replicas=np.full(n, 2.0),
        allocated_gpus=np.full(n, 2.0),
        gpu_utilization=np.full(n, 0.5),
        p50_latency_s=np.full(n, 1.0),
        p99_latency_s=np.full(n, 3.0),
        completed=np.full(n, 50.0),
        within_slo=np.full(n, 49.0),
    )
    return RunResult(
        policy=policy,
        timeline=timeline,
        requests=1000.0,
        within_slo=980.0,
        dropped=0.0,
        latency_edges_s=np.array([0.0, 1.0, np.inf]),
        latency_counts=np.array([500.0, 500.0]),
        gpu_seconds=3600.0,
        busy_gpu_seconds=1800.0,
        scale_events=1,
    )


def test_llm_runs_draw_no_end_to_end_slo_line_and_show_attainment_against_the_target():
    run = _run("hybrid")
    plain = policy_figure(run, 2.0, target_attainment=0.99)
    llm = policy_figure(run, 2.0, target_attainment=0.99, llm=True)
    assert "SLO" in plain.axes[3].get_legend_handles_labels()[1]
    assert "SLO" not in llm.axes[3].get_legend_handles_labels()[1]
    within = llm.axes[4]
    assert "TTFT and TPOT within SLO" in within.get_legend_handles_labels()[1]
    target = [ln for ln in within.get_lines() if list(ln.get_ydata()) == [99.0, 99.0]]
    assert len(target) == 1


def test_html_has_a_section_per_part_and_the_verdict_first():
    e = evaluation({"static": summary(100.0), "hybrid": summary(105.0, ttft=0.98)})
    page = render_html(e, [_run("static"), _run("hybrid")])
    ids = ["verdict", "comparison", "tradeoff", "parameters", "timelines"]
    positions = [page.index(f'<section id="{i}">') for i in ids]
    assert positions == sorted(positions)
    assert html.escape(verdict(e)) in page
    assert "LLM trace" in page
