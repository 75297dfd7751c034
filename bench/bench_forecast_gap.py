"""How much of ``hybrid``'s gap to the hindsight oracle is its forecast's.

``hybrid`` runs twice on each seed and knob value of one trace: as it is, and told
the demand ahead. The second replaces ``forecast.forecast`` for that run only
(``told_ahead``) with the trace's own arrivals: the demand at ``now + horizon`` is
the GPU-seconds of work that arrived per second over the minute before it (for a
service of one request per replica, the requests in service on average), with a
Poisson band at the configured quantile. Everything else (the reactive need, the
queue's terms, the scale-in rules, whole nodes, the forecaster's own state) runs
unchanged. It is no policy anyone can run: it is what a perfect forecast would buy
the same policy, so its cost is the rest of the policy's, and the difference to
``hybrid`` as it is is the forecast's.

Each variant's cost at the target attainment is read off each seed's curve of
``per_replica`` (``evaluate.bracket.at_target``) and off the mean curve, as
``gpuscale evaluate`` reads it, and divided by the oracle's figure in docs/results.md's
table (``bench/results.json["hybrid"]``) for the same trace and scale without
faults, when it is there. LLM traces are refused: under continuous batching the
requests in service are not the work rate. Run (docs/benchmarks.md's table rows):

    python bench/bench_forecast_gap.py --trace gentd26 --scale 0.13 --duration 21600 --write
    python bench/bench_forecast_gap.py --trace diurnal --scale 4 --duration 21600 --write
    python bench/bench_forecast_gap.py --trace ramp --write

``--write`` stores the figures as ``bench/results.json["forecast_gap"]["<trace> x<scale>"]``.
``bench/bench_seasonal.py`` does the same on four days of a rate file, told the
file's rate.
"""

import argparse
import contextlib
import dataclasses
import datetime
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from statistics import NormalDist
from typing import Any
from unittest import mock

import numpy as np

from gpuscale.errors import GpuscaleError
from gpuscale.evaluate.bracket import Sample, at_target, mean_curve
from gpuscale.evaluate.pool import RunPool
from gpuscale.evaluate.runner import EvaluationRequest, PreparedEvaluation, build_policy
from gpuscale.evaluate.scoring import score_run
from gpuscale.evaluate.stats import mean_ci
from gpuscale.scaling import forecast
from gpuscale.scaling.hybrid import HybridConfig
from gpuscale.sim.engine import simulate

ROOT = Path(__file__).resolve().parent
TARGET = 0.99
MULTIPLES = (1.0, 1.3, 1.6, 1.9, 2.2, 2.6, 3.0, 3.5)
"""``per_replica`` values swept by default, as multiples of the fair value: told the
demand ahead, ``hybrid`` holds 0.99 at a leaner setting than as it is."""
WINDOW_S = 60
"""``told_ahead`` reads the work that arrived over this many seconds."""
VARIANTS = ("as is", "told ahead")


def told_ahead(
    busy_at: Callable[[float], float], ahead: bool = True
) -> Callable[..., forecast.Forecast]:
    """A stand-in for ``forecast.forecast`` that knows the demand at ``now + horizon``.

    Args:
        busy_at: The requests in service on average at a time, seconds.
        ahead: False: the demand at ``now``, as if the horizon were 0 (what a perfect
            reading of the present, with no knowledge of what changes next, gives).

    Returns:
        A function with ``forecast.forecast``'s signature: that mean, and as its bound
        the configured quantile of a Poisson count with that mean (the requests in
        service of an M/G/inf queue).
    """

    def known(
        _state: Mapping[str, Any],
        _points: Any,
        now: float,
        horizon_s: float,
        cfg: forecast.ForecastConfig,
        _average_s: float = 0.0,
    ) -> forecast.Forecast:
        mean = max(busy_at(now + horizon_s if ahead else now), 0.0)
        upper = mean + NormalDist().inv_cdf(cfg.quantile) * math.sqrt(mean)
        return forecast.Forecast(mean, upper, "seasonal", horizon_s)

    return known


def trailing_work(work_s: np.ndarray) -> Callable[[float], float]:
    """The work that arrived per second over the ``WINDOW_S`` before a time, seconds.

    Returns:
        A function of the time, seconds.
    """
    total = np.concatenate([[0.0], np.cumsum(work_s)])

    def at(t: float) -> float:
        end = min(max(int(t), 1), work_s.size)
        start = max(end - WINDOW_S, 0)
        return float(total[end] - total[start]) / (end - start)

    return at


