"""Policies on demand nobody tuned them for: the held-back shapes and the shared traces.

Runs ``gpuscale evaluate`` on each named shape of ``sim.shapes`` (the held-back
set by default) and each named shared trace, every policy over the same seeds,
then reads each run's ``results.json`` and reports, per shape:

* each policy's GPU-hours at the target attainment as a multiple of the oracle's
  (the mean of the per-seed ratios, with its 95 % interval; ``<=`` where a curve
  only bounds it);
* the gap closure ``(best baseline - hybrid) / (best baseline - oracle)`` at matched
  attainment, for ``hybrid`` and ``hybrid-deploy``, where the best baseline is the
  cheapest of static, hpa, hpa-sm, keda and kpa at the target, each read as its
  multiple of the oracle (so the oracle is 1);
* ``hybrid-deploy`` at its deployable setting (its fair parameters, told the
  target attainment, no knob chosen per shape): the attainment it reached and its
  GPU-hours over the oracle's at the target.

Each run is a directory ``OUT/NAME`` (a trace's ``OUT/NAME-xSCALE[-SECONDSs]``) holding
``results.json``; a run whose file exists is read, not run again, so a long bench can be
resumed. ``--policy`` runs only the named policies (and the oracle, which every ratio
divides by); ``--carry FILE`` takes every other policy's cells from an earlier
``--json`` of the same shape, seeds, length and scale, so a change to one policy reruns
that policy alone. A carried cell is marked in the figures (``carried``). ``--json``
writes the figures, ``--doc`` the Markdown page generated from them
(docs/robustness.md); ``--rows FILE`` reads the figures of an earlier ``--json`` instead
of running (to regenerate the page after its text changes).
Run (small, then the final figures with more seeds):

    python bench/bench_robust.py --out /tmp/robust --seeds 3 --duration 3600 \\
        --shape flash-double-h10-w600 --trace azure-conv --trace-scale 0.2 \\
        --trace-duration 3000 --json /tmp/robust.json
    python bench/bench_robust.py --out /tmp/robust-final --seeds 10 \\
        --trace azure-conv:100 --trace azure-code:100 --trace gentd26:0.13:21600 \\
        --json bench/results-robust.json --doc docs/robustness.md

A trace is ``NAME[:SCALE[:SECONDS]]``; ``--trace-scale`` and ``--trace-duration`` stand
for what a spec leaves out.
"""

import argparse
import json
import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpuscale.sim import shapes
from gpuscale.sim.generators import DAY_S

BASELINES = ("static", "hpa", "hpa-sm", "keda", "kpa")
"""The tuned baselines the gap is measured from (the cheapest at the target)."""

HYBRIDS = ("hybrid", "hybrid-deploy")
"""The policies whose gap closure is reported."""

POLICIES = (*BASELINES, *HYBRIDS, "oracle")
"""Every policy each run evaluates, in the table's order."""

CLOSURE_TARGET = 0.5
"""The gap closure hybrid is asked for."""

DEPLOY_LIMIT = 1.25
"""``hybrid-deploy``'s GPU-hours over the oracle's asked for on learnable shapes."""


def history_layout(name: str) -> tuple[int, int]:
    """A shape's run with one pass of history, not scored, before the pass scored.

    A shape of a few hours runs twice over and its first pass is the history; a
    two-day shape (a daily pattern, whose history is a day) runs once, its first day
    not scored.

    Returns:
        (seconds to simulate, seconds of warm-up not scored).
    """
    own = shapes.SHAPES[name.removeprefix(shapes.PREFIX)].duration_s
    if own >= 2 * DAY_S:
        return own, DAY_S
    return 2 * own, own


def trace_spec(spec: str, scale: float, seconds: int | None) -> tuple[str, float, int | None]:
    """``NAME[:SCALE[:SECONDS]]`` as the trace, its rate multiple and its length.

    ``scale`` and ``seconds`` stand where the spec gives none (None: the whole trace).

    Raises:
        SystemExit: SCALE or SECONDS is not a positive number (one line naming the spec).
    """
    name, *rest = spec.split(":", 2)
    try:
        scale = float(rest[0]) if rest and rest[0] else scale
        seconds = int(rest[1]) if len(rest) > 1 and rest[1] else seconds
    except ValueError:
        scale = -1.0
    if not name or not scale > 0 or (seconds is not None and seconds <= 0):
        sys.exit(f"--trace {spec}: use NAME[:SCALE[:SECONDS]], e.g. gentd26:0.13:21600")
    return name, scale, seconds


