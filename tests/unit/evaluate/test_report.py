import base64
import json
import math
import re
import struct

import numpy as np
import pytest
from matplotlib.patches import Rectangle
from rich.console import Console

from gpuscale.evaluate.plots import DPI, figures, shared_scales
from gpuscale.evaluate.report import (
    COLUMNS,
    comparison_table,
    markdown_table,
    parameter_rows,
    render_html,
    table_rows,
    write_report,
)
from gpuscale.evaluate.results import FaultWindow, evaluation_from
from gpuscale.sim.outcome import RunResult, Timeline


def make_result(policy, gpu_seconds, replicas=2.0, load=1.0):
    n = 50
    t = np.arange(n) * 10.0
    p99 = np.where(np.arange(n) < 5, np.nan, load * (2.0 + np.sin(t)))
    timeline = Timeline(
        time_s=t,
        demand_rps=load * (5 + np.sin(t / 100)),
        capacity_rps=np.full(n, 6.0 * load),
        desired_replicas=np.full(n, replicas),
        ready_replicas=np.full(n, replicas),
        allocated_gpus=np.full(n, replicas),
        gpu_utilization=np.full(n, 0.5),
        p50_latency_s=p99 / 2,
        p99_latency_s=p99,
    )
    return RunResult(
        policy=policy,
        timeline=timeline,
        requests=100.0,
        within_slo=95.0,
        dropped=1.0,
        latency_edges_s=np.array([0.0, 1.0, 2.0, math.inf]),
        latency_counts=np.array([50.0, 49.0, 0.0]),
        gpu_seconds=gpu_seconds,
        busy_gpu_seconds=gpu_seconds / 4,
        scale_events=4,
    )


FAULTS = (
    FaultWindow("thermal@100:duration=60", 100.0, 160.0),
    FaultWindow("ecc-dbe@300", 300.0, None),
)


def make_evaluation(results, windows=()):
    return evaluation_from(
        trace="bursty",
        seed=1,
        duration_s=500.0,
        scale=3.0,
        slo_latency_s=2.0,
        timeout_s=20.0,
        faults=[w.spec for w in windows],
        runs=[(r, {"target": 70.0, "max_replicas": 8}) for r in results],
        units={
            r.policy: {"target": "% GPU utilisation", "max_replicas": "replicas"} for r in results
        },
        fault_windows=windows,
    )


def test_rows_show_ratio_to_oracle_and_percentages():
    results = [make_result("hpa", 7200.0), make_result("oracle", 3600.0)]
    rows = table_rows(make_evaluation(results))
    # Without a sweep: no GPU-hours at target, x oracle compares the runs' GPU-hours.
    assert rows[0][:6] == ["hpa", "-", "2.00", "2.00", "95.0%", "25.0%"]
    assert rows[1][:4] == ["oracle", "-", "1.00", "1.00"]
    # not an LLM trace (no TTFT/TPOT shares), no power, no burst
    assert rows[0][-8:] == ["100", "1", "0", "-", "-", "4", "-", "-"]


def test_markdown_table_has_header_and_one_line_per_policy():
    text = markdown_table(
        make_evaluation([make_result("kpa", 3600.0), make_result("keda", 1800.0)])
    )
    lines = [line for line in text.splitlines() if line.startswith("|")]
    assert len(lines) == 4
    assert lines[0].count("|") == len(COLUMNS) + 1
    assert lines[2].startswith("| kpa | - | - | 1.00 |")
    assert "trace bursty x3" in text


def test_rich_table_renders_every_policy():
    console = Console(width=200, record=True)
    console.print(comparison_table(make_evaluation([make_result("static", 3600.0)])))
    out = console.export_text()
    assert "static" in out
    assert "within SLO" in out


