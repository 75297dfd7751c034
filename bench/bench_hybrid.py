"""Hybrid's targets, read from ``gpuscale evaluate`` results: hybrid against the oracle and HPA.

Each ``results.json`` named on the command line is one trace (with or without a
fault), written by ``gpuscale evaluate ... --out DIR``. For every policy this
prints, as a Markdown table (docs/benchmarks.md), the GPU-hours at the target attainment
read off the policy's knob curve (mean over seeds, 95 % interval from each seed's
own curve), that as a multiple of the oracle's, the share fewer than HPA's at the
same attainment (or at HPA's best when its curve never reaches the target), the
energy (kWh), the node GPU-hours billed over those the pods held, and the mean
time from a burst's onset to the SLO held again; then,
per trace, whether ``hybrid`` meets the issue's targets:

* at most 1.15 x the oracle's GPU-hours at the target attainment, and at least
  25 % fewer than HPA's curve (traces with a shape to learn);
* no baseline's curve dominating hybrid's (flash-crowd and bursty): no baseline
  point reaches at least hybrid's attainment at no more GPU-hours than a hybrid
  point with that attainment.

The target attainment is the run's (0.99), or the trace's ceiling when that is
lower. A cost whose curve never fell below the target even after the sweep's
extension (``gpu_hours_at_target_bound: "upper"`` in results.json) is printed as
``<=`` and judged as a bound: a ratio at or under its limit is met, one over it
is undetermined; seeds whose own curve gives only a bound (their readings make the
interval) are counted beside the figure. Run:

    python bench/bench_hybrid.py out/azure-conv/results.json out/ramp/results.json ...

Results files of the same run split over several ``gpuscale evaluate`` calls (the
same trace, scale, faults, seeds, warm-up and target, each with some policies) are
read as one: their policies are put together in the table's order, and a policy
in more than one file (the oracle, which each call needs for its ratios) must
read the same in each. ``--write`` also stores the figures and verdicts as the
``hybrid`` key of bench/results.json, keeping the other keys; with ``--update`` it
replaces only the stored runs the files rerun (the same trace, scale and faults)
and keeps the rest.
"""

import argparse
import json
from pathlib import Path
from typing import Any

BASELINES = ("static", "hpa", "keda", "kpa", "hpa-sm", "hpa-behavior", "keda-util", "keda-sm")
"""Policies whose curves may dominate hybrid's."""

ORACLE_LIMIT = 1.15
"""Hybrid may use at most this multiple of the oracle's GPU-hours at the target."""

HPA_SAVING = 0.25
"""Hybrid must use at least this share fewer GPU-hours than HPA at the same attainment."""

UNPREDICTABLE = ("flash-crowd", "bursty")
"""Traces whose demand no forecast sees coming: judged on dominance only."""

ORDER = {name: i for i, name in enumerate((*BASELINES, "oracle", "predictive", "hybrid"))}
"""Each policy's place in the table where one run's policies come from several files."""

SAME_RUN = (
    "trace", "scale", "faults", "seed", "seeds", "duration_s", "warmup_s",
    "target_attainment", "slo_latency_s", "timeout_s", "ceiling",
)  # fmt: skip
"""Keys that must agree for results files to be parts of one run."""


def _pm(value: float | None, ci: list[float | None] | None, fmt: str) -> str:
    if value is None:
        return "-"
    text = format(value, fmt)
    if ci and ci[0] is not None and ci[1] is not None:
        text += " ±" + format((ci[1] - ci[0]) / 2.0, fmt)
    return text


def _bound(p: dict[str, Any]) -> bool:
    """Whether the policy's cost at the target is only an upper bound."""
    return p.get("gpu_hours_at_target_bound") == "upper"


def _curve(p: dict[str, Any]) -> list[tuple[float, float]]:
    return [
        (c["gpu_hours"], c["slo_attainment"]) for c in p["curve"] if c["slo_attainment"] is not None
    ]