def run(name: str, out: Path, args: argparse.Namespace) -> Path:
    """Run ``gpuscale evaluate`` on one shape or trace unless its results exist.

    Returns:
        The path of its ``results.json``.
    """
    shape = name.startswith(shapes.PREFIX)
    if shape:
        scale, seconds, folder = args.scale, args.duration, out / name.replace(":", "-")
    else:
        name, scale, seconds = trace_spec(name, args.trace_scale, args.trace_duration)
        folder = out / (f"{Path(name).stem}-x{scale:g}" + (f"-{seconds}s" if seconds else ""))
    result = folder / "results.json"
    if result.is_file():
        return result
    command = [
        sys.executable, "-m", "gpuscale", "evaluate", "--trace", name,
        "--seeds", str(args.seeds), "--jobs", str(args.jobs), "--scale", str(scale),
        "--out", str(folder),
    ]  # fmt: skip
    if shape and args.history:
        length, warmup = history_layout(name)
        command += ["--duration", str(length), "--warmup", str(warmup)]
    elif seconds:
        command += ["--duration", str(seconds)]
    for policy in args.policy or POLICIES:
        command += ["--policy", policy]
    if args.policy and "oracle" not in args.policy:
        command += ["--policy", "oracle"]
    done = subprocess.run(command, check=False)
    if done.returncode != 0:  # evaluate has said why, in one line
        sys.exit(
            f"gpuscale evaluate on {name} exited {done.returncode}; the runs before it are kept"
        )
    return result


def ratio(p: dict[str, Any]) -> dict[str, Any]:
    """A policy's x-oracle at the target, its interval and whether it is a bound.

    Returns:
        ``{"x": ..., "ci": [low, high], "bound": bool}``.
    """
    return {
        "x": p["x_oracle_at_target"],
        "ci": p["x_oracle_at_target_ci95"],
        "bound": p.get("gpu_hours_at_target_bound") == "upper",
    }


def closure(cells: dict[str, dict[str, Any]], name: str) -> dict[str, Any]:
    """The share of the gap from the cheapest baseline to the oracle a policy closes.

    Args:
        cells: Each policy's x-oracle cell (``ratio``): the oracle's multiple is 1.
        name: The policy.

    Returns:
        ``{"closure": share or None, "best_baseline": name, "bound": bool}``; the
        share is None when the policy or every baseline lacks a reading, or the best
        baseline is no dearer than the oracle.
    """
    known = {b: cells[b]["x"] for b in BASELINES if b in cells and cells[b]["x"] is not None}
    mine = cells.get(name, {}).get("x")
    if not known or mine is None:
        return {"closure": None, "best_baseline": None, "bound": False}
    best = min(known, key=lambda b: known[b])
    gap = known[best] - 1.0
    bound = cells[best]["bound"] or cells[name]["bound"]
    value = (known[best] - mine) / gap if gap > 0 else None
    return {"closure": value, "best_baseline": best, "bound": bound}


def deployable(doc: dict[str, Any]) -> dict[str, Any] | None:
    """``hybrid-deploy`` at its fair parameters: attainment and GPU-hours over the oracle's.

    Returns:
        ``{"attainment": ..., "x_oracle": ...}``, or None without the policy or oracle.
    """
    p, oracle = doc["policies"].get("hybrid-deploy"), doc["policies"]["oracle"]
    if p is None or not oracle["gpu_hours_at_target"]:
        return None
    return {
        "attainment": p["slo_attainment"],
        "x_oracle": p["gpu_hours"] / oracle["gpu_hours_at_target"],
    }


