"""Load profiles: how busy the simulated GPUs are at each moment, and what kind of work it is.

The sim source needs a demand to drive its physics. A profile is a function of time
that returns one busy share per GPU, so the same profile drives 8 GPUs or 10,000. A
profile comes from a short spec on the command line (``--load sine:0.5:0.4:300``) or
from a recorded utilisation trace in CSV. ``ActivityMix`` says how the busy time
spreads over DCGM's activity counters and how much power it draws.
"""

import bisect
import csv
import functools
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from gpuscale.errors import ConfigError, config_error, require

logger = logging.getLogger(__name__)

LOAD_SPEC_FORMS = "constant:LEVEL (0..1), sine[:MEAN[:AMPLITUDE[:PERIOD_S]]], trace:PATH.csv"


@dataclass(frozen=True, slots=True)
class ActivityMix:
    """How busy time spreads over DCGM's activity counters; the defaults resemble LLM serving.

    Ratios are shares of busy time (what ``DCGM_FI_PROF_*`` reads at full busy); link
    shares are shares of the link's per-direction bandwidth at full busy.

    Attributes:
        power_intensity: Dynamic power at full busy and full clock, as a share of
            ``TDP - idle``. Serving rarely reaches the power limit (0.92); above 1 the
            card is power-limited at full load, as dense training kernels are.
    """

    sm_active: float = 0.85
    sm_occupancy: float = 0.30
    tensor_active: float = 0.35
    dram_active: float = 0.60
    fp64_active: float = 0.0
    fp32_active: float = 0.08
    fp16_active: float = 0.04
    pcie_rx_share: float = 0.010
    pcie_tx_share: float = 0.005
    pcie_idle_share: float = 0.0002
    nvlink_share: float = 0.05
    power_intensity: float = 0.92


LLM_SERVING = ActivityMix()


class LoadProfile(Protocol):
    """Demanded busy share per GPU as a function of time."""

    def __call__(self, t: float, n: int) -> np.ndarray:
        """Busy share of each of ``n`` GPUs at ``t`` seconds since the start.

        Returns:
            Array of length ``n``, each value in [0, 1] (a share of time, not percent).
        """
        ...


@dataclass(frozen=True, slots=True)
class ConstantLoad:
    """Every GPU equally busy, always."""

    level: float

    def __call__(self, t: float, n: int) -> np.ndarray:
        """Busy share of each GPU: ``level``."""
        return np.full(n, self.level)


@functools.lru_cache(maxsize=16)
def _phases(seed: int, n: int) -> np.ndarray:
    phases = np.random.default_rng(seed).uniform(0.0, 2.0 * math.pi, n)
    phases.flags.writeable = False
    return phases


@dataclass(frozen=True, slots=True)
class SineLoad:
    """A diurnal-style swing, each GPU at its own phase (drawn from ``seed``)."""

    mean: float
    amplitude: float
    period_s: float
    seed: int

    def __call__(self, t: float, n: int) -> np.ndarray:
        """Busy share of each GPU, ``mean + amplitude * sin(...)`` clipped to [0, 1]."""
        angle = 2.0 * math.pi * t / self.period_s + _phases(self.seed, n)
        return np.clip(self.mean + self.amplitude * np.sin(angle), 0.0, 1.0)


@dataclass(frozen=True, slots=True)
class TraceLoad:
    """A recorded busy share, held from one row to the next and repeated every ``period_s``."""

    times_s: tuple[float, ...]
    loads: tuple[float, ...]
    period_s: float

    def __call__(self, t: float, n: int) -> np.ndarray:
        """Busy share of every GPU: the trace row in force at ``t`` modulo the period."""
        row = max(bisect.bisect_right(self.times_s, t % self.period_s) - 1, 0)
        return np.full(n, self.loads[row])


def constant(level: float) -> LoadProfile:
    """Every GPU busy ``level`` of the time.

    Raises:
        ConfigError: ``level`` is outside [0, 1].
    """
    require(0.0 <= level <= 1.0, f"constant load {level}", "outside 0..1", "give a busy share")
    return ConstantLoad(float(level))


