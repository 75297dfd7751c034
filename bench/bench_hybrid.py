"""Issue 9's targets, read from ``gpuscale evaluate`` results: hybrid against the oracle and HPA.

Each ``results.json`` named on the command line is one trace (with or without a
fault), written by ``gpuscale evaluate ... --out DIR``. For every policy this
prints, as the README's Markdown table, the GPU-hours at the target attainment
read off the policy's knob curve (mean over seeds, 95 % interval from each seed's
own curve), that as a multiple of the oracle's, the share fewer than HPA's at the
same attainment (or at HPA's best when its curve never reaches the target), the
energy (kWh) and the mean time from a burst's onset to the SLO held again; then,
per trace, whether ``hybrid`` meets the issue's targets:

* at most 1.15 x the oracle's GPU-hours at the target attainment, and at least
  25 % fewer than HPA's curve (traces with a shape to learn);
* no baseline's curve dominating hybrid's (flash-crowd and bursty): no baseline
  point reaches at least hybrid's attainment at no more GPU-hours than a hybrid
  point with that attainment.

The target attainment is the run's (0.99), or the trace's ceiling when that is
lower. Run:

    python bench/bench_hybrid.py out/azure-conv/results.json out/ramp/results.json ...

``--write`` also stores the figures and verdicts as the ``hybrid`` key of
bench/results.json, keeping the other keys.
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


def _pm(value: float | None, ci: list[float | None] | None, fmt: str) -> str:
    if value is None:
        return "-"
    text = format(value, fmt)
    if ci and ci[0] is not None and ci[1] is not None:
        text += " ±" + format((ci[1] - ci[0]) / 2.0, fmt)
    return text


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
        return float(hpa["gpu_hours_at_target"]), "at target"
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


def rows(doc: dict[str, Any]) -> list[str]:
    """The Markdown rows of one trace, one per policy.

    Returns:
        Lines of the table body.
    """
    trace = doc["trace"] + (f" + {', '.join(doc['faults'])}" if doc["faults"] else "")
    hpa_hours, _ = hpa_reference(doc)
    lines = []
    for name, p in doc["policies"].items():
        at = p["gpu_hours_at_target"]
        fewer = "-"
        if at is not None and hpa_hours and name != "hpa":
            fewer = f"{(1.0 - at / hpa_hours) * 100.0:.0f} %"
        reach = "never reaches" if at is None else _pm(at, p["gpu_hours_at_target_ci95"], ".1f")
        cells = [
            trace,
            name,
            reach,
            _pm(p["x_oracle_at_target"], p["x_oracle_at_target_ci95"], ".2f"),
            fewer,
            _pm(p["slo_attainment"], None, ".4f"),
            _pm(p.get("energy_kwh"), p.get("energy_kwh_ci95"), ".0f"),
            _pm(p.get("burst_recovery_s"), p.get("burst_recovery_s_ci95"), ".0f"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def verdict(doc: dict[str, Any]) -> str:
    """Whether hybrid meets the issue's targets on this trace, with the numbers.

    Returns:
        One line.
    """
    trace = doc["trace"] + (f" + {', '.join(doc['faults'])}" if doc["faults"] else "")
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
    hpa_hours, how = hpa_reference(doc)
    if at is None:
        return f"{head}: hybrid never reaches the target: MISSED"
    fewer = None if not hpa_hours else 1.0 - at / hpa_hours
    ok_oracle = ratio is not None and ratio <= ORACLE_LIMIT
    ok_hpa = fewer is not None and fewer >= HPA_SAVING
    parts = [
        f"{ratio:.2f} x oracle ({'met' if ok_oracle else 'MISSED'}, <= {ORACLE_LIMIT})"
        if ratio is not None
        else "no oracle",
        f"{fewer * 100.0:.0f} % fewer than HPA {how} ({'met' if ok_hpa else 'MISSED'}, >= 25 %)"
        if fewer is not None
        else "no HPA",
    ]
    return f"{head}: " + "; ".join(parts)


def summary(doc: dict[str, Any]) -> dict[str, Any]:
    """One trace's figures per policy and hybrid's verdict, for bench/results.json.

    Returns:
        A JSON-ready dict.
    """
    hpa_hours, how = hpa_reference(doc)
    policies = {}
    for name, p in doc["policies"].items():
        at = p["gpu_hours_at_target"]
        fewer = None
        if at is not None and hpa_hours and name != "hpa":
            fewer = round(1.0 - at / hpa_hours, 4)
        policies[name] = {
            "gpu_hours_at_target": at,
            "gpu_hours_at_target_ci95": p["gpu_hours_at_target_ci95"],
            "x_oracle_at_target": p["x_oracle_at_target"],
            "x_oracle_at_target_ci95": p["x_oracle_at_target_ci95"],
            "fewer_than_hpa": fewer,
            "slo_attainment_fair": p["slo_attainment"],
            "energy_kwh_fair": p.get("energy_kwh"),
            "burst_recovery_s_fair": p.get("burst_recovery_s"),
        }
    return {
        "trace": doc["trace"],
        "faults": doc["faults"],
        "seeds": doc["seeds"],
        "target_attainment": doc["target_attainment"],
        "ceiling": doc["ceiling"],
        "hpa_reference": how,
        "policies": policies,
        "verdict": verdict(doc),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path, help="results.json files")
    parser.add_argument(
        "--write", action="store_true", help="store them as the hybrid key of bench/results.json"
    )
    args = parser.parse_args()
    docs = [json.loads(path.read_text()) for path in args.results]
    if args.write:
        store = Path(__file__).with_name("results.json")
        kept = json.loads(store.read_text()) if store.exists() else {}
        kept["hybrid"] = {"queue_model": "auto", "traces": [summary(d) for d in docs]}
        store.write_text(json.dumps(kept, indent=2) + "\n")
    print(
        "| trace | policy | GPU-h at target | x oracle | fewer than HPA | within SLO "
        "(fair) | kWh (fair) | burst recovery s |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for doc in docs:
        print("\n".join(rows(doc)))
    print()
    for doc in docs:
        print("- " + verdict(doc))


if __name__ == "__main__":
    main()