def test_report_writes_json_and_html_with_embedded_png_per_policy(tmp_path):
    results = [make_result("static", 3600.0), make_result("oracle", 1800.0)]
    json_path, html_path = write_report(make_evaluation(results), results, tmp_path / "out")
    data = json.loads(json_path.read_text())
    assert set(data["policies"]) == {"static", "oracle"}
    page = html_path.read_text()
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 3  # trade-off + one per policy
    assert all(base64.b64decode(img)[:8] == b"\x89PNG\r\n\x1a\n" for img in images)
    assert "<td>static</td>" in page
    assert "<td>target</td><td>70</td><td>% GPU utilisation</td>" in page


def png_size(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])  # IHDR width, height


@pytest.fixture(scope="module")
def unequal():
    """Two runs whose scales differ several-fold, with a span fault and an instant one."""
    results = [
        make_result("hpa", 3600.0, replicas=3.0, load=1.0),
        make_result("oracle", 1800.0, replicas=17.0, load=4.0),
    ]
    evaluation = make_evaluation(results, FAULTS)
    return evaluation, results, figures(evaluation, results)


def test_every_policy_shares_the_y_range_of_each_quantity(unequal):
    _, _, figs = unequal
    hpa, oracle = figs["hpa"].axes, figs["oracle"].axes
    assert len(hpa) == len(oracle) == 5
    for a, b in zip(hpa, oracle, strict=True):
        assert a.get_ylim() == pytest.approx(b.get_ylim())
        assert a.get_yscale() == b.get_yscale()
    assert hpa[0].get_ylim()[1] >= 4 * 6.0  # fits the larger run's capacity
    assert hpa[1].get_ylim()[1] >= 17


def test_replica_axis_ticks_are_whole_replicas(unequal):
    _, _, figs = unequal
    for name in ("hpa", "oracle"):
        replicas = figs[name].axes[1]
        figs[name].canvas.draw()
        ticks = [t for t in replicas.get_yticks() if 0 <= t <= replicas.get_ylim()[1]]
        assert len(ticks) >= 2
        assert all(float(t).is_integer() for t in ticks), ticks


def test_faults_are_drawn_on_every_timeline_panel(unequal):
    _, _, figs = unequal
    for axes in figs["oracle"].axes:
        spans = [p for p in axes.patches if isinstance(p, Rectangle)]
        xs = sorted(x for span in spans for x in (span.get_x(), span.get_x() + span.get_width()))
        assert xs == pytest.approx([100 / 60, 160 / 60])  # minutes
        lines = [ln for ln in axes.get_lines() if list(ln.get_xdata()) == [300 / 60, 300 / 60]]
        assert len(lines) == 1  # the instantaneous ecc-dbe
    labels = figs["oracle"].axes[0].get_legend_handles_labels()[1]
    assert "fault thermal@100:duration=60" in labels
    assert "fault ecc-dbe@300" in labels


def test_report_titles_each_policy_once_at_full_width_with_units(unequal):
    evaluation, results, figs = unequal
    assert all(f.get_suptitle() == "" for f in figs.values())  # the page heads each figure
    assert all(not a.get_title() for f in figs.values() for a in f.axes)
    page = render_html(evaluation, results)
    for name in ("hpa", "oracle"):
        assert page.count(f"<h3>{name}</h3>") == 1
        assert page.count(f'alt="{name}"') == 1
    assert "width: 100%" in page
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    widths = [png_size(base64.b64decode(img))[0] for img in images]
    assert min(widths) >= 12 * DPI  # about 1,600 px: the page width, not half of it
    assert "<td>max_replicas</td><td>8</td><td>replicas</td>" in page


def test_every_parameter_row_has_a_unit(unequal):
    evaluation, _, _ = unequal
    rows = parameter_rows(evaluation)
    assert rows[0] == ["hpa", "target", "70", "% GPU utilisation"]
    assert all(row[3] for row in rows)


def test_latency_scale_is_linear_when_a_latency_is_zero():
    result = make_result("static", 3600.0)
    result.timeline.p50_latency_s[10] = 0.0
    scales = shared_scales([result], 2.0)
    assert not scales.log_latency
    assert scales.latency[0] == 0.0
