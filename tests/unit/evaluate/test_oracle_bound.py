"""The searched hindsight oracle meets its target, and no baseline beats it on cost.

Each scenario is short and small (20 minutes, a few dozen GPUs) so every generator
runs over several seeds in seconds; bench/bench_oracle.py runs the shared traces.
While the serving model caps attainment below the target, the search aims just
under the ceiling (what the whole node pool, asked for at the start, attains);
``goal`` is that aim, and the tests hold the oracle to it.
"""

import pytest

from gpuscale.evaluate.oracle_search import (
    CEILING_SLACK,
    DEFAULT_TARGET,
    MAX_SIMULATIONS,
    OracleSearch,
    attainment,
    search_oracle,
)
from gpuscale.evaluate.runner import EvaluationRequest, PreparedEvaluation, run_one
from gpuscale.scaling.static import StaticPolicy
from gpuscale.sim.cluster import ClusterConfig
from gpuscale.sim.engine import simulate

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
