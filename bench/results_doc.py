"""Write docs/results.md and README's headline table from bench/results.json.

Every figure on the front page and on the results page is read from
``bench/results.json``, which the benchmarks under ``bench/`` write; nothing is
pasted by hand. After a benchmark run:

    python bench/results_doc.py            # rewrite both
    python bench/results_doc.py --check    # exit 1 if either is out of date

The README's table sits between the ``<!-- generated: bench/results_doc.py -->``
and ``<!-- end generated -->`` markers; the rest of the README is left alone.
"""

import argparse
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results.json"
README = ROOT / "README.md"
RESULTS_DOC = ROOT / "docs" / "results.md"

BEGIN = "<!-- generated: bench/results_doc.py -->"
END = "<!-- end generated -->"

BASELINES = ("static", "hpa", "hpa-sm", "keda", "kpa")
"""The policies a user would otherwise run (the hindsight oracle and gpuscale's own excluded)."""

OURS = "hybrid"

Json = Mapping[str, Any]


def _half(ci: Iterable[float | None] | None) -> float | None:
    lo, hi = tuple(ci) if ci else (None, None)
    return None if lo is None or hi is None else (hi - lo) / 2


def _bound(p: Json) -> str:
    # A curve the sweep could not bring below the target gives only an upper bound.
    return "<= " if p.get("gpu_hours_at_target_bound") == "upper" else ""


def _x(p: Json) -> str:
    x = p.get("x_oracle_at_target")
    if x is None:
        return "never reaches"
    ci = p.get("x_oracle_at_target_ci95") or [None, None]
    lo, hi = ci
    interval = "" if lo is None or hi is None else f" [{lo:.2f}, {hi:.2f}]"
    return f"{_bound(p)}{x:.2f}{interval}"


def _gpu_h(p: Json) -> str:
    at = p.get("gpu_hours_at_target")
    if at is None:
        return "never reaches"
    half = _half(p.get("gpu_hours_at_target_ci95"))
    return f"{_bound(p)}{at:.1f}" + ("" if half is None else f" ±{half:.1f}")


def _name(entry: Json) -> str:
    scale = entry.get("scale", 1.0)
    trace = Path(entry["trace"]).stem if "/" in entry["trace"] else entry["trace"]
    name = trace if scale == 1.0 else f"{trace} x{scale:g}"
    return " + ".join([name, *entry.get("faults", [])])


def _cheapest_baseline(policies: Json) -> tuple[str, Json] | None:
    reached = [
        (p["gpu_hours_at_target"], name, p)
        for name, p in policies.items()
        if name in BASELINES and p.get("gpu_hours_at_target") is not None
    ]
    if not reached:
        return None
    _, name, p = min(reached, key=lambda r: r[0])
    return name, p


def _against_best(ours: Json, best: Json) -> str:
    a, b = ours.get("gpu_hours_at_target"), best.get("gpu_hours_at_target")
    if a is None or b is None:
        return "-"
    change = (a - b) / b
    return f"{100 * change:+.0f} %"


def headline(results: Json) -> str:
    """README's table: each fault-free demand, hybrid against the oracle and the best baseline."""
    entries = [e for e in results.get("hybrid", {}).get("traces", []) if not e.get("faults")]
    lines = [
        "| demand | seeds | oracle GPU-h | hybrid, x oracle [95 % CI] "
        "| cheapest baseline, x oracle [95 % CI] | hybrid against it |",
        "|---|---:|---:|---|---|---:|",
    ]
    for e in entries:
        pol = e["policies"]
        oracle, ours = pol.get("oracle"), pol.get(OURS)
        best = _cheapest_baseline(pol)
        if oracle is None or ours is None or best is None:
            continue
        name, bp = best
        lines.append(
            f"| {_name(e)} | {e['seeds']} | {oracle['gpu_hours_at_target']:.1f} | {_x(ours)} "
            f"| {name} {_x(bp)} | {_against_best(ours, bp)} |"
        )
    target = {e.get("target_attainment") for e in entries}
    note = (
        f"GPU-hours at {', '.join(f'{t:g}' for t in sorted(target))} SLO attainment, read off "
        "each policy's knob curve (matched attainment), as a multiple of the hindsight "
        "oracle's; negative in the last column is cheaper than the cheapest baseline "
        f"({', '.join(BASELINES)}). Full tables: [docs/results.md](docs/results.md)."
    )
    return "\n".join(lines) + "\n\n" + note + _speed_line(results)


