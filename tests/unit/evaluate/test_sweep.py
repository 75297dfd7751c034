import dataclasses
import json
import math

import numpy as np
import pytest

from gpuscale.errors import ConfigError
from gpuscale.evaluate.executor import DaskRunner, SerialRunner, open_runner
from gpuscale.evaluate.report import NEVER, table_rows, write_report
from gpuscale.evaluate.runner import EvaluationRequest
from gpuscale.evaluate.scoring import evaluation_from_sweep, score_run
from gpuscale.evaluate.stats import cost_at_target, mean_ci
from gpuscale.evaluate.sweep import CEILING, SweepRequest, default_warmup_s, run_sweep
from gpuscale.scaling.oracle import OraclePolicy
from gpuscale.scaling.static import StaticPolicy
from gpuscale.sim.cluster import ClusterConfig
from gpuscale.sim.engine import Scenario, simulate
from gpuscale.sim.generators import from_rate
from gpuscale.sim.outcome import RunResult
from gpuscale.sim.serving import ServingConfig

REQUEST = EvaluationRequest("ramp", scale=2.0, duration_s=900, seed=5)


@pytest.fixture(scope="module")
def plan():
    return SweepRequest(REQUEST, seeds=2, knob_values=2, warmup_s=120.0).prepare()


@pytest.fixture(scope="module")
def swept(plan):
    return run_sweep(plan, SerialRunner())


@pytest.fixture(scope="module")
def evaluation(plan, swept):
    return evaluation_from_sweep(plan, swept)


def test_every_point_runs_on_every_seed_with_the_same_parameters(plan, swept):
    assert plan.seeds == (5, 6)
    static = [v for v, _ in plan.points["static"]]
    fair = plan.base.configs["static"].replicas
    assert fair in static
    assert len(static) >= 2
    hpa = [v for v, _ in plan.points["hpa"]]
    assert hpa == [30.0, 70.0, 95.0]  # the sweep's ends and the fair 70 %
    assert [v for v, _ in plan.points["oracle"]] == [None]  # no knob: the fair run alone
    per_seed = {seed: [s.key for s, _ in swept if s.seed == seed] for seed in plan.seeds}
    assert [k.split("/", 1)[1] for k in per_seed[5]] == [
        k.split("/", 1)[1].replace("6", "5", 1) for k in per_seed[6]
    ]
    assert sum(1 for s, _ in swept if s.policy == CEILING) == 2
    for spec, score in swept:
        if spec.policy == "hpa":
            assert spec.config.target_average_value == spec.knob_value
        assert score.seed == spec.seed


def test_results_json_has_the_new_keys_and_the_request_totals_add_up(plan, evaluation, tmp_path):
    ev, kept = evaluation
    json_path, html_path = write_report(ev, kept, tmp_path)
    data = json.loads(json_path.read_text())
    assert data["seeds"] == 2
    assert data["warmup_s"] == 120.0
    assert data["target_attainment"] == 0.99
    assert 0.0 < data["ceiling"] <= 1.0
    assert len(data["ceiling_ci95"]) == 2
    assert list(data["policies"]) == list(plan.base.policies)
    for name, p in data["policies"].items():
        total = p["completed_requests"] + p["dropped_requests"] + p["in_flight_requests"]
        assert total == pytest.approx(p["requests"], rel=1e-9), name
        low, high = p["gpu_hours_ci95"]
        assert low <= p["gpu_hours"] <= high
        low, high = p["slo_attainment_ci95"]
        assert low <= p["slo_attainment"] <= high
        assert "gpu_hours_at_target" in p
        at = p["gpu_hours_at_target"]
        curve = [(c["gpu_hours"], c["slo_attainment"]) for c in p["curve"]]
        assert at == cost_at_target([c for c, _ in curve], [a for _, a in curve], 0.99)
    assert [r.policy for r in kept] == list(data["policies"])
    assert "within SLO (%)" not in html_path.read_text()  # figures are PNG, not text
    # the curves on one plot, then one timeline per policy
    assert html_path.read_text().count("data:image/png;base64,") == 1 + len(data["policies"])


