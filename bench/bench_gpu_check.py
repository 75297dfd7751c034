"""Check (needs an NVIDIA GPU): the exporter's values beside nvidia-smi's, idle and loaded.

Starts ``gpuscale exporter --source nvml`` (1 s collects) on a free loopback port,
then prints for each GPU, at idle, four times under load (7 s apart) and after,
``nvidia-smi``'s utilisation, power, temperature, SM clock and memory used beside
the exporter's ``DCGM_FI_DEV_*`` series read in the same second, and the median of
30 back-to-back scrapes. The load is a loop of bf16 matrix products through PyTorch
for ``--load-seconds`` (skipped, with a note, where PyTorch or CUDA is missing).

Run: ``.venv/bin/python bench/bench_gpu_check.py [--load-seconds 40]``. Without a
GPU the exporter cannot start and the check says so in one line (exit 1).
"""

import argparse
import statistics
import subprocess
import sys
import time

import httpx
from bench_overhead import free_port, wait_http

SMI = "utilization.gpu,power.draw,temperature.gpu,clocks.sm,memory.used"
FIELDS = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_FB_USED",
)
LOAD = """
import sys, time, torch
end = time.time() + float(sys.argv[1])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
while time.time() < end:
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()
"""


def exported(url: str) -> dict[str, list[str]]:
    """Each of ``FIELDS`` as exposed, one value per GPU in exposition order."""
    out: dict[str, list[str]] = {f: [] for f in FIELDS}
    for line in httpx.get(url, timeout=5).text.splitlines():
        name = line.split("{", 1)[0]
        if name in out:
            out[name].append(line.rsplit(" ", 1)[1])
    return out


def show(label: str, url: str) -> None:
    """Print nvidia-smi's reading and the exporter's for every GPU, now."""
    smi = subprocess.run(
        ["nvidia-smi", f"--query-gpu={SMI}", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.splitlines()
    ours = exported(url)
    for gpu, row in enumerate(smi):
        mine = ", ".join(f"{f.removeprefix('DCGM_FI_DEV_')} {ours[f][gpu]}" for f in FIELDS)
        print(f"{label} gpu {gpu}: nvidia-smi {row} | exporter {mine}")


def main() -> None:
    """Run the check and print it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load-seconds", type=float, default=40.0)
    args = parser.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    cmd = [sys.executable, "-m", "gpuscale", "exporter", "--source", "nvml"]
    exporter = subprocess.Popen(
        [*cmd, "--address", f"127.0.0.1:{port}", "--collect-interval", "1000"]
    )
    try:
        deadline = time.monotonic() + 30.0
        while True:
            if exporter.poll() is not None:
                sys.exit("bench_gpu_check: the nvml exporter exited (its message is above)")
            try:
                wait_http(url, 1.0)
                break
            except RuntimeError:
                if time.monotonic() > deadline:
                    sys.exit(f"bench_gpu_check: {url} did not answer within 30 s")
        time.sleep(3.0)  # a few collects
        show("idle", url)
        load = subprocess.Popen([sys.executable, "-c", LOAD, str(args.load_seconds)])
        for i in range(4):
            time.sleep(7.0)
            if load.poll() not in (None, 0):
                print("load: PyTorch with CUDA is not available here; readings are idle")
            show(f"load {i + 1}", url)
        times = []
        with httpx.Client() as client:
            for _ in range(30):
                start = time.perf_counter()
                client.get(url)
                times.append(1000 * (time.perf_counter() - start))
        print(f"scrape: median {statistics.median(times):.2f} ms of 30")
        load.wait()
        time.sleep(4.0)
        show("after", url)
    finally:
        exporter.terminate()
        exporter.wait(10)


if __name__ == "__main__":
    main()
