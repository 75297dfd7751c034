"""Exporter under load: many concurrent scrapers, with and without 1,000 idle connections.

The exporter runs as a process (``gpuscale exporter --source sim``) on
loopback. Each scraper keeps one connection and scrapes ``/metrics`` back to
back with gzip, as Prometheus does, for the phase's duration; a scrape that
errs or takes over 10 s counts as failed and the scraper reconnects. The
baseline is the same load without idle connections, measured in the same run;
the idle phase adds 1,000 connections that each send half a request head and
reconnect whenever the server closes them (a slow-loris client), so they are
held open throughout. Reported per phase: scrapes, failed, scrapes a second,
p50 and p99 latency, the exporter's CPU seconds and its thread count, and the
idle phase's p50/p99 as ratios to the baseline's. The machine is shared, so
the 1-minute load average is printed too. Run:

    python bench/bench_exporter_load.py               # 200 x 60 s at 8 GPUs, 20 x 30 s at 1,000
    python bench/bench_exporter_load.py --scale 0.25  # every phase a quarter as long
"""

import argparse
import asyncio
import contextlib
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass, field

import httpx
from bench_overhead import cpu_seconds, free_port

SCRAPE_TIMEOUT_S = 10.0
IDLE_CONNECTIONS = 1000


@dataclass
class Phase:
    """One measured load: who scrapes, how long, and what they saw."""

    name: str
    scrapers: int
    seconds: float
    idle: int = 0
    latencies: list[float] = field(default_factory=list)
    failed: int = 0
    cpu_s: float = 0.0
    threads: int = 0

    def quantile(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _start_exporter(gpus: int) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    cmd = [sys.executable, "-m", "gpuscale", "exporter", "--source", "sim", "--gpus", str(gpus)]
    proc = subprocess.Popen(
        [*cmd, "--address", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).status_code == 200:
                return proc, port
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"the exporter at {gpus} GPUs did not answer within 120 s")


_REQUEST = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept-Encoding: gzip\r\n\r\n"


async def _scrape(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(_REQUEST)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    status = head.split(b" ", 2)[1]
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    if status != b"200":
        raise RuntimeError(f"HTTP {status.decode()}")


async def _scraper(port: int, phase: Phase, stop: float) -> None:
    connection = None
    while time.monotonic() < stop:
        start = time.perf_counter()
        try:
            if connection is None:
                connection = await asyncio.open_connection("127.0.0.1", port)
            await asyncio.wait_for(_scrape(*connection), SCRAPE_TIMEOUT_S)
            phase.latencies.append(time.perf_counter() - start)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, RuntimeError, ValueError):
            phase.failed += 1
            if connection is not None:
                connection[1].close()
            connection = None
    if connection is not None:
        connection[1].close()


async def _idle(port: int, stop: float) -> None:
    """Hold one half-sent request open, reconnecting whenever the server closes it."""
    while time.monotonic() < stop:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            await asyncio.wait_for(reader.read(1024), max(0.1, stop - time.monotonic()))
            writer.close()
        except (OSError, TimeoutError):
            await asyncio.sleep(0.1)


async def _run(port: int, phase: Phase) -> None:
    stop = time.monotonic() + phase.seconds
    idle = [asyncio.create_task(_idle(port, stop)) for _ in range(phase.idle)]
    if idle:
        await asyncio.sleep(2.0)  # let them connect before the clock starts
        stop = time.monotonic() + phase.seconds
    await asyncio.gather(*(_scraper(port, phase, stop) for _ in range(phase.scrapers)))
    for task in idle:
        task.cancel()
    await asyncio.gather(*idle, return_exceptions=True)


def measure(gpus: int, phases: list[Phase]) -> None:
    """Run ``phases`` one after another against one exporter at ``gpus`` GPUs."""
    proc, port = _start_exporter(gpus)
    try:
        for phase in phases:
            cpu = cpu_seconds(proc.pid)
            asyncio.run(_run(port, phase))
            phase.cpu_s = cpu_seconds(proc.pid) - cpu
            phase.threads = _threads(proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> int:
    """Run the phases and print the table.

    Returns:
        0.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every phase's length")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    runs = {
        8: [Phase("8 GPUs, 200 scrapers", 200, 60 * args.scale)],
        1000: [Phase("1000 GPUs, 20 scrapers", 20, 30 * args.scale)],
    }
    for gpus, phases in runs.items():
        base = phases[0]
        phases.append(
            Phase(f"{base.name} + {IDLE_CONNECTIONS} idle", base.scrapers, base.seconds, 1000)
        )
        measure(gpus, phases)
    print(
        f"{'phase':40} {'scrapes':>8} {'failed':>6} {'per s':>7} {'p50 ms':>8} {'p99 ms':>8}"
        f" {'cpu s':>6} {'threads':>7} {'p50 x':>6} {'p99 x':>6}"
    )
    for phases in runs.values():
        base = phases[0]
        for phase in phases:
            p50, p99 = phase.quantile(0.5), phase.quantile(0.99)
            print(
                f"{phase.name:40} {len(phase.latencies):8d} {phase.failed:6d}"
                f" {len(phase.latencies) / phase.seconds:7.1f} {p50 * 1e3:8.1f} {p99 * 1e3:8.1f}"
                f" {phase.cpu_s:6.1f} {phase.threads:7d}"
                f" {p50 / base.quantile(0.5):6.2f} {p99 / base.quantile(0.99):6.2f}"
            )
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
