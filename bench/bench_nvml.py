"""Benchmark (needs an NVIDIA GPU): what one sample of the nvml source costs, per NVML call.

Opens ``NvmlSource`` on this machine's GPUs with every NVML function wrapped in a
timer, takes ``--samples`` samples, and prints per sample the wall and CPU time and,
per NVML function, its calls and wall milliseconds, slowest first. Wall above CPU
is time NVML waits (``nvmlDeviceGetPcieThroughput`` measures over 20 ms). Then it
prints the clock, power, temperature and utilisation fields of one more sample, to
set beside ``nvidia-smi`` under a load of your choice. Nothing is written.

Run: ``.venv/bin/python bench/bench_nvml.py [--samples 10]`` on a machine with the
NVIDIA driver; without one it says so in one line and exits 1. Calls made on
the source's reader threads overlap, so their milliseconds may add up to more than
the wall time.
"""

import argparse
import collections
import sys
import time
import types
from typing import Any

from gpuscale.errors import SourceUnavailableError
from gpuscale.telemetry.nvml import NvmlSource

SHOWN = ("REASON", "VIOLATION", "CLOCK", "POWER", "TEMP", "UTIL", "FB_USED")


class TimedNvml(types.ModuleType):
    """pynvml with every ``nvml*`` function timed (wall seconds and calls, by name)."""

    def __init__(self, library: types.ModuleType) -> None:
        super().__init__("pynvml_timed")
        self._library = library
        self.spent: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._library, name)
        if not (callable(value) and name.startswith("nvml")):
            return value

        def timed(*args: object, **kwargs: object) -> Any:
            start = time.perf_counter()
            try:
                return value(*args, **kwargs)
            finally:
                self.spent[name] += time.perf_counter() - start
                self.calls[name] += 1

        return timed


def main() -> None:
    """Time the samples and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=10)
    args = parser.parse_args()
    import pynvml  # noqa: TID251 - the benchmark times the real binding the source calls

    library = TimedNvml(pynvml)
    try:
        source = NvmlSource(library=library)
    except SourceUnavailableError as err:
        sys.exit(f"bench_nvml: no NVIDIA GPU here: {err}")
    library.spent.clear()
    library.calls.clear()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(args.samples):
        source.sample()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    per = 1000 / args.samples
    entities = len(source.devices())
    print(f"{entities} entities; per sample: wall {wall * per:.1f} ms, CPU {cpu * per:.1f} ms")
    for name, spent in library.spent.most_common():
        print(f"  {name:45s} {library.calls[name] / args.samples:5.1f} calls {spent * per:8.3f} ms")
    for device in source.sample().devices:
        shown = {k: v for k, v in sorted(device.values.items()) if any(p in k for p in SHOWN)}
        print(device.info.key, shown)
    source.close()


if __name__ == "__main__":
    main()
