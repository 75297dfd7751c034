"""What placement-aware scale-in buys: node GPU-hours against what the pods held, on and off.

A scale-in left to the ReplicaSet controller deletes by readiness and age (and, in
Kubernetes, from the nodes holding the most of the workload's pods), which spreads
the survivors over the nodes: none empties, and the cluster autoscaler can release
none while the pods' own GPU-hours fall. With placement on (``scaling.placement``,
opt-in: a GPUScaler's ``placement: true``, ``Scenario.placement``) the step marks the pods to go
with ``pod-deletion-cost``: those on unhealthy GPUs, those loading, then those on
the nodes serving the fewest pods, so nodes empty whole.

Each policy runs at its fair parameters on the same seeds with placement on and
off; the table gives node GPU-hours (GPUs on joined nodes until each is removed,
from the warm-up on, as ``gpuscale evaluate`` counts them), the pods' GPU-hours,
their ratio, and SLO attainment, means over seeds with 95 % intervals. The GPU-hours
saved are node GPU-hours off minus on, per seed, at the same parameters (so at
the attainment each reaches, shown beside it).

Where the rest of the gap lies. Two fleets are computed from each run's own timeline of
the GPUs its pods held (``Timeline.allocated_gpus``), never below the pool's floor of
nodes: ``packed`` holds at every moment the fewest whole nodes those GPUs fit on (a
fleet that packs perfectly and adds and releases nodes at once: what whole nodes
alone cost), and ``packed, held`` keeps each of those nodes until it has not been needed
for the cluster autoscaler's ``--scale-down-unneeded-time`` (``ClusterConfig.
node_idle_remove_s``, 10 min; the node count at ``t`` is the most the packed fleet
needed in the ``U`` seconds before). The second is a model, not a proof of a floor:
it ignores ``--scale-down-delay-after-add`` (which only holds nodes longer) and the
autoscaler's per-node check; it says how much of node GPU-hours over pods' the
autoscaler's hold costs even a perfect placement, and what is left to placement.
Reported beside node over pods: each fleet's GPU-hours over the pods', and the
run's node GPU-hours over ``packed, held``'s. Run:

    python bench/bench_placement.py --seeds 10 --write

(azure-conv and azure-code at scale 100, gentd26 at 0.13 for 6 h, as docs/results.md's
results table runs them; ``--trace``, ``--scale`` and ``--duration`` pick others.)

``--write`` stores the figures as ``bench/results.json["placement"]["<trace>"]``.
Traces come from ``GPUSCALE_TRACES_DIR`` (default ``../shared/traces``).
"""

import argparse
import dataclasses
import datetime
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpuscale.evaluate.pool import RunPool
from gpuscale.evaluate.runner import EvaluationRequest, PreparedEvaluation, build_policy
from gpuscale.evaluate.scoring import score_run
from gpuscale.evaluate.stats import mean_ci
from gpuscale.sim.engine import simulate

ROOT = Path(__file__).resolve().parent
WARMUP_S = 600.0
WORLDS = {"placement on": True, "placement off": False}
SHARED = {"azure-conv": (100.0, None), "azure-code": (100.0, None), "gentd26": (0.13, 21600)}
"""The shared traces as docs/results.md's results table runs them: (scale, duration seconds)."""


def prepare(trace: str, policies: tuple[str, ...], seed: int, placement: bool, **kw: Any):
    """One seed's prepared evaluation of ``trace`` with placement on or off.

    Returns:
        The prepared evaluation.
    """
    request = EvaluationRequest(
        trace=trace, policies=policies, seed=seed, placement=placement, **kw
    )
    return request.prepare()


