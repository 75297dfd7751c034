"""The hindsight oracle's plan: searched until its simulated attainment meets the target.

The oracle (``scaling.oracle``) plans from a queueing estimate of the replicas
each second needs, and knows each pod's actual cold start in advance
(``sim.coldstart.pod_cold_starts``). An estimate can be short (bursts inside its
rate window, a queue that builds while capacity arrives) or generous, so the
plan is checked the only way that counts: by running it through the same
simulator the baselines run through (``sim.engine.simulate``, same scenario,
same seed) and reading the run's attainment. The estimate is first sharpened
with the arrivals the oracle knows: each second's count is scaled by the work of
the surrounding ``SHARP_WINDOW_S`` seconds over that of the estimate's own rate
window (``sharpen``), so a burst shorter than that window is planned for. Then
one knob ``x`` scales the plan:
``margin = x`` (``ceil(required x (1 + x))`` replicas) and
``slack_s = SLACK_PER_MARGIN_S x max(x, 0)`` (replicas come that much earlier
and stay that much longer). The search is deterministic and bounded
(``max_simulations`` runs, the ceiling run included):

1. ``x = 0``. If it meets the target, bisect down towards ``MIN_MARGIN``;
   otherwise double ``x`` from ``FIRST_STEP`` until the target is met, then
   bisect between the last miss and the first hit.
2. Only when no plan met the target: the ceiling, every GPU the node pool holds
   asked for at the start (from the scenario's own initial replicas and nodes).
   If even it misses the target, the search aims just below the ceiling
   (``CEILING_SLACK``), bisects towards that goal, and says so
   (``OracleSearch.met_target`` is False).
3. The answer is the cheapest run (GPU-hours, by the search's ``cost``) that met
   the goal, or, when none did, the run with the highest attainment.

``gpuscale evaluate`` runs one search per seed (``evaluate.sweep``), scored with
its warm-up-aware scorer (``score`` and ``cost``), and its trials are the
oracle's cost-against-attainment curve.

What comes out is the best plan found in hindsight, not a proven lower bound: a
cheaper plan may exist that this one-knob search does not reach.
"""

import dataclasses
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from gpuscale.errors import require
from gpuscale.evaluate import fleet
from gpuscale.scaling.oracle import OracleConfig, OraclePolicy
from gpuscale.scaling.static import StaticPolicy
from gpuscale.sim.coldstart import pod_cold_starts
from gpuscale.sim.engine import Scenario, simulate
from gpuscale.sim.latency import centred_mean
from gpuscale.sim.outcome import RunResult

logger = logging.getLogger(__name__)

DEFAULT_TARGET = 0.99
"""Attainment the oracle must reach by default (share of requests within the SLO)."""

MAX_SIMULATIONS = 12
"""Most simulator runs one search makes, the ceiling run included."""

MIN_MARGIN = -0.5
"""The search never plans for fewer than half the estimated requirement."""

FIRST_STEP = 0.1
"""First margin tried when the estimate misses; each later one doubles it."""

MAX_MARGIN = 6.4
"""The search stops growing the margin here (7.4 x the estimate)."""

SLACK_PER_MARGIN_S = 60.0
"""Seconds of planning-window widening per unit of (positive) margin."""

CEILING_SLACK = 0.002
"""When the ceiling is below the target, the search aims this far below the ceiling."""

SHARP_WINDOW_S = 10
"""Seconds of the short centred window ``sharpen`` scales the estimate by."""


@dataclass(frozen=True, slots=True)
class OracleTrial:
    """One simulated plan.

    Attributes:
        margin: Extra share of the requirement planned for (negative: less).
        slack_s: Planning-window widening on each side, seconds.
        attainment: Share of arrived requests completed within the SLO, 0 to 1.
        gpu_hours: GPU-hours the plan cost (by the search's ``cost``).
    """

    margin: float
    slack_s: float
    attainment: float
    gpu_hours: float


