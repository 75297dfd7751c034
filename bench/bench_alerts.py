"""Fault-injection benchmark of the alert catalogue: recall, false alarms and detection delay.

For each seed, a simulated fleet runs for two hours at a 15 s scrape interval:
one host per fault kind the exporter can inject (``FAULTS``), each fault on a
random GPU (the whole host for exporter-down) at a random time in its kind's
window (``WINDOWS_MIN``: 75 to 95 minutes, so the anomaly rules have their hour
of history, earlier where the rule's ``for:`` and window need longer to fire
within the two hours), and fault-free hosts. Each host has 8 H100s under the
simulator's default load (a 5-minute sine around 50 % busy, per-GPU phases),
except the straggler's and one fault-free host, which run a training job (every
GPU 90 % busy): a straggler is a GPU slower than its peers at equal load, which
a synchronous job has and a swinging serving load does not. The fleet's history
goes through the real Prometheus (``gpuscale.alerts.simtest``), and every rule
of the default catalogue is scored against the faults, its delays counted from
the injection and from the observable onset (``gpuscale.alerts.history.WATCHES``).
The goal: every fault detected, no alert on fault-free hosts,
detection within two scrape intervals plus the rule's ``for:``, judged from the
observable onset. Then, ``--e2e-runs`` times, the
end-to-end path of the integration test is timed: the sim exporter loses a GPU,
and GpuFellOffBus reaches a webhook through the real Prometheus and Alertmanager.
Run:

    python bench/bench_alerts.py                 # writes bench/results-alerts.json
    python bench/bench_alerts.py --markdown      # also prints the tables of docs/benchmarks.md
"""

import argparse
import json
import logging
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import numpy as np

from gpuscale.alerts.backtest import DETECTS, RuleScore
from gpuscale.alerts.catalogue import build_catalogue
from gpuscale.alerts.config import parse_config
from gpuscale.alerts.history import HostRun
from gpuscale.alerts.render import render
from gpuscale.alerts.simtest import Sweep, SweepPoint, run_backtest
from gpuscale.telemetry.faults import parse_fault

ROOT = Path(__file__).resolve().parent
STEP_S = 15.0
START_S = 1_779_998_400.0
"""A fixed start (2026-05-28 UTC, on a 2-hour boundary like Prometheus's blocks): the
simulator's jitter depends on the clock, so a fixed start makes a seed give the same
history on every run."""
DURATION_S = 7200.0
GPUS = 8
TRAINING = "constant:0.9"
FAULT_FREE: tuple[str | None, ...] = (None, None, None, TRAINING)
"""Load of each fault-free host: three serving (the default sine), one training."""
FAULTS = {
    "gpu-lost": "gpu-lost@{at}:gpu={gpu}",
    "xid": "xid@{at}:code=13:gpu={gpu}",
    "ecc-dbe": "ecc-dbe@{at}:gpu={gpu}",
    "row-remap": "row-remap@{at}:gpu={gpu}",
    "thermal": "thermal@{at}:gpu={gpu}:duration=1200",
    "power-cap": "power-cap@{at}:gpu={gpu}",
    "memory-full": "memory-full@{at}:gpu={gpu}",
    "idle-allocated": "idle-allocated@{at}:gpu={gpu}",
    "stale": "stale@{at}:gpu={gpu}",
    "straggler": "straggler@{at}:gpu={gpu}",
    "straggler-serving": "straggler@{at}:gpu={gpu}",
    "exporter-down": "exporter-down@{at}",
}
"""Fault spec of each faulty host, by the host's name suffix."""
WINDOWS_MIN = {
    # GpuIdleWhileAllocated holds for 1 h: injected early enough to fire in the history.
    "idle-allocated": (15, 35),
}
"""Injection window (minutes) of the kinds that do not use the default, 75 to 95."""
LOADS = {"straggler": TRAINING}
"""Load of the faulty hosts that do not run the default serving sine."""
SWEEPS = (
    Sweep("GpuTemperatureHigh", "threshold", (70.0, 80.0, 85.0, 90.0)),
    Sweep("GpuTemperatureHigh", "for", (0.0, 60.0, 120.0)),
    Sweep("GpuTemperatureRisingFast", "threshold", (0.002, 0.005, 0.01, 0.02)),
    Sweep("GpuTemperatureRisingFast", "window", (120.0, 300.0, 600.0)),
    Sweep("GpuTemperatureAnomaly", "threshold", (1.0, 1.5, 2.0, 3.0)),
    Sweep("GpuThermalThrottling", "for", (0.0, 120.0, 300.0)),
    Sweep("GpuPowerCapped", "dip_window", (15.0, 120.0, 300.0)),
    Sweep("GpuStraggler", "dip_window", (15.0, 120.0, 300.0)),
    Sweep("GpuMetricsStale", "window", (30.0, 45.0, 60.0)),
)
DURATION_KEYS = frozenset({"for", "window", "dip_window"})
"""Swept keys whose values are seconds."""


