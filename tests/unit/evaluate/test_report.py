import base64
import json
import math
import re

import numpy as np
from rich.console import Console

from gpuscale.evaluate.report import (
    COLUMNS,
    comparison_table,
    markdown_table,
    table_rows,
    write_report,
)
from gpuscale.evaluate.results import evaluation_from
from gpuscale.sim.outcome import RunResult, Timeline


def make_result(policy, gpu_seconds):
    n = 50
    t = np.arange(n) * 10.0
    p99 = np.where(np.arange(n) < 5, np.nan, 2.0 + np.sin(t))
    timeline = Timeline(
        time_s=t,
        demand_rps=5 + np.sin(t / 100),
        capacity_rps=np.full(n, 6.0),
        desired_replicas=np.full(n, 2.0),
        ready_replicas=np.full(n, 2.0),
        allocated_gpus=np.full(n, 2.0),
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


def make_evaluation(results):
    return evaluation_from(
        trace="bursty",
        seed=1,
        duration_s=500.0,
        scale=3.0,
        slo_latency_s=2.0,
        timeout_s=20.0,
        faults=[],
        runs=[(r, {"target": 70}) for r in results],
    )


def test_rows_show_ratio_to_oracle_and_percentages():
    results = [make_result("hpa", 7200.0), make_result("oracle", 3600.0)]
    rows = table_rows(make_evaluation(results))
    assert rows[0][:5] == ["hpa", "2.00", "2.00", "95.0%", "25.0%"]
    assert rows[1][:3] == ["oracle", "1.00", "1.00"]
    assert rows[0][-3:] == ["100", "1", "4"]


def test_markdown_table_has_header_and_one_line_per_policy():
    text = markdown_table(
        make_evaluation([make_result("kpa", 3600.0), make_result("keda", 1800.0)])
    )
    lines = [line for line in text.splitlines() if line.startswith("|")]
    assert len(lines) == 4
    assert lines[0].count("|") == len(COLUMNS) + 1
    assert lines[2].startswith("| kpa | 1.00 | - |")
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
    assert "&quot;target&quot;: 70" in page