def packed_fleets(
    starts: np.ndarray, allocated: np.ndarray, gpus_per_node: int, floor_nodes: int, hold_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """GPUs per timeline row of a perfectly packed fleet, released at once and after ``hold_s``.

    Returns:
        (packed, packed and held): GPUs on nodes per row.
    """
    nodes = np.maximum(np.ceil(np.round(allocated, 6) / gpus_per_node), floor_nodes)
    # a node needed in the row starting at s is unneeded from the next row's start and
    # goes hold_s later, so the row at t keeps the most needed by any row in [t - hold_s, t]
    needed = pd.Series(nodes, index=pd.to_timedelta(starts, unit="s"))
    window = needed.rolling(pd.Timedelta(seconds=hold_s), closed="both")
    held = window.max().to_numpy() if hold_s > 0 else nodes
    return nodes * gpus_per_node, held * gpus_per_node


def run(prepared: PreparedEvaluation, name: str, progress: Any = None) -> dict[str, Any]:
    """One policy's run: node and pod GPU-hours and attainment after the warm-up.

    Returns:
        The figures of the run.
    """
    policy = build_policy(name, prepared.configs[name], prepared.required)
    # one-second rows, so that each packed fleet is the fewest nodes at each second (a
    # longer row's mean would round up within the row and read the fleets high)
    sc = dataclasses.replace(prepared.scenario, record_interval_s=1.0)
    result = simulate(sc, policy)
    score = score_run(result, sc.seed, None, WARMUP_S, cooldown_s=sc.timeout_s)
    tl, cluster = result.timeline, sc.cluster
    starts = np.asarray(tl.time_s, dtype=np.float64)
    lengths = np.diff(starts, append=starts[-1] + (starts[-1] - starts[-2]))
    scored = starts >= WARMUP_S
    packed, held = packed_fleets(
        starts,
        np.asarray(tl.allocated_gpus, dtype=np.float64),
        cluster.gpus_per_node,
        cluster.floor_nodes,
        cluster.node_idle_remove_s,
    )
    packed_h, held_h = (float((g * lengths)[scored].sum()) / 3600.0 for g in (packed, held))
    pods = score.allocated_gpu_hours
    return {
        "node_gpu_hours": score.gpu_hours,
        "pod_gpu_hours": pods,
        "node_over_pods": score.gpu_hours / pods - 1.0,
        "packed_over_pods": packed_h / pods - 1.0,
        "held_over_pods": held_h / pods - 1.0,
        "node_over_held": score.gpu_hours / held_h - 1.0,
        "slo_attainment": score.slo_attainment,
    }


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over seeds with 95 % intervals of every figure of ``runs``.

    Returns:
        ``{figure: mean, figure_ci95: [low, high]}`` and the seed count.
    """
    out: dict[str, Any] = {"seeds": len(runs)}
    for key in runs[0]:
        values = [float(r[key]) for r in runs if r[key] is not None]
        ci = mean_ci(values)
        out[key], out[f"{key}_ci95"] = ci.mean, [ci.low, ci.high]
    return out


def _pm(mean: float, ci: list[float | None], fmt: str, factor: float = 1.0) -> str:
    text = format(mean * factor, fmt)
    if ci[0] is not None and ci[1] is not None:
        text += " ±" + format((ci[1] - ci[0]) / 2 * factor, fmt)
    return text


def table(figures: dict[str, dict[str, Any]]) -> str:
    """The Markdown table of one trace's figures.

    Returns:
        The table.
    """
    lines = [
        "| policy | placement | node GPU-h | pods' GPU-h | node over pods | packed over pods "
        "| packed, held over pods | node over packed, held | within SLO |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, f in figures.items():
        for world in WORLDS:
            w = f[world]
            lines.append(
                f"| {name} | {world.split()[-1]} | "
                f"{_pm(w['node_gpu_hours'], w['node_gpu_hours_ci95'], '.1f')} | "
                f"{_pm(w['pod_gpu_hours'], w['pod_gpu_hours_ci95'], '.1f')} | "
                f"{_pm(w['node_over_pods'], w['node_over_pods_ci95'], '.1f', 100)} % | "
                f"{_pm(w['packed_over_pods'], w['packed_over_pods_ci95'], '.1f', 100)} % | "
                f"{_pm(w['held_over_pods'], w['held_over_pods_ci95'], '.1f', 100)} % | "
                f"{_pm(w['node_over_held'], w['node_over_held_ci95'], '.1f', 100)} % | "
                f"{_pm(w['slo_attainment'], w['slo_attainment_ci95'], '.2f', 100)} % |"
            )
        s = f["saved"]
        lines.append(
            f"| {name} | saved | {_pm(s['node_gpu_hours'], s['node_gpu_hours_ci95'], '.1f')} | "
            f"| | | | | {_pm(s['slo_attainment'], s['slo_attainment_ci95'], '.2f', 100)} pt |"
        )
    return "\n".join(lines)


def main() -> None:
    """Run every trace, policy, seed and world; print (and with ``--write`` store) the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", action="append", default=None)
    parser.add_argument("--policy", action="append", default=None)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--duration", type=int, default=None, help="seconds (default: SHARED's)")
    parser.add_argument("--scale", type=float, default=None, help="default: SHARED's, else 1")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    traces = args.trace or ["azure-conv", "azure-code", "gentd26"]
    policies = tuple(args.policy or ["hpa", "keda", "hybrid"])
    calls = []
    runs: dict[str, tuple[float, int | None]] = {}
    for trace in traces:
        scale, duration = SHARED.get(trace, (1.0, None))
        runs[trace] = (scale if args.scale is None else args.scale, args.duration or duration)
        kw = {"scale": runs[trace][0], "duration_s": runs[trace][1]}
        for world, on in WORLDS.items():
            for seed in range(args.seeds):
                prepared = prepare(trace, policies, seed, on, **kw)
                calls += [((trace, name, world, seed), (prepared, name)) for name in policies]
    with RunPool(args.jobs) as pool:
        results = pool.run(run, [(str(k), a) for k, a in calls], None)
    got = {key: r for (key, _), r in zip(calls, results, strict=True)}
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for trace in traces:
        out[trace] = {}
        for name in policies:
            f = {w: summarise([got[trace, name, w, s] for s in range(args.seeds)]) for w in WORLDS}
            saved = [
                {
                    k: got[trace, name, "placement off", s][k]
                    - got[trace, name, "placement on", s][k]
                    for k in ("node_gpu_hours", "slo_attainment")
                }
                for s in range(args.seeds)
            ]
            f["saved"] = summarise(saved)
            out[trace][name] = f
        scale, duration = runs[trace]
        print(
            f"{trace} x{scale:g}, {duration or 'whole'} s, {args.seeds} seeds, fair parameters, "
            f"warm-up {WARMUP_S:g} s not scored"
        )
        print(table(out[trace]))
    if args.write:
        path = ROOT / "results.json"
        data = json.loads(path.read_text())
        for trace in traces:
            data.setdefault("placement", {})[trace] = {
                "measured": datetime.datetime.now(datetime.UTC).isoformat(timespec="minutes"),
                "seeds": args.seeds,
                "duration_s": runs[trace][1],
                "scale": runs[trace][0],
                "policies": out[trace],
            }
        path.write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    main()