def hpa_reference(doc: dict[str, Any]) -> tuple[float | None, str]:
    """HPA's GPU-hours at the target, or at its best attainment when it never reaches it.

    Returns:
        (GPU-hours, how it was read).
    """
    hpa = doc["policies"].get("hpa")
    if hpa is None:
        return None, "no hpa"
    if hpa["gpu_hours_at_target"] is not None:
        how = "at target (an upper bound)" if _bound(hpa) else "at target"
        return float(hpa["gpu_hours_at_target"]), how
    best = max(_curve(hpa), key=lambda p: (p[1], -p[0]), default=None)
    return (None, "no curve") if best is None else (best[0], f"at HPA's best {best[1]:.3f}")


def dominated_by(doc: dict[str, Any], name: str = "hybrid") -> list[str]:
    """Baselines with a curve point at least as good as one of hybrid's on both axes, strictly
    better on one, for every hybrid point: their curve dominates hybrid's.

    Returns:
        The names of the dominating baselines.
    """
    mine = _curve(doc["policies"][name])
    out = []
    for base in BASELINES:
        if base not in doc["policies"]:
            continue
        theirs = _curve(doc["policies"][base])

        def beaten(h: float, a: float, theirs: list[tuple[float, float]] = theirs) -> bool:
            return any(c <= h and t >= a and (c < h or t > a) for c, t in theirs)

        if mine and theirs and all(beaten(h, a) for h, a in mine):
            out.append(base)
    return out


def fewer_than_hpa(doc: dict[str, Any], name: str) -> tuple[float | None, str]:
    """The share fewer GPU-hours than HPA's, and which way it is bounded.

    A bound on the policy's cost bounds the saving from below (``>=``), one on
    HPA's from above (``<=``); with both, nothing is known.

    Returns:
        (share, ``""``, ``">= "`` or ``"<= "``); (None, "") when unknown.
    """
    at = doc["policies"][name]["gpu_hours_at_target"]
    hpa_hours, _ = hpa_reference(doc)
    if at is None or not hpa_hours or name == "hpa":
        return None, ""
    mine, theirs = _bound(doc["policies"][name]), _bound(doc["policies"]["hpa"])
    if mine and theirs:
        return None, ""
    return 1.0 - at / hpa_hours, (">= " if mine else "<= " if theirs else "")


def label(doc: dict[str, Any]) -> str:
    """The trace, its scale where it is not 1, and its faults: one run's name in the table.

    Returns:
        E.g. ``diurnal x4 + thermal@7200:duration=1800``; a rate file by its name
        without folder or suffix (``gentd26_lora_4d x40``).
    """
    scale = float(doc.get("scale", 1.0))
    name = str(doc["trace"])
    name = Path(name).stem if name.endswith(".csv") else name
    trace = name + (f" x{scale:g}" if scale != 1.0 else "")
    return trace + (f" + {', '.join(doc['faults'])}" if doc["faults"] else "")


