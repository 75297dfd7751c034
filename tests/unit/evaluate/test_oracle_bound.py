"""The searched hindsight oracle meets its target, and no baseline beats it on cost.

Each scenario is short and small (20 minutes, a few dozen GPUs) so every generator
runs over several seeds in seconds; bench/bench_oracle.py runs the shared traces.
While the serving model caps attainment below the target, the search aims just
under the ceiling (what the whole node pool, asked for at the start, attains);
``goal`` is that aim, and the tests hold the oracle to it. The curve test scores
as ``gpuscale evaluate`` does (node GPU-hours from the warm-up on) and holds the
oracle below static's replica sweep and HPA's target sweep at the goal.
"""

import dataclasses

import pytest

from gpuscale.evaluate import registry
from gpuscale.evaluate.oracle_search import (
    CEILING_SLACK,
    DEFAULT_TARGET,
    MAX_SIMULATIONS,
    OracleSearch,
    attainment,
    search_oracle,
)
from gpuscale.evaluate.runner import EvaluationRequest, PreparedEvaluation, build_policy, run_one
from gpuscale.evaluate.scoring import score_run
from gpuscale.evaluate.sweep import default_warmup_s
from gpuscale.scaling.static import StaticPolicy
from gpuscale.sim.cluster import ClusterConfig
from gpuscale.sim.engine import simulate
from gpuscale.sim.outcome import RunResult

GENERATORS = ("diurnal", "bursty", "flash-crowd", "ramp")
SCALE = {"diurnal": 2.0, "bursty": 1.0, "flash-crowd": 1.0, "ramp": 1.0}


def prepared(trace: str, seed: int) -> PreparedEvaluation:
    return EvaluationRequest(
        trace,
        scale=SCALE[trace],
        duration_s=1200,
        seed=seed,
        cluster=ClusterConfig(gpus_per_node=16),
    ).prepare()


def searched(p: PreparedEvaluation, target: float = DEFAULT_TARGET) -> OracleSearch:
    return search_oracle(p.scenario, p.required.tolist(), p.configs["oracle"], target=target)


def bound_problems(
    oracle_attainment: float,
    oracle_gpu_hours: float,
    goal: float,
    baselines: dict[str, tuple[float, float]],
) -> list[str]:
    """What is wrong with an oracle as the reference: missed goal, or a cheaper equal."""
    problems = []
    if oracle_attainment < goal:
        problems.append(f"oracle attains {oracle_attainment:.4f} < goal {goal:.4f}")
    for name, (att, gpu_hours) in baselines.items():
        if att >= oracle_attainment and gpu_hours < oracle_gpu_hours:
            problems.append(
                f"{name}: {gpu_hours:.3f} GPU-h at {att:.4f} beats the oracle's "
                f"{oracle_gpu_hours:.3f} GPU-h at {oracle_attainment:.4f}"
            )
    return problems


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("trace", GENERATORS)
def test_searched_oracle_meets_its_goal_on_every_generator(trace, seed):
    search = searched(prepared(trace, seed))
    if search.ceiling is None:  # run only when no plan met the target
        assert search.goal == DEFAULT_TARGET
        assert search.met_target
    else:
        assert search.goal == min(DEFAULT_TARGET, search.ceiling - CEILING_SLACK)
    assert search.attainment >= search.goal, [(t.margin, t.attainment) for t in search.trials]
    assert search.met_target == (search.attainment >= DEFAULT_TARGET)
    assert len(search.trials) + 1 <= MAX_SIMULATIONS
    assert search.attainment == attainment(search.result)


def test_search_below_the_ceiling_meets_the_target_and_a_cheaper_margin_misses_it():
    p = prepared("flash-crowd", 1)
    search = searched(p, target=0.975)
    assert search.goal == 0.975
    assert search.met_target
    chosen = search.config.margin
    tighter = [t for t in search.trials if t.margin < chosen]
    assert tighter
    assert max(tighter, key=lambda t: t.margin).attainment < 0.975  # the bracket is tight
    assert all(t.gpu_hours >= search.gpu_hours for t in search.trials if t.attainment >= 0.975)


def test_search_is_deterministic():
    p = prepared("bursty", 4)
    assert searched(p).trials == searched(p).trials