def hybrid_run(
    prepared: PreparedEvaluation,
    config: HybridConfig,
    seed: int,
    multiple: float,
    warmup_s: float,
    known: Callable[..., forecast.Forecast] | None = None,
) -> tuple[float, float | None]:
    """One hybrid run with ``config``, its forecast replaced by ``known`` if given.

    Returns:
        Its GPU-hours and attainment after the warm-up.
    """
    policy = build_policy("hybrid", config, prepared.required)
    # predictive.plan calls forecast.forecast through the module, so this replaces it there.
    told = mock.patch.object(forecast, "forecast", known) if known else contextlib.nullcontext()
    with told:
        result = simulate(prepared.scenario, policy)
    score = score_run(result, seed, multiple, warmup_s, cooldown_s=prepared.scenario.timeout_s)
    return score.gpu_hours, score.slo_attainment


def run(
    request: EvaluationRequest,
    multiple: float,
    variant: str,
    warmup_s: float,
    progress: Any = None,
) -> tuple[float, float | None]:
    """One hybrid run of ``variant``; its GPU-hours and attainment after the warm-up."""
    prepared = request.prepare()
    config = prepared.configs["hybrid"]
    config = dataclasses.replace(config, per_replica=multiple * config.per_replica)
    work = np.asarray(prepared.scenario.workload.work_s, dtype=float)
    known = told_ahead(trailing_work(work)) if variant == "told ahead" else None
    return hybrid_run(prepared, config, request.seed, multiple, warmup_s, known)


def oracle_at_target(trace: str, scale: float) -> float | None:
    """The oracle's GPU-hours at the target in docs/results.md's row without faults.

    A rate file's row is found by its file name (the table stores the path it ran).

    Returns:
        ``bench/results.json["hybrid"]``'s figure for ``trace`` at ``scale``, or None.
    """
    out = ROOT / "results.json"
    rows = json.loads(out.read_text()).get("hybrid", {}).get("traces", []) if out.exists() else []
    for row in rows:
        same = Path(str(row.get("trace"))).stem == Path(trace).stem
        if same and row.get("scale") == scale and not row.get("faults"):
            value = row.get("policies", {}).get("oracle", {}).get("gpu_hours_at_target")
            return None if value is None else float(value)
    return None


def readings(
    points: Mapping[tuple[int, float], tuple[float, float | None]],
    seeds: range,
    multiples: tuple[float, ...],
) -> dict[str, Any]:
    """Each seed's and the mean curve's cost at the target, read as ``gpuscale evaluate`` reads.

    Args:
        points: (GPU-hours, attainment) of each (seed, multiple) run.
        seeds: The seeds run.
        multiples: The ``per_replica`` multiples run.

    Returns:
        The readings, as ``results.json`` stores them.
    """
    samples = [Sample(s, m, *points[(s, m)]) for m in multiples for s in seeds]
    found = at_target(samples, seeds, TARGET)
    known = [v for v in found.per_seed.values() if v is not None]
    return {
        "gpu_hours_at_target": found.mean,
        "bound": found.bound,
        "gpu_hours_at_target_ci95": mean_ci(known).interval() if known else [None, None],
        "per_seed": found.per_seed,
        "seeds_bounded": found.seeds_bounded,
        "curve": [
            {"multiple": m, "gpu_hours": c, "slo_attainment": a}
            for m, (c, a) in zip(multiples, mean_curve(samples), strict=True)
        ],
    }


TABLE_HEAD = (
    "| forecast | GPU-h at target (mean curve) | x oracle | seeds' mean, 95 % "
    "| seeds reaching | bounded |\n|---|---:|---:|---:|---:|---:|"
)


def table_row(name: str, r: dict[str, Any], oracle: float | None) -> str:
    """One variant's row under ``TABLE_HEAD``; sets ``r["x_oracle"]``.

    Returns:
        The row.
    """
    low, high = r["gpu_hours_at_target_ci95"]
    known = [x for x in r["per_seed"].values() if x is not None]
    spread = f"{np.mean(known):.1f} ({low:.1f} to {high:.1f})" if low is not None else "-"
    cost, mark = r["gpu_hours_at_target"], "<= " if r["bound"] else ""
    reading = "never reaches" if cost is None else f"{mark}{cost:.1f}"
    r["x_oracle"] = x = cost / oracle if cost is not None and oracle else None
    times = "-" if x is None else f"{mark}{x:.3f}"
    return f"| {name} | {reading} | {times} | {spread} | {len(known)} | {r['seeds_bounded']} |"