def test_headline_figures_are_means_over_seeds_of_the_fair_runs(plan, swept, evaluation):
    ev, _ = evaluation
    fair = plan.base.configs["static"].replicas
    runs = [s for spec, s in swept if spec.policy == "static" and spec.knob_value == fair]
    assert len(runs) == 2
    want = mean_ci([s.gpu_hours for s in runs])
    summary = ev.policies["static"]
    assert summary.gpu_hours == pytest.approx(want.mean)
    assert summary.gpu_hours_ci95 == (want.low, want.high)
    assert summary.knob == "replicas"
    # every planned knob value is on the curve (a bracketed reading may add refinements)
    assert {c.knob_value for c in summary.curve} >= {v for v, _ in plan.points["static"]}


def test_a_curve_that_never_reaches_the_target_says_so(plan, swept):
    strict = dataclasses.replace(
        plan, request=dataclasses.replace(plan.request, target_attainment=0.999999)
    )
    ev, _ = evaluation_from_sweep(strict, swept)
    rows = {row[0]: row for row in table_rows(ev)}
    for name, summary in ev.policies.items():
        if summary.gpu_hours_at_target is None:
            assert rows[name][1] == NEVER
            assert rows[name][2] == "-"
    assert any(s.gpu_hours_at_target is None for s in ev.policies.values())


def test_warm_up_is_not_scored_in_gpu_hours(swept):
    spec, score = next((s, r) for s, r in swept if s.policy == "static" and r.result is not None)
    result = score.result
    full = score_run(result, spec.seed, spec.knob_value, 0.0)
    late = score_run(result, spec.seed, spec.knob_value, 450.0)
    assert full.nodes_counted
    assert full.gpu_hours == pytest.approx(result.node_gpu_seconds / 3600.0)
    assert full.allocated_gpu_hours == pytest.approx(result.gpu_seconds / 3600.0)
    tl = result.timeline
    held_late = float(tl.allocated_gpus[tl.time_s >= 450.0].sum()) * 10.0 / 3600.0
    nodes_late = float(tl.node_gpus[tl.time_s >= 450.0].sum()) * 10.0 / 3600.0
    assert late.allocated_gpu_hours == pytest.approx(held_late, rel=0.02)
    assert late.gpu_hours == pytest.approx(nodes_late, rel=0.02)
    assert late.gpu_hours < full.gpu_hours
    assert late.from_warmup


class _StepTimeline:
    """A timeline with per-step counts within the SLO, as the simulator will record them."""

    def __init__(self):
        self.time_s = np.arange(10) * 10.0
        self.demand_rps = np.full(10, 1.0)
        self.allocated_gpus = np.full(10, 1.0)
        self.within_slo = np.array([0.0] * 5 + [10.0] * 5)  # nothing met it while warming up
        self.node_gpus = np.zeros(0)  # not recorded: GPU-hours are the pods'


def test_attainment_skips_the_warm_up_when_per_step_counts_exist():
    result = RunResult(
        policy="p",
        timeline=_StepTimeline(),
        requests=100.0,
        within_slo=50.0,
        dropped=0.0,
        latency_edges_s=np.array([0.0, 1.0]),
        latency_counts=np.array([50.0]),
        gpu_seconds=100.0,
        busy_gpu_seconds=50.0,
        scale_events=0,
        completed_requests=100.0,
    )
    assert score_run(result, 0, None, 0.0).slo_attainment == pytest.approx(0.5)
    warm = score_run(result, 0, None, 50.0)
    assert warm.slo_attainment == pytest.approx(1.0)
    assert warm.from_warmup
    assert warm.gpu_hours == pytest.approx(50.0 / 3600.0)
    assert not warm.nodes_counted


def _cold_start_scenario() -> Scenario:
    """A minute of 60 requests/s arriving at one Ready replica; the rest cold-start."""
    workload = from_rate("flat", np.full(900, 60.0), service_s=0.2, seed=2)
    return Scenario(workload, ClusterConfig(), ServingConfig(), 1.0, 4.0, seed=1)


def test_warm_up_changes_the_attainment_of_a_real_run():
    result = simulate(_cold_start_scenario(), StaticPolicy(20, name="static"))
    whole = score_run(result, 1, None, 0.0)
    warm = score_run(result, 1, None, 300.0)
    tl = result.timeline
    late = tl.time_s >= 300.0
    want = float(tl.within_slo[late].sum()) / float((tl.demand_rps[late] * 10.0).sum())
    assert whole.slo_attainment == pytest.approx(result.within_slo / result.requests)
    assert warm.slo_attainment == pytest.approx(min(want, 1.0))
    assert warm.from_warmup
    assert warm.slo_attainment > whole.slo_attainment + 0.02  # the cold start is not scored
    assert warm.slo_attainment > 0.99


