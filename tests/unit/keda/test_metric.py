"""The metric KEDA's HPA reads lands on the decision: exactly with the tolerance at 0, and
wherever the default tolerance of 0.1 lets the HPA move at all."""

from hypothesis import given
from hypothesis import strategies as st

from gpuscale.keda.scaler import QUANTUM, TARGET_SIZE, metric_value
from tests.support.keda import DEFAULT_TOLERANCE, hpa_replicas

REPLICAS = range(1, 201)


def test_with_no_tolerance_the_hpa_computes_every_decision_exactly():
    for current in REPLICAS:
        for desired in range(1, 201):
            got = hpa_replicas(metric_value(desired, current), TARGET_SIZE, current, 0.0)
            assert got == desired, (current, desired)


@given(current=st.integers(1, 5000), desired=st.integers(1, 5000))
def test_with_the_default_tolerance_the_hpa_moves_to_the_decision_or_stays(current, desired):
    got = hpa_replicas(metric_value(desired, current), TARGET_SIZE, current, DEFAULT_TOLERANCE)
    assert got in (desired, current)
    # Kubernetes moves only when the ratio leaves [0.9, 1.1]; a scale-in sends the lowest
    # value with the same ceiling, so it moves whenever (desired - 1 + QUANTUM) / current < 0.9.
    if desired > current * (1 + DEFAULT_TOLERANCE) or (
        desired < current and (desired - 1 + QUANTUM) / current < 1 - DEFAULT_TOLERANCE
    ):
        assert got == desired


def test_a_scale_in_sends_the_lowest_value_of_the_same_ceiling():
    assert metric_value(9, 10) == 8.001  # ratio 0.8001: outside the default band
    assert hpa_replicas(metric_value(9, 10), TARGET_SIZE, 10, DEFAULT_TOLERANCE) == 9
    assert hpa_replicas(9.0, TARGET_SIZE, 10, DEFAULT_TOLERANCE) == 10  # the naive value stays
    assert metric_value(4, 4) == 4.0
    assert metric_value(7, 3) == 7.0
    assert metric_value(0, 3) == 0.0  # KEDA's activity (IsActive false) takes it to zero
