"""Fault-injection benchmark of the alert catalogue: recall, false alarms and detection delay.

For each seed, a simulated fleet runs for two hours at a 15 s scrape interval:
one host per fault kind the exporter can inject (gpu-lost, xid 13, ecc-dbe,
row-remap, thermal for 20 minutes), each fault on a random GPU at a random time
between 75 and 95 minutes (so the anomaly rules have their hour of history),
and three fault-free hosts. Each host has 8 H100s under the simulator's
default load (a 5-minute sine around 50 % busy, per-GPU phases). The fleet's
history goes through the real Prometheus (``gpuscale.alerts.simtest``), and
every rule of the default catalogue is scored against the faults. The goal of
issue 11: every fault detected, no alert on fault-free hosts, detection within
two scrape intervals plus the rule's ``for:``. Run:

    python bench/bench_alerts.py                 # writes bench/results-alerts.json
    python bench/bench_alerts.py --markdown      # also prints the README tables
"""

import argparse
import json
import logging
import statistics
import time
from pathlib import Path

import numpy as np

from gpuscale.alerts.backtest import DETECTS, RuleScore
from gpuscale.alerts.history import HostRun
from gpuscale.alerts.simtest import Sweep, SweepPoint, run_backtest
from gpuscale.telemetry.faults import parse_fault

ROOT = Path(__file__).resolve().parent
STEP_S = 15.0
DURATION_S = 7200.0
GPUS = 8
FAULT_FREE = 3
FAULTS = {
    "gpu-lost": "gpu-lost@{at}:gpu={gpu}",
    "xid": "xid@{at}:code=13:gpu={gpu}",
    "ecc-dbe": "ecc-dbe@{at}:gpu={gpu}",
    "row-remap": "row-remap@{at}:gpu={gpu}",
    "thermal": "thermal@{at}:gpu={gpu}:duration=1200",
}
SWEEPS = (
    Sweep("GpuTemperatureHigh", "threshold", (60.0, 70.0, 80.0, 85.0, 90.0)),
    Sweep("GpuTemperatureRisingFast", "threshold", (0.002, 0.005, 0.01, 0.02)),
    Sweep("GpuTemperatureAnomaly", "threshold", (0.5, 1.0, 2.0, 3.0)),
    Sweep("GpuThermalThrottling", "for", (0.0, 120.0, 300.0)),
)


def fleet(seed: int) -> list[HostRun]:
    rng = np.random.default_rng([seed, 11])
    runs = []
    for i, (kind, spec) in enumerate(FAULTS.items()):
        at = int(rng.integers(75 * 60, 95 * 60))
        gpu = int(rng.integers(0, GPUS))
        fault = parse_fault(spec.format(at=at, gpu=gpu), "exporter")
        runs.append(HostRun(f"s{seed}-{kind}", GPUS, 1000 * seed + i, (fault,)))
    for j in range(FAULT_FREE):
        runs.append(HostRun(f"s{seed}-ok{j}", GPUS, 1000 * seed + 100 + j))
    return runs


def aggregate(per_seed: list[list[RuleScore]], seeds: int) -> list[dict]:
    rows = []
    for name in [s.alert for s in per_seed[0]]:
        scores = [next(s for s in run if s.alert == name) for run in per_seed]
        delays = [d for s in scores for d in s.delays_s]
        faults = sum(s.faults for s in scores)
        for_s = scores[0].for_s
        false_free = sum(sum(1 for h in s.false_hosts if "-ok" in h) for s in scores)
        rows.append(
            {
                "alert": name,
                "for_s": for_s,
                "faults": faults,
                "detected": sum(s.detected for s in scores),
                "recall": sum(s.detected for s in scores) / faults if faults else None,
                "false_episodes": sum(s.false_positives for s in scores),
                "fault_free_hosts_with_alarm": false_free,
                "fault_free_hosts": FAULT_FREE * seeds,
                "median_delay_s": statistics.median(delays) if delays else None,
                "within_goal": sum(1 for d in delays if d <= 2 * STEP_S + for_s),
                "goal_s": 2 * STEP_S + for_s,
            }
        )
    return rows


def sweep_rows(points: list[list[SweepPoint]]) -> list[dict]:
    rows = []
    for sw in SWEEPS:
        for value in sw.values:
            scores = [p.score for run in points for p in run if p.sweep == sw and p.value == value]
            delays = [d for s in scores for d in s.delays_s]
            rows.append(
                {
                    "alert": sw.alert,
                    "key": sw.key,
                    "value": value,
                    "detected": sum(s.detected for s in scores),
                    "faults": sum(s.faults for s in scores),
                    "false_episodes": sum(s.false_positives for s in scores),
                    "median_delay_s": statistics.median(delays) if delays else None,
                }
            )
    return rows


def _delay(value):
    return "-" if value is None else f"{value:.0f} s"


def markdown(result: dict) -> str:
    lines = [
        "| alert | for | faults caught | recall | false alarms (episodes) "
        "| fault-free hosts alarmed | median delay | within 2 scrapes + for |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rules"]:
        recall = "-" if r["recall"] is None else f"{r['recall']:.0%}"
        within = f"{r['within_goal']}/{r['detected']}" if r["detected"] else "-"
        lines.append(
            f"| {r['alert']} | {r['for_s']:.0f} s | {r['detected']}/{r['faults']} | {recall} "
            f"| {r['false_episodes']} | {r['fault_free_hosts_with_alarm']}/{r['fault_free_hosts']} "
            f"| {_delay(r['median_delay_s'])} | {within} |"
        )
    lines += [
        "",
        "| sweep | value | caught | false alarms | median delay |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in result["sweeps"]:
        value = f"{r['value']:g} s" if r["key"] == "for" else f"{r['value']:g}"
        lines.append(
            f"| {r['alert']}.{r['key']} | {value} | {r['detected']}/{r['faults']} "
            f"| {r['false_episodes']} | {_delay(r['median_delay_s'])} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "results-alerts.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    per_seed, points, took = [], [], []
    for seed in range(args.seeds):
        started = time.monotonic()
        scores, sweep_points = run_backtest(fleet(seed), DURATION_S, STEP_S, sweeps=SWEEPS)
        took.append(time.monotonic() - started)
        per_seed.append(scores)
        points.append(sweep_points)
        print(f"seed {seed}: {took[-1]:.1f} s", flush=True)
    kinds = {kind: [a for a in DETECTS[kind]] for kind in FAULTS}
    result = {
        "seeds": args.seeds,
        "hosts_per_seed": len(FAULTS) + FAULT_FREE,
        "gpus_per_host": GPUS,
        "duration_s": DURATION_S,
        "scrape_interval_s": STEP_S,
        "detectors": kinds,
        "median_seconds_per_seed": statistics.median(took),
        "rules": aggregate(per_seed, args.seeds),
        "sweeps": sweep_rows(points),
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    if args.markdown:
        print(markdown(result))


if __name__ == "__main__":
    main()