def _speed_line(results: Json) -> str:
    """README's line on the simulator's speed: each policy's day on one core, x static."""
    r = results.get("sim", {}).get("results", {}).get("24h_100gpu_one_core")
    if not r or not r.get("policy_x_static"):
        return ""
    ratios = ", ".join(
        f"{name} {x:.2f}" for name, x in r["policy_x_static"].items() if name != "static"
    )
    return (
        f"\n\nSimulator speed: a 24-hour day on 100 GPUs, one core, each policy's CPU time as "
        f"a multiple of static's ({r['policy_cpu_s']['static']:.2f} s) in the same run "
        f"({r.get('date', 'undated')}): {ratios}."
    )


def _policy_table(entry: Json) -> list[str]:
    out = [
        "| policy | GPU-h at target | x oracle [95 % CI] | within SLO at fair parameters "
        "| GPU-h at fair parameters |",
        "|---|---:|---|---:|---:|",
    ]
    for name, p in entry["policies"].items():
        fair = p.get("slo_attainment_fair")
        fair_s = "-" if fair is None else f"{100 * fair:.2f} %"
        gh = p.get("gpu_hours_fair")
        gh_s = "-" if gh is None else f"{gh:.1f}"
        out.append(f"| {name} | {_gpu_h(p)} | {_x(p)} | {fair_s} | {gh_s} |")
    return out


