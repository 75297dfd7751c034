"""Knob sweeps over seeds: the runs behind every figure the harness reports.

``gpuscale evaluate`` does not trust one run. For each policy it sweeps the
policy's main knob (``evaluate.knobs``) around the value its fair rule picks,
repeats every point on ``seeds`` seeds, and runs an unlimited fleet on each seed
for the trace's ceiling. Every run is independent, so the runs go to a
``concurrent.futures`` executor (``evaluate.executor``): each run is a small
picklable ``RunSpec``, and the worker loads the trace and derives the scenario
for its seed itself, once per process (``_prepared``), so a day's scenario is
never shipped to a worker. The parameters come from the first seed's scenario
(``SweepPlan.base``) and are the same on every seed, so curves of several seeds
line up point by point.

The oracle (``SEARCHED``) has no such knob: on each seed its run is a search
(``evaluate.oracle_search.search_oracle``) for the cheapest plan whose simulated
attainment, scored as every run is (``scoring.score_run``: node GPU-hours and
attainment from the warm-up on), meets the target; the plans it tried are its
curve (``RunScore.trials``), at no extra runs.
"""

import dataclasses
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpuscale.errors import config_error
from gpuscale.evaluate import bracket
from gpuscale.evaluate import policies as registry
from gpuscale.evaluate.executor import Progress, Runner
from gpuscale.evaluate.fixed_runs import CEILING as CEILING
from gpuscale.evaluate.fixed_runs import CEILING_PEAK_MULTIPLE as CEILING_PEAK_MULTIPLE
from gpuscale.evaluate.fixed_runs import ceiling_run, searched_run
from gpuscale.evaluate.runner import (
    EvaluationRequest,
    PreparedEvaluation,
    run_one,
)
from gpuscale.evaluate.scoring import RunScore, score_run

logger = logging.getLogger(__name__)

DEFAULT_SEEDS = 10
"""Seeds per point unless told otherwise."""

DEFAULT_KNOB_VALUES = 8
"""Knob values per policy's sweep unless told otherwise (the fair value is added)."""

DEFAULT_WARMUP_S = 600.0
"""Seconds at the start of a run that are not scored, unless the run is short."""

SHORT_RUN_WARMUP_SHARE = 0.2
"""A run shorter than ``DEFAULT_WARMUP_S / SHORT_RUN_WARMUP_SHARE`` warms up for this share."""

DEFAULT_TARGET = 0.99
"""The attainment at which curves are compared unless told otherwise."""

SEARCHED = "oracle"
"""The policy whose run on each seed is a search for the target (``search_oracle``)."""


