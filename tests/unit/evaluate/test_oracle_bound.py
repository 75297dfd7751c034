"""The oracle is the lower bound: no baseline buys the same service with fewer GPU-hours."""

import pytest

from gpuscale.evaluate.runner import EvaluationRequest, run_evaluation


@pytest.mark.parametrize(
    ("trace", "scale", "duration_s", "faults"),
    [
        ("bursty", 4.0, 1800, ()),
        ("flash-crowd", 4.0, 1800, ()),
        ("diurnal", 8.0, 3600, ()),
        ("ramp", 3.0, 1800, ("thermal@300:duration=600",)),
        ("azure-conv", 30.0, 1200, ()),
    ],
)
def test_no_policy_beats_the_oracle_on_gpu_hours_at_equal_or_better_slo(
    trace, scale, duration_s, faults
):
    prepared = EvaluationRequest(
        trace, scale=scale, duration_s=duration_s, seed=3, faults=faults
    ).prepare()
    evaluation, _ = run_evaluation(prepared, jobs=1)
    oracle = evaluation.policies["oracle"]
    assert oracle.slo_attainment is not None
    assert oracle.gpu_hours > 0
    for name, summary in evaluation.policies.items():
        if name == "oracle":
            continue
        assert summary.slo_attainment is not None
        cheaper = summary.gpu_hours < oracle.gpu_hours
        as_good = summary.slo_attainment >= oracle.slo_attainment
        assert not (cheaper and as_good), (
            f"{name} used {summary.gpu_hours:.3f} GPU-h at {summary.slo_attainment:.4f} SLO; "
            f"oracle {oracle.gpu_hours:.3f} GPU-h at {oracle.slo_attainment:.4f}"
        )