def summarise(doc: dict[str, Any], earlier: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """One run's figures, with the cells of policies it did not run carried from ``earlier``.

    Args:
        doc: The run's ``results.json``.
        earlier: Rows of an earlier ``--json``; a row of the same trace, seeds, length
            and scale gives the cells of the policies this run left out.

    Returns:
        The trace, its split and learnability, seeds, x-oracle per policy, closures,
        the deployable reading and the names of the carried cells.
    """
    trace = str(doc["trace"])
    shape = shapes.SHAPES.get(trace.removeprefix(shapes.PREFIX))
    cells = {n: ratio(p) for n, p in doc["policies"].items()}
    same = ("trace", "seeds", "duration_s", "scale", "target_attainment")
    carried = []
    for row in earlier:
        if all(row[k] == doc[k] for k in same):
            carried = [n for n in row["x_oracle"] if n not in cells]
            cells.update({n: row["x_oracle"][n] for n in carried})
            break
    return {
        "trace": trace,
        "split": None if shape is None else shapes.split_of(shape.name),
        "learnable": None if shape is None else shape.learnable,
        "seeds": doc["seeds"],
        "duration_s": doc["duration_s"],
        "scale": doc["scale"],
        "target_attainment": doc["target_attainment"],
        "x_oracle": {n: cells[n] for n in POLICIES if n in cells},
        "closure": {n: closure(cells, n) for n in HYBRIDS if n in cells},
        "deployable": deployable(doc),
        "carried": carried,
    }


def _x(cell: dict[str, Any] | None) -> str:
    if cell is None:
        return "-"  # not run
    if cell["x"] is None:
        return "never"
    text = ("<=" if cell["bound"] else "") + f"{cell['x']:.2f}"
    low, high = cell["ci"]
    return text + (f" [{low:.2f}, {high:.2f}]" if low is not None and high is not None else "")


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The Markdown table of every run.

    Returns:
        Lines.
    """
    head = ["shape", "seeds", *POLICIES, "closure hybrid", "closure deploy", "deploy att / x"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        run_of = f"{r['trace']} ({r['duration_s']:.0f} s, x{r['scale']:g})"
        cells = [run_of, str(r["seeds"]), *(_x(r["x_oracle"].get(n)) for n in POLICIES)]
        for name in HYBRIDS:
            c = r["closure"].get(name)
            share = None if c is None else c["closure"]
            mark = "~" if c is not None and c["bound"] else ""
            cells.append("-" if share is None else f"{mark}{share:.2f} (vs {c['best_baseline']})")
        d = r["deployable"]
        cells.append("-" if d is None else f"{d['attainment']:.4f} / {d['x_oracle']:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    """Run or read the bench's runs and report them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder of the runs")
    parser.add_argument("--shape", action="append", help="a shape (default: the held-back set)")
    parser.add_argument(
        "--trace",
        action="append",
        default=[],
        help="a shared trace to add, NAME[:SCALE[:SECONDS]] (defaults: --trace-scale and"
        " --trace-duration)",
    )
    parser.add_argument("--no-shapes", action="store_true", help="only the --trace runs")
    parser.add_argument("--seeds", type=int, default=10, help="seeds per run")
    parser.add_argument("--duration", type=int, default=None, help="seconds per shape")
    parser.add_argument(
        "--history",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run each shape twice over, scoring only the second pass (--duration unused)",
    )
    parser.add_argument("--scale", type=float, default=2.0, help="rate multiple of the shapes")
    parser.add_argument("--trace-scale", type=float, default=1.0, help="of the shared traces")
    parser.add_argument("--trace-duration", type=int, default=None, help="their seconds")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument(
        "--policy", action="append", choices=POLICIES, help="run only these (and the oracle)"
    )
    parser.add_argument("--carry", type=Path, help="an earlier --json: the other policies' cells")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--doc", type=Path, help="write the Markdown page here")
    parser.add_argument(
        "--rows", type=Path, help="an earlier --json: report its figures, running nothing"
    )
    args = parser.parse_args()
    if args.rows is not None:
        rows = json.loads(args.rows.read_text())["runs"]
    else:
        if args.out is None:
            parser.error("--out is needed unless --rows is given")
        shown = [] if args.no_shapes else (args.shape or shapes.names(shapes.HELD_BACK))
        names = [shapes.PREFIX + s for s in shown]
        for spec in args.trace:  # a malformed spec ends the bench now, not after hours of runs
            trace_spec(spec, args.trace_scale, args.trace_duration)
        earlier = json.loads(args.carry.read_text())["runs"] if args.carry else []
        rows = []
        for name in [*names, *args.trace]:
            doc = json.loads(run(name, args.out, args).read_text())
            rows.append(summarise(doc, earlier))
    lines = table(rows)
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps({"runs": rows}, indent=1) + "\n")
    if args.doc:
        args.doc.write_text(page(rows, lines))