def default_warmup_s(duration_s: float) -> float:
    """The warm-up used when none is given: 600 s, or a fifth of a run shorter than 3000 s.

    Returns:
        Seconds.
    """
    return min(DEFAULT_WARMUP_S, SHORT_RUN_WARMUP_SHARE * duration_s)


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One run of a sweep, small enough to ship to any worker.

    Attributes:
        request: The evaluation; its seed is replaced by ``seed``.
        seed: The seed of this run.
        policy: Policy name (``CEILING`` for the unlimited fleet).
        config: The policy's config (None for the ceiling).
        knob_value: The value of the policy's knob in ``config``; None without a knob.
        warmup_s: Seconds not scored at the start.
        max_nodes: The node pool's bound, the same on every seed.
        keep: Whether to return the whole ``RunResult`` (for the report's timelines).
        search_target: For the oracle, the attainment its search must reach; None
            runs ``config`` as it is.
        target: The attainment the sweep compares at (burst recovery is judged on it).
    """

    request: EvaluationRequest
    seed: int
    policy: str
    config: Any
    knob_value: float | None
    warmup_s: float
    max_nodes: int
    keep: bool = False
    search_target: float | None = None
    target: float = DEFAULT_TARGET

    @property
    def key(self) -> str:
        """The progress key: ``policy/seed/value``."""
        return f"{self.policy}/{self.seed}/{self.knob_value}"


_CACHE: dict[tuple[EvaluationRequest, int], PreparedEvaluation] = {}
_CACHE_SIZE = 4


def _prepared(request: EvaluationRequest, seed: int, max_nodes: int) -> PreparedEvaluation:
    """The scenario of ``request`` on ``seed``, computed once per process."""
    key = (request, seed)
    hit = _CACHE.get(key)
    if hit is None:
        hit = dataclasses.replace(request, seed=seed).prepare()
        cluster = hit.scenario.cluster
        if cluster.max_nodes < max_nodes:
            bigger = dataclasses.replace(cluster, max_nodes=max_nodes)
            hit = dataclasses.replace(
                hit, scenario=dataclasses.replace(hit.scenario, cluster=bigger)
            )
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = hit
    return hit


def execute(spec: RunSpec, *, progress: Callable[[float], None]) -> RunScore:
    """Run one point of a sweep and score it (a module-level function, for any worker).

    Returns:
        The run's score, with the whole result when ``spec.keep``.
    """
    prepared = _prepared(spec.request, spec.seed, spec.max_nodes)
    if spec.search_target is not None:
        return searched_run(prepared, spec, spec.search_target, progress)
    if spec.policy == CEILING:
        result = ceiling_run(prepared, progress)
    else:
        configs = {**prepared.configs, spec.policy: spec.config}
        result = run_one(
            dataclasses.replace(prepared, configs=configs),
            spec.policy,
            progress=progress,
            quiet=not spec.keep,
        )
    return score_run(
        result,
        spec.seed,
        spec.knob_value,
        spec.warmup_s,
        keep=spec.keep,
        cooldown_s=prepared.scenario.timeout_s,
        target=spec.target,
    )


@dataclass(frozen=True, slots=True)
class SweepRequest:
    """What the user asked of a sweep.

    Attributes:
        request: Trace, policies, scale, SLO, faults; ``request.seed`` is the first seed.
        seeds: Seeds per point: ``request.seed`` and the ones after it.
        knob_values: Values per knob (the fair value is added); 0 runs the fair value only.
        warmup_s: Seconds not scored; None for ``default_warmup_s``.
        target_attainment: Attainment at which the curves are compared, 0 to 1.
    """

    request: EvaluationRequest
    seeds: int = DEFAULT_SEEDS
    knob_values: int = DEFAULT_KNOB_VALUES
    warmup_s: float | None = None
    target_attainment: float = DEFAULT_TARGET

    def prepare(self) -> "SweepPlan":
        """Check the inputs, derive the parameters on the first seed and list the runs.

        Returns:
            The plan.

        Raises:
            ConfigError: Any input is wrong (one line naming it).
        """
        if self.seeds < 1:
            raise config_error(f"--seeds {self.seeds}", "must be 1 or more", "e.g. --seeds 10")
        if self.knob_values < 0:
            raise config_error(
                f"--knob-values {self.knob_values}", "must be 0 or more", "e.g. --knob-values 8"
            )
        if not 0 < self.target_attainment < 1:
            raise config_error(
                f"--target-attainment {self.target_attainment}",
                "must be between 0 and 1",
                "e.g. --target-attainment 0.99",
            )
        base = self.request.prepare()
        duration = float(base.scenario.workload.duration_s)
        warmup = default_warmup_s(duration) if self.warmup_s is None else self.warmup_s
        if not (math.isfinite(warmup) and 0 <= warmup < duration):
            raise config_error(
                f"--warmup {warmup:g}",
                f"must be at least 0 s and shorter than the run's {duration:g} s",
                "e.g. --warmup 600 with a longer --duration",
            )
        points = {name: self._points(base, name) for name in base.policies}
        return SweepPlan(self, base, float(warmup), points)

    def _points(self, base: PreparedEvaluation, name: str) -> tuple[tuple[float | None, Any], ...]:
        config = base.configs[name]
        knob = registry.get(name).knob
        if knob is None:
            return ((None, config),)
        fair = float(getattr(config, knob.field))
        out = []
        for value in knob.values(fair, self.knob_values):
            typed = int(value) if knob.integer else value
            out.append((float(value), dataclasses.replace(config, **{knob.field: typed})))
        return tuple(out)


@dataclass(frozen=True, slots=True)
class SweepPlan:
    """The runs of a sweep, with the first seed's scenario they were derived on.

    Attributes:
        request: What was asked.
        base: The first seed's prepared evaluation (parameters, report metadata).
        warmup_s: Seconds not scored.
        points: Policy name to its (knob value, config) points, the fair one among them.
    """

    request: SweepRequest
    base: PreparedEvaluation
    warmup_s: float
    points: dict[str, tuple[tuple[float | None, Any], ...]]

    @property
    def seeds(self) -> tuple[int, ...]:
        """The seeds every point runs on."""
        first = self.request.request.seed
        return tuple(range(first, first + self.request.seeds))

    def fair_value(self, name: str) -> float | None:
        """The knob value the fair rule chose for ``name``; None without a knob."""
        knob = registry.get(name).knob
        return None if knob is None else float(getattr(self.base.configs[name], knob.field))

    def specs(self) -> list[RunSpec]:
        """Every run: per seed, the ceiling, then each policy's points (the oracle's search).

        Returns:
            The runs; the first seed's fair runs keep their whole result.
        """
        req = self.request.request
        max_nodes = self.base.scenario.cluster.max_nodes
        out = []
        target = self.request.target_attainment
        for seed in self.seeds:
            out.append(
                RunSpec(req, seed, CEILING, None, None, self.warmup_s, max_nodes, target=target)
            )
            for name, points in self.points.items():
                fair = self.fair_value(name)
                search = target if name == SEARCHED else None
                for value, config in points:
                    keep = seed == req.seed and value == fair
                    out.append(
                        RunSpec(
                            req,
                            seed,
                            name,
                            config,
                            value,
                            self.warmup_s,
                            max_nodes,
                            keep,
                            search,
                            target,
                        )
                    )
        return out

    def extension(self, runs: Sequence[tuple["RunSpec", RunScore]]) -> list["RunSpec"]:
        """The next extension round's runs (``bracket.extension_values``), on every seed.

        Returns:
            The runs; empty when every curve brackets the target or is at its limit.
        """
        knobs = {n: k for n in self.points if n != SEARCHED and (k := registry.get(n).knob)}
        samples: dict[str, list[bracket.Sample]] = {}
        for p, s in runs:
            samples.setdefault(p.policy, []).append(
                bracket.Sample(p.seed, p.knob_value, s.gpu_hours, s.slo_attainment)
            )
        target = self.request.target_attainment
        values = bracket.extension_values(
            knobs,
            samples,
            [s.slo_attainment for spec, s in runs if spec.policy == CEILING],
            self.seeds,
            target,
        )
        req, nodes = self.request.request, self.base.scenario.cluster.max_nodes
        out = []
        for name, value in values.items():
            knob = knobs[name]
            typed = int(value) if knob.integer else value
            config = dataclasses.replace(self.base.configs[name], **{knob.field: typed})
            out += [
                RunSpec(req, seed, name, config, value, self.warmup_s, nodes, target=target)
                for seed in self.seeds
            ]
        return out


def run_sweep(
    plan: SweepPlan, runner: Runner, progress: Progress | None = None
) -> list[tuple[RunSpec, RunScore]]:
    """Run every point of ``plan`` on ``runner``, then extend the curves that miss the target.

    After the planned runs, each policy whose curves do not bracket the target gets
    one more knob value (``bracket.next_value``) on the same seeds, through the same
    runner, for at most ``bracket.MAX_ROUNDS`` rounds.

    Returns:
        Each run's spec with its score: ``plan.specs()`` order, then the extensions.
    """
    specs = plan.specs()
    logger.info(
        "sweep on %s: %d runs (%d seeds, warm-up %g s)",
        plan.base.trace, len(specs), plan.request.seeds, plan.warmup_s,
    )  # fmt: skip
    scores = runner.run(execute, [(s.key, (s,)) for s in specs], progress)
    runs = list(zip(specs, scores, strict=True))
    for round_ in range(1, bracket.MAX_ROUNDS + 1):
        extra = plan.extension(runs)
        if not extra:
            break
        logger.info(
            "sweep on %s: extension round %d, %s",
            plan.base.trace, round_,
            ", ".join(sorted({f"{s.policy} {s.knob_value:g}" for s in extra})),
        )  # fmt: skip
        scores = runner.run(execute, [(s.key, (s,)) for s in extra], progress)
        runs += zip(extra, scores, strict=True)
    return runs


def policy_of(key: str) -> str:
    """The policy of a progress key (``RunSpec.key``).

    Returns:
        The policy name, or ``CEILING``.
    """
    return key.split("/", 1)[0]


def keys_by_policy(specs: Sequence[RunSpec]) -> dict[str, int]:
    """How many runs each policy (and the ceiling) has.

    Returns:
        Name to count, in run order.
    """
    out: dict[str, int] = {}
    for spec in specs:
        out[spec.policy] = out.get(spec.policy, 0) + 1
    return out
