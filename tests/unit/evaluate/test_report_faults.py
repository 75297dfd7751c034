"""Each injected fault's time to detect and to mitigate reaches results.json and the report."""

import json

from gpuscale.evaluate.report import fault_rows, fault_table, markdown_table, render_html
from gpuscale.evaluate.results import Evaluation, PolicySummary
from gpuscale.sim.outcome import FaultTiming

LOST = FaultTiming("gpu-lost@600", "gpu-lost", 600.0, "inference-00002", "GPU-1", 15.0,
                   "GpuFellOffBus", 75.0)  # fmt: skip
HOT = FaultTiming("thermal@300", "thermal", 300.0, "inference-00001", "GPU-2", None, None, None)


def _evaluation(timings) -> Evaluation:
    summary = PolicySummary(
        gpu_hours=1.0,
        slo_attainment=0.99,
        mean_gpu_utilization=0.5,
        p50_latency_s=1.0,
        p99_latency_s=2.0,
        requests=100.0,
        dropped_requests=0.0,
        scale_events=1,
        fault_timings=timings,
    )
    return Evaluation("flat", 0, 1200.0, 1.0, 5.0, 60.0, ("gpu-lost@600",), {"hpa": summary})


def test_fault_rows_show_the_alert_and_both_times_or_a_dash():
    rows = fault_rows(_evaluation((LOST, HOT)))
    assert rows == [
        ["hpa", "gpu-lost@600", "inference-00002", "GpuFellOffBus", "15", "75"],
        ["hpa", "thermal@300", "inference-00001", "-", "-", "-"],
    ]
    assert "| hpa | gpu-lost@600 | inference-00002 | GpuFellOffBus | 15 | 75 |" in markdown_table(
        _evaluation((LOST,))
    )
    assert "GpuFellOffBus" in render_html(_evaluation((LOST,)), [])


def test_results_json_carries_the_timings_and_no_table_without_them():
    doc = json.loads(json.dumps(_evaluation((LOST,)).to_json()))
    (timing,) = doc["policies"]["hpa"]["fault_timings"]
    assert (timing["detect_s"], timing["mitigate_s"], timing["alert"]) == (
        15.0,
        75.0,
        "GpuFellOffBus",
    )
    assert fault_table(_evaluation(())) is None
    assert "Injected faults" not in render_html(_evaluation(()), [])


def test_evaluate_alerts_switches_the_catalogue_on_in_every_run():
    from gpuscale.evaluate.runner import EvaluationRequest

    on = EvaluationRequest("ramp", duration_s=900, faults=("gpu-lost@300",), alerts=True)
    off = EvaluationRequest("ramp", duration_s=900, faults=("gpu-lost@300",))
    assert on.prepare().scenario.alerting is True
    assert off.prepare().scenario.alerting is False
