"""The hindsight oracle's plan: searched until its simulated attainment meets the target.

The oracle (``scaling.oracle``) plans from a queueing estimate of the replicas
each second needs, and knows each pod's actual cold start in advance
(``sim.coldstart.pod_cold_starts``). An estimate can be short (bursts inside its
rate window, a queue that builds while capacity arrives) or generous, so the
plan is checked the only way that counts: by running it through the same
simulator the baselines run through (``sim.engine.simulate``, same scenario,
same seed) and reading the run's attainment. The estimate is first sharpened
with the arrivals the oracle knows (``sharpen``: each second scaled by the work
of the surrounding ``SHARP_WINDOW_S`` seconds over that of the estimate's own
rate window). A replica is kept while it is needed again within the node
break-even (``node_hold_s``): GPU-hours count a node until it has stood idle,
and each release drains pods whose long requests are retried. Then one knob
``x`` scales the plan: ``margin = x`` (``ceil(required x (1 + x))`` replicas)
and ``slack_s = SLACK_PER_MARGIN_S x max(x, 0)``. The search is deterministic
and bounded (``max_simulations`` runs, the ceiling run included):

Plans are whole nodes (``FILL_NODES``), and a plan that rounds to one already
run is not run again.

1. ``x = 0``.
2. If it misses the target: the ceiling, every GPU the node pool holds asked for
   at the start (from the scenario's own initial replicas and nodes). If it
   misses the target (the serving model caps attainment below it: an SLO shorter
   than the slowest service times, whatever the fleet), the goal is
   the ceiling itself, less one request's share of the run (``ceiling_goal``):
   attainment counts requests, and the fluid queue only approaches the ceiling
   (any queueing at all costs a fraction of a request), so a plan within one
   request of an unlimited fleet is as good as one can be. ``met_target`` is
   False.
3. When the pool grows by new nodes, ``x = 0`` again with nodes asked for only
   when pods wait for them (``node_lead_s = 0``); if that meets the goal more
   cheaply (or alone meets it), the rest of the search plans that way.
4. If ``x = 0`` met the goal, bisect ``x`` down towards ``MIN_MARGIN``.
   Otherwise local rounds (at most ``LOCAL_ROUNDS``): each raises the plan by
   ``LOCAL_STEP`` of the estimate over the scored steps that missed the goal in
   the last run and the ``LOCAL_BEFORE_S`` seconds before them
   (``missed_seconds``), until the goal is met or a round gains less than
   ``LOCAL_PROGRESS``; a round that meets it is bisected down to the least share
   of its raise, and of the seconds it raised before each miss, that still does
   (``LOCAL_REFINE``). Then, if still short, double ``x`` from ``FIRST_STEP`` on
   the raised plan until the goal is met, and bisect between miss and hit.
5. When the cheapest plan that met the goal asks for new nodes ahead, bisect how
   far ahead (its ``node_lead_s`` down towards 0, to ``NODE_LEAD_REFINE_S``): a
   node that joins a little later costs less and may still meet the goal.
6. The answer is the cheapest run (GPU-hours, by the search's ``cost``) that met
   the goal, or, when none did, the run with the highest attainment.

``gpuscale evaluate`` runs one search per seed (``evaluate.sweep``), scored with
its warm-up-aware scorer (``score`` and ``cost``), and its trials are the
oracle's cost-against-attainment curve.

What comes out is the best plan found in hindsight, not a proven lower bound: a
cheaper plan may exist that this search does not reach.
"""

import dataclasses
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from gpuscale.errors import require
from gpuscale.evaluate import fleet
from gpuscale.evaluate.oracle_plan import (
    LOCAL_BEFORE_S,
    LOCAL_MAX,
    MAX_MARGIN,
    cold_starts_for,
    missed_seconds,
    node_hold_s,
    sharpen,
)
from gpuscale.scaling.oracle import OracleConfig, OraclePolicy
from gpuscale.scaling.static import StaticPolicy
from gpuscale.sim.engine import Scenario, simulate
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

SLACK_PER_MARGIN_S = 60.0
"""Seconds of planning-window widening per unit of (positive) margin."""

BISECT_TOLERANCE = 0.002
"""The search stops bisecting the margin when the bracket is this narrow."""

CEILING_REQUESTS = 1.0
"""When the ceiling is below the target, the search aims this many requests' share below it."""

LOCAL_STEP = 0.05
"""Share of the estimate each local round adds to the seconds around a missed step."""

LOCAL_PROGRESS = 1e-4
"""A local round that gains less attainment than this ends the local rounds."""

FILL_NODES = True
"""Plan whole nodes (``OracleConfig.fill_nodes``): the harness pays for a node's every GPU."""