@pytest.mark.parametrize(("trace", "seed"), [("bursty", 3), ("flash-crowd", 3), ("ramp", 5)])
def test_no_baseline_reaches_the_oracle_attainment_with_fewer_gpu_hours(trace, seed):
    p = prepared(trace, seed)
    search = searched(p)
    baselines = {}
    for name in p.policies:
        if name == "oracle":
            continue
        run = run_one(p, name)
        baselines[name] = (attainment(run), run.gpu_seconds / 3600.0)
    assert len(baselines) >= 4
    assert bound_problems(search.attainment, search.gpu_hours, search.goal, baselines) == []


def test_a_one_replica_oracle_fails_the_bound_check():
    p = prepared("flash-crowd", 3)
    search = searched(p)
    lone = simulate(p.scenario, StaticPolicy(1, name="oracle"))
    baselines = {"static": (search.attainment, search.gpu_hours)}
    problems = bound_problems(attainment(lone), lone.gpu_seconds / 3600.0, search.goal, baselines)
    assert problems
    assert problems[0].startswith("oracle attains")


def test_a_baseline_as_good_for_fewer_gpu_hours_fails_the_bound_check():
    problems = bound_problems(0.98, 10.0, 0.97, {"hpa": (0.98, 9.9), "kpa": (0.979, 5.0)})
    assert problems == ["hpa: 9.900 GPU-h at 0.9800 beats the oracle's 10.000 GPU-h at 0.9800"]


def node_scored(
    p: PreparedEvaluation, target: float = DEFAULT_TARGET
) -> tuple[OracleSearch, float]:
    """The search scored as ``gpuscale evaluate`` scores it: from the warm-up, node GPU-hours."""
    warmup = default_warmup_s(float(p.scenario.workload.duration_s))

    def rate(result: RunResult) -> float:
        got = score_run(result, p.scenario.seed, None, warmup).slo_attainment
        return 1.0 if got is None else got

    def cost(result: RunResult) -> float:
        return score_run(result, p.scenario.seed, None, warmup).gpu_hours

    search = search_oracle(
        p.scenario,
        p.required.tolist(),
        p.configs["oracle"],
        target=target,
        score=rate,
        cost=cost,
        warmup_s=warmup,
    )
    return search, warmup


def cost_at(curve: list[tuple[float, float]], target: float) -> float | None:
    """GPU-hours where a (GPU-hours, attainment) curve first reaches ``target``, interpolated."""
    points = sorted(curve)
    for i, (h1, a1) in enumerate(points):
        if a1 >= target:
            if i == 0:
                return h1
            h0, a0 = points[i - 1]
            return h0 + (h1 - h0) * (target - a0) / (a1 - a0)
    return None


def baseline_curves(p: PreparedEvaluation, warmup: float) -> dict[str, list[tuple[float, float]]]:
    """Static's replica sweep and HPA's target sweep, each point scored as the harness does."""
    curves: dict[str, list[tuple[float, float]]] = {}
    for name in ("static", "hpa"):
        knob = registry.get(name).knob
        assert knob is not None
        fair = p.configs[name]
        points = []
        for value in knob.values(float(getattr(fair, knob.field)), 8):
            config = dataclasses.replace(fair, **{knob.field: value})
            run = simulate(p.scenario, build_policy(name, config, p.required))
            s = score_run(run, p.scenario.seed, value, warmup)
            assert s.slo_attainment is not None
            points.append((s.gpu_hours, s.slo_attainment))
        curves[name] = points
    return curves


@pytest.mark.parametrize(
    ("trace", "scale", "seed", "gpus_per_node"),
    [("azure-conv", 20.0, 0, 8), ("bursty", 1.0, 3, 8), ("ramp", 1.0, 9, 16)],
)
def test_no_baseline_curve_reaches_the_target_with_fewer_node_gpu_hours(
    trace, scale, seed, gpus_per_node
):
    cluster = ClusterConfig(gpus_per_node=gpus_per_node)
    p = EvaluationRequest(trace, scale=scale, duration_s=1800, seed=seed, cluster=cluster).prepare()
    search, warmup = node_scored(p)
    assert search.met_goal, [(t.margin, t.attainment, t.gpu_hours) for t in search.trials]
    for name, curve in baseline_curves(p, warmup).items():
        theirs = cost_at(curve, search.goal)
        assert theirs is None or theirs >= search.gpu_hours, (name, theirs, search.gpu_hours, curve)


def test_cost_at_interpolates_where_a_curve_first_reaches_the_target():
    assert cost_at([(10.0, 0.98), (20.0, 1.0)], 0.99) == pytest.approx(15.0)
    assert cost_at([(10.0, 0.995), (20.0, 1.0)], 0.99) == 10.0
    assert cost_at([(10.0, 0.5)], 0.99) is None
