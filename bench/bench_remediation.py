"""What remediation buys on a faulted trace: GPU-hours and SLO with it on and off.

A GPU that falls off the bus leaves its pod in one of two worlds. Kubernetes by itself
keeps the pod bound to the broken GPU, its container crash-looping and never Ready,
until something deletes it (``--lost-gpu-pod stuck``). With remediation on
(``--remediate``, the decision step's ``scaling.remediate``, as a GPUScaler's
``remediate: true`` does live) that pod is deleted once the exporter's series show the
GPU down, and its ReplicaSet places a new one on a healthy GPU. The third row is the
best remediation could do: the pod replaced the moment the GPU went
(``--lost-gpu-pod replaced``, the simulator's default).

Each policy runs at its fair parameters on the same seeds in the three worlds; the
table gives GPU-hours (node GPUs until scale-down, from the warm-up on, as
``gpuscale evaluate`` counts them), SLO attainment, the pods remediation deleted and
the fail-safe's holds, means over seeds with 95 % intervals. Run (docs/results.md's table):

    python bench/bench_remediation.py --trace ramp --fault gpu-lost@1200 --seeds 10 --write

``--write`` stores the figures as ``bench/results.json["remediation"]["<trace> + <faults>"]``.
"""

import argparse
import datetime
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpuscale.evaluate.pool import RunPool
from gpuscale.evaluate.runner import EvaluationRequest, PreparedEvaluation, build_policy
from gpuscale.evaluate.scoring import score_run
from gpuscale.evaluate.stats import mean_ci
from gpuscale.sim.engine import simulate
from gpuscale.sim.nodepool import ClusterConfig

ROOT = Path(__file__).resolve().parent
WORLDS = {
    "stuck, no remediation": ("stuck", False),
    "stuck, remediation": ("stuck", True),
    "replaced at once": ("replaced", False),
}
"""Each world: (``ClusterConfig.lost_gpu_pod``, ``Scenario.remediate``)."""
WARMUP_S = 600.0


def prepare(trace: str, faults: Sequence[str], policies: Sequence[str], seed: int, world: str):
    lost, remediate = WORLDS[world]
    request = EvaluationRequest(
        trace=trace,
        policies=tuple(policies),
        seed=seed,
        faults=tuple(faults),
        cluster=ClusterConfig(lost_gpu_pod=lost),
        remediate=remediate,
    )
    return request.prepare()


def run(prepared: PreparedEvaluation, name: str, progress: Any = None) -> dict[str, Any]:
    policy = build_policy(name, prepared.configs[name], prepared.required)
    sc = prepared.scenario
    result = simulate(sc, policy)
    score = score_run(result, sc.seed, None, WARMUP_S, cooldown_s=sc.timeout_s)
    return {
        "gpu_hours": score.gpu_hours,
        "slo_attainment": score.slo_attainment,
        "pods_remediated": result.pods_remediated,
        "pods_replaced": result.pods_replaced,
        "holds": sum(n for _, n in result.holds),
    }


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"seeds": len(runs)}
    for key in ("gpu_hours", "slo_attainment", "pods_remediated", "holds"):
        values = [float(r[key]) for r in runs if r[key] is not None]
        ci = mean_ci(values)
        out[key] = ci.mean
        out[f"{key}_ci95"] = [ci.low, ci.high]
    return out


def table(figures: dict[str, dict[str, dict[str, Any]]]) -> str:
    lines = [
        "| policy | world | GPU-h | within SLO | pods remediated | holds |",
        "|---|---|---:|---:|---:|---:|",
    ]

    def pm(mean: float | None, ci: list[float | None], fmt: str, factor: float = 1.0) -> str:
        if mean is None:
            return "-"
        text = format(mean * factor, fmt)
        if ci[0] is not None and ci[1] is not None:
            text += " ±" + format((ci[1] - ci[0]) / 2 * factor, fmt)
        return text

    for name, worlds in figures.items():
        for world, f in worlds.items():
            lines.append(
                f"| {name} | {world} | {pm(f['gpu_hours'], f['gpu_hours_ci95'], '.1f')} | "
                f"{pm(f['slo_attainment'], f['slo_attainment_ci95'], '.2f', 100)} % | "
                f"{f['pods_remediated']:.1f} | {f['holds']:.1f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="ramp")
    parser.add_argument("--fault", action="append", default=None)
    parser.add_argument("--policy", action="append", default=None)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    faults = args.fault or ["gpu-lost@1200"]
    policies = args.policy or ["hpa", "keda", "hybrid"]
    calls = []
    for world in WORLDS:
        for seed in range(args.seeds):
            prepared = prepare(args.trace, faults, policies, seed, world)
            calls += [((world, name), (prepared, name)) for name in policies]
    with RunPool(args.jobs) as pool:
        results = pool.run(run, [(str(k), a) for k, a in calls], None)
    by: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for (key, _), got in zip(calls, results, strict=True):
        world, name = key
        by.setdefault(name, {}).setdefault(world, []).append(got)
    figures = {
        name: {world: summarise(runs) for world, runs in worlds.items()}
        for name, worlds in by.items()
    }
    label = f"{args.trace} + {' + '.join(faults)}"
    print(f"{label}, {args.seeds} seeds, fair parameters, warm-up {WARMUP_S:g} s not scored")
    print(table(figures))
    if args.write:
        path = ROOT / "results.json"
        data = json.loads(path.read_text())
        data.setdefault("remediation", {})[label] = {
            "measured": datetime.datetime.now(datetime.UTC).isoformat(timespec="minutes"),
            "seeds": args.seeds,
            "policies": figures,
        }
        path.write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    main()