def page(rows: list[dict[str, Any]], lines: list[str]) -> str:
    """docs/robustness.md: the method, then the table generated from the figures.

    Returns:
        The Markdown text.
    """
    closures = [
        r["closure"]["hybrid-deploy"]["closure"]
        for r in rows
        if r["closure"].get("hybrid-deploy")
        and r["closure"]["hybrid-deploy"]["closure"] is not None
    ]
    met = sum(c >= CLOSURE_TARGET for c in closures)
    # Each row's deployable reading against its own target (a row may have none).
    deployed = [r for r in rows if r["deployable"] is not None]
    reached = sum(r["deployable"]["attainment"] >= r["target_attainment"] for r in deployed)
    learnable = [r for r in deployed if r.get("learnable")]
    within = sum((r["deployable"]["x_oracle"] or math.inf) <= DEPLOY_LIMIT for r in learnable)
    return "\n".join(
        [
            "# Robustness: demand shapes nobody tuned for",
            "",
            METHOD,
            "",
            "## Results",
            "",
            f"Generated by `bench/bench_robust.py` from its runs ({len(rows)} runs; seeds per"
            " run in the table). Each policy cell is GPU-hours at the target attainment as a"
            " multiple of the oracle's: the mean of the per-seed ratios with its 95 % interval"
            " (`<=`: a curve that only bounds it). Closure: `(best baseline - policy) / (best"
            " baseline - oracle)` at the target (`~`: a bound enters it). Deploy: hybrid-deploy"
            " at its fair parameters, the attainment it reached and its GPU-hours over the"
            " oracle's at the target.",
            "",
            *lines,
            "",
            *carried_lines(rows),
            f"hybrid-deploy closes at least {CLOSURE_TARGET:g} of the gap on {met} of"
            f" {len(closures)} runs with a reading; at its deployable setting it reaches the"
            f" target attainment on {reached} of {len(deployed)}, and costs at most"
            f" {DEPLOY_LIMIT:g} x the oracle on {within} of the {len(learnable)} shapes with a"
            " pattern to learn.",
            "",
            *cheapest_lines(rows),
            "",
            READING,
            "",
        ]
    )


def carried_lines(rows: list[dict[str, Any]]) -> list[str]:
    """A line naming the cells carried from an earlier run, if any.

    Returns:
        The line and a blank line, or nothing.
    """
    carried = sorted({n for r in rows for n in r.get("carried", ())}, key=POLICIES.index)
    if not carried:
        return []
    runs = sum(bool(r.get("carried")) for r in rows)
    return [
        f"Carried from the previous run of the same settings on {runs} of {len(rows)} runs"
        f" (their code unchanged since): {', '.join(carried)}.",
        "",
    ]


def cheapest_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per run: the cheapest policy at the target besides the oracle.

    Returns:
        Markdown list items.
    """
    out = []
    for r in rows:
        known = {
            n: c["x"] for n, c in r["x_oracle"].items() if n != "oracle" and c["x"] is not None
        }
        if known:
            best = min(known, key=lambda n: known[n])
            out.append(f"- {r['trace']}: cheapest at the target is {best} ({known[best]:.2f} x).")
    return out


METHOD = """\
## Method