def sine(
    mean: float = 0.5, amplitude: float = 0.4, period_s: float = 300.0, seed: int = 0
) -> LoadProfile:
    """A sine swing around ``mean`` with per-GPU phase offsets drawn from ``seed``.

    Raises:
        ConfigError: ``mean`` is outside [0, 1], ``amplitude`` is negative, or
            ``period_s`` is not a positive number of seconds.
    """
    require(0.0 <= mean <= 1.0, f"sine mean {mean}", "outside 0..1", "give a busy share")
    require(
        0.0 <= amplitude < math.inf, f"sine amplitude {amplitude}", "negative", "give a share >= 0"
    )
    require(
        0.0 < period_s < math.inf, f"sine period {period_s}", "not positive", "give seconds > 0"
    )
    return SineLoad(float(mean), float(amplitude), float(period_s), seed)


def from_trace_file(path: Path) -> LoadProfile:
    """Read a ``time_s,load`` CSV trace; the load is held between rows and the trace loops.

    Loads are shares 0..1, or percent 0..100 when any value is above 1. The trace
    repeats after its last row, which lasts as long as the gap before it.

    Raises:
        ConfigError: The file cannot be read or a row is malformed, as ``FILE:LINE: reason: fix``.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise config_error(
            str(path), f"cannot read load trace ({exc.strerror})", "check the path after 'trace:'"
        ) from None
    times: list[float] = []
    loads: list[float] = []
    header_seen = False
    for line_no, row in enumerate(csv.reader(text.splitlines()), start=1):
        where = f"{path}:{line_no}"
        cells = [c.strip() for c in row]
        if not cells or not any(cells) or cells[0].startswith("#"):
            continue
        if not header_seen:
            require(
                [c.lower() for c in cells] == ["time_s", "load"],
                where,
                f"header is {','.join(cells)!r}",
                "the first line must be 'time_s,load'",
            )
            header_seen = True
            continue
        require(
            len(cells) == 2,
            where,
            f"expected 2 columns, got {len(cells)}",
            "write 'time_s,load'",
        )
        try:
            t, value = float(cells[0]), float(cells[1])
        except ValueError:
            raise config_error(
                where,
                f"{','.join(cells)!r} is not numeric",
                "write seconds and a load, e.g. '60,0.5'",
            ) from None
        require(
            math.isfinite(t) and t >= 0,
            where,
            f"time_s {cells[0]} is negative",
            "give seconds >= 0",
        )
        require(
            not times or t > times[-1],
            where,
            f"time_s {cells[0]} does not increase",
            "sort the rows by time",
        )
        require(
            math.isfinite(value) and 0.0 <= value <= 100.0,
            where,
            f"load {cells[1]} is outside 0..1 (or 0..100 %)",
            "fix the value",
        )
        times.append(t)
        loads.append(value)
    require(bool(times), f"{path}:1", "no data rows", "add rows of 'time_s,load' after the header")
    if max(loads) > 1.0:
        loads = [v / 100.0 for v in loads]
    gap = times[-1] - times[-2] if len(times) > 1 else 1.0
    logger.debug("load trace %s: %d rows, loops every %.1f s", path, len(times), times[-1] + gap)
    return TraceLoad(tuple(times), tuple(loads), times[-1] + gap)


def parse_load_spec(spec: str, seed: int) -> LoadProfile:
    """Build a profile from a CLI spec: ``constant:0.7``, ``sine:0.5:0.4:300``, ``trace:PATH``.

    Args:
        spec: The spec as the user typed it.
        seed: Seeds per-GPU phase offsets of ``sine``.

    Raises:
        ConfigError: The spec is malformed; the message names it and the accepted forms.
    """
    kind, _, rest = spec.strip().partition(":")

    def bad(reason: str) -> ConfigError:
        return config_error(f"load spec {spec!r}", reason, f"use one of {LOAD_SPEC_FORMS}")

    if kind == "trace":
        if not rest:
            raise bad("trace needs a file path")
        return from_trace_file(Path(rest))  # its errors name the file and line
    try:
        args = [float(a) for a in rest.split(":")] if rest else []
        if kind == "constant":
            if len(args) != 1:
                raise bad("constant takes exactly one level")
            return constant(args[0])
        if kind == "sine":
            if len(args) > 3:
                raise bad("sine takes at most mean, amplitude and period")
            mean, amplitude, period_s = [*args, *(0.5, 0.4, 300.0)[len(args) :]]
            return sine(mean, amplitude, period_s, seed=seed)
    except ValueError:
        raise bad("its numbers are not numbers") from None
    except ConfigError as exc:
        if str(exc).startswith("load spec"):
            raise
        raise bad(str(exc).partition(";")[0]) from None  # the value and what is wrong with it
    raise bad(f"unknown kind {kind!r}")
