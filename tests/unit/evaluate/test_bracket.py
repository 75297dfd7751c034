"""A sweep whose curve does not bracket the target is extended, and what stays a bound is
reported as one (``evaluate.bracket``, ``Knob.beyond``, ``sweep.run_sweep``)."""

import json
import math

import pytest

from gpuscale.evaluate import policies as registry
from gpuscale.evaluate.bracket import (
    MAX_ROUNDS,
    REFINE_SHARE,
    Sample,
    at_target,
    next_value,
    refine_value,
)
from gpuscale.evaluate.knobs import EXTEND_FACTOR, Knob
from gpuscale.evaluate.report import BOUND, table_rows, write_report
from gpuscale.evaluate.runner import EvaluationRequest
from gpuscale.evaluate.scoring import RunScore, evaluation_from_sweep
from gpuscale.evaluate.stats import UPPER, reading_at_target
from gpuscale.evaluate.sweep import CEILING, SweepRequest, run_sweep

TARGET = 0.99
SEEDS = (1, 2, 3)


def attainment_of(value, fair, crossing):
    """A fake curve: attainment falls linearly past ``crossing`` x the fair value."""
    share = value / fair
    return min(1.0, 1.0 - 0.05 * (share - crossing))


def cost_of(value, fair, seed):
    """GPU-hours fall as the per-replica target rises (fewer replicas), a little per seed."""
    return 100.0 * fair / value + seed


class FakeRunner:
    """Scores each spec from the fake curve instead of simulating it; records the calls."""

    def __init__(self, crossing, fair, cost=cost_of, attainment=attainment_of):
        self.crossing, self.fair, self.calls = crossing, fair, []
        self.cost, self.attainment = cost, attainment

    def run(self, task, calls, progress=None):
        self.calls.append([args[0] for _, args in calls])
        out = []
        for _, (spec,) in calls:
            value = spec.knob_value
            attained = 0.995 if value is None else self.attainment(value, self.fair, self.crossing)
            hours = 1.0 if value is None else self.cost(value, self.fair, spec.seed)
            out.append(
                RunScore(
                    spec.policy,
                    spec.seed,
                    value,
                    hours,
                    attained,
                    True,
                    None,
                    None,
                    None,
                    10.0,
                    10.0,
                    0.0,
                    0.0,
                    0,
                )
            )
        return out


@pytest.fixture(scope="module")
def plan():
    request = EvaluationRequest("ramp", policies=("kpa",), scale=2.0, duration_s=900, seed=1)
    return SweepRequest(request, seeds=len(SEEDS), knob_values=2, warmup_s=120.0).prepare()


def swept_with(plan, crossing):
    fair = plan.fair_value("kpa")
    runner = FakeRunner(crossing, fair)
    return runner, run_sweep(plan, runner)


def test_a_curve_brackets_only_after_the_sweep_extends_past_its_range(plan):
    # kpa sweeps 0.4 to 1.4 x fair; attainment falls 0.05 per unit of share past 1.3 x
    # fair, so it crosses 0.99 at 1.5 x fair, beyond the range: one step (1.96) brackets it.
    runner, runs = swept_with(plan, crossing=1.3)
    fair = plan.fair_value("kpa")
    # The planned runs, one extension round, then refinements between 1.4 and 1.96 x fair.
    assert len(runner.calls) >= 2
    extended = runner.calls[1]
    for call in runner.calls[2:]:
        assert [s.seed for s in call] == list(plan.seeds)
        assert all(1.4 * fair < s.knob_value < 1.96 * fair for s in call)
    assert {s.policy for s in extended} == {"kpa"}
    assert sorted(s.seed for s in extended) == list(plan.seeds)  # same seeds
    assert [s.knob_value for s in extended] == pytest.approx([1.4 * fair * EXTEND_FACTOR] * 3)
    for spec in extended:
        assert spec.config.target == spec.knob_value  # the config runs the new value
    evaluation, _ = evaluation_from_sweep(plan, runs)
    kpa = evaluation.policies["kpa"]
    assert kpa.gpu_hours_at_target_bound is None
    assert kpa.seeds_bounded_at_target == 0
    # The reading interpolates between 1.4 and 1.96 x fair, so it lies below the cost
    # at 1.4 x fair, the bound the fixed range gave.
    mean_cost_at_end = sum(cost_of(1.4 * fair, fair, s) for s in plan.seeds) / len(plan.seeds)
    assert kpa.gpu_hours_at_target < mean_cost_at_end
    assert max(p.knob_value for p in kpa.curve) == pytest.approx(1.96 * fair)