LOCAL_ROUNDS = 8
"""Most local rounds before the search falls back to scaling the whole plan."""

NODE_LEAD_REFINE_S = 25.0
"""The cheapest plan's node lead is bisected down to a bracket this narrow, seconds."""

LOCAL_REFINE = 0.125
"""A local round that meets the goal is bisected down to this share of its raise."""


@dataclass(frozen=True, slots=True)
class OracleTrial:
    """One simulated plan.

    Attributes:
        margin: Extra share of the requirement planned for (negative: less).
        slack_s: Planning-window widening on each side, seconds.
        attainment: Share of arrived requests completed within the SLO, 0 to 1.
        gpu_hours: GPU-hours the plan cost (by the search's ``cost``).
        raised_s: Seconds of the plan a local round raised above the estimate.
        node_lead_s: Node provisioning the plan asked for new nodes ahead by, seconds.
    """

    margin: float
    slack_s: float
    attainment: float
    gpu_hours: float
    raised_s: int = 0
    node_lead_s: float = 0.0


@dataclass(frozen=True, slots=True)
class OracleSearch:
    """The outcome of a search: the chosen plan and every run that led to it.

    Attributes:
        config: The chosen plan's config (build with ``OraclePolicy.from_config``).
        result: The chosen plan's run.
        attainment: The chosen plan's attainment (by the search's ``score``), 0 to 1.
        gpu_hours: The chosen plan's GPU-hours (by the search's ``cost``).
        target: The attainment asked for.
        goal: The attainment aimed for: ``target``, or ``ceiling_goal`` when the
            ceiling is below the target.
        ceiling: Attainment of the whole node pool asked for at the start; None when
            the first plan met the target (it is run only when that one did not).
        trials: Every oracle run, in the order made.
        plan: The chosen plan's per-second requirement (build the policy from it and
            ``config``).
    """

    config: OracleConfig
    result: RunResult
    attainment: float
    gpu_hours: float
    target: float
    goal: float
    ceiling: float | None
    trials: tuple[OracleTrial, ...]
    plan: tuple[int, ...] = ()

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


