"""Base install benchmark: the size of ``pip install .``, and that it runs exporter and controller.

A fresh virtual environment is made with ``--python`` (default: Debian's own
``/usr/bin/python3``), the project is installed into it without extras, and then:
``gpuscale exporter --source sim`` must answer ``/metrics`` with GPU series and
``gpuscale autoscale --help`` must succeed (``gpuscale evaluate --help``'s answer, one
line naming the ``sim`` extra, is recorded too). The size is ``site-packages`` as
installed (bytecode included, as pip compiles it), less pip and setuptools, which
every environment has; the breakdown sums each distribution's files from its
``RECORD``. ``--extra sim`` (repeatable) measures an install with extras instead.
Needs PyPI. Run:

    python bench/bench_install.py             # writes bench/results.json["install"]
"""

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from bench_overhead import free_port

ROOT = Path(__file__).resolve().parent
PROJECT = ROOT.parent
RESULTS = ROOT / "results.json"
TARGET_MB = 100.0
EVERY_ENV = {"pip", "setuptools"}
"""Distributions a fresh virtual environment brings along, not counted."""


def _tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def distribution_bytes(site: Path) -> dict[str, int]:
    """Bytes on disk of each installed distribution, from its RECORD."""
    sizes: dict[str, int] = {}
    for info in site.glob("*.dist-info"):
        record = info / "RECORD"
        name = info.name.removesuffix(".dist-info").rsplit("-", 1)[0]  # NAME-VERSION
        total = 0
        if record.exists():
            for row in csv.reader(record.read_text().splitlines()):
                path = (site / row[0]).resolve()
                if row and path.is_file():
                    total += path.stat().st_size
        sizes[name] = total
    return sizes


def check_exporter(gpuscale: Path) -> int:
    """Start ``gpuscale exporter --source sim``; return how many GPU series /metrics served."""
    port = free_port()
    proc = subprocess.Popen(
        [str(gpuscale), "exporter", "--source", "sim", "--gpus", "8", "-a", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
                return sum(
                    1 for line in body.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{")
                )
            except httpx.HTTPError:
                if proc.poll() is not None:
                    raise RuntimeError(f"the exporter exited: {proc.stderr.read()}") from None  # type: ignore[union-attr]
                time.sleep(0.1)
        raise RuntimeError("the exporter did not answer /metrics within 60 s")
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default="/usr/bin/python3", help="interpreter of the venv")
    parser.add_argument("--extra", action="append", default=[], help="install with this extra")
    parser.add_argument("--no-write", action="store_true", help="do not update results.json")
    args = parser.parse_args()
    target = f"{PROJECT}[{','.join(args.extra)}]" if args.extra else str(PROJECT)
    with tempfile.TemporaryDirectory(prefix="gpuscale-install-") as tmp:
        env_dir = Path(tmp) / "venv"
        subprocess.run([args.python, "-m", "venv", str(env_dir)], check=True)
        py = env_dir / "bin" / "python"
        started = time.monotonic()
        pip = subprocess.run(
            [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", target],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if pip.returncode != 0:
            sys.exit(f"pip install {target} failed:\n{pip.stderr[-3000:]}")
        install_s = time.monotonic() - started
        site = Path(
            subprocess.run(
                [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                capture_output=True, text=True, check=True,
            ).stdout.strip()
        )  # fmt: skip
        sizes = distribution_bytes(site)
        whole = _tree_bytes(site)
        every_env = sum(b for name, b in sizes.items() if name.lower() in EVERY_ENV)
        installed = whole - every_env
        gpus = check_exporter(env_dir / "bin" / "gpuscale")
        autoscale = subprocess.run(
            [str(env_dir / "bin" / "gpuscale"), "autoscale", "--help"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        evaluate = subprocess.run(
            [str(env_dir / "bin" / "gpuscale"), "evaluate", "--help"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        python_version = subprocess.run(
            [str(py), "--version"], capture_output=True, text=True, check=True
        ).stdout.strip()
    mb = installed / 1e6
    breakdown = {
        name: round(b / 1e6, 1)
        for name, b in sorted(sizes.items(), key=lambda kv: -kv[1])
        if name.lower() not in EVERY_ENV
    }
    what = f"gpuscale[{','.join(args.extra)}]" if args.extra else "gpuscale"
    print(f"{python_version}, pip install {what}")
    print(f"site-packages less pip and setuptools: {mb:.1f} MB (target {TARGET_MB:g} MB)")
    print(f"exporter --source sim served {gpus} GPUs; autoscale --help exit {autoscale.returncode}")
    print(f"evaluate --help exit {evaluate.returncode}: {evaluate.stderr.strip()}")
    for name, size in breakdown.items():
        print(f"  {name:32} {size:7.1f} MB")
    if args.no_write:
        return
    existing = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    key = "install" if not args.extra else f"install[{','.join(sorted(args.extra))}]"
    existing[key] = {
        "python": python_version,
        "machine": f"{os.cpu_count()} cores",
        "site_packages_mb_less_pip_setuptools": round(mb, 1),
        "target_mb": TARGET_MB,
        "meets_target": mb <= TARGET_MB,
        "install_s": round(install_s, 1),
        "exporter_sim_gpus_served": gpus,
        "autoscale_help_exit": autoscale.returncode,
        "evaluate_help_exit": evaluate.returncode,
        "evaluate_help_stderr": evaluate.stderr.strip(),
        "distributions_mb": breakdown,
    }
    RESULTS.write_text(json.dumps(existing, indent=2) + "\n")
    if gpus != 8 or autoscale.returncode != 0:
        sys.exit(1)


if __name__ == "__main__":
    main()