def test_a_curve_that_never_brackets_is_flagged_as_a_bound(plan, tmp_path):
    # Crossing far beyond every step: MAX_ROUNDS extensions and still above the target.
    runner, runs = swept_with(plan, crossing=100.0)
    assert len(runner.calls) == 1 + MAX_ROUNDS
    evaluation, results = evaluation_from_sweep(plan, runs)
    kpa = evaluation.policies["kpa"]
    assert kpa.gpu_hours_at_target_bound == UPPER
    assert kpa.seeds_bounded_at_target == len(plan.seeds)
    cheapest = min(p.gpu_hours for p in kpa.curve)
    assert kpa.gpu_hours_at_target == pytest.approx(cheapest)
    rows = {row[0]: row for row in table_rows(evaluation)}
    assert rows["kpa"][1].startswith(BOUND)
    json_path, html_path = write_report(evaluation, results, tmp_path)
    assert json.loads(json_path.read_text())["policies"]["kpa"]["gpu_hours_at_target_bound"] == (
        "upper"
    )
    assert "&lt;= " in html_path.read_text()


def test_a_bracketed_curve_is_not_extended_past_its_range(plan):
    runner, runs = swept_with(plan, crossing=0.8)  # crosses inside 0.4 to 1.4 x fair
    fair = plan.fair_value("kpa")
    for call in runner.calls[1:]:  # refinements only, inside the range
        assert all(0.4 * fair < s.knob_value < 1.4 * fair for s in call)
    evaluation, _ = evaluation_from_sweep(plan, runs)
    assert evaluation.policies["kpa"].gpu_hours_at_target_bound is None
    assert sum(1 for s, _ in runs if s.policy == CEILING) == len(plan.seeds)


def samples(values, attained, cost=lambda v: 10.0 / v):
    return [Sample(seed, v, cost(v) + seed, attained(v)) for seed in SEEDS for v in values]


def test_a_curve_past_its_crossing_whose_cost_rises_again_is_refined_not_extended():
    # Attainment crosses the target at the knob's end, but the cost rose there: the
    # cheapest point still exceeds the target (a bound). Steps past the end only lower
    # the attainment, so none is taken; the cost may dip between the two points, so
    # their geometric middle runs next.
    knob = Knob("per_replica", "requests", 0.6, 1.4)
    points = samples([1.0, 2.0], lambda v: 0.995 if v < 1.5 else 0.95, cost=lambda v: 5.0 * v)
    assert at_target(points, SEEDS, TARGET).bound == UPPER
    assert next_value(knob, points, SEEDS, TARGET, reachable=True) == pytest.approx(math.sqrt(2))
    # A knob whose cheap side is down (static replicas): the leaner value is below.
    static = Knob("replicas", "replicas", 1, 100, relative=False, integer=True, cheap_up=False)
    fewer = samples([3.0, 6.0], lambda v: 0.995 if v > 4 else 0.95, cost=lambda v: 60.0 / v + v)
    assert at_target(fewer, SEEDS, TARGET).bound == UPPER  # 6 replicas: 16, 3: 23
    assert refine_value(static, fewer, TARGET) == 4.0  # (3 + 6) / 2, rounded half to even


def test_a_bound_at_the_cheap_end_or_close_to_its_leaner_neighbour_is_not_refined():
    knob = Knob("per_replica", "requests", 0.6, 1.4)
    # The cheapest point is the leanest value swept: extension's case, not refinement's.
    at_end = samples([1.0, 2.0], lambda v: 0.995, cost=lambda v: 10.0 / v)
    assert refine_value(knob, at_end, TARGET) is None
    # The leaner neighbour within REFINE_SHARE of the cheapest point's cost.
    close = samples([1.0, 2.0], lambda v: 0.995 if v < 1.5 else 0.95, cost=lambda v: 10.0 + 0.1 * v)
    assert refine_value(knob, close, TARGET) is None