`sim/shapes.py` generates 44 demand shapes in seven families: single, double and
periodic flash crowds (heights 3, 6 and 10 x the base, decay 120 s or 600 s, periods
900 s or 1800 s), ramps ending in a cliff and cliffs followed by a ramp (to 3 or 6
x), steps to 3 or 6 x decaying over 900 s or 2700 s, two noisy diurnal days with and
without a one-hour dip, and weeks pressed into one day with a quieter weekend. A
shape is held back when the SHA-256 of its name is divisible by 3 (16 shapes), and
for training otherwise (28); every family has members on both sides. Each shape is
named `shape:NAME` by `gpuscale evaluate --trace`; its seed draws its noise and its
Poisson arrivals. The settings of `hybrid-deploy` were chosen on training shapes
only; the table holds the held-back shapes, then the shared traces. The traces run as
the front page's table runs them: once, with no history pass and the first 600 s not
scored (azure-conv and azure-code x 100, their hour; gentd26 x 0.13, its first six
hours), every policy over 10 seeds.

Each shape of a few hours runs twice over (`--duration` of two of its own
lengths; a run longer than a shape repeats it, each pass with its own noise) and
only the second pass is scored (`--warmup` of one length): a deployed controller
has seen its demand before, and a policy that has seen one burst should hold the
capacity its like calls for. The two-day shapes (diurnal, weekly) run once and
their first day, the history a daily pattern needs, is not scored. Every policy
is scored on the same pass. Every policy is evaluated as `gpuscale evaluate`
does: the fair parameters, then a sweep of its knob until its
cost-against-attainment curve brackets the target (0.99), read per seed; the
oracle is the hindsight planner's search per seed. `hybrid-deploy`'s knob is the
target attainment it is told (0.95 to 0.998): the sweep shows what it costs when
told less or more than the target it is read at.

A change to one policy reruns that policy alone (`--policy`); the other
policies' cells are carried from the previous run of the same shape, seeds,
length and scale (`--carry`) where `bench/check_sim_equal.py` shows their
results unchanged. The figures list which cells were carried. Before that rerun,
`bench/bench_deploy.py` checks a change in minutes: it runs one policy at its fair
parameters alone (no sweep, no oracle) on a split of the shapes, with the same
history pass, and compares attainment and GPU-hours with a run on earlier code.

