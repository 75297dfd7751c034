"""Exporter benchmark: /metrics latency, CPU per 1,000 scrapes and peak RSS, 8 and 1,000 GPUs.

Both servers run as separate processes and are scraped back-to-back over
loopback with gzip, as Prometheus scrapes. The baseline is the stock
prometheus_client path a hand-rolled exporter would take: the same families,
rebuilt and rendered by ``generate_latest`` on every scrape. Simulated NVIDIA
H100s at 8 and 1,000 GPUs, and 8 simulated AMD MI300X (device-metrics-exporter's
series, profiler counters included). The machine is shared, so the 1-minute
load average is recorded before and after. Run:

    python bench/bench_exporter.py            # writes bench/results.json["exporter"]
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent
TICKS = os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def serve_baseline(gpus: int, port: int, vendor: str) -> None:
    """The naive exporter: prometheus_client's server, families rebuilt on every scrape."""
    from prometheus_client import CollectorRegistry, start_http_server

    from gpuscale.exporter.collector import SnapshotFamilies
    from gpuscale.fields import default_counters
    from gpuscale.telemetry.amd_sim import AmdSimSource
    from gpuscale.telemetry.sim import SimSource

    source = SimSource(gpus) if vendor == "nvidia" else AmdSimSource(SimSource(gpus, ("MI300X",)))
    families = SnapshotFamilies(default_counters())

    class PerScrape:
        def collect(self):
            return families.build(source.sample(), {})

    registry = CollectorRegistry(auto_describe=False)
    registry.register(PerScrape())
    start_http_server(port, addr="127.0.0.1", registry=registry)
    while True:
        time.sleep(3600)


MODEL = {"nvidia": "H100", "amd": "MI300X"}


def _start(kind: str, gpus: int, vendor: str) -> tuple[subprocess.Popen, int]:
    port = _free_port()
    if kind == "gpuscale":
        args = [sys.executable, "-m", "gpuscale", "--log-level", "warning", "exporter"]
        args += ["--source", "sim", "--gpus", str(gpus), "--gpu-models", MODEL[vendor]]
        args += ["--address", f"127.0.0.1:{port}"]
    else:
        args = [sys.executable, __file__, "--serve-baseline", str(gpus), str(port), vendor]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).status_code == 200:
                return proc, port
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{kind} exporter with {gpus} GPUs did not start")


def measure(kind: str, gpus: int, scrapes: int, vendor: str) -> dict[str, float]:
    proc, port = _start(kind, gpus, vendor)
    try:
        latencies = []
        with httpx.Client(headers={"Accept-Encoding": "gzip"}, timeout=30) as client:
            url = f"http://127.0.0.1:{port}/metrics"
            for _ in range(min(20, scrapes)):  # warm-up
                with client.stream("GET", url) as r:
                    for _ in r.iter_raw():
                        pass
            cpu0 = _cpu_seconds(proc.pid)
            for _ in range(scrapes):
                t0 = time.perf_counter()
                with client.stream("GET", url) as r:
                    size = sum(len(chunk) for chunk in r.iter_raw())
                latencies.append(time.perf_counter() - t0)
            cpu = _cpu_seconds(proc.pid) - cpu0
        latencies.sort()
        return {
            "p50_ms": 1000 * statistics.median(latencies),
            "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
            "cpu_s_per_1000_scrapes": cpu * 1000 / scrapes,
            "peak_rss_mb": _peak_rss_mb(proc.pid),
            "body_bytes_gzip": size,
            "scrapes": scrapes,
        }
    finally:
        proc.terminate()
        proc.wait(10)


TARGET_P99_MS = {8: 5.0, 1000: 100.0}
# Result key -> (GPUs, vendor, scrapes, quick scrapes).
PLAN = {
    "8": (8, "nvidia", 2000, 200),
    "1000": (1000, "nvidia", 300, 40),
    "8-amd": (8, "amd", 2000, 200),
}
TARGET_RSS_MB = 100.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--serve-baseline", nargs=3, metavar=("GPUS", "PORT", "VENDOR"))
    parser.add_argument("--quick", action="store_true", help="fewer scrapes (smoke run)")
    args = parser.parse_args()
    if args.serve_baseline:
        gpus, port, vendor = args.serve_baseline
        serve_baseline(int(gpus), int(port), vendor)
        return
    load_before = os.getloadavg()[0]
    results: dict[str, dict] = {}
    for key, (gpus, vendor, full, quick) in PLAN.items():
        scrapes = quick if args.quick else full
        ours = measure("gpuscale", gpus, scrapes, vendor)
        base = measure("baseline", gpus, max(20, scrapes // 4), vendor)
        results[key] = {
            "gpuscale": ours,
            "baseline_prometheus_client_per_scrape": base,
            "p99_ratio_vs_baseline": ours["p99_ms"] / base["p99_ms"],
            "target_p99_ms": TARGET_P99_MS[gpus],
            "target_rss_mb": TARGET_RSS_MB,
            "meets_targets": ours["p99_ms"] < TARGET_P99_MS[gpus]
            and ours["peak_rss_mb"] < TARGET_RSS_MB,
        }
    load = {"before": load_before, "after": os.getloadavg()[0]}
    print(f"1-minute load average: {load['before']:.2f} before, {load['after']:.2f} after")
    header = ("GPUs", "p50 ms", "p99 ms", "target", "CPU s/1k", "RSS MB", "base p99", "ratio")
    print(" ".join(f"{h:>9}" for h in header))
    for gpus, r in results.items():
        o, b = r["gpuscale"], r["baseline_prometheus_client_per_scrape"]
        row = (gpus, o["p50_ms"], o["p99_ms"], r["target_p99_ms"], o["cpu_s_per_1000_scrapes"],
               o["peak_rss_mb"], b["p99_ms"], r["p99_ratio_vs_baseline"])  # fmt: skip
        print(" ".join(f"{v:>9}" if isinstance(v, str) else f"{v:9.2f}" for v in row))
    if args.quick:
        return  # a smoke run: printed only
    out = ROOT / "results.json"
    existing = json.loads(out.read_text()) if out.exists() else {}
    existing["exporter"] = {
        "machine": f"{os.cpu_count()} cores",
        "load_average_1m": load,
        "results": results,
    }
    out.write_text(json.dumps(existing, indent=2) + "\n")


if __name__ == "__main__":
    main()
