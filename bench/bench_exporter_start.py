"""Exporter start-up benchmark: memory held, time to the first /metrics answer, help's CPU.

``gpuscale exporter --source sim --gpus 8`` is started as its own process; the time
from ``Popen`` to the first 200 answer of ``/metrics`` is measured, and the process's
resident memory (``VmRSS`` in ``/proc/PID/status``) and the CPU seconds it has used
(``/proc/PID/stat``: on a shared machine the wall time stretches, the CPU time much
less) are read right after that answer.
The baseline, measured in the same run and interleaved with it, is the smallest
exporter there is: a bare ``prometheus_client.start_http_server`` process serving its
default registry. ``gpuscale --help`` is timed in CPU seconds (user + system of the
child), against ``python -c pass`` as the interpreter's own floor. ``--compare-src DIR``
adds the same figures for another source tree of gpuscale (e.g. the main branch's
``src``), run with ``PYTHONPATH=DIR``. Each figure is the median of ``--runs``
(default 5). Run:

    python bench/bench_exporter_start.py      # writes bench/results.json["exporter_start"]
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
from bench_overhead import cpu_seconds, free_port, status_mb

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results.json"
TARGET_RSS_MB = 60.0
TARGET_FIRST_SCRAPE_S = 1.0
BASELINE_SERVER = (
    "import sys, time\n"
    "from prometheus_client import start_http_server\n"
    "start_http_server(int(sys.argv[1]), addr='127.0.0.1')\n"
    "while True:\n"
    "    time.sleep(3600)\n"
)


def _env(src: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUSCALE_", "DCGM_"))}
    if src is not None:
        env["PYTHONPATH"] = src
    return env


def start_once(kind: str, src: str | None) -> dict[str, float]:
    """One start: seconds to the first 200 from /metrics, and the RSS right after it."""
    port = free_port()
    if kind == "baseline":
        args = [sys.executable, "-c", BASELINE_SERVER, str(port)]
    else:
        args = [sys.executable, "-m", "gpuscale", "--log-level", "warning", "exporter"]
        args += ["--source", "sim", "--gpus", "8", "--address", f"127.0.0.1:{port}"]
    url = f"http://127.0.0.1:{port}/metrics"
    started = time.perf_counter()
    proc = subprocess.Popen(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env(src)
    )
    try:
        deadline = started + 60
        while time.perf_counter() < deadline:
            try:
                if httpx.get(url, timeout=5).status_code == 200:
                    return {
                        "first_scrape_s": time.perf_counter() - started,
                        "rss_mb": status_mb(proc.pid, "VmRSS"),
                        "cpu_s": cpu_seconds(proc.pid),
                    }
            except httpx.HTTPError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"{kind} exited with status {proc.returncode}")
            time.sleep(0.005)
        raise RuntimeError(f"{kind} did not answer /metrics within 60 s")
    finally:
        proc.terminate()
        proc.wait(10)


def cpu_once(args: list[str], src: str | None) -> float:
    """CPU seconds (user + system) one child process took to run ``args``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env(src), check=True
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _median(samples: list[dict[str, float]], key: str) -> float:
    return statistics.median(s[key] for s in samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="starts per variant (median)")
    parser.add_argument("--compare-src", help="another gpuscale src tree to measure too")
    parser.add_argument("--no-write", action="store_true", help="do not update results.json")
    args = parser.parse_args()

    variants: dict[str, tuple[str, str | None]] = {
        "gpuscale": ("gpuscale", None),
        "baseline_prometheus_client": ("baseline", None),
    }
    if args.compare_src:
        variants["compare_src"] = ("gpuscale", args.compare_src)
    help_cmds: dict[str, tuple[list[str], str | None]] = {
        "gpuscale_help": ([sys.executable, "-m", "gpuscale", "--help"], None),
        "python_pass": ([sys.executable, "-c", "pass"], None),
    }
    if args.compare_src:
        help_cmds["compare_src_help"] = help_cmds["gpuscale_help"][0], args.compare_src

    load_before = os.getloadavg()[0]
    starts: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in help_cmds}
    for _ in range(args.runs):  # interleaved, so a busy spell hits every variant alike
        for name, (kind, src) in variants.items():
            starts[name].append(start_once(kind, src))
        for name, (cmd, src) in help_cmds.items():
            cpu[name].append(cpu_once(cmd, src))
    load = {"before": load_before, "after": os.getloadavg()[0]}

    start_results = {
        name: {
            "first_scrape_s_median": _median(samples, "first_scrape_s"),
            "rss_mb_median": _median(samples, "rss_mb"),
            "cpu_to_first_scrape_s_median": _median(samples, "cpu_s"),
            "samples": samples,
        }
        for name, samples in starts.items()
    }
    ours, base = start_results["gpuscale"], start_results["baseline_prometheus_client"]
    help_results = {
        name: {"cpu_s_median": statistics.median(v), "samples": v} for name, v in cpu.items()
    }
    summary = {
        "rss_ratio_vs_baseline": ours["rss_mb_median"] / base["rss_mb_median"],
        "first_scrape_ratio_vs_baseline": ours["first_scrape_s_median"]
        / base["first_scrape_s_median"],
        "help_cpu_ratio_vs_python_pass": help_results["gpuscale_help"]["cpu_s_median"]
        / help_results["python_pass"]["cpu_s_median"],
        "target_rss_mb": TARGET_RSS_MB,
        "target_first_scrape_s": TARGET_FIRST_SCRAPE_S,
        "meets_targets": ours["rss_mb_median"] <= TARGET_RSS_MB
        and ours["first_scrape_s_median"] <= TARGET_FIRST_SCRAPE_S,
    }

    print(f"1-minute load average: {load['before']:.2f} before, {load['after']:.2f} after")
    print(
        f"{'exporter --source sim --gpus 8':34} {'first /metrics s':>16} {'RSS MB':>8} {'CPU s':>7}"
    )
    for name, r in start_results.items():
        print(
            f"{name:34} {r['first_scrape_s_median']:16.3f} {r['rss_mb_median']:8.1f}"
            f" {r['cpu_to_first_scrape_s_median']:7.2f}"
        )
    for name, r in help_results.items():
        print(f"{name:34} CPU {r['cpu_s_median']:.3f} s")
    print(
        f"ratios vs baseline: RSS {summary['rss_ratio_vs_baseline']:.2f}x, first scrape"
        f" {summary['first_scrape_ratio_vs_baseline']:.2f}x; --help CPU vs python -c pass"
        f" {summary['help_cpu_ratio_vs_python_pass']:.2f}x"
    )
    print(
        f"meets targets (RSS <= {TARGET_RSS_MB:g} MB, first scrape <= {TARGET_FIRST_SCRAPE_S:g} s):"
        f" {summary['meets_targets']}"
    )
    if args.no_write:
        return
    existing = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    existing["exporter_start"] = {
        "machine": f"{os.cpu_count()} cores",
        "runs": args.runs,
        "load_average_1m": load,
        "starts": start_results,
        "help": help_results,
        "summary": summary,
    }
    RESULTS.write_text(json.dumps(existing, indent=2) + "\n")


if __name__ == "__main__":
    main()