def ceiling_goal(ceiling: float, requests: float) -> float:
    """The goal when the ceiling is below the target: the ceiling less ``CEILING_REQUESTS``.

    Args:
        ceiling: Attainment of the ceiling run, 0 to 1.
        requests: Requests that arrived in the ceiling run (a share of one of them is
            the finest difference attainment can show).

    Returns:
        Attainment, 0 to 1.
    """
    return ceiling - CEILING_REQUESTS / max(requests, 1.0)


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
    warmup_s: float = 0.0,
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
        warmup_s: Seconds ``score`` does not count: a step before it does not make a
            local round raise the plan.

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
    estimate = sharpen(required, scenario).astype(float)
    boost = np.zeros(estimate.size)
    plan = estimate.astype(np.int64).tolist()
    fleet = fleet_replicas(scenario)
    hold = node_hold_s(base)
    runs: dict[float, tuple[OracleConfig, RunResult, OracleTrial, list[int]]] = {}
    local: list[tuple[OracleConfig, RunResult, OracleTrial, list[int]]] = []
    trials: list[OracleTrial] = []
    last: list[RunResult] = []
    node_lead = [base.node_lead_s]
    seen: dict[tuple[bytes, float, float], RunResult] = {}

    def hits(x: float, *, boosted: bool = False) -> bool:
        margin, slack = _knob(x)
        config = dataclasses.replace(
            base,
            margin=margin,
            slack_s=slack,
            cold_starts_s=colds,
            max_replicas=fleet,
            hold_s=hold,
            node_lead_s=node_lead[0],
            fill_nodes=FILL_NODES,
        )
        policy = OraclePolicy.from_config(plan, config, name)
        # Margins a node rounds to the same plan decide alike: run each plan once.
        key = (policy.planned.tobytes(), slack, node_lead[0])
        result = seen.get(key)
        if result is None:
            result = seen[key] = simulate(scenario, policy)
        raised = int(np.count_nonzero(boost))
        trial = OracleTrial(margin, slack, rate(result), price(result), raised, node_lead[0])
        trials.append(trial)
        if boosted:
            local.append((config, result, trial, plan))
        else:
            runs[x] = (config, result, trial, plan)
        last[:] = [result]
        logger.debug(
            "%s: margin %+.3f, slack %.0f s: attainment %.4f, %.3f GPU-h",
            name, margin, slack, trial.attainment, trial.gpu_hours,
        )  # fmt: skip
        if on_trial is not None:
            on_trial(trial)
        return trial.attainment >= goal

    budget = max_simulations
    met = hits(0.0)
    if not met:  # the estimate misses: can the node pool meet the target at all?
        full = ceiling_run(scenario)
        ceiling = rate(full)
        budget -= 1
        if ceiling < target:
            goal = ceiling_goal(ceiling, full.requests)
            logger.warning(
                "%s: the ceiling %.4f is below the target %.4f; aiming for %.4f",
                name, ceiling, target, goal,
            )  # fmt: skip
            met = trials[0].attainment >= goal
    if base.node_lead_s > 0:  # nodes asked for only when pods wait: cheaper if it meets the goal
        early = runs[0.0]
        node_lead[0] = 0.0
        late = runs[0.0] if hits(0.0) else None
        if late is not None and (not met or late[2].gpu_hours < early[2].gpu_hours):
            local.append(early)
            met = True
        else:
            local.append(runs[0.0])
            runs[0.0], node_lead[0], last[:] = early, base.node_lead_s, [early[1]]
    lo, hi = (MIN_MARGIN, 0.0) if met else (0.0, math.nan)
    rounds = 0  # raise only the seconds around the steps that missed
    while math.isnan(hi) and rounds < LOCAL_ROUNDS and len(trials) < budget - 1:
        missed = missed_seconds(last[0], goal, warmup_s, estimate.size)
        if not missed.any() or boost[missed].min() >= LOCAL_MAX:
            break
        previous, missed_run = boost.copy(), last[0]
        boost[missed] = np.minimum(boost[missed] + LOCAL_STEP, LOCAL_MAX)
        plan = np.ceil(estimate * (1.0 + boost) - 1e-9).astype(np.int64).tolist()
        rounds += 1
        before = trials[-1].attainment
        if hits(0.0, boosted=True):
            lo = hi = 0.0  # met: no global margin is tried; bisect this round's raise
            low, high = 0.0, 1.0
            while len(trials) < budget and high - low > LOCAL_REFINE:
                share = (low + high) / 2.0  # of the raise, and of the seconds before a miss
                near = missed_seconds(
                    missed_run, goal, warmup_s, estimate.size, share * LOCAL_BEFORE_S
                )
                raised = previous.copy()
                raised[near] = np.minimum(previous[near] + share * LOCAL_STEP, LOCAL_MAX)
                plan = np.ceil(estimate * (1.0 + raised) - 1e-9).astype(np.int64).tolist()
                low, high = (low, share) if hits(0.0, boosted=True) else (share, high)
        elif trials[-1].attainment < before + LOCAL_PROGRESS:
            break  # raising the plan where it missed does not help: scale all of it
    x = FIRST_STEP  # otherwise scale the whole (locally raised) plan
    while math.isnan(hi) and len(trials) < budget and x <= MAX_MARGIN:
        if hits(x):
            hi = x
        else:
            lo, x = x, 2.0 * x
    while not math.isnan(hi) and len(trials) < budget and hi - lo > BISECT_TOLERANCE:
        mid = round((lo + hi) / 2.0, 4)
        if hits(mid):
            hi = mid
        else:
            lo = mid
    passing = [run for run in list(runs.values()) + local if run[2].attainment >= goal]
    best = min(passing, key=lambda run: (run[2].gpu_hours, run[2].margin), default=None)
    if best is not None and best[0].node_lead_s > 0:  # ask for new nodes later while it meets
        plan, low, high = best[3], 0.0, best[0].node_lead_s
        while len(trials) < budget and high - low > NODE_LEAD_REFINE_S:
            node_lead[0] = mid = round((low + high) / 2.0, 1)
            low, high = (low, mid) if hits(best[0].margin, boosted=True) else (mid, high)
    every = list(runs.values()) + local
    passing = [run for run in every if run[2].attainment >= goal]
    if passing:
        config, result, chosen, chosen_plan = min(
            passing, key=lambda run: (run[2].gpu_hours, run[2].margin)
        )
    else:
        config, result, chosen, chosen_plan = max(
            every, key=lambda run: (run[2].attainment, -run[2].gpu_hours)
        )
    logger.info(
        "%s: chose margin %+.3f (%.4f attainment, %.3f GPU-h, goal %.4f, ceiling %s) "
        "after %d runs",
        name, config.margin, chosen.attainment, chosen.gpu_hours, goal,
        "not run" if ceiling is None else f"{ceiling:.4f}", len(trials) + (ceiling is not None),
    )  # fmt: skip
    return OracleSearch(
        config,
        result,
        chosen.attainment,
        chosen.gpu_hours,
        target,
        goal,
        ceiling,
        tuple(trials),
        tuple(chosen_plan),
    )
