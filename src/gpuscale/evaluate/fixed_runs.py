"""The two runs of a sweep that are not a policy at a knob value.

The unlimited fleet (``ceiling_run``) gives each trace's ceiling, the attainment
no policy can beat; the oracle's search (``searched_run``) is the oracle's run on
each seed. ``evaluate.sweep.execute`` dispatches to them.
"""

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from gpuscale.evaluate.oracle_search import MAX_SIMULATIONS, OracleTrial, search_oracle
from gpuscale.evaluate.pool import decisions_at_debug
from gpuscale.evaluate.runner import PreparedEvaluation
from gpuscale.evaluate.scoring import RunScore, score_run
from gpuscale.scaling.static import StaticConfig, StaticPolicy
from gpuscale.sim.engine import simulate
from gpuscale.sim.outcome import RunResult

if TYPE_CHECKING:
    from gpuscale.evaluate.sweep import RunSpec

CEILING = "ceiling"
"""The name of the unlimited-fleet runs in progress keys and logs."""

CEILING_PEAK_MULTIPLE = 4
"""The unlimited fleet: this many times the peak requirement, held from the start."""


def ceiling_run(prepared: PreparedEvaluation, progress: Callable[[float], None]) -> RunResult:
    """Static at ``CEILING_PEAK_MULTIPLE`` x the peak need, started warm, on nodes to match."""
    sc = prepared.scenario
    replicas = CEILING_PEAK_MULTIPLE * max(int(prepared.required.max()), 1)
    nodes = math.ceil(replicas * sc.serving.gpus_per_replica / sc.cluster.gpus_per_node)
    cluster = dataclasses.replace(
        sc.cluster,
        initial_nodes=nodes,
        min_nodes=nodes,
        max_nodes=max(sc.cluster.max_nodes, nodes + len(sc.faults)),
    )
    scenario = dataclasses.replace(sc, cluster=cluster, initial_replicas=replicas)
    policy = StaticPolicy.from_config(StaticConfig(replicas=replicas), CEILING)
    with decisions_at_debug():
        return simulate(scenario, policy, progress=progress)


def searched_run(
    prepared: PreparedEvaluation, spec: "RunSpec", target: float, progress: Callable[[float], None]
) -> RunScore:
    """The oracle's search on one seed, scored as every run is; its trials are the curve."""
    cooldown = prepared.scenario.timeout_s

    def scored(result: RunResult) -> RunScore:
        return score_run(
            result, spec.seed, None, spec.warmup_s, cooldown_s=cooldown, target=spec.target
        )

    def attainment(result: RunResult) -> float:
        got = scored(result).slo_attainment
        return 1.0 if got is None else got

    def cost(result: RunResult) -> float:
        return scored(result).gpu_hours

    tried = [0]

    def step(_trial: OracleTrial) -> None:
        tried[0] += 1
        progress(min(tried[0] / MAX_SIMULATIONS, 0.99))

    with decisions_at_debug():
        found = search_oracle(
            prepared.scenario,
            prepared.required.tolist(),
            spec.config,
            target=target,
            name=spec.policy,
            on_trial=step,
            score=attainment,
            cost=cost,
            warmup_s=spec.warmup_s,
        )
    chosen = score_run(
        found.result,
        spec.seed,
        spec.knob_value,
        spec.warmup_s,
        keep=spec.keep,
        cooldown_s=cooldown,
        target=spec.target,
    )
    trials = tuple((t.gpu_hours, t.attainment) for t in found.trials)
    progress(1.0)
    return dataclasses.replace(chosen, trials=trials)