`hybrid-deploy` is `hybrid` told the target attainment (`HybridConfig.
target_attainment`) and the deployment's received-requests counter
(`arrivals_metric`), at its fair parameters, with no knob chosen per shape
(`scaling/headroom.py`, `scaling/recurrence.py`, docs/predictive.md). It records
each minute's load offered (arrival rate x service time) against its mean over
the ten minutes that ended one horizon (cold start and node provisioning) before,
and holds the ratio's request-weighted quantile at the target times the level
now, capped by the load's own quantile; both histograms halve over a day. While
the load stands above the highest ratio recorded (a return at once from a dip),
the quantile is applied to the load now, until the ratio is back within it. Of
that load the floor holds the share that keeps the longest wait within the wait
budget until capacity asked for at the burst's start serves (the horizon over the
horizon and the budget: 0.98 to 0.99 on these shapes, whose requests may wait 3 s
against a horizon of three to four minutes). That
load is staffed for its scatter by Erlang's delay formula (the share of requests
waiting beyond the wait budget within 1 - target, over the requests a pod's
server serves at once, which `gpuscale evaluate` tells it as a deployer would:
one on these shapes), and so are the forecast's plan, the reactive need and the
scale-in guard; the plan is sized for at most the load
quantile (or the load now, where higher). It holds the floor, and staffs its
load so, only once it has run long enough to read the quantile at its target
(`burst_window_s / (1 - target)`: 100 minutes at 0.99); until then `per_replica`'s
headroom stands in, as for `hybrid`. A shape's history pass is longer than that
at 0.99; a sweep point told 0.995 or more reads it later. When the last three intervals between
burst onsets (rises through half the load quantile, above their baseline; the
first burst at the reading that first gives the floor a threshold) agree within a
minute, the floor stands only from one horizon and two minutes (the tolerance, and
the burst window an onset's mean lags the rise by) before the next expected onset
until one horizon after it comes, and meanwhile a scale-in gives back at once what
the load does not need: what was recommended and the load seen before the floor
stood down hold nothing, and the plan holds for no more than the load since. The
histograms' quantiles are read within their bin, log-linearly between its edges.
The `hybrid-deploy` cells of the diurnal day of amplitude 0.8 with little noise, the
day with a dip, the compressed week and the three shared traces were measured before
the last five rules (onsets above their baseline; nothing from before the stand-down
held; the first burst timed; the rise allowed for; quantiles within their bin),
every other row's with all of them. At the fair setting (`bench_deploy`, 10 seeds)
the first four move those three shapes' attainment by at most 0.0001 and their
GPU-hours by at most +0.3 % (the day with a dip; the other two unchanged); the last
lowers every held-back shape's GPU-hours by 1.0 to 8.3 % and its attainment by at
most 0.0005 (the day with a dip 0.9908 to 0.9903), with the same seeds at the target
on every shape. On the traces the last three leave attainment unchanged and move
GPU-hours by at most 0.5 % (gentd26 -0.5 %); of the first two only the stand-down
rule was measured there alone, for attainment: unchanged."""


READING = """\
## Reading

What these runs show, and what stands in the way:

- With a pass of history, `hybrid-deploy` at its fair setting (told 0.99) reaches
  the target attainment on 16 of the 16 held-back shapes, the tenfold crowds
  included: a crowd that rises within a minute is met only by capacity already
  standing, and the floor measures a burst against the level one horizon before it,
  so the crowd's own rise does not hide its height. The noisy diurnal day with a dip
  comes closest (0.9908; 6 of its 10 seeds reach 0.99). Its misses come where the
  dip ends, when the load returns at once to the day's peak and what is asked for
  then arrives a cold start later. The floor measures a rise beyond every ratio it
  has recorded from the load now; without that rule (measured before the lead share
  below) it measures the return against the dip's level for a lead time and a
  baseline window, and the day falls just short (0.9897; seed 0: 71 % of its late
  requests in that hour). On the training shapes (5 seeds, fair setting) the rule
  leaves the twenty four-hour shapes unchanged and lifts the three days with a dip
  from 0.9912, 0.9895 and 0.9893 to 0.9915, 0.9910 and 0.9899, for at most 0.4 %
  more GPU-hours; on the last, a quiet day whose load returns at once to 2.5 x the
  dip, what misses is the load before new capacity serves. The floor holds only the
  share of its load that keeps the longest wait within the budget until new capacity
  serves; with waits of 3 s against a lead of minutes that share is 0.98 to 0.99
  here. Against the floor held in full it moves the fair setting's GPU-hours by
  -2.2 to +0.1 % on the held-back shapes (matched: -0.8 to +0.9 %) and its
  attainment only on the day with a dip (0.9911 to 0.9908); on the training shapes
  (5 seeds) attainment is unchanged or up by 0.0001 and GPU-hours move by -4.0 to
  +0.3 %.
- At its fair setting it is within 1.25 x the oracle on 6 of the 10 shapes with a
  pattern to learn: 1.14 x on the periodic crowd every 900 s, 1.19 and 1.24 x on the
  sixfold and tenfold crowds every 1800 s, 1.25 x on the ramp ending in a cliff (3
  x), where every reactive baseline at matched attainment costs 1.07 to 1.46 x, and
  1.16 and 1.17 x on the two diurnal days with little noise. It costs 1.29 x on the
  threefold crowd every 1800 s, 1.27 x on the sixfold ramp, 1.26 x on the compressed
  week and 1.29 x on the noisy diurnal day with a dip. Reading the floor's quantiles
  within their bin, not at a bin's upper edge, costs 1.0 to 8.3 % fewer GPU-hours at
  the fair setting (the method above). On the three crowds every 1800 s the
  first burst is now timed (its rise sets the threshold it is timed against, and was
  missed), so the period is read a burst earlier and the first scored cycle no
  longer holds the floor throughout; the floor stands a burst window earlier than
  before, for the window's mean that times an onset lags the rise (without it one
  seed in ten of the sixfold crowd came to 0.9485: its first period, read from the
  first onset timed low on its rise, put the next burst 10 s late, and new nodes
  came after it). Against the code before these two rules they cost 4.6, 7.3 and
  2.8 % less at the fair setting, attainment unchanged (10 seeds; on the training
  shapes 2.7 to 7.8 % less on the four crowds every 1800 s, the rest within 0.1 %).
  Between
  crowds whose onsets come a steady interval apart the floor stands down and the
  fleet gives back at once what the load does not need: at 5 % a minute, a crowd's
  nodes would stay until the next.