def test_gpu_hours_count_a_node_idle_until_scale_down():
    # 12 replicas for 300 s need a second 8-GPU node; then 2 replicas leave it idle until
    # cluster-autoscaler removes it, node_idle_remove_s (600 s) after it emptied.
    wanted = [12] * 300 + [2] * 1200
    workload = from_rate("flat", np.full(1500, 2.0), service_s=0.2, seed=2)
    cluster = ClusterConfig(initial_nodes=1, min_nodes=1, max_nodes=2)
    scenario = Scenario(workload, cluster, ServingConfig(), 1.0, 4.0, seed=1, initial_replicas=2)
    result = simulate(scenario, OraclePolicy(wanted, lead_s=0.0, min_replicas=1, max_replicas=16))
    tl = result.timeline
    idle = (tl.time_s >= 500.0) & (tl.time_s < 850.0)  # scaled in, node not yet removed
    assert np.all(tl.allocated_gpus[idle] == 2.0)
    assert np.all(tl.node_gpus[idle] == 16.0)
    assert np.all(tl.node_gpus[tl.time_s >= 1400.0] == 8.0)  # removed after 600 s idle
    assert result.node_gpu_seconds > result.gpu_seconds + 8 * 600
    score = score_run(result, 1, None, 0.0)
    assert score.gpu_hours == pytest.approx(result.node_gpu_seconds / 3600.0)
    assert score.gpu_hours > score.allocated_gpu_hours


@pytest.fixture(scope="module")
def searched():
    """Static and the oracle at a target the ramp's serving model can reach (its ceiling
    is about 0.98: exponential service times and an SLO of 4 of them)."""
    request = dataclasses.replace(REQUEST, policies=("static", "oracle"))
    plan = SweepRequest(
        request, seeds=2, knob_values=2, warmup_s=120.0, target_attainment=0.95
    ).prepare()
    runs = run_sweep(plan, SerialRunner())
    return plan, runs, evaluation_from_sweep(plan, runs)[0]


def test_the_oracle_row_is_its_search_on_each_seed(searched):
    plan, swept, ev = searched
    oracle = [(spec, s) for spec, s in swept if spec.policy == "oracle"]
    assert [spec.search_target for spec, _ in oracle] == [0.95, 0.95]
    for _, score in oracle:
        assert len(score.trials) >= 2  # the plans the search tried: the oracle's curve
        assert score.slo_attainment >= 0.95, score.trials
        assert (score.gpu_hours, score.slo_attainment) in score.trials
        reaching = [c for c, a in score.trials if a >= 0.95]
        assert score.gpu_hours == min(reaching)  # the cheapest plan that met the target
    first = next(s for spec, s in oracle if s.result is not None)
    cooldown = plan.base.scenario.timeout_s
    rescored = score_run(first.result, first.seed, None, plan.warmup_s, cooldown_s=cooldown)
    assert rescored.slo_attainment == first.slo_attainment  # scored as every run is
    summary = ev.policies["oracle"]
    assert summary.knob == "target_attainment"
    assert summary.curve[-1].knob_value == 0.95
    assert len(summary.curve) >= 2
    assert summary.seeds_reaching_target == 2
    assert summary.x_oracle_at_target == pytest.approx(1.0)
    assert summary.gpu_hours_at_target <= summary.gpu_hours + 1e-9
    assert summary.slo_attainment_per_seed == tuple(s.slo_attainment for _, s in oracle)
    static = ev.policies["static"]
    if static.gpu_hours_at_target is not None:
        # the figure is the mean of the per-seed ratios: each seed's static curve read
        # at the target over that seed's search read at the target
        ratios = []
        for seed in plan.seeds:
            mine = [
                (s.gpu_hours, s.slo_attainment)
                for p, s in swept
                if p.policy == "static" and p.seed == seed
            ]
            trials = next(s.trials for p, s in oracle if p.seed == seed)
            ours = cost_at_target([c for c, _ in mine], [a for _, a in mine], 0.95)
            theirs = cost_at_target([c for c, _ in trials], [a for _, a in trials], 0.95)
            ratios.append(ours / theirs)
        assert static.x_oracle_at_target == pytest.approx(sum(ratios) / len(ratios))
        low, high = static.x_oracle_at_target_ci95
        assert low <= static.x_oracle_at_target <= high
    assert ev.gpu_hours_basis == "node"
    assert ev.attainment_from_warmup


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"seeds": 0}, r"--seeds 0: must be 1 or more"),
        ({"knob_values": -1}, r"--knob-values -1: must be 0 or more"),
        ({"target_attainment": 1.0}, r"--target-attainment 1.0: must be between 0 and 1"),
        ({"warmup_s": 900.0}, r"--warmup 900: must be at least 0 s and shorter than the run's 900"),
        ({"warmup_s": -1.0}, r"--warmup -1"),
    ],
)
def test_bad_sweep_options_are_config_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        SweepRequest(REQUEST, **kwargs).prepare()


