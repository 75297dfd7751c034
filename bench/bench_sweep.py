"""Sweep benchmark: 5 policies x 8 knob values x 10 seeds on azure-conv, on 2 local workers.

Target (on 2 cores): the whole sweep within 10 minutes. It is the sweep
``gpuscale evaluate --trace azure-conv --scale 100`` runs by default (each
policy's knob values plus its fair value, the ceiling's unlimited fleet, every
seed), run through the same ``evaluate.sweep`` and local process pool. Each
worker times its own runs. Reported: wall seconds of the whole sweep against the
target, the number of runs, and the median single-run time (with the median of
each policy, and its ratio to ``static`` measured in the same sweep). Run:

    python bench/bench_sweep.py                        # writes bench/results.json["sweep"]
    python bench/bench_sweep.py --seeds 2 --knobs 3    # a quick check (not the figure)
    python bench/bench_sweep.py --report out/azure-conv # also write results.json and report.html

With ``--report DIR`` the sweep's own evaluation is written and printed as
``gpuscale evaluate`` would (same sweep, same seeds, same figures), so one run gives
both the timing and the comparison table; writing it is not timed.
"""

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from gpuscale.evaluate.executor import open_runner
from gpuscale.evaluate.report import comparison_table, write_report
from gpuscale.evaluate.results import Evaluation
from gpuscale.evaluate.runner import EvaluationRequest
from gpuscale.evaluate.scoring import RunScore, evaluation_from_sweep
from gpuscale.evaluate.sweep import RunSpec, SweepPlan, SweepRequest, execute
from gpuscale.sim.outcome import RunResult

ROOT = Path(__file__).resolve().parent
TARGET_S = 600.0
"""The whole default sweep within 10 minutes on 2 cores."""


def timed(spec: RunSpec, *, progress: Callable[[float], None]) -> tuple[float, RunScore]:
    """One run of the sweep, timed inside its worker: (seconds, score)."""
    start = time.perf_counter()
    score = execute(spec, progress=progress)
    return time.perf_counter() - start, score


def bench(args: argparse.Namespace) -> tuple[dict[str, object], Evaluation, list[RunResult]]:
    start = time.perf_counter()
    request = EvaluationRequest(args.trace, scale=args.scale, duration_s=args.duration)
    plan: SweepPlan = SweepRequest(request, seeds=args.seeds, knob_values=args.knobs).prepare()
    specs = plan.specs()
    with open_runner(args.jobs, len(specs)) as runner:
        timings = runner.run(timed, [(s.key, (s,)) for s in specs])
    evaluation, kept = evaluation_from_sweep(
        plan, [(s, score) for s, (_, score) in zip(specs, timings, strict=True)]
    )
    wall = time.perf_counter() - start
    per_policy: dict[str, list[float]] = {}
    for spec, (seconds, _) in zip(specs, timings, strict=True):
        per_policy.setdefault(spec.policy, []).append(seconds)
    medians = {p: statistics.median(v) for p, v in per_policy.items()}
    full = (args.seeds, args.knobs) == (10, 8) and args.duration is None
    return (
        {
            "trace": args.trace,
            "scale": args.scale,
            "duration_s": float(plan.base.scenario.workload.duration_s),
            "seeds": args.seeds,
            "knob_values": args.knobs,
            "runs": len(specs),
            "runs_per_policy": {p: len(v) for p, v in per_policy.items()},
            "jobs": args.jobs,
            "wall_s": wall,
            "target_s": TARGET_S if full else None,
            "ratio_to_target": wall / TARGET_S if full else None,
            "meets_target": wall <= TARGET_S if full else None,
            "median_run_s": statistics.median(s for s, _ in timings),
            "policy_median_run_s": medians,
            "policy_x_static": {p: s / medians["static"] for p, s in medians.items()},
            "ceiling": evaluation.ceiling,
            "gpu_hours_at_target": {
                n: s.gpu_hours_at_target for n, s in evaluation.policies.items()
            },
        },
        evaluation,
        kept,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="azure-conv")
    parser.add_argument("--scale", type=float, default=100.0)
    parser.add_argument("--duration", type=int, default=None, help="seconds (default: all)")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--knobs", type=int, default=8, help="knob values per policy")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--out", type=Path, default=ROOT / "results.json")
    parser.add_argument("--report", type=Path, default=None, help="also write the evaluation")
    args = parser.parse_args()
    result, evaluation, kept = bench(args)
    if args.report is not None:
        json_path, html_path = write_report(evaluation, kept, args.report)
        Console(width=200).print(comparison_table(evaluation))
        print(f"wrote {json_path} and {html_path}")
    target = result["target_s"]
    verdict = (
        "a reduced sweep: no target"
        if target is None
        else f"target {target:.0f} s, {'meets' if result['meets_target'] else 'MISSES'}"
    )
    print(
        f"{result['runs']} runs on {args.jobs} workers: {result['wall_s']:.1f} s wall "
        f"({verdict}); median run {result['median_run_s']:.2f} s"
    )
    for policy, seconds in result["policy_median_run_s"].items():  # type: ignore[attr-defined]
        print(f"  {policy:<8} median {seconds:.2f} s per run")
    document = json.loads(args.out.read_text()) if args.out.exists() else {}
    document["sweep"] = {"machine": f"{os.cpu_count()} cores", "results": result}
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {args.out} ['sweep']")


if __name__ == "__main__":
    main()
