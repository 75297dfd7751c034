"""Hindsight-oracle benchmark: the searched oracle on the shared traces over seeds.

For each shared trace and seed it prepares the evaluation as ``gpuscale evaluate``
does, searches the oracle's margin (``evaluate.oracle_search.search_oracle``),
scored as ``gpuscale evaluate`` scores it (``scoring.score_run``: attainment and
node GPU-hours from the default warm-up on), and prints the chosen plan's
attainment, the goal it aimed for (the target, or the ceiling less one request when the
serving model caps attainment below it), the ceiling, GPU-hours, the margin and
the seconds the search took. Run:

    python bench/bench_oracle.py                       # 10 seeds, 1 h of each trace
    python bench/bench_oracle.py --seeds 3 --duration 1800
"""

import argparse
import json
import time
from pathlib import Path

from gpuscale.evaluate.oracle_search import DEFAULT_TARGET, search_oracle
from gpuscale.evaluate.runner import EvaluationRequest
from gpuscale.evaluate.scoring import score_run
from gpuscale.evaluate.sweep import default_warmup_s
from gpuscale.sim.outcome import RunResult

ROOT = Path(__file__).resolve().parent

TRACES = {"azure-code": 100.0, "azure-conv": 100.0, "gentd26": 0.13}
"""Trace to request-rate scale (the evaluation scales of docs/results.md)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1 (default 10)")
    parser.add_argument("--duration", type=int, default=3600, help="seconds of each trace")
    parser.add_argument("--target", type=float, default=DEFAULT_TARGET, help="attainment")
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = parser.parse_args()
    rows = []
    for trace, scale in TRACES.items():
        for seed in range(args.seeds):
            prepared = EvaluationRequest(
                trace, scale=scale, duration_s=args.duration, seed=seed
            ).prepare()
            warmup = default_warmup_s(float(prepared.scenario.workload.duration_s))

            def attainment(result: RunResult, seed: int = seed, warmup: float = warmup) -> float:
                got = score_run(result, seed, None, warmup).slo_attainment
                return 1.0 if got is None else got

            def cost(result: RunResult, seed: int = seed, warmup: float = warmup) -> float:
                return score_run(result, seed, None, warmup).gpu_hours

            start = time.perf_counter()
            found = search_oracle(
                prepared.scenario,
                prepared.required.tolist(),
                prepared.configs["oracle"],
                target=args.target,
                score=attainment,
                cost=cost,
                warmup_s=warmup,
            )
            row = {
                "trace": trace,
                "seed": seed,
                "attainment": round(found.attainment, 5),
                "goal": round(found.goal, 5),
                "ceiling": None if found.ceiling is None else round(found.ceiling, 5),
                "met_goal": found.met_goal,
                "met_target": found.met_target,
                "gpu_hours": round(found.gpu_hours, 3),
                "margin": found.config.margin,
                "simulations": len(found.trials) + (found.ceiling is not None),
                "seconds": round(time.perf_counter() - start, 1),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    missed = [r for r in rows if not r["met_goal"]]
    print(f"{len(rows) - len(missed)} of {len(rows)} runs met their goal")
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
