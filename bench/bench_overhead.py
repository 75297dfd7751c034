"""Monitoring overhead against granularity: what finer telemetry costs, cell by cell.

For each collect interval (100 ms, 1 s, 10 s, 30 s), scrape interval (1 s, 15 s,
60 s) and fleet size (8, 64 simulated GPUs) one ``gpuscale exporter`` process
runs, and one real Prometheus per (fleet size, scrape interval) scrapes the
four exporters of its row. All cells run at once, so the whole grid costs one
window of wall time. Per cell it measures:

- exporter CPU, % of one core: utime + stime from ``/proc/<pid>/stat`` over the
  window, split into 60 s sub-windows (60 s is a multiple of every interval, so
  each sub-window holds the same collects and scrapes); the median is reported;
- exporter RSS (VmRSS at the end, VmHWM peak);
- bytes on the wire per scrape, plain and gzip (the median of three fetches);
- Prometheus ingestion: the rate of its own ``prometheus_tsdb_head_samples_appended_total``
  over the window, divided among its four targets (they expose the same series;
  the bench checks ``scrape_samples_scraped`` agrees);
- TSDB growth per GPU-day: after the window a TSDB snapshot writes the head to a
  block; its size over its ``numSamples`` (meta.json) is bytes per sample, times
  the measured samples/s per GPU, times 86,400. The block holds the whole run,
  so at 15 s and 60 s scrapes each series has only a few samples per chunk and
  the figure is an upper bound on what Prometheus' 2 h blocks store. A
  reference Prometheus per fleet size scrapes an extra 100 ms-collect exporter
  every second: its chunks fill within the run and every sample is a new
  collect, so its bytes per sample price full chunks when collect <= scrape;
- staleness a policy sees: at jittered times during the window, the age of the
  collect behind the newest sample (query time minus
  ``gpuscale_exporter_last_successful_collect_timestamp_seconds``), read raw and
  through a recording rule evaluated every scrape interval (collect + scrape +
  rule delay); median and p95.

Run (the machine is shared: numbers are medians, and every ratio in docs/benchmarks.md
is between cells of the same run):

    python bench/bench_overhead.py           # full grid, about 5 minutes
    python bench/bench_overhead.py --quick   # 8 GPUs, 2 x 2 cells, 30 s window; prints only
"""

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent
TICKS = os.sysconf("SC_CLK_TCK")
FULL = {"gpus": (8, 64), "collect_s": (0.1, 1.0, 10.0, 30.0), "scrape_s": (1, 15, 60)}
QUICK = {"gpus": (8,), "collect_s": (0.1, 1.0), "scrape_s": (1, 15)}
RULE = "bench:last_collect_timestamp_seconds"
COLLECT_TS = "gpuscale_exporter_last_successful_collect_timestamp_seconds"
TARGET_CPU_PCT = 2.0  # the goal at 1 s collect on 8 GPUs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def status_mb(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def wait_http(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {timeout} s")


class Cell:
    """One exporter process: a (GPUs, collect, scrape) cell of the grid."""

    def __init__(self, gpus: int, collect_s: float, scrape_s: int, log: Path) -> None:
        self.gpus, self.collect_s, self.scrape_s = gpus, collect_s, scrape_s
        self.port = free_port()
        self.job = f"c{int(collect_s * 1000)}ms"
        args = [sys.executable, "-m", "gpuscale", "--log-level", "warning", "exporter"]
        args += ["--source", "sim", "--gpus", str(gpus), "--collect-interval"]
        args += [str(int(collect_s * 1000)), "--address", f"127.0.0.1:{self.port}"]
        self.proc = subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT)
        self.cpu_marks: list[float] = []
        self.ages_raw: list[float] = []
        self.ages_rule: list[float] = []

    def wire_bytes(self) -> tuple[int, int]:
        """Median body size of three scrapes, (plain, gzip), as sent on the wire."""
        url = f"http://127.0.0.1:{self.port}/metrics"
        sizes: dict[str, list[int]] = {"identity": [], "gzip": []}
        for encoding, found in sizes.items():
            for _ in range(3):
                with httpx.stream("GET", url, headers={"Accept-Encoding": encoding}) as r:
                    found.append(sum(len(chunk) for chunk in r.iter_raw()))
        return int(statistics.median(sizes["identity"])), int(statistics.median(sizes["gzip"]))


