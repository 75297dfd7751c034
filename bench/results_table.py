"""Print a per-trace comparison table from a ``gpuscale evaluate`` results.json.

The "Results on the shared traces" tables of docs/benchmarks.md are this script's output for
the ``--out`` directory of the command printed above each table:

    python bench/results_table.py out/gentd26/results.json

Columns: GPU-hours at the target attainment read off each policy's knob curve
(mean over seeds, 95 % half-width; "<=" where the sweep could not bring the curve
below the target, so the figure is an upper bound), that as a multiple of the
oracle's, then the
fair-parameter run's GPU-hours, attainment, mean GPU utilisation, p99 latency,
dropped requests (mean per run) and scale events.
"""

import argparse
import json
from pathlib import Path
from typing import Any


def _half(ci: list[float] | None) -> float:
    return 0.0 if not ci else (ci[1] - ci[0]) / 2


def row(name: str, p: dict[str, Any]) -> str:
    """One Markdown row for a policy's entry in results.json."""
    at = p.get("gpu_hours_at_target")
    if at is None:
        at_s, x_s = "never reaches", "-"
    else:
        # A curve the sweep could not bracket gives only an upper bound: say so.
        bound = "<= " if p.get("gpu_hours_at_target_bound") == "upper" else ""
        at_s = f"{bound}{at:.1f} ±{_half(p.get('gpu_hours_at_target_ci95')):.1f}"
        x = p.get("x_oracle_at_target")
        x_ci = _half(p.get("x_oracle_at_target_ci95"))
        x_s = "-" if x is None else f"{bound}{x:.2f} ±{x_ci:.2f}"
    cells = [
        name,
        at_s,
        x_s,
        f"{p['gpu_hours']:.1f} ±{_half(p.get('gpu_hours_ci95')):.1f}",
        f"{100 * p['slo_attainment']:.1f} ±{100 * _half(p.get('slo_attainment_ci95')):.1f} %",
        f"{100 * p['mean_gpu_utilization']:.1f} %",
        f"{p['p99_latency_s']:.1f} s",
        f"{p['dropped_requests']:.0f}",
        str(p["scale_events"]),
    ]
    return "| " + " | ".join(cells) + " |"


def table(results: dict[str, Any]) -> str:
    """The Markdown table, a header line first."""
    head = (
        "| policy | GPU-h at target | x oracle | GPU-h (fair parameters) | within SLO "
        "| mean GPU util | p99 latency | dropped | scale events |"
    )
    lines = [head, "|---|" + "---:|" * 8]
    lines += [row(name, p) for name, p in results["policies"].items()]
    return "\n".join(lines)


def main() -> None:
    """Print one table per results.json named."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", type=Path, nargs="+")
    for path in parser.parse_args().results:
        results = json.loads(path.read_text(encoding="utf-8"))
        ceiling = results.get("ceiling")
        note = "" if ceiling is None else f"; ceiling {100 * ceiling:.2f} %"
        print(f"{path}: {results['trace']}, {results['duration_s']:.0f} s{note}\n")
        print(table(results) + "\n")


if __name__ == "__main__":
    main()