- Told 0.99, it reaches 0.9908 to 0.9986: more than it was asked on every shape. Its
  sweep knob is the target it is told, and told less it meets 0.99 for 2 to 12 %
  fewer GPU-hours on the shapes with a pattern to learn (the `hybrid-deploy` column,
  against the deploy column): within 1.25 x on 9 of the 10 learnable shapes (the
  periodic crowds, 1.08 to 1.22 x; both ramps, the compressed week, the two quiet
  diurnal days); on the noisy day with a dip
  the seeds' mean meets 0.99 at 1.27 x (told 0.987), but only 7 of its 10 seeds
  reach 0.99 anywhere on the sweep. A target chosen per shape in hindsight is not a
  deployable setting; the gap between the two readings is what steering the target
  from the attainment observed could win. Reading the floor at the share of load
  beyond it, rather than the share of requests in windows that exceed it, cost the
  target on the training shapes (0.972 to 0.987 on five of seven periodic and step
  shapes): a window over capacity delays all its requests, not only its excess.
- The policy holds its learned floor only after 100 minutes at 0.99; before,
  `per_replica`'s headroom stands in. On these shapes that ends 20 minutes before
  the scored pass, and at the fair setting the fleet it leaves costs up to 6.3 %
  more than a floor held from the start (10 seeds each, measured before the lead
  share: the double tenfold crowd 2.23 to 2.37 x, the tenfold crowds every 1800 s
  1.34 to 1.40 x, the ramp to 3 x 1.249 to 1.27 x; the single tenfold crowd 3.74 to
  3.65 x). It is what meets the target on a trace with no history (below).
- At matched attainment a static fleet sized in hindsight is the cheapest baseline
  on every crowd and step shape. `hybrid-deploy` is cheaper than static on the
  three crowds every 1800 s: it closes 0.68 of the gap to the oracle on the sixfold
  one, 0.40 on the threefold and 0.30 on the tenfold one; on bursts at unknown times
  (single and double crowds, steps) it costs 2 to 8 % more than static (9 to 18 % at
  its fair setting). There, any causal policy that meets the target must hold the
  burst's capacity between bursts, as static does all the time; what separates
  static from the oracle is knowing when the burst comes, and `hybrid-deploy` pays
  for scaling up during the burst and down after it. On the periodic crowd every 900
  s static stands within 2 % of the oracle, so the closure is ill-conditioned there.
