"""Simulator benchmark: every baseline on a day at 1 s on 100 GPUs, and an hour on 10,000.

Targets (on 2 cores): the 24-hour, 100-GPU run of all five baselines under 2 minutes;
the 1-hour, 10,000-GPU run under 5 minutes. Each case runs the five policies in a
two-worker process pool, as ``gpuscale evaluate --jobs 2`` does, and each worker
times its own run. Reported: wall seconds of the whole case (median of
``--repeats``), each policy's seconds (median), the ratio of wall time to the target,
and each policy's time relative to ``static`` in the same run (the cost of the
policy's observations and decisions over the bare simulation). Run:

    python bench/bench_sim.py                 # writes bench/results.json["sim"]
    python bench/bench_sim.py --repeats 1     # quicker
"""

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from gpuscale.evaluate.pool import RunPool
from gpuscale.evaluate.runner import POLICY_NAMES, EvaluationRequest, PreparedEvaluation, run_one

ROOT = Path(__file__).resolve().parent

# name -> (trace, scale, seconds, target wall seconds)
CASES = {
    # diurnal peaks at 16 req/s x 5.5 = 88 req/s of 1 GPU-second each: ~94 GPUs needed.
    "24h_100gpu": ("diurnal", 5.5, 86_400, 120.0),
    # the diurnal trough (4.8 req/s) x 2000 at 1 GPU-second each: ~9,600 GPUs needed.
    "1h_10000gpu": ("diurnal", 2000.0, 3_600, 300.0),
}


def timed_run(
    prepared: PreparedEvaluation, name: str, *, progress: Callable[[float], None] | None = None
) -> tuple[float, float, float]:
    """One policy's run, timed inside its worker: (seconds, GPU-hours, SLO attainment)."""
    start = time.perf_counter()
    result = run_one(prepared, name, progress=progress)
    seconds = time.perf_counter() - start
    return seconds, result.gpu_seconds / 3600.0, result.within_slo / max(result.requests, 1.0)


def bench_case(name: str, repeats: int, pool: RunPool) -> dict[str, object]:
    trace, scale, duration, target = CASES[name]
    start = time.perf_counter()
    prepared = EvaluationRequest(trace, scale=scale, duration_s=duration).prepare()
    prepare_s = time.perf_counter() - start
    walls: list[float] = []
    per_policy: dict[str, list[float]] = {p: [] for p in POLICY_NAMES}
    outcome: dict[str, tuple[float, float]] = {}
    for _ in range(repeats):
        start = time.perf_counter()
        runs = pool.run(timed_run, [(p, (prepared, p)) for p in POLICY_NAMES])
        walls.append(time.perf_counter() - start + prepare_s)
        for policy, (seconds, gpu_hours, slo) in zip(POLICY_NAMES, runs, strict=True):
            per_policy[policy].append(seconds)
            outcome[policy] = (gpu_hours, slo)
    wall = statistics.median(walls)
    medians = {p: statistics.median(v) for p, v in per_policy.items()}
    return {
        "trace": trace,
        "scale": scale,
        "duration_s": duration,
        "peak_required_gpus": int(prepared.required.max()),
        "cluster_max_gpus": prepared.scenario.cluster.max_gpus,
        "repeats": repeats,
        "prepare_s": prepare_s,
        "wall_s": wall,
        "target_s": target,
        "ratio_to_target": wall / target,
        "meets_target": wall <= target,
        "policy_s": medians,
        "policy_x_static": {p: s / medians["static"] for p, s in medians.items()},
        "gpu_hours": {p: o[0] for p, o in outcome.items()},
        "slo_attainment": {p: o[1] for p, o in outcome.items()},
    }


def print_table(results: dict[str, dict[str, object]]) -> None:
    print(f"{'case':<13}{'policy':<8}{'seconds':>9}{'x static':>10}{'GPU-h':>10}{'SLO':>8}")
    for case, r in results.items():
        policy_s = r["policy_s"]
        ratio = r["policy_x_static"]
        hours = r["gpu_hours"]
        slo = r["slo_attainment"]
        assert isinstance(policy_s, dict)
        assert isinstance(ratio, dict)
        assert isinstance(hours, dict)
        assert isinstance(slo, dict)
        for p in POLICY_NAMES:
            print(
                f"{case:<13}{p:<8}{policy_s[p]:>9.1f}{ratio[p]:>10.2f}"
                f"{hours[p]:>10.1f}{slo[p] * 100:>7.1f}%"
            )
        print(
            f"{case:<13}{'ALL':<8}{r['wall_s']:>9.1f}  wall (2 workers), "
            f"target {r['target_s']:.0f} s, ratio {r['ratio_to_target']:.2f}, "
            f"{'meets' if r['meets_target'] else 'MISSES'}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="repeats of the 100-GPU case")
    parser.add_argument("--big-repeats", type=int, default=1, help="repeats of the 10k case")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--out", type=Path, default=ROOT / "results.json")
    args = parser.parse_args()
    with RunPool(args.jobs) as pool:
        results = {
            "24h_100gpu": bench_case("24h_100gpu", args.repeats, pool),
            "1h_10000gpu": bench_case("1h_10000gpu", args.big_repeats, pool),
        }
    print_table(results)
    document = json.loads(args.out.read_text()) if args.out.exists() else {}
    document["sim"] = {"machine": f"{os.cpu_count()} cores", "jobs": args.jobs, "results": results}
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {args.out} ['sim']")


if __name__ == "__main__":
    main()