@dataclass(frozen=True, slots=True)
class OracleSearch:
    """The outcome of a search: the chosen plan and every run that led to it.

    Attributes:
        config: The chosen plan's config (build with ``OraclePolicy.from_config``).
        result: The chosen plan's run.
        attainment: The chosen plan's attainment (by the search's ``score``), 0 to 1.
        gpu_hours: The chosen plan's GPU-hours (by the search's ``cost``).
        target: The attainment asked for.
        goal: The attainment aimed for: ``target``, or ``ceiling - CEILING_SLACK``
            when the ceiling is below the target.
        ceiling: Attainment of the whole node pool asked for at the start; None when
            a plan met the target without it (it is run only when none did).
        trials: Every oracle run, in the order made.
    """

    config: OracleConfig
    result: RunResult
    attainment: float
    gpu_hours: float
    target: float
    goal: float
    ceiling: float | None
    trials: tuple[OracleTrial, ...]

    @property
    def met_target(self) -> bool:
        """Whether the chosen plan reached ``target``."""
        return self.attainment >= self.target

    @property
    def met_goal(self) -> bool:
        """Whether the chosen plan reached ``goal``."""
        return self.attainment >= self.goal


def attainment(result: RunResult) -> float:
    """Share of a run's arrived requests completed within the SLO.

    Returns:
        0 to 1 (1 when nothing arrived).
    """
    return float(result.within_slo) / result.requests if result.requests > 0 else 1.0


def allocated_gpu_hours(result: RunResult) -> float:
    """GPU-hours a run's pods held (the search's default cost).

    Returns:
        Hours.
    """
    return result.gpu_seconds / 3600.0


def fleet_replicas(scenario: Scenario) -> int:
    """Replicas the scenario's node pool holds at its largest (``fleet.fleet_replicas``).

    Returns:
        Replicas.
    """
    return fleet.fleet_replicas(scenario.cluster, scenario.serving)


def ceiling_run(scenario: Scenario) -> RunResult:
    """The scenario with every GPU of its node pool asked for at the start.

    The run starts as every policy does (the scenario's initial replicas and
    nodes), so its attainment is what a policy can reach from that start: a burst
    before a node can join is lost to all of them.

    Returns:
        The run (its attainment is the search's ceiling).
    """
    fleet = fleet_replicas(scenario)
    return simulate(scenario, StaticPolicy(fleet, name="ceiling", interval_s=1.0))


def cold_starts_for(scenario: Scenario, required: Sequence[int], base: OracleConfig) -> np.ndarray:
    """Enough of the run's pod cold starts for any plan the search tries.

    A plan creates at most its initial replicas plus, for every rise of its planned
    requirement, the rise (each scale-down can be undone once more): twice the rises
    at ``MAX_MARGIN``, plus the bound, plus the initial replicas.

    Returns:
        Seconds, by pod creation order.
    """
    top = np.ceil(np.asarray(required, dtype=float) * (1.0 + MAX_MARGIN))
    rises = float(np.clip(np.diff(top), 0.0, None).sum()) if top.size > 1 else 0.0
    bound = base.max_replicas or int(top.max(initial=1.0))
    n = scenario.initial_replicas + 2 * math.ceil(rises) + bound + 64
    return pod_cold_starts(scenario.cluster.cold_start, scenario.seed, n)


def sharpen(
    required: Sequence[int], scenario: Scenario, window_s: int = SHARP_WINDOW_S
) -> np.ndarray:
    """Scale a per-second estimate by the work of a short window over its own window.

    ``required`` plans for the rate averaged over ``serving.rate_window_s`` (60 s by
    default), which hides a burst shorter than that; the oracle knows the arrivals,
    so each second's count is multiplied by the work arriving in the centred
    ``window_s`` seconds over that in the estimate's window, and rounded up.

    Returns:
        Replicas per second.
    """
    work = scenario.workload.work_s
    wide = centred_mean(work, int(getattr(scenario.serving, "rate_window_s", 60)))
    narrow = centred_mean(work, window_s)
    ratio = np.where(wide > 0, narrow / np.maximum(wide, 1e-12), 1.0)
    return np.ceil(np.asarray(required, dtype=float) * ratio - 1e-9).astype(np.int64)


def _knob(x: float) -> tuple[float, float]:
    return x, round(SLACK_PER_MARGIN_S * max(x, 0.0), 1)


