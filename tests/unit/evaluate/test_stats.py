import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuscale.evaluate.knobs import Knob
from gpuscale.evaluate.stats import cost_at_target, mean_ci, proportion_ci


def test_interval_is_student_t_on_the_standard_error():
    estimate = mean_ci([1.0, 2.0, 3.0])
    half = 4.302652729911275 / math.sqrt(3.0)  # t(0.975, 2) x sd 1 / sqrt(3)
    assert estimate.mean == pytest.approx(2.0)
    assert estimate.low == pytest.approx(2.0 - half)
    assert estimate.high == pytest.approx(2.0 + half)
    assert estimate.interval() == [estimate.low, estimate.high]


def test_one_value_has_no_interval_and_equal_values_a_point_interval():
    assert mean_ci([0.7]).interval() == [None, None]
    assert mean_ci([0.5, 0.5, 0.5]).interval() == [0.5, 0.5]
    with pytest.raises(ValueError, match="at least one"):
        mean_ci([])


def test_cost_at_target_interpolates_between_the_points_around_it():
    costs = [10.0, 20.0, 30.0]
    attainments = [0.90, 0.98, 1.00]
    assert cost_at_target(costs, attainments, 0.99) == pytest.approx(25.0)
    assert cost_at_target(list(reversed(costs)), list(reversed(attainments)), 0.99) == 25.0


def test_a_curve_that_never_reaches_the_target_has_no_cost():
    assert cost_at_target([1.0, 2.0], [0.5, 0.9], 0.99) is None


def test_the_cheapest_point_counts_when_it_already_reaches_the_target():
    assert cost_at_target([5.0, 8.0], [0.995, 0.999], 0.99) == 5.0


def test_a_dip_at_higher_cost_does_not_move_the_answer():
    # 15 GPU-h reaches 0.99 by interpolation; the worse point at 25 GPU-h is ignored.
    assert cost_at_target([10.0, 20.0, 25.0], [0.98, 1.0, 0.95], 0.99) == pytest.approx(15.0)


@given(
    st.lists(st.tuples(st.floats(0.1, 100.0), st.floats(0.0, 1.0)), min_size=1, max_size=12),
    st.floats(0.5, 0.999),
)
def test_cost_at_target_lies_on_the_curve_and_rises_with_the_target(points, target):
    costs = [c for c, _ in points]
    attainments = [a for _, a in points]
    got = cost_at_target(costs, attainments, target)
    if max(attainments) < target:
        assert got is None
        return
    assert got is not None
    assert min(costs) <= got <= max(costs)
    lower = cost_at_target(costs, attainments, target - 0.1)
    assert lower is not None
    assert lower <= got + 1e-9


def test_knob_values_spread_around_and_include_the_fair_value():
    relative = Knob("threshold", "requests", 0.5, 1.5)
    assert relative.values(2.0, 3) == (1.0, 2.0, 3.0)
    assert relative.values(2.0, 0) == (2.0,)
    absolute = Knob("target", "%", 30.0, 90.0, relative=False)
    assert absolute.values(70.0, 4) == (30.0, 50.0, 70.0, 90.0)
    whole = Knob("replicas", "replicas", 0.5, 1.5, integer=True)
    assert whole.values(1.0, 8) == (1, 2)  # rounded, at least 1, repeats dropped
    odd = 0.7 * 8  # 5.6000000000000005: the fair value comes back exactly, not rounded
    assert odd in Knob("threshold", "requests", 0.5, 1.5).values(odd, 3)
    assert len(Knob("threshold", "requests", 0.5, 1.5).values(odd, 3)) == 3
    with pytest.raises(ValueError, match="low <= high"):
        Knob("x", "u", 2.0, 1.0)


def test_a_proportion_interval_stays_within_zero_and_one_where_student_t_does_not():
    seeds = [0.9995, 0.9896]  # two seeds near the top: the t interval passes 100 %
    t = mean_ci(seeds)
    assert t.high is not None
    assert t.high > 1.0
    p = proportion_ci(seeds)
    assert p.low is not None
    assert p.high is not None
    assert min(seeds) <= p.low <= p.mean <= p.high <= max(seeds)


def test_a_proportion_interval_contains_its_mean_and_is_reproducible():
    seeds = [0.91, 0.95, 0.97, 0.99, 1.0, 0.93, 0.96, 0.98, 0.94, 0.92]
    a, b = proportion_ci(seeds), proportion_ci(seeds)
    assert a == b
    assert a.low is not None
    assert a.high is not None
    assert a.low < a.mean < a.high
    # a 95 % interval of a mean over 10 seeds is narrower than the seeds' own range
    assert min(seeds) < a.low
    assert a.high < max(seeds)
    assert proportion_ci([0.5]).low is None
    assert proportion_ci([0.8, 0.8, 0.8]).interval() == pytest.approx([0.8, 0.8])
