"""AMD profiler counters (``gpu_prof_*``) the way device-metrics-exporter reads them: rocpctl.

No amdsmi call gives SM activity, occupancy, SIMD or MFMA (tensor) utilisation:
they are rocprofiler-sdk *derived counters* (``VALUBusy``, ``MeanOccupancyPerCU``,
``SIMD_UTILIZATION``, ``MfmaUtil`` ...), sampled with its device counting service.
That service is a C++ tool API (a tool registers itself with the HSA runtime and
configures per-agent contexts through callbacks) with no Python binding on PyPI,
so AMD's exporter does not call it in-process either: it ships ``rocpctl``, a small
rocprofiler-sdk client, runs ``rocpctl -d <window us> -p <PTL delay ms> COUNTER...``
with ``ROCPROFILER_DEVICE_LOCK_AT_START=1``, and parses the JSON it prints::

    {"GpuMetrics": [{"GpuId": "...", "DrmRenderId": "128", "LogicalNodeId": "1",
                     "Metrics": [{"Field": "VALUBusy", "Value": "41.5"}, ...]}]}

This module does the same, and is the only one that runs rocpctl. As upstream, a
result is reused for 10 s (each run stops the device's counters for the sampling
window); a run over 30 s is killed; three failures in a row, or one crash (a
signal such as SIGABRT), switch the profiler off until restart, logged once. Runs
happen on a background thread, so a slow rocpctl never delays a collect: until the
first run answers, and after a failure, the ``gpu_prof_*`` series are absent, never 0.
GPUs are matched by DRM render minor (``DrmRenderId``), as upstream matches them.
"""

import json
import logging
import math
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpuscale.fields.amd import PROFILER_COUNTERS

logger = logging.getLogger(__name__)

CACHE_S = 10.0
"""How long one rocpctl result is served (device-metrics-exporter's ``cachedTimer``)."""
TIMEOUT_S = 30.0
"""A rocpctl run that takes longer is killed and counts as a failure (upstream's)."""
FAIL_THRESHOLD = 3
"""Failures in a row after which the profiler is switched off (upstream's)."""
MIN_SAMPLING_US = 1000
"""The shortest sampling window upstream accepts (``ProfilerConfig.SamplingInterval``)."""


@dataclass(frozen=True, slots=True)
class ProfilerSettings:
    """How rocpctl is run (device-metrics-exporter's ``ProfilerConfig``).

    Attributes:
        sampling_interval_us: The counting window of each run, microseconds (``-d``).
        ptl_delay_ms: Wait after setting Peak Top Limiter states before sampling (``-p``).
        command: The rocpctl executable, looked up on ``PATH``.
    """

    sampling_interval_us: int = MIN_SAMPLING_US
    ptl_delay_ms: int = 0
    command: str = "rocpctl"


PerGpu = dict[int, dict[str, float]]
"""Profiler values per GPU: DRM render minor -> series name -> value."""


def parse_rocpctl(text: str) -> PerGpu:
    """Turn rocpctl's JSON into series values per GPU, in the exporter's units.

    Counters that are not numbers (``nan``, ``inf``: a zero denominator in a derived
    counter) are left out, so the series is absent; values are clamped to the range
    upstream clamps them to (rocprofiler rounding can go past 100 % at saturation).

    Args:
        text: rocpctl's standard output.

    Returns:
        Values per DRM render minor.

    Raises:
        ValueError: The output is not rocpctl's JSON.
    """
    series_of = {counter: (name, top) for name, (counter, top) in PROFILER_COUNTERS.items()}
    doc = json.loads(text)
    if not isinstance(doc, dict) or not isinstance(doc.get("GpuMetrics", []), list):
        raise ValueError("no GpuMetrics list")  # noqa: TRY004 - one error kind for bad output
    out: PerGpu = {}
    for gpu in doc.get("GpuMetrics") or []:
        values: dict[str, float] = {}
        for metric in gpu.get("Metrics") or []:
            found = series_of.get(str(metric.get("Field")))
            if found is None:
                continue
            try:
                value = float(metric.get("Value"))
            except (TypeError, ValueError):
                continue
            if not math.isfinite(value):
                continue
            name, top = found
            values[name] = max(0.0, value) if top is None else min(max(0.0, value), top)
        out[int(gpu["DrmRenderId"])] = values
    return out