def search_oracle(
    scenario: Scenario,
    required: Sequence[int],
    base: OracleConfig,
    *,
    target: float = DEFAULT_TARGET,
    max_simulations: int = MAX_SIMULATIONS,
    name: str = "oracle",
    on_trial: Callable[[OracleTrial], None] | None = None,
    score: Callable[[RunResult], float] | None = None,
    cost: Callable[[RunResult], float] | None = None,
) -> OracleSearch:
    """Find the cheapest oracle plan whose simulated attainment meets ``target``.

    Args:
        scenario: The scenario every policy runs on (its seed fixes the cold starts).
        required: Per-second replica estimate (``PreparedEvaluation.required``).
        base: The oracle's fair config; the search sets its margin, slack and cold
            starts, and lifts ``max_replicas`` to what the node pool holds.
        target: Attainment to reach, 0 to 1.
        max_simulations: Most simulator runs, the ceiling run included (3 or more).
        name: The oracle's name in results.
        on_trial: Called after each oracle run (for progress or logs).
        score: A run's attainment (default ``attainment``, over the whole run); the
            harness passes its warm-up-aware scorer.
        cost: A run's GPU-hours (default ``allocated_gpu_hours``, the whole run's); the
            harness passes its node GPU-hours from the warm-up on.

    Returns:
        The chosen plan, its run, the ceiling and every trial.
    """
    require(0.0 < target <= 1.0, f"target={target!r}", "out of range", "use 0 < target <= 1")
    require(max_simulations >= 3, f"max_simulations={max_simulations!r}", "too few", "use 3+")
    rate = score or attainment
    price = cost or allocated_gpu_hours
    ceiling: float | None = None
    goal = target
    colds = tuple(float(c) for c in cold_starts_for(scenario, required, base))
    plan = sharpen(required, scenario).tolist()
    fleet = fleet_replicas(scenario)
    runs: dict[float, tuple[OracleConfig, RunResult, OracleTrial]] = {}
    trials: list[OracleTrial] = []

    def hits(x: float) -> bool:
        margin, slack = _knob(x)
        config = dataclasses.replace(
            base, margin=margin, slack_s=slack, cold_starts_s=colds, max_replicas=fleet
        )
        result = simulate(scenario, OraclePolicy.from_config(plan, config, name))
        trial = OracleTrial(margin, slack, rate(result), price(result))
        trials.append(trial)
        runs[x] = (config, result, trial)
        logger.debug(
            "%s: margin %+.3f, slack %.0f s: attainment %.4f, %.3f GPU-h",
            name, margin, slack, trial.attainment, trial.gpu_hours,
        )  # fmt: skip
        if on_trial is not None:
            on_trial(trial)
        return trial.attainment >= goal

    budget = max_simulations - 1  # one run kept for the ceiling
    lo, hi = (MIN_MARGIN, 0.0) if hits(0.0) else (0.0, math.nan)
    x = FIRST_STEP
    while math.isnan(hi) and len(trials) < budget and x <= MAX_MARGIN:
        if hits(x):
            hi = x
        else:
            lo, x = x, 2.0 * x
    if math.isnan(hi):  # nothing met the target: can the node pool meet it at all?
        ceiling = rate(ceiling_run(scenario))
        budget -= 1
        if ceiling < target:
            goal = ceiling - CEILING_SLACK
            logger.warning(
                "%s: the ceiling %.4f is below the target %.4f; aiming for %.4f",
                name, ceiling, target, goal,
            )  # fmt: skip
            met = [k for k, run in runs.items() if run[2].attainment >= goal]
            if met:
                hi = min(met)
                lo = max((k for k in runs if k < hi), default=MIN_MARGIN)
    while not math.isnan(hi) and len(trials) < budget and hi - lo > 0.01:
        mid = round((lo + hi) / 2.0, 4)
        if hits(mid):
            hi = mid
        else:
            lo = mid
    passing = [k for k, run in runs.items() if run[2].attainment >= goal]
    if passing:
        best = min(passing, key=lambda k: (runs[k][2].gpu_hours, k))
    else:
        best = max(runs, key=lambda k: (runs[k][2].attainment, -runs[k][2].gpu_hours))
    config, result, chosen = runs[best]
    logger.info(
        "%s: chose margin %+.3f (%.4f attainment, %.3f GPU-h, goal %.4f, ceiling %s) "
        "after %d runs",
        name, config.margin, chosen.attainment, chosen.gpu_hours, goal,
        "not run" if ceiling is None else f"{ceiling:.4f}", len(trials) + (ceiling is not None),
    )  # fmt: skip
    return OracleSearch(
        config, result, chosen.attainment, chosen.gpu_hours, target, goal, ceiling, tuple(trials)
    )
