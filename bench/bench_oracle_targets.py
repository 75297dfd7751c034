"""Does the searched oracle reach the target on every trace and seed? The per-trace table.

For each shared trace (at the scales of docs/results.md) and each generator (at its default
scale and length) it runs what ``gpuscale evaluate --policy oracle --knob-values 0
--seeds 10`` runs, through the same ``evaluate.sweep`` and local process pool: on
each seed the trace's ceiling (a static fleet of 4 x the peak need, started warm)
and the oracle's search, both scored from the warm-up on. A seed meets the target
when the oracle's attainment is at least the target attainment (0.99), or, when
the seed's ceiling is lower, the ceiling less one request's share of the run
(``oracle_search.ceiling_goal``: attainment counts requests, and a fluid queue
only approaches the ceiling). Printed per trace: seeds, ceiling (mean and
lowest), oracle attainment (mean and lowest), the seeds that met the target,
node GPU-hours (mean), and the wall seconds. Run:

    python bench/bench_oracle_targets.py              # every trace, seeds 0-9
    python bench/bench_oracle_targets.py --trace bursty --seeds 3   # a quick check

The table goes to ``bench/results.json["oracle_targets"]`` (other keys are kept;
a run of some traces replaces only those traces' rows).
"""

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from gpuscale.evaluate.executor import open_runner
from gpuscale.evaluate.oracle_search import ceiling_goal
from gpuscale.evaluate.runner import EvaluationRequest
from gpuscale.evaluate.scoring import RunScore
from gpuscale.evaluate.sweep import CEILING, DEFAULT_TARGET, RunSpec, SweepRequest, execute

ROOT = Path(__file__).resolve().parent

TRACES: dict[str, dict[str, object]] = {
    "azure-code": {"scale": 100.0},
    "azure-conv": {"scale": 100.0},
    "gentd26": {"scale": 0.13, "duration_s": 21600, "faults": ("thermal@3600:duration=1800",)},
    "diurnal": {},
    "bursty": {},
    "flash-crowd": {},
    "ramp": {},
}
"""Each trace's evaluation as docs/results.md runs it (generators: their defaults)."""


def command(trace: str, seeds: int) -> str:
    """The ``gpuscale evaluate`` line that runs the same sweep.

    Returns:
        The command line.
    """
    setup = TRACES[trace]
    words = ["gpuscale evaluate", f"--trace {trace}"]
    if "scale" in setup:
        words.append(f"--scale {setup['scale']:g}")
    if "duration_s" in setup:
        words.append(f"--duration {setup['duration_s']}")
    words += [f"--fault {f}" for f in setup.get("faults", ())]  # type: ignore[attr-defined]
    words.append(f"--policy oracle --knob-values 0 --seeds {seeds}")
    return " ".join(words)


def row(trace: str, seeds: int, jobs: int, target: float) -> dict[str, object]:
    """Run the ceiling and the oracle's search on each seed of one trace.

    Returns:
        The trace's row of the table, with each seed's figures.
    """
    setup = TRACES[trace]
    request = EvaluationRequest(
        trace,
        policies=("oracle",),
        scale=float(setup.get("scale", 1.0)),  # type: ignore[arg-type]
        duration_s=setup.get("duration_s"),  # type: ignore[arg-type]
        faults=tuple(setup.get("faults", ())),  # type: ignore[call-overload]
    )
    start = time.perf_counter()
    plan = SweepRequest(request, seeds=seeds, knob_values=0, target_attainment=target).prepare()
    specs: list[RunSpec] = plan.specs()
    with open_runner(jobs, len(specs)) as runner:
        scores: list[RunScore] = runner.run(execute, [(s.key, (s,)) for s in specs])
    wall = time.perf_counter() - start
    ceiling: dict[int, float] = {}
    requests: dict[int, float] = {}
    oracle: dict[int, RunScore] = {}
    for spec, score in zip(specs, scores, strict=True):
        if spec.policy == CEILING:
            ceiling[spec.seed] = 1.0 if score.slo_attainment is None else score.slo_attainment
            requests[spec.seed] = score.requests
        else:
            oracle[spec.seed] = score
    per_seed = []
    for seed in plan.seeds:
        got = oracle[seed].slo_attainment
        got = 1.0 if got is None else got
        aim = target if ceiling[seed] >= target else ceiling_goal(ceiling[seed], requests[seed])
        per_seed.append(
            {
                "seed": seed,
                "ceiling": round(ceiling[seed], 6),
                "attainment": round(got, 6),
                "aim": round(aim, 6),
                "requests": requests[seed],
                "met": got >= aim,
                "gpu_hours": round(oracle[seed].gpu_hours, 3),
                "simulations": len(oracle[seed].trials) + 1,
            }
        )
    attained = [float(s["attainment"]) for s in per_seed]  # type: ignore[arg-type]
    ceilings = [float(s["ceiling"]) for s in per_seed]  # type: ignore[arg-type]
    return {
        "trace": trace,
        "command": command(trace, seeds),
        "duration_s": float(plan.base.scenario.workload.duration_s),
        "warmup_s": plan.warmup_s,
        "seeds": list(plan.seeds),
        "target_attainment": target,
        "ceiling_mean": round(statistics.fmean(ceilings), 5),
        "ceiling_min": round(min(ceilings), 5),
        "aim_min": min(float(s["aim"]) for s in per_seed),  # type: ignore[arg-type]
        "attainment_mean": round(statistics.fmean(attained), 5),
        "attainment_min": round(min(attained), 5),
        "met": sum(bool(s["met"]) for s in per_seed),
        "gpu_hours_mean": round(
            statistics.fmean(float(s["gpu_hours"]) for s in per_seed),  # type: ignore[arg-type]
            3,
        ),
        "wall_s": round(wall, 1),
        "per_seed": per_seed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", action="append", choices=list(TRACES), help="repeatable")
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1 (default 10)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--target", type=float, default=DEFAULT_TARGET, help="attainment")
    parser.add_argument("--out", type=Path, default=ROOT / "results.json")
    args = parser.parse_args()
    rows = []
    print("| trace | seeds | ceiling mean (min) | aim (lowest) | oracle attainment mean (min) | "
          "target met | GPU-h mean | wall s |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for trace in args.trace or list(TRACES):
        r = row(trace, args.seeds, args.jobs, args.target)
        rows.append(r)
        seeds = r["seeds"]
        print(
            f"| {trace} | {seeds[0]}-{seeds[-1]} "  # type: ignore[index]
            f"| {100 * r['ceiling_mean']:.3f} ({100 * r['ceiling_min']:.3f}) % "  # type: ignore[operator]
            f"| {100 * r['aim_min']:.3f} % "  # type: ignore[operator]
            f"| {100 * r['attainment_mean']:.3f} ({100 * r['attainment_min']:.3f}) % "  # type: ignore[operator]
            f"| {r['met']} of {len(seeds)} "  # type: ignore[arg-type]
            f"| {r['gpu_hours_mean']:.1f} | {r['wall_s']:.0f} |",
            flush=True,
        )
    document = json.loads(args.out.read_text()) if args.out.exists() else {}
    old = document.get("oracle_targets", {}).get("results", [])
    kept = [r for r in old if r.get("trace") not in {n["trace"] for n in rows}]
    document["oracle_targets"] = {
        "machine": f"{os.cpu_count()} cores",
        "jobs": args.jobs,
        "results": kept + rows,
    }
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {args.out} ['oracle_targets']")


if __name__ == "__main__":
    main()