def run_sweep(
    task: Callable[..., tuple[float, float | None]],
    keys: Sequence[tuple[int, float, str]],
    calls: Sequence[tuple[str, tuple[Any, ...]]],
    jobs: int,
    seeds: range,
    multiples: tuple[float, ...],
) -> dict[str, dict[str, Any]]:
    """Run ``calls`` (one per (seed, multiple, variant) in ``keys``) in ``jobs`` workers.

    Returns:
        Each variant's ``readings``, in the order the variants first appear in ``keys``.
    """
    with RunPool(jobs) as pool:
        scores = pool.run(task, calls)
    points: dict[str, dict[tuple[int, float], tuple[float, float | None]]] = {}
    for (s, m, v), score in zip(keys, scores, strict=True):
        points.setdefault(v, {})[(s, m)] = score
    return {v: readings(p, seeds, multiples) for v, p in points.items()}


ORACLE_LINE = "oracle: {oracle:.1f} GPU-h at {target} (docs/results.md, bench/results.json)"


def ratio_text(name: str, ratio: Mapping[str, Any]) -> str:
    """``seed_ratio``'s answer as one printed line.

    Returns:
        The line.
    """
    low, high = (v or 0.0 for v in ratio["ci95"])
    spread = f"95 % {low:.3f} to {high:.3f}, {ratio['seeds']} seeds"
    return f"{name}, seed by seed: {ratio['mean']:.3f} ({spread})"


def seed_ratio(a: Mapping[str, Any], b: Mapping[str, Any], seeds: range) -> dict[str, Any] | None:
    """The ratio of two variants' readings at the target, seed by seed, with its interval.

    Returns:
        ``{"mean", "ci95", "seeds"}``, or None when no seed has both.
    """
    ratios = [
        x / y for s in seeds if (x := a["per_seed"][s]) is not None and (y := b["per_seed"][s])
    ]
    if not ratios:
        return None
    ci = mean_ci(ratios)
    return {"mean": ci.mean, "ci95": [ci.low, ci.high], "seeds": len(ratios)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", required=True, help="a shared trace or generator")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--duration", type=int, default=None, help="seconds")
    parser.add_argument("--warmup", type=float, default=600.0, help="seconds not scored")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--multiples",
        default=",".join(f"{m:g}" for m in MULTIPLES),
        help="per_replica values, as multiples of the fair value, comma-separated",
    )
    parser.add_argument("--write", action="store_true", help="store results.json['forecast_gap']")
    args = parser.parse_args()
    first = EvaluationRequest(args.trace, ("hybrid",), args.scale, duration_s=args.duration)
    try:
        workload = first.prepare().scenario.workload
    except GpuscaleError as exc:
        parser.error(str(exc))
    if workload.tokens is not None:
        parser.error(
            f"--trace {args.trace}: an LLM trace, whose requests in service are not its "
            "work rate under continuous batching; use gentd26, diurnal, ramp or a rate file"
        )
    seeds = range(args.seeds)
    multiples = tuple(sorted(float(m) for m in args.multiples.split(",")))
    keys = [(s, m, v) for s in seeds for m in multiples for v in VARIANTS]
    calls = [
        (
            f"{s}/{m:.2f}/{v}",
            (dataclasses.replace(first, seed=s), m, v, args.warmup),
        )
        for s, m, v in keys
    ]
    found = run_sweep(run, keys, calls, args.jobs, seeds, multiples)
    oracle = oracle_at_target(args.trace, args.scale)
    label = f"{args.trace} x{args.scale:g}"
    print(f"{label}, hybrid, {args.seeds} seeds, scored after {args.warmup:g} s, target {TARGET}:")
    print(TABLE_HEAD)
    for v, r in found.items():
        print(table_row(v, r, oracle))
    if oracle:
        print(ORACLE_LINE.format(oracle=oracle, target=TARGET))
    ratio = seed_ratio(found["as is"], found["told ahead"], seeds)
    if ratio is not None:
        print(ratio_text("as is / told ahead", ratio))
    if args.write:
        out = ROOT / "results.json"
        document = json.loads(out.read_text()) if out.exists() else {}
        document.setdefault("forecast_gap", {})[label] = {
            "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="minutes"),
            "trace": args.trace,
            "scale": args.scale,
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "seeds": args.seeds,
            "target_attainment": TARGET,
            "per_replica_multiples": list(multiples),
            "oracle_gpu_hours_at_target": oracle,
            "variants": found,
            "ratio": ratio,
        }
        out.write_text(json.dumps(document, indent=2) + "\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