def test_a_cost_that_dips_between_swept_values_is_found_and_read_lower(plan):
    # A policy that spends more when set too lean (KPA's panics, KEDA's thrash): its cost
    # is least at 1.15 x fair, between the swept 1.0 and 1.4 x, where it still meets the
    # target; past 1.3 x fair it does not. The sweep's cheapest point (1.0 x) is a bound.
    def u_cost(value, fair, seed):
        return 100.0 * (value / fair - 1.15) ** 2 + 10.0 + seed

    def attained(value, fair, crossing):
        return 0.995 if value / fair < 1.3 else 0.95

    fair = plan.fair_value("kpa")
    runner = FakeRunner(None, fair, cost=u_cost, attainment=attained)
    runs = run_sweep(plan, runner)
    assert 1 < len(runner.calls) <= 1 + MAX_ROUNDS
    for call in runner.calls[1:]:  # refinements, between the cheapest and its leaner neighbour
        assert [s.seed for s in call] == list(plan.seeds)
        assert all(fair < s.knob_value < 1.4 * fair for s in call)
    evaluation, _ = evaluation_from_sweep(plan, runs)
    kpa = evaluation.policies["kpa"]
    assert kpa.gpu_hours_at_target_bound == UPPER  # still the cheapest point, not a crossing
    before = sum(u_cost(fair, fair, s) for s in plan.seeds) / len(plan.seeds)  # 12.25 + 2
    assert kpa.gpu_hours_at_target < before - 1.0
    floor = 10.0 + sum(plan.seeds) / len(plan.seeds)  # the dip's bottom
    assert kpa.gpu_hours_at_target >= floor


def test_one_unbracketed_seed_extends_the_sweep():
    knob = Knob("per_replica", "requests", 0.6, 1.4)
    points = samples([1.0, 2.0], lambda v: 0.995 if v < 1.5 else 0.98)
    points = [
        Sample(s.seed, s.value, s.cost, 0.999 if s.seed == SEEDS[0] else s.attainment)
        for s in points
    ]
    assert at_target(points, SEEDS, TARGET).seeds_bounded == 1
    assert next_value(knob, points, SEEDS, TARGET, reachable=True) == pytest.approx(2.8)


def test_a_curve_that_never_reaches_extends_the_expensive_way_only_when_the_ceiling_does():
    knob = Knob("per_replica", "requests", 0.6, 1.4)
    points = samples([1.0, 2.0], lambda v: 0.9)
    assert next_value(knob, points, SEEDS, TARGET, reachable=True) == pytest.approx(1.0 / 1.4)
    assert next_value(knob, points, SEEDS, TARGET, reachable=False) is None


def test_steps_stay_within_each_knobs_valid_range():
    hpa = registry.get("hpa").knob
    assert hpa is not None
    assert hpa.maximum == 100.0
    assert hpa.beyond(95.0, cheaper=True) == 100.0  # clamped to the limit
    assert hpa.beyond(100.0, cheaper=True) is None  # at the limit: no further round
    sm = registry.get("hpa-sm").knob
    assert sm is not None
    assert sm.beyond(0.9, cheaper=True) == 1.0
    static = registry.get("static").knob
    assert static is not None
    assert not static.cheap_up
    assert static.beyond(3, cheaper=True) == 2
    assert static.beyond(1, cheaper=True) is None  # at least one replica
    assert static.beyond(3, cheaper=False) == 4
    relative = Knob("target", "requests", 0.4, 1.4)
    value = 1.0
    for _ in range(50):  # geometric steps towards 0 never reach the exclusive minimum
        value = relative.beyond(value, cheaper=False) or 0.0
        assert value > 0.0
        assert relative.valid(value)
    for name in registry.names():
        knob = registry.get(name).knob
        if knob is not None and not knob.relative:
            assert knob.valid(knob.low), name
            assert knob.valid(knob.high), name


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"low": 30.0, "high": 120.0, "relative": False, "maximum": 100.0}, "leaves the valid"),
        ({"low": 0.5, "high": 1.5, "minimum": 2.0, "maximum": 1.0}, "minimum < maximum"),
    ],
)
def test_a_knob_range_outside_its_valid_values_is_an_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Knob("x", "u", **kwargs)