class RocprofReader:
    """Profiler values from rocpctl, refreshed in the background every ``CACHE_S``.

    Args:
        settings: How to run rocpctl.
        clock: Monotonic seconds; tests inject one.
        background: Run rocpctl on a thread (the exporter); False runs it inside
            ``read`` (tests, one-shot tools).
        env: The environment rocpctl runs in; this process's when None.
    """

    def __init__(
        self,
        settings: ProfilerSettings | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        background: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings or ProfilerSettings()
        self._clock = clock
        self._background = background
        self._env = {**(env if env is not None else os.environ)}
        self._env["ROCPROFILER_DEVICE_LOCK_AT_START"] = "1"  # as upstream: no PTL conflicts
        self._lock = threading.Lock()
        self._latest: PerGpu | None = None
        self._read_at = -math.inf
        self._running = False
        self._failures = 0
        self.disabled_reason: str | None = None
        path = shutil.which(self.settings.command, path=self._env.get("PATH"))
        self._path = path
        if path is None:
            self.disabled_reason = f"{self.settings.command} not found on PATH"
            logger.warning(
                "profiler: %s; the gpu_prof_* series are absent (install AMD's rocpctl,"
                " which device-metrics-exporter ships, or turn ProfilerMetrics off)",
                self.disabled_reason,
            )

    @property
    def counters(self) -> list[str]:
        """The rocprofiler-sdk counters asked for, in a fixed order."""
        return [counter for counter, _ in PROFILER_COUNTERS.values()]

    def read(self) -> PerGpu:
        """The latest values per DRM render minor; empty when there are none to serve.

        Starts a refresh when the cached result is older than ``CACHE_S``.
        """
        with self._lock:
            if self.disabled_reason is not None:
                return {}
            stale = self._clock() - self._read_at >= CACHE_S
            start = stale and not self._running
            if start:
                self._running = True
        if start:
            if self._background:
                threading.Thread(target=self._refresh, name="rocpctl", daemon=True).start()
            else:
                self._refresh()
        with self._lock:
            # A result is served until the next one replaces it, and never past its
            # cache life plus the longest run (a stuck refresh does not keep it alive).
            if self._latest is None or self._clock() - self._read_at > CACHE_S + TIMEOUT_S:
                return {}
            return self._latest

    def _refresh(self) -> None:
        result: PerGpu | None = None
        error, fatal = "rocpctl run interrupted", False
        try:
            result, error, fatal = self._run()
        finally:
            with self._lock:
                self._running = False
                self._read_at = self._clock()
                self._latest = result
                self._failures = 0 if result is not None else self._failures + 1
                if result is None and (fatal or self._failures >= FAIL_THRESHOLD):
                    why = "it crashed" if fatal else f"it failed {FAIL_THRESHOLD} times in a row"
                    self.disabled_reason = f"rocpctl switched off: {why} ({error})"
        if result is not None:
            return
        if self.disabled_reason is not None:
            logger.error("profiler: %s; gpu_prof_* absent until restart", self.disabled_reason)
        else:
            logger.warning("profiler: rocpctl failed (%s); gpu_prof_* absent meanwhile", error)

    def _run(self) -> tuple[PerGpu | None, str, bool]:
        """One rocpctl run: (values or None, what went wrong, whether it crashed)."""
        s = self.settings
        args = [str(self._path), "-d", str(s.sampling_interval_us), "-p", str(s.ptl_delay_ms)]
        try:
            done = subprocess.run(  # noqa: S603 - a fixed executable and our own arguments
                [*args, *self.counters],
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                env=self._env,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return None, f"no answer in {TIMEOUT_S:.0f} s", False
        except OSError as err:
            return None, str(err), False
        if done.returncode < 0:  # killed by a signal: abort, segfault
            return None, f"signal {-done.returncode}", True
        if done.returncode != 0:
            tail = " ".join(done.stderr.split())[-200:]
            return None, f"exit {done.returncode}: {tail}", False
        try:
            return parse_rocpctl(done.stdout), "", False
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            return None, f"unreadable output ({err})", False
