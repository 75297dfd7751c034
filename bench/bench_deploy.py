"""A policy at its deployable setting on many shapes and seeds in minutes: attainment, GPU-hours.

``bench/bench_robust.py`` reads every policy at matched attainment, which takes a
knob sweep and the oracle's search per seed (an hour and more on two cores). What
decides whether a change to a policy can ship is often one column of it: the policy
at its fair parameters (``hybrid-deploy``: told the target, no knob chosen per
shape), run once per seed. This bench runs that column alone, as ``gpuscale
evaluate``'s fair run does it (``runner.run_one``, scored by ``scoring.score_run``
after the warm-up, the drop timeout's last requests left out), on

* the shapes of one split (``--split``, default the held-back set) or those named
  (``--shape``), each with one pass of history not scored (``bench_robust``'s
  ``history_layout``), at ``--scale``;
* shared traces (``--trace NAME:SCALE[:SECONDS[:WARMUP]]``; a rate file's path is a
  trace name too).

``--placement`` marks each scale-in's pods so whole nodes empty, as ``gpuscale evaluate
--placement`` does (compare with a run without it for what placement saves).

Reported per shape or trace: mean attainment over seeds, the seeds at the target or
above, and mean GPU-hours (node GPU-hours, as ``gpuscale evaluate`` counts them).
``--compare EARLIER`` adds, per row of the same name and seeds, the change against
an earlier ``--json``: run it once on the code before a change (for example from a
``git worktree`` of it, with ``PYTHONPATH`` at its ``src``) and once after. It
reads no oracle, so it gives no multiple of the oracle's GPU-hours: for those, and
for matched attainment, run ``bench_robust``. Run:

    python bench/bench_deploy.py --split train --seeds 5 --json /tmp/before.json
    python bench/bench_deploy.py --split train --seeds 5 --compare /tmp/before.json
    python bench/bench_deploy.py --shape diurnal-a0.8-n0.15-dip0.4 --seeds 10 \\
        --trace gentd26:0.13:21600 --trace out/gentd26_lora_4d.csv:40::172800
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench_robust import history_layout

from gpuscale.errors import ConfigError
from gpuscale.evaluate import registry
from gpuscale.evaluate.pool import RunPool
from gpuscale.evaluate.runner import EvaluationRequest, run_one
from gpuscale.evaluate.scoring import score_run
from gpuscale.evaluate.sweep import default_warmup_s
from gpuscale.sim import shapes

TARGET = 0.99
"""The attainment each seed is judged against (``hybrid-deploy`` is told it)."""

Case = tuple[str, float, int | None, float | None]
"""(trace, scale, seconds to simulate or None for all, warm-up seconds not scored or None
for ``gpuscale evaluate``'s default)."""


def trace_case(spec: str) -> Case:
    """``NAME:SCALE[:SECONDS[:WARMUP]]`` as a case.

    SECONDS empty: the whole trace; WARMUP empty: ``gpuscale evaluate``'s default (600 s,
    or a fifth of a run shorter than 3000 s).

    Raises:
        SystemExit: The spec is malformed (one line naming it).
    """
    name, *rest = spec.rsplit(":", 3)
    try:
        scale = float(rest[0]) if rest else 1.0
        seconds = int(rest[1]) if len(rest) > 1 and rest[1] else None
        warmup = float(rest[2]) if len(rest) > 2 and rest[2] else None
    except ValueError:
        sys.exit(f"--trace {spec}: use NAME:SCALE[:SECONDS[:WARMUP]], e.g. gentd26:0.13:21600")
    return name, scale, seconds, warmup


def shape_case(name: str, scale: float) -> Case:
    """A shape's case: one pass of history, not scored, then the pass scored."""
    length, warmup = history_layout(name)
    return shapes.PREFIX + name.removeprefix(shapes.PREFIX), scale, length, float(warmup)


def run_case(
    case: Case,
    seed: int,
    policy: str,
    traces_dir: Path | None,
    placement: bool = False,
    progress: Any = None,
) -> dict[str, Any]:
    """One seed of one case at the policy's fair parameters (``placement``: scale-ins
    marked so whole nodes empty, ``gpuscale evaluate --placement``).

    Returns:
        Attainment, GPU-hours and the run's wall seconds.
    """
    trace, scale, seconds, warmup = case
    started = time.perf_counter()
    request = EvaluationRequest(
        trace,
        policies=(policy,),
        scale=scale,
        duration_s=seconds,
        seed=seed,
        traces_dir=traces_dir,
        placement=placement,
    )
    prepared = request.prepare()
    if warmup is None:
        warmup = default_warmup_s(float(prepared.scenario.workload.duration_s))
    result = run_one(prepared, policy, progress=progress, quiet=True)
    score = score_run(result, seed, None, warmup, cooldown_s=prepared.scenario.timeout_s)
    return {
        "attainment": score.slo_attainment,
        "gpu_hours": score.gpu_hours,
        "seconds": time.perf_counter() - started,
    }


def summarise(name: str, case: Case, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One case's row: its seeds' figures and their means.

    Returns:
        The row (``attainment`` and ``gpu_hours`` are means over seeds).
    """
    reached = [r["attainment"] for r in runs if r["attainment"] is not None]
    return {
        "name": name,
        "trace": case[0],
        "scale": case[1],
        "duration_s": case[2],
        "warmup_s": case[3],
        "seeds": len(runs),
        "attainment": statistics.fmean(reached) if reached else None,
        "seeds_at_target": sum(1 for a in reached if a >= TARGET),
        "gpu_hours": statistics.fmean(r["gpu_hours"] for r in runs),
        "per_seed": runs,
    }


def read_rows(path: Path) -> dict[str, dict[str, Any]]:
    """An earlier ``--json``'s rows by name.

    Raises:
        SystemExit: The file is missing or not such a file (one line naming it).
    """
    try:
        return {r["name"]: r for r in json.loads(path.read_text())["rows"]}
    except (OSError, ValueError, KeyError, TypeError) as err:
        kind = type(err).__name__
        sys.exit(f"--compare {path}: not an earlier --json of this bench ({kind}); rerun one")


def compare(row: dict[str, Any], earlier: dict[str, dict[str, Any]]) -> str:
    """The row against the earlier row of the same name, trace layout and seeds ("" if none).

    Returns:
        "attainment was A, GPU-hours +P %", or "".
    """
    then = earlier.get(row["name"])
    same = ("trace", "scale", "duration_s", "warmup_s", "seeds")
    if then is None or any(then[k] != row[k] for k in same) or not then["gpu_hours"]:
        return ""
    change = 100.0 * (row["gpu_hours"] / then["gpu_hours"] - 1.0)
    was = "-" if then["attainment"] is None else f"{then['attainment']:.4f}"
    return f"attainment was {was} ({then['seeds_at_target']} at target), GPU-hours {change:+.1f} %"


def table(rows: list[dict[str, Any]], earlier: dict[str, dict[str, Any]]) -> list[str]:
    """The Markdown table of the rows.

    Returns:
        Lines.
    """
    head = ["shape or trace", "seeds", "attainment", f"seeds >= {TARGET}", "GPU-hours"]
    head += ["against the earlier run"] if earlier else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        att = "-" if r["attainment"] is None else f"{r['attainment']:.4f}"
        gpu_h = f"{r['gpu_hours']:.1f}"
        cells = [r["name"], str(r["seeds"]), att, str(r["seeds_at_target"]), gpu_h]
        cells += [compare(r, earlier) or "-"] if earlier else []
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    """Run the cases and report them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=shapes.SPLITS, default=shapes.HELD_BACK)
    parser.add_argument("--shape", action="append", help="a shape (default: the split's)")
    parser.add_argument(
        "--trace", action="append", default=[], help="NAME:SCALE[:SECONDS[:WARMUP]]"
    )
    parser.add_argument("--no-shapes", action="store_true", help="only the --trace cases")
    parser.add_argument("--scale", type=float, default=2.0, help="rate multiple of the shapes")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--policy", default="hybrid-deploy")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--traces-dir", type=Path, help="the shared traces' folder")
    parser.add_argument(
        "--placement",
        action="store_true",
        help="mark each scale-in's pods so whole nodes empty (gpuscale evaluate --placement)",
    )
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--compare", type=Path, help="an earlier --json to compare with")
    args = parser.parse_args()
    names = [] if args.no_shapes else (args.shape or shapes.names(args.split))
    unknown = [n for n in names if n.removeprefix(shapes.PREFIX) not in shapes.SHAPES]
    if unknown:
        parser.error(f"--shape {unknown[0]}: no such shape (see sim/shapes.py)")
    if args.policy not in registry.names():
        parser.error(f"--policy {args.policy}: unknown; use one of {', '.join(registry.names())}")
    cases = {n.removeprefix(shapes.PREFIX): shape_case(n, args.scale) for n in names}
    cases |= {spec: trace_case(spec) for spec in args.trace}
    for spec in args.trace:  # a wrong name or file: one line here, not a worker's traceback
        trace, scale, seconds, _ = cases[spec]
        try:
            EvaluationRequest(
                trace, scale=scale, duration_s=seconds, traces_dir=args.traces_dir
            ).prepare()
        except ConfigError as err:
            sys.exit(str(err))
    earlier: dict[str, dict[str, Any]] = {}
    if args.compare is not None:
        earlier = read_rows(args.compare)
    calls = [
        (f"{name}/{seed}", (case, seed, args.policy, args.traces_dir, args.placement))
        for name, case in cases.items()
        for seed in range(args.seeds)
    ]
    with RunPool(args.jobs) as pool:
        results = pool.run(run_case, calls)
    rows = [
        summarise(name, case, results[i * args.seeds : (i + 1) * args.seeds])
        for i, (name, case) in enumerate(cases.items())
    ]
    placed = ", placement on" if args.placement else ""
    print(f"{args.policy} at its fair setting{placed}:")
    print("\n".join(table(rows, earlier)))
    if args.json:
        doc = {"policy": args.policy, "placement": args.placement, "rows": rows}
        args.json.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