class Server:
    """A real Prometheus scraping one row of cells at one scrape interval."""

    def __init__(self, binary: str, workdir: Path, cells: list[Cell], scrape_s: int) -> None:
        self.cells, self.scrape_s = cells, scrape_s
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        (workdir / "rules.yml").write_text(
            "groups:\n  - name: bench\n    rules:\n"
            f"      - record: {RULE}\n        expr: max by (job) ({COLLECT_TS})\n"
        )
        jobs = "".join(
            f"  - job_name: {c.job}\n    static_configs:\n      - targets: ['127.0.0.1:{c.port}']\n"
            for c in cells
        )
        timeout = min(scrape_s, 10)
        (workdir / "prometheus.yml").write_text(
            f"global:\n  scrape_interval: {scrape_s}s\n  scrape_timeout: {timeout}s\n"
            f"  evaluation_interval: {scrape_s}s\nrule_files: [rules.yml]\n"
            f"scrape_configs:\n{jobs}"
        )
        self.data = workdir / "data"
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.data}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-admin-api",
                "--log.level=warn",
            ],
            stdout=(workdir / "prometheus.log").open("wb"),
            stderr=subprocess.STDOUT,
        )

    def query(self, promql: str) -> list[dict]:
        r = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=10)
        r.raise_for_status()
        return list(r.json()["data"]["result"])

    def appended(self) -> float:
        """prometheus_tsdb_head_samples_appended_total, from Prometheus' own /metrics."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        name = "prometheus_tsdb_head_samples_appended_total"
        return sum(float(ln.split()[-1]) for ln in text.splitlines() if ln.startswith(name))

    def snapshot_block(self) -> dict[str, float]:
        """Write the head to a block through the snapshot API; its size per sample."""
        r = httpx.post(f"{self.url}/api/v1/admin/tsdb/snapshot", timeout=60)
        r.raise_for_status()
        folder = self.data / "snapshots" / r.json()["data"]["name"]
        samples = size = 0
        for meta in folder.glob("*/meta.json"):
            samples += json.loads(meta.read_text())["stats"]["numSamples"]
            size += sum(f.stat().st_size for f in meta.parent.rglob("*") if f.is_file())
        return {"bytes": size, "samples": samples, "bytes_per_sample": size / max(samples, 1)}


def watch_staleness(servers: list[Server], stop: threading.Event, seed: int) -> None:
    """Sample the age of the newest collect, raw and through the rule, at jittered times."""
    rng = random.Random(seed)
    while not stop.wait(rng.uniform(1.5, 3.0)):
        for server in servers:
            by_job = {c.job: c for c in server.cells}
            for promql, field in ((COLLECT_TS, "ages_raw"), (RULE, "ages_rule")):
                asked = time.time()
                try:
                    result = server.query(promql)
                except httpx.HTTPError:
                    continue
                for r in result:
                    cell = by_job.get(r["metric"].get("job", ""))
                    if cell is not None:
                        getattr(cell, field).append(asked - float(r["value"][1]))


def quantiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"median": None, "p95": None, "n": 0}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return {"median": statistics.median(ordered), "p95": p95, "n": len(ordered)}


def run(plan: dict, window_s: float, sub_s: float, binary: str, workdir: Path) -> dict:
    cells: list[Cell] = []
    servers: list[Server] = []
    refs: dict[int, Server] = {}
    for gpus in plan["gpus"]:
        # Reference for TSDB cost at full chunks: 100 ms collect, 1 s scrape, so every
        # sample is a new collect and each series fills its chunks within the run.
        folder = workdir / f"g{gpus}-ref"
        folder.mkdir()
        ref = Cell(gpus, 0.1, 1, folder / "ref.log")
        ref.job = "ref"
        refs[gpus] = Server(binary, folder, [ref], 1)
        for scrape_s in plan["scrape_s"]:
            folder = workdir / f"g{gpus}-s{scrape_s}"
            folder.mkdir()
            row = [Cell(gpus, c, scrape_s, folder / f"{c}.log") for c in plan["collect_s"]]
            cells += row
            servers.append(Server(binary, folder, row, scrape_s))
    try:
        for cell in cells + [r.cells[0] for r in refs.values()]:
            wait_http(f"http://127.0.0.1:{cell.port}/metrics", 120)
        for server in servers + list(refs.values()):
            wait_http(f"{server.url}/-/ready", 60)
        # Warm-up: every target scraped at least twice, so rates and the rule have data.
        deadline = time.monotonic() + 3 * max(plan["scrape_s"]) + 30
        while time.monotonic() < deadline:
            counts = [len(s.query(f"count_over_time(up[{4 * s.scrape_s}s]) >= 2")) for s in servers]
            if all(n == len(s.cells) for n, s in zip(counts, servers, strict=True)):
                break
            time.sleep(1)
        stop = threading.Event()
        watcher = threading.Thread(target=watch_staleness, args=(servers, stop, 7), daemon=True)
        appended0 = [(time.monotonic(), s.appended()) for s in servers]
        marks = max(1, round(window_s / sub_s))
        for cell in cells:
            cell.cpu_marks.append(cpu_seconds(cell.proc.pid))
        watcher.start()
        for _ in range(marks):
            time.sleep(sub_s)
            for cell in cells:
                cell.cpu_marks.append(cpu_seconds(cell.proc.pid))
        stop.set()
        watcher.join(10)
        appended1 = [(time.monotonic(), s.appended()) for s in servers]
        full = {gpus: ref.snapshot_block() for gpus, ref in refs.items()}
        return summarise(servers, appended0, appended1, sub_s, full)
    finally:
        every = servers + list(refs.values())
        procs = [c.proc for s in every for c in s.cells] + [s.proc for s in every]
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


def summarise(servers, appended0, appended1, sub_s, full) -> dict:
    rows, proms = [], []
    for server, (t0, a0), (t1, a1) in zip(servers, appended0, appended1, strict=True):
        rate = (a1 - a0) / (t1 - t0)
        scraped = {
            r["metric"]["job"]: float(r["value"][1]) for r in server.query("scrape_samples_scraped")
        }
        block = server.snapshot_block()
        gpus = server.cells[0].gpus
        per_target = rate / len(server.cells)
        proms.append({
            "gpus": gpus, "scrape_s": server.scrape_s, "targets": len(server.cells),
            "samples_appended_per_s": rate, "samples_scraped_per_target": scraped,
            "snapshot_block": block,
        })  # fmt: skip
        for cell in server.cells:
            windows = [
                100 * (b - a) / sub_s
                for a, b in zip(cell.cpu_marks, cell.cpu_marks[1:], strict=False)
            ]
            plain, gz = cell.wire_bytes()
            per_gpu = per_target / gpus
            rows.append({
                "gpus": gpus, "collect_s": cell.collect_s, "scrape_s": server.scrape_s,
                "cpu_pct_of_core": statistics.median(windows), "cpu_pct_windows": windows,
                "rss_mb": status_mb(cell.proc.pid, "VmRSS"),
                "peak_rss_mb": status_mb(cell.proc.pid, "VmHWM"),
                "bytes_per_scrape_plain": plain, "bytes_per_scrape_gzip": gz,
                "samples_per_s": per_target, "samples_per_s_per_gpu": per_gpu,
                "tsdb_bytes_per_sample": block["bytes_per_sample"],
                "tsdb_mb_per_gpu_day": block["bytes_per_sample"] * per_gpu * 86400 / 1e6,
                "tsdb_bytes_per_sample_full_chunks": full[gpus]["bytes_per_sample"],
                "tsdb_mb_per_gpu_day_full_chunks": (
                    full[gpus]["bytes_per_sample"] * per_gpu * 86400 / 1e6
                ),
                "staleness_raw_s": quantiles(cell.ages_raw),
                "staleness_rule_s": quantiles(cell.ages_rule),
            })  # fmt: skip
    return {"cells": rows, "prometheus": proms, "full_chunk_reference": full}


def print_table(rows: list[dict]) -> None:
    head = ("GPUs", "collect", "scrape", "CPU %", "RSS MB", "gz B", "plain B", "samp/s",
            "MB/GPU-d", "stale p50", "rule p50")  # fmt: skip
    print(" ".join(f"{h:>9}" for h in head))
    for r in rows:
        vals = (r["gpus"], r["collect_s"], r["scrape_s"], r["cpu_pct_of_core"], r["rss_mb"],
                r["bytes_per_scrape_gzip"], r["bytes_per_scrape_plain"], r["samples_per_s"],
                r["tsdb_mb_per_gpu_day"], r["staleness_raw_s"]["median"],
                r["staleness_rule_s"]["median"])  # fmt: skip
        print(" ".join(f"{v:9.2f}" if isinstance(v, float) else f"{v!s:>9}" for v in vals))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 GPUs, 2 x 2 cells, 30 s window")
    parser.add_argument("--window", type=float, help="seconds measured (default 180, quick 30)")
    parser.add_argument("--no-write", action="store_true", help="print only (--quick never writes)")
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    sub_s = 30.0 if args.quick else 60.0  # a multiple of every interval in the plan
    window = args.window or (30.0 if args.quick else 180.0)
    binary = shutil.which("prometheus")
    if binary is None:
        sys.exit("prometheus is not installed: run ./scripts/test, which installs it")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpuscale-overhead-") as tmp:
        result = run(plan, window, sub_s, binary, Path(tmp))
    rows = sorted(result["cells"], key=lambda r: (r["gpus"], r["collect_s"], r["scrape_s"]))
    print_table(rows)
    goal = [r for r in rows if r["gpus"] == 8 and r["collect_s"] == 1.0]
    worst = max(r["cpu_pct_of_core"] for r in goal)
    out = {
        "machine": f"{os.cpu_count()} cores, shared",
        "mode": "quick" if args.quick else "full",
        "window_s": window,
        "sub_window_s": sub_s,
        "wall_s": time.monotonic() - started,
        "cells": rows,
        "prometheus": result["prometheus"],
        "full_chunk_reference": result["full_chunk_reference"],
        "goal_cpu_pct_1s_collect_8_gpus": {
            "worst_scrape": worst,
            "target": TARGET_CPU_PCT,
            "meets": worst < TARGET_CPU_PCT,
        },
    }
    print(f"wall {out['wall_s']:.0f} s; 1 s collect, 8 GPUs: {worst:.2f} % of a core (goal < 2 %)")
    if not (args.no_write or args.quick):  # a quick run must not replace the full grid
        path = ROOT / "results.json"
        existing = json.loads(path.read_text()) if path.exists() else {}
        existing["overhead"] = out
        path.write_text(json.dumps(existing, indent=2) + "\n")


if __name__ == "__main__":
    main()