- With placement on (`--placement`: before each scale-in the pods to go are marked
  with `pod-deletion-cost` so whole nodes empty), `hybrid-deploy` at its fair setting
  costs up to 7.0 % less at the same attainment, with the same seeds at the target
  (`bench_deploy --placement` against the rows above, 10 seeds, the 13 rerun
  shapes): 7.0 % on the tenfold crowd every 1800 s (1.24 to 1.16 x the oracle), 4.1
  % on the sixfold one (1.19 to 1.14 x), 3.7 % on the double tenfold crowd, 2.0 % on
  the threefold crowd every 1800 s (1.29 to 1.27 x) and 1.6 % on the crowd every 900
  s; the rest move by -1.0 to +0.3 %. Without it the ReplicaSet takes the most
  recently Ready pods first: on the threefold crowd every 1800 s (seed 0) a scale-in
  from 64 to 32 on eight full nodes left 8, 8, 8, 4, 4, 0, 0 and 0 pods on them, and
  the fifth node stayed until the next crowd. The oracle ran without placement.
  Between those crowds `hybrid-deploy` still holds a node more than the oracle: each
  of its terms (the load now, the plan's bound, the observed peak, each staffed by
  Erlang's formula at the target) puts the load of 20 to 22 at 24 to 27 replicas,
  four nodes, where the oracle serves it with 22 on three.
- Without the floor (`hybrid`, tuned per shape) hybrid is as dear as the reactive
  baselines on the crowds: a per-replica knob buys burst headroom at every level at
  once.
- The two-day shapes ran `hybrid-deploy` and the oracle only (no baselines, so no
  closure). The floor's wait for its history ends within their first day, which is
  not scored, even told 0.998 (8.3 hours). Before `gpuscale evaluate` told
  `hybrid-deploy` the server's concurrency, a pod's slots read from the pods came
  out below one on the day with a dip (0.97 to 0.98, seed 0), so the fleet was
  staffed a few percent above its load; told one, the four days cost 3 % less at the
  fair setting (the quiet days 1.24 and 1.22 x before, the week 1.30 x, the day with
  a dip 1.34 x) and the day with a dip fell from 0.9905 to 0.9897. On the twelve
  four-hour shapes that change moved the figures by at most 1.3 %. The rule for a
  rise beyond the recorded ratios moves the day with a dip from 0.9897 to 0.9911 at
  1.30 x (1.40 to 1.28 x at matched attainment) and every other held-back figure by
  at most 0.3 %. The lead share then moves the four days by -0.8 to -0.6 % at the
  fair setting and -0.8 to +0.1 % at matched attainment.
- On the shared traces (the last three rows) `hybrid-deploy` at its fair setting
  meets the target on all three: azure-conv 0.9993 at 1.65 x the oracle, azure-code
  1.0000 at 1.43 x, gentd26 0.9998 at 1.68 x; told less, 1.35, 1.20 and at most
  1.49 x. Within an hour the floor is not read (it waits 100 minutes for its
  history), so on the Azure traces the fleet is `per_replica`'s headroom staffed for
  the target, paying for crowds it has not seen. In development runs (2 seeds) a
  floor held from the start reached only 0.92 on azure-code whatever target it was
  told, since a crowd 14 minutes in rose above all the load it had seen, and 0.9995
  at 1.19 x on azure-conv. On gentd26 the floor is read after 100 minutes: its
  ratio quantile at 0.99 is 4 to 6, from the morning's rise out of near-idle, so the
  floor is its cap, the load's own quantile, and holds near the day's peak through
  the afternoon (seed 0, measured before the lead share, which lowers gentd26's
  GPU-hours by 1.5 %: 32 replicas where the oracle holds 25). At matched attainment
  static in hindsight is the cheapest baseline on all three (1.08, 1.18 and 1.29 x).
  `hybrid`, its knob chosen per trace, closes 0.59 of static's gap on gentd26 and
  0.35 on azure-code, and costs more than static on azure-conv (1.13 x); at its fair
  setting it costs 1.68, 1.39 and 2.10 x. `hybrid-deploy` closes none of the gap.
- Four days of GenTD26's LoRA log (x 40, two days of history not scored, 10 seeds,
  `hybrid-deploy` and the oracle only, not in the table: `gpuscale evaluate --trace
  out/gentd26_lora_4d.csv --scale 40 --warmup 172800 --policy hybrid-deploy --policy
  oracle`, the rate file from `bench/bench_seasonal.py --rate-file`): `hybrid-deploy`
  reaches 0.9983 at 1.84 x the oracle (2,686 GPU-hours against 1,464), and told as
  little as 0.5 it still exceeds 0.99 on every seed, at 1.41 x (a bound: its curve
  never falls to the target); `hybrid` costs 1.96 x at its fair setting and 1.25 x
  at matched attainment. The log's users send requests in clumps between idle
  hours, and a clump tops the near-empty level before it many times over. Its
  requests take about 29 s, one at a time per pod, and may wait 86 s, against a lead
  of 190 to 250 s, so the floor holds 0.69 to 0.75 of a clump. Held in full it cost
  2.35 x at 0.9986 (2 seeds); on seed 0 it then bound 55 % of the scored decisions
  and 84 % of the replica-seconds, a mean of 88 replicas against 21 requests in
  service. Reading the ratio quantile per band of level, so that a clump out of
  near-idle does not raise the floor at high load, made it dearer (3,316 to 4,211
  GPU-hours, seed 0). What is left is what a floor by ratio to the level before a
  clump cannot know: the clump's size."""


if __name__ == "__main__":
    main()