def test_reading_says_when_the_cheapest_point_only_bounds_the_cost():
    assert reading_at_target([1.0, 2.0], [0.995, 0.999], TARGET) == (1.0, UPPER)
    cost, bound = reading_at_target([1.0, 2.0], [0.98, 1.0], TARGET)
    assert bound is None
    assert cost is not None
    assert math.isclose(cost, 1.5)
    assert reading_at_target([1.0], [0.99], TARGET) == (1.0, None)  # exactly on the target
    assert reading_at_target([1.0], [0.9], TARGET) == (None, None)


def test_a_cliff_between_two_points_is_refined_halfway_until_they_are_close():
    knob = Knob("per_replica", "requests", 0.6, 1.4)
    cliff = samples([1.0, 2.0], lambda v: 0.9996 if v < 1.5 else 0.25)
    # Costs 10 and 5 (+ seed): 50 % apart, so the geometric middle of 1 and 2 runs next.
    assert refine_value(knob, cliff, TARGET) == pytest.approx(math.sqrt(2.0))
    assert next_value(knob, cliff, SEEDS, TARGET, reachable=True) == pytest.approx(math.sqrt(2.0))
    # Two points whose costs are within REFINE_SHARE need no middle.
    close = 1.0 + REFINE_SHARE / 2
    near = samples([1.0, close], lambda v: 0.9996 if v < close else 0.25, cost=lambda v: 100 / v)
    assert refine_value(knob, near, TARGET) is None


def test_refinement_stops_where_an_integer_knob_has_no_value_between():
    knob = Knob("replicas", "replicas", 1, 100, relative=False, integer=True, cheap_up=False)
    points = samples([4.0, 5.0], lambda v: 0.999 if v >= 5 else 0.5, cost=lambda v: 10.0 * v)
    assert refine_value(knob, points, TARGET) is None


def test_the_headline_at_the_target_lies_inside_its_own_interval():
    # Half the seeds meet the target at 10 GPU-h, half only at 20 (a cliff between). The
    # mean curve (0.495 at 10, 0.99 at 20) reads 20, outside the per-seed readings'
    # interval around 15; the headline from those same readings is 15 and inside it.
    seeds = tuple(range(10))
    points = []
    for seed in seeds:
        lean = 0.99 if seed % 2 else 0.0
        points += [Sample(seed, 1.0, 10.0, lean), Sample(seed, 0.5, 20.0, 0.99)]
    reach = at_target(points, seeds, TARGET)
    assert reach.mean == pytest.approx(20.0)
    estimate, bound = reach.headline()
    assert bound is None
    assert estimate.mean == pytest.approx(15.0)
    assert estimate.low < estimate.mean < estimate.high
    assert estimate.high < reach.mean  # the old headline sat outside this interval
    assert estimate.n == len(seeds)


def test_a_seed_that_never_reaches_leaves_the_mean_curve_headline_without_interval():
    points = [Sample(1, 1.0, 10.0, 0.995), Sample(2, 1.0, 12.0, 0.98), Sample(3, 1.0, 11.0, 1.0)]
    estimate, bound = at_target(points, SEEDS, TARGET).headline()
    assert estimate.mean == pytest.approx(11.0)  # the mean curve's single point, 0.9917
    assert (estimate.low, estimate.high, estimate.n) == (None, None, 0)
    assert bound == UPPER


def test_a_seed_bounded_from_above_marks_the_headline_as_a_bound():
    points = [Sample(1, 1.0, 10.0, 0.995), Sample(2, 1.0, 12.0, 0.99), Sample(3, 1.0, 11.0, 0.99)]
    estimate, bound = at_target(points, SEEDS, TARGET).headline()
    assert estimate.mean == pytest.approx(11.0)
    assert bound == UPPER