def test_default_warm_up_is_ten_minutes_or_a_fifth_of_a_short_run():
    assert default_warmup_s(86_400.0) == 600.0
    assert default_warmup_s(900.0) == 180.0


def test_a_dask_cluster_gives_the_same_scores_as_this_process(plan, swept):
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=2,
        processes=False,
        protocol="tcp",
        host="127.0.0.1",  # loopback only
        dashboard_address=None,
    )
    with cluster, open_runner(1, 10, cluster.scheduler_address) as runner:
        assert isinstance(runner, DaskRunner)
        seen = {}
        remote = run_sweep(plan, runner, lambda key, f: seen.__setitem__(key, f))
    assert len(remote) == len(swept)
    for (spec, here), (_, there) in zip(swept, remote, strict=True):
        assert there.gpu_hours == here.gpu_hours, spec.key
        assert there.slo_attainment == here.slo_attainment, spec.key
    assert set(seen) == {spec.key for spec, _ in swept}
    assert set(seen.values()) == {1.0}


def test_an_unreachable_dask_scheduler_is_a_config_error():
    pytest.importorskip("distributed")
    with pytest.raises(ConfigError, match=r"--dask-scheduler tcp://127.0.0.1:9: no scheduler"):
        DaskRunner("tcp://127.0.0.1:9", timeout_s=1.0)


def test_local_runs_use_processes_only_when_more_than_one_is_useful():
    with open_runner(4, 1) as runner:
        assert isinstance(runner, SerialRunner)
    assert math.isfinite(default_warmup_s(1.0))


class _EndingTimeline:
    """100 requests a second for 1,000 s; those entering service in the last 100 s missed."""

    def __init__(self):
        self.time_s = np.arange(1000) * 1.0
        self.demand_rps = np.full(1000, 100.0)
        self.allocated_gpus = np.full(1000, 8.0)
        self.within_slo = np.array([100.0] * 900 + [0.0] * 100)
        self.node_gpus = np.zeros(0)


def test_requests_arriving_within_the_last_timeout_are_not_judged():
    result = RunResult(
        policy="p",
        timeline=_EndingTimeline(),
        requests=100_000.0,
        within_slo=90_000.0,
        dropped=0.0,
        latency_edges_s=np.array([0.0, 1.0]),
        latency_counts=np.array([90_000.0]),
        gpu_seconds=8000.0,
        busy_gpu_seconds=4000.0,
        scale_events=0,
        completed_requests=90_000.0,
        in_flight_requests=10_000.0,
    )
    assert score_run(result, 0, None, 0.0).slo_attainment == pytest.approx(0.9)
    # A 100 s cool-down judges the 900 s whose requests could finish: all met the SLO.
    assert score_run(result, 0, None, 0.0, cooldown_s=100.0).slo_attainment == pytest.approx(1.0)
    assert score_run(result, 0, None, 0.0, cooldown_s=50.0).slo_attainment == pytest.approx(
        900 * 100 / (950 * 100)
    )
    # It never takes more than half the scored span: 1,000 s judged from 0 to 500 s.
    assert score_run(result, 0, None, 0.0, cooldown_s=5000.0).slo_attainment == pytest.approx(1.0)
    # GPU-hours still run to the end.
    assert score_run(result, 0, None, 0.0, cooldown_s=100.0).gpu_hours == pytest.approx(8000 / 3600)