def fleet(seed: int) -> list[HostRun]:
    rng = np.random.default_rng([seed, 11])
    runs = []
    for i, (name, spec) in enumerate(FAULTS.items()):
        low, high = WINDOWS_MIN.get(name, (75, 95))
        at = int(rng.integers(low * 60, high * 60))
        gpu = int(rng.integers(0, GPUS))
        fault = parse_fault(spec.format(at=at, gpu=gpu), "exporter")
        load = LOADS.get(name)
        runs.append(HostRun(f"s{seed}-{name}", GPUS, 1000 * seed + i, (fault,), load=load))
    for j, load in enumerate(FAULT_FREE):
        runs.append(HostRun(f"s{seed}-ok{j}", GPUS, 1000 * seed + 100 + j, load=load))
    return runs


def aggregate(per_seed: list[list[RuleScore]], seeds: int) -> list[dict]:
    rows = []
    for name in [s.alert for s in per_seed[0]]:
        scores = [next(s for s in run if s.alert == name) for run in per_seed]
        delays = [d for s in scores for d in s.delays_s]
        onset = [d for s in scores for d in s.onset_delays_s]
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
                "fault_free_hosts": len(FAULT_FREE) * seeds,
                "median_delay_s": statistics.median(delays) if delays else None,
                "median_onset_delay_s": statistics.median(onset) if onset else None,
                "within_goal": sum(1 for d in onset if d <= 2 * STEP_S + for_s),
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
        "| fault-free hosts alarmed | median delay from injection | from onset "
        "| within 2 scrapes + for of onset |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rules"]:
        recall = "-" if r["recall"] is None else f"{r['recall']:.0%}"
        within = f"{r['within_goal']}/{r['detected']}" if r["detected"] else "-"
        lines.append(
            f"| {r['alert']} | {r['for_s']:.0f} s | {r['detected']}/{r['faults']} | {recall} "
            f"| {r['false_episodes']} | {r['fault_free_hosts_with_alarm']}/{r['fault_free_hosts']} "
            f"| {_delay(r['median_delay_s'])} | {_delay(r['median_onset_delay_s'])} | {within} |"
        )
    lines += [
        "",
        "| sweep | value | caught | false alarms | median delay |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in result["sweeps"]:
        value = f"{r['value']:g} s" if r["key"] in DURATION_KEYS else f"{r['value']:g}"
        lines.append(
            f"| {r['alert']}.{r['key']} | {value} | {r['detected']}/{r['faults']} "
            f"| {r['false_episodes']} | {_delay(r['median_delay_s'])} |"
        )
    return "\n".join(lines)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ready(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise TimeoutError(url)


def _gpu1_up(port: int) -> float | None:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    for line in text.splitlines():
        if line.startswith("gpuscale_gpu_up{") and 'gpu="1"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def end_to_end(work: Path) -> float:
    """Seconds from the exporter reporting GPU 1 lost to GpuFellOffBus at a webhook.

    The same path as tests/integration/test_alerts_alertmanager.py: the sim
    exporter (500 ms collect), Prometheus (1 s scrape and evaluation), Alertmanager
    (group_wait 1 s), a webhook on this process.
    """
    arrived: list[float] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            arrived.append(time.monotonic())
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    hook = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    am, prom, exp = _port(), _port(), _port()
    rules = work / "rules.yml"
    rules.write_text(render(build_catalogue(parse_config("exporter_job: gpu\n", rules))))
    (work / "am.yml").write_text(
        "route: {receiver: hook, group_by: [alertname], group_wait: 1s, group_interval: 1s}\n"
        "receivers:\n  - name: hook\n    webhook_configs:\n"
        f"      - url: 'http://127.0.0.1:{hook.server_address[1]}/'\n"
    )
    (work / "prom.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{rules}']\n"
        f"alerting: {{alertmanagers: [{{static_configs: [{{targets: ['127.0.0.1:{am}']}}]}}]}}\n"
        f"scrape_configs: [{{job_name: gpu, static_configs: [{{targets: ['127.0.0.1:{exp}']}}]}}]\n"
    )
    log = (work / "log.txt").open("wb")
    am_bin = shutil.which("prometheus-alertmanager") or "alertmanager"
    procs = [
        subprocess.Popen(
            [
                am_bin,
                f"--config.file={work / 'am.yml'}",
                f"--storage.path={work / 'am'}",
                f"--web.listen-address=127.0.0.1:{am}",
                "--cluster.listen-address=",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        ),
        subprocess.Popen(
            [
                "prometheus",
                f"--config.file={work / 'prom.yml'}",
                f"--storage.tsdb.path={work / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        ),
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpuscale",
                "exporter",
                "--address",
                f"127.0.0.1:{exp}",
                "--source",
                "sim",
                "--gpus",
                "4",
                "--collect-interval",
                "500",
                "--fault",
                "gpu-lost@5:gpu=1",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        ),
    ]
    try:
        _ready(f"http://127.0.0.1:{exp}/metrics")
        while _gpu1_up(exp) != 0.0:
            time.sleep(0.05)
        lost = time.monotonic()
        while not arrived and time.monotonic() < lost + 60:
            time.sleep(0.05)
        return arrived[0] - lost
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(10)
        hook.shutdown()
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--e2e-runs", type=int, default=3, help="GPU-lost end-to-end runs")
    parser.add_argument("--out", type=Path, default=ROOT / "results-alerts.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    per_seed, points, took = [], [], []
    for seed in range(args.seeds):
        started = time.monotonic()
        scores, sweep_points = run_backtest(
            fleet(seed), DURATION_S, STEP_S, sweeps=SWEEPS, start_s=START_S
        )
        took.append(time.monotonic() - started)
        per_seed.append(scores)
        points.append(sweep_points)
        print(f"seed {seed}: {took[-1]:.1f} s", flush=True)
    e2e = []
    for _ in range(args.e2e_runs):
        with tempfile.TemporaryDirectory(prefix="bench-alerts-") as tmp:
            e2e.append(end_to_end(Path(tmp)))
        print(f"end to end: {e2e[-1]:.2f} s", flush=True)
    fault_kinds = sorted({spec.split("@")[0] for spec in FAULTS.values()})
    kinds = {kind: list(DETECTS[kind]) for kind in fault_kinds}
    result = {
        "seeds": args.seeds,
        "hosts_per_seed": len(FAULTS) + len(FAULT_FREE),
        "gpus_per_host": GPUS,
        "duration_s": DURATION_S,
        "scrape_interval_s": STEP_S,
        "detectors": kinds,
        "median_seconds_per_seed": statistics.median(took),
        "rules": aggregate(per_seed, args.seeds),
        "sweeps": sweep_rows(points),
        "end_to_end_s": e2e,
        "end_to_end_median_s": statistics.median(e2e) if e2e else None,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    if args.markdown:
        print(markdown(result))


if __name__ == "__main__":
    main()