def rows(doc: dict[str, Any]) -> list[str]:
    """The Markdown rows of one trace, one per policy.

    Returns:
        Lines of the table body.
    """
    trace = label(doc)
    lines = []
    for name, p in doc["policies"].items():
        at = p["gpu_hours_at_target"]
        share, mark = fewer_than_hpa(doc, name)
        fewer = "-" if share is None else f"{mark}{share * 100.0:.0f} %"
        le = "<= " if _bound(p) else ""
        reach = (
            "never reaches" if at is None else le + _pm(at, p["gpu_hours_at_target_ci95"], ".1f")
        )
        bounded = p.get("seeds_bounded_at_target", 0)
        if at is not None and bounded:  # the interval mixes readings and bounds
            reach += f" ({bounded} of {doc['seeds']} seeds <=)"
        ratio = _pm(p["x_oracle_at_target"], p["x_oracle_at_target_ci95"], ".2f")
        cells = [
            trace,
            name,
            reach,
            ratio if ratio == "-" else le + ratio,
            fewer,
            _pm(p["slo_attainment"], None, ".4f"),
            _pm(p.get("energy_kwh"), p.get("energy_kwh_ci95"), ".0f"),
            node_overhead(p),
            _pm(p.get("burst_recovery_s"), p.get("burst_recovery_s_ci95"), ".0f"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def node_overhead(p: dict[str, Any]) -> str:
    """Node GPU-hours over the pods' at the fair parameters (idle node GPUs billed).

    Returns:
        A percentage cell, or "-" where results.json has no pod GPU-hours.
    """
    held = p.get("allocated_gpu_hours")
    if not held:
        return "-"
    return f"{(p['gpu_hours'] / held - 1.0) * 100.0:.0f} %"


def verdict(doc: dict[str, Any]) -> str:
    """Whether hybrid meets the issue's targets on this trace, with the numbers.

    Returns:
        One line.
    """
    trace = label(doc)
    head = f"{trace} ({doc['seeds']} seeds, target {doc['target_attainment']:g}, "
    head += f"ceiling {doc['ceiling']:.4f})"
    hybrid = doc["policies"].get("hybrid")
    if hybrid is None:
        return f"{head}: no hybrid run"
    if any(doc["trace"].startswith(u) for u in UNPREDICTABLE):
        beaten = dominated_by(doc)
        text = f"{head}: " + (
            f"dominated by {', '.join(beaten)}: MISSED"
            if beaten
            else "no baseline dominates hybrid: met"
        )
        mine = hybrid["gpu_hours_at_target"]
        cheaper = [
            f"{b} {doc['policies'][b]['gpu_hours_at_target']:.1f}"
            for b in BASELINES
            if b in doc["policies"]
            and doc["policies"][b]["gpu_hours_at_target"] is not None
            and (mine is None or doc["policies"][b]["gpu_hours_at_target"] < mine)
        ]
        if cheaper:
            at = "never reaches" if mine is None else f"{mine:.1f}"
            text += f"; cheaper at the target than hybrid ({at}): {', '.join(cheaper)}"
        return text
    at, ratio = hybrid["gpu_hours_at_target"], hybrid["x_oracle_at_target"]
    _, how = hpa_reference(doc)
    if at is None:
        return f"{head}: hybrid never reaches the target: MISSED"
    bound = _bound(hybrid)
    fewer, mark = fewer_than_hpa(doc, "hybrid")
    parts = [
        f"{'<= ' if bound else ''}{ratio:.2f} x oracle "
        f"({_judge(ratio <= ORACLE_LIMIT, '<= ' if bound else '')}, <= {ORACLE_LIMIT})"
        if ratio is not None
        else "no oracle",
        f"{mark}{fewer * 100.0:.0f} % fewer than HPA {how} "
        f"({_judge(fewer >= HPA_SAVING, mark)}, >= 25 %)"
        if fewer is not None
        else "fewer than HPA unknown (both bounds)",
    ]
    return f"{head}: " + "; ".join(parts)


def _judge(holds: bool, mark: str) -> str:
    """A target's verdict on a figure that may be a bound (``mark``).

    An upper bound (``<= ``) that meets an upper limit meets it, and a lower bound
    (``>= ``) that meets a lower limit does too; a bound that misses says nothing.
    """
    if holds:
        return "met"
    return "undetermined: a bound" if mark else "MISSED"


def summary(doc: dict[str, Any]) -> dict[str, Any]:
    """One trace's figures per policy and hybrid's verdict, for bench/results.json.

    Returns:
        A JSON-ready dict.
    """
    _, how = hpa_reference(doc)
    policies = {}
    for name, p in doc["policies"].items():
        share, mark = fewer_than_hpa(doc, name)
        policies[name] = {
            "gpu_hours_at_target": p["gpu_hours_at_target"],
            "gpu_hours_at_target_bound": p.get("gpu_hours_at_target_bound"),
            "seeds_bounded_at_target": p.get("seeds_bounded_at_target", 0),
            "gpu_hours_at_target_ci95": p["gpu_hours_at_target_ci95"],
            "x_oracle_at_target": p["x_oracle_at_target"],
            "x_oracle_at_target_ci95": p["x_oracle_at_target_ci95"],
            "fewer_than_hpa": None if share is None else round(share, 4),
            "fewer_than_hpa_bound": {">= ": "lower", "<= ": "upper"}.get(mark),
            "slo_attainment_fair": p["slo_attainment"],
            "energy_kwh_fair": p.get("energy_kwh"),
            "gpu_hours_fair": p["gpu_hours"],
            "allocated_gpu_hours_fair": p.get("allocated_gpu_hours"),
            "burst_recovery_s_fair": p.get("burst_recovery_s"),
        }
    return {
        "trace": doc["trace"],
        "scale": doc.get("scale", 1.0),
        "faults": doc["faults"],
        "seeds": doc["seeds"],
        "target_attainment": doc["target_attainment"],
        "ceiling": doc["ceiling"],
        "hpa_reference": how,
        "policies": policies,
        "verdict": verdict(doc),
    }


def merged(named: list[tuple[Path, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The results files as runs: files that are parts of one run put together.

    Args:
        named: Each file's path and contents, in command-line order.

    Returns:
        One document per run, in the order of each run's first file.

    Raises:
        SystemExit: Two files name the same trace but differ in a run setting, or
            disagree on a policy both hold.
    """
    runs: dict[str, tuple[Path, dict[str, Any]]] = {}
    for path, doc in named:
        key = label(doc)
        if key not in runs:
            runs[key] = (path, {**doc, "policies": dict(doc["policies"])})
            continue
        first, run = runs[key]
        for k in SAME_RUN:
            if run.get(k) != doc.get(k):
                raise SystemExit(
                    f"{path}: {k}={doc.get(k)!r} but {first} has {run.get(k)!r} for {key}; "
                    "rerun both with the same settings or name only one"
                )
        for name, p in doc["policies"].items():
            mine = run["policies"].get(name)
            if mine is not None and _reading(mine) != _reading(p):
                raise SystemExit(
                    f"{path}: policy {name} reads {_reading(p)} but {first} has "
                    f"{_reading(mine)} on {key}; rerun both on the same code"
                )
            run["policies"][name] = p
        ordered = sorted(run["policies"].items(), key=lambda kv: ORDER.get(kv[0], len(ORDER)))
        run["policies"] = dict(ordered)
    return [run for _, run in runs.values()]


def _run_key(entry: dict[str, Any]) -> tuple[Any, ...]:
    """What names one stored run: its trace, scale and faults."""
    return entry["trace"], entry.get("scale", 1.0), tuple(entry.get("faults", []))


def updated(stored: list[dict[str, Any]], rerun: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stored runs with each one ``rerun`` names replaced in place, new ones appended.

    Returns:
        The runs, in the stored order.
    """
    fresh = {_run_key(e): e for e in rerun}
    out = [fresh.pop(_run_key(e), e) for e in stored]
    return out + list(fresh.values())


def _reading(p: dict[str, Any]) -> tuple[Any, ...]:
    """What two runs of one policy on one run's settings must agree on."""
    return p["gpu_hours_at_target"], p["gpu_hours"], p["slo_attainment"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path, help="results.json files")
    parser.add_argument(
        "--write", action="store_true", help="store them as the hybrid key of bench/results.json"
    )
    parser.add_argument(
        "--update",
        action="store_true",
        help="with --write: replace only the stored runs these files rerun, keep the others",
    )
    args = parser.parse_args()
    docs = merged([(path, json.loads(path.read_text())) for path in args.results])
    if args.write:
        store = Path(__file__).with_name("results.json")
        kept = json.loads(store.read_text()) if store.exists() else {}
        new = [summary(d) for d in docs]
        old = kept.get("hybrid", {}).get("traces", []) if args.update else []
        kept["hybrid"] = {"queue_model": "auto", "traces": updated(old, new)}
        store.write_text(json.dumps(kept, indent=2) + "\n")
    print(
        "| trace | policy | GPU-h at target | x oracle | fewer than HPA | within SLO "
        "(fair) | kWh (fair) | node GPU-h over pods' (fair) | burst recovery s |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for doc in docs:
        print("\n".join(rows(doc)))
    print()
    for doc in docs:
        print("- " + verdict(doc))


if __name__ == "__main__":
    main()