def _remediation(results: Json) -> list[str]:
    out: list[str] = []
    for scenario, run in results.get("remediation", {}).items():
        out += [
            f"### {scenario}",
            "",
            f"{run['seeds']} seeds, measured {run.get('measured', 'on an unrecorded date')}; "
            "± is the half-width of the 95 % interval.",
            "",
            "| policy | world | GPU-h | within SLO | pods remediated | holds |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for policy, worlds in run["policies"].items():
            for world, r in worlds.items():
                gh = _half(r.get("gpu_hours_ci95")) or 0.0
                att = _half(r.get("slo_attainment_ci95")) or 0.0
                out.append(
                    f"| {policy} | {world} | {r['gpu_hours']:.1f} ±{gh:.1f} "
                    f"| {100 * r['slo_attainment']:.2f} ±{100 * att:.2f} % "
                    f"| {r['pods_remediated']:.0f} | {r['holds']:.0f} |"
                )
        out.append("")
    return out


def _placement(results: Json) -> list[str]:
    out: list[str] = []
    for trace, run in results.get("placement", {}).items():
        scale = run.get("scale") or 1.0
        out += [
            f"### {trace} x{scale:g}",
            "",
            f"{run['seeds']} seeds, fair parameters, measured {run.get('measured', 'undated')}; "
            "node GPU-hours over the pods' GPU-hours with placement on and off, and the node "
            "GPU-hours placement saves (± is the half-width of the 95 % interval). The last "
            "three columns (placement on) price two fleets built from the run's own pods: "
            "`packed` holds the fewest whole nodes the pods' GPUs fit on in each second, "
            "`packed, held` keeps each such node for the cluster autoscaler's 10-minute "
            "scale-down-unneeded-time after it was last needed; the last column is what "
            "placement leaves above the second (`bench/bench_placement.py`).",
            "",
            "| policy | node over pods', on | off | node GPU-h saved | within SLO, on | off "
            "| packed over pods' | packed, held over pods' | node over packed, held, on |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for policy, r in run["policies"].items():
            on, off, saved = r["placement on"], r["placement off"], r["saved"]
            half = _half(saved.get("node_gpu_hours_ci95")) or 0.0
            fleets = " | ".join(
                f"{100 * on[key]:.1f} %" if key in on else "not measured"
                for key in ("packed_over_pods", "held_over_pods", "node_over_held")
            )
            out.append(
                f"| {policy} | {100 * on['node_over_pods']:.1f} % "
                f"| {100 * off['node_over_pods']:.1f} % "
                f"| {saved['node_gpu_hours']:.1f} ±{half:.1f} "
                f"| {100 * on['slo_attainment']:.2f} % | {100 * off['slo_attainment']:.2f} % "
                f"| {fleets} |"
            )
        out.append("")
    return out


def _exporter(results: Json) -> list[str]:
    out: list[str] = []
    start = results.get("exporter_start", {}).get("starts", {})
    ours, base = start.get("gpuscale"), start.get("baseline_prometheus_client")
    if ours and base:
        load = results["exporter_start"].get("load_average_1m", {})
        out += [
            "### Start-up (`bench/bench_exporter_start.py`)",
            "",
            f"Median of {results['exporter_start'].get('runs', '?')} starts of the simulated "
            f"exporter; 1-minute load average {load.get('before', float('nan')):.2f} before.",
            "",
            "| process | first /metrics | RSS | CPU to first /metrics |",
            "|---|---:|---:|---:|",
            f"| gpuscale exporter | {ours['first_scrape_s_median']:.2f} s "
            f"| {ours['rss_mb_median']:.1f} MB | {ours['cpu_to_first_scrape_s_median']:.2f} s |",
            f"| bare prometheus_client server | {base['first_scrape_s_median']:.2f} s "
            f"| {base['rss_mb_median']:.1f} MB | {base['cpu_to_first_scrape_s_median']:.2f} s |",
            "",
        ]
    scrape = results.get("exporter", {}).get("results", {})
    if scrape:
        out += [
            "### Scrape latency (`bench/bench_exporter.py`)",
            "",
            "| GPUs | p50 | p99 | peak RSS | baseline p50 | baseline p99 |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for gpus, r in scrape.items():
            g, b = r["gpuscale"], r["baseline_prometheus_client_per_scrape"]
            out.append(
                f"| {gpus} | {g['p50_ms']:.2f} ms | {g['p99_ms']:.1f} ms "
                f"| {g['peak_rss_mb']:.0f} MB | {b['p50_ms']:.1f} ms | {b['p99_ms']:.1f} ms |"
            )
        out.append("")
    return out


def _speed(results: Json) -> list[str]:
    runs = results.get("sim", {}).get("results", {})
    out: list[str] = []
    for case, r in runs.items():
        ratios = r.get("policy_x_static")
        if not ratios:
            continue
        names = list(ratios)
        date = r.get("date", results["sim"].get("date", "undated"))  # a case run alone has its own
        out += [
            f"### {case} (`bench/bench_sim.py`, {date})",
            "",
            "CPU seconds per run, and as a multiple of static's in the same run (a case named "
            "one_core ran every policy on one core; the others on the bench's workers).",
            "",
            "| " + " | ".join(["", *names]) + " |",
            "|---|" + "---:|" * len(names),
            "| CPU s | " + " | ".join(f"{r['policy_cpu_s'][n]:.2f}" for n in names) + " |",
            "| x static | " + " | ".join(f"{ratios[n]:.2f}" for n in names) + " |",
            "",
        ]
    return out


def results_page(results: Json) -> str:
    """docs/results.md: every table the benchmarks' JSON holds, in one page."""
    out = [
        "# Results",
        "",
        "Generated by `python bench/results_doc.py` from `bench/results.json`; do not edit by "
        "hand. How each benchmark runs, and what each figure means, is in "
        "[benchmarks.md](benchmarks.md).",
        "",
        "## Policies at matched SLO attainment",
        "",
        "For each demand, every policy's knob is swept over the same seeds and its GPU-hours are "
        "read where its attainment curve crosses the target; `<=` marks a curve the sweep could "
        "not bring below the target (an upper bound); the oracle plans in hindsight.",
        "",
    ]
    for e in results.get("hybrid", {}).get("traces", []):
        out += [
            f"### {_name(e)}",
            "",
            f"{e['seeds']} seeds, target {e['target_attainment']:g}, ceiling "
            f"{e.get('ceiling', float('nan')):.4f}.",
            "",
            *_policy_table(e),
            "",
        ]
    rem = _remediation(results)
    if rem:
        out += ["## Remediation in the simulator", "", *rem]
    placed = _placement(results)
    if placed:
        out += ["## Placement-aware scale-in", "", *placed]
    exp = _exporter(results)
    if exp:
        out += ["## Exporter", "", *exp]
    speed = _speed(results)
    if speed:
        out += ["## Simulator speed", "", *speed]
    return "\n".join(out).rstrip() + "\n"


def readme_with(readme: str, table: str) -> str:
    """README with the text between the markers replaced by ``table``."""
    try:
        head, rest = readme.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
    except ValueError:
        raise SystemExit(f"README.md: the markers {BEGIN!r} and {END!r} are missing") from None
    return f"{head}{BEGIN}\n{table}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or with --check, compare) docs/results.md and README's table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if either file is out of date")
    args = ap.parse_args(argv)
    results = json.loads(RESULTS.read_text())
    wanted = {
        README: readme_with(README.read_text(), headline(results)),
        RESULTS_DOC: results_page(results),
    }
    stale = [p for p, text in wanted.items() if not p.exists() or p.read_text() != text]
    if args.check:
        for p in stale:
            print(f"{p.relative_to(ROOT)} is out of date: run python bench/results_doc.py")
        return 1 if stale else 0
    for p in stale:
        p.write_text(wanted[p])
    return 0


if __name__ == "__main__":
    sys.exit(main())
