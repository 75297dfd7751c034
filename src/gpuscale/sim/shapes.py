"""A generated family of demand shapes, split once into a training and a held-back set.

A policy tuned and judged on the same few traces is judged on what it was fitted
to. This module generates many parameterised shapes of the kinds that break
autoscalers (single, double and periodic flash crowds of several heights and
widths; ramps ending in a cliff and cliffs followed by a ramp; steps with a slow
decay; diurnal days with noise and dips; compressed weeks) and splits them by a
fixed rule, so that knobs are set on the training set and figures are reported on
the held-back set only.

The split rule: a shape is held back when the SHA-256 of its name, read as an
integer, is divisible by ``HELD_BACK_EVERY`` (3); otherwise it is for training.
The rule depends on the name alone, so the split never changes with the order
shapes are listed in, with the seeds, or with shapes added later; each family has
members on both sides (the tests check it).

Every shape is a rate in requests per second around a base of ``BASE_RPS`` (a
multiple of it at each second), built from the seed (noise, where a shape has it)
and sampled as Poisson arrivals (``generators.from_rate``); ``SEEDS`` are the seeds
each shape is evaluated over. Event times are shares of the run, so a shorter
``duration_s`` keeps a shape's events; diurnal and weekly shapes keep real days (a
forecast's season is a day) and are cut by a shorter run. A run longer than the
shape's own length repeats it, each pass with its own noise: the shape recurs, as a
deployment's demand does from one day to the next, so a run of two lengths scored
from the second (``gpuscale evaluate --warmup``) judges a policy that has the first
in its history, as a controller reading Prometheus's history has at its start.
"""

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from gpuscale.errors import config_error
from gpuscale.sim.generators import DAY_S, DEFAULT_SERVICE_S, HOUR_S, from_rate
from gpuscale.sim.workload import FloatArray, Workload

PREFIX = "shape:"
"""How a trace spec names a shape (``--trace shape:flash-double-h6-w300``)."""

BASE_RPS = 10.0
"""The base rate every shape is a multiple of, requests per second (before ``scale``)."""

HELD_BACK_EVERY = 3
"""A shape is held back when its name's SHA-256 is divisible by this."""

SEEDS = tuple(range(1, 11))
"""The seeds each shape is evaluated over (ten)."""

TRAIN = "train"
HELD_BACK = "heldback"
SPLITS = (TRAIN, HELD_BACK)
"""The two sets, as ``split_of`` and ``names`` call them."""

Rate = Callable[[FloatArray, np.random.Generator], FloatArray]
"""A shape's rate as a multiple of ``BASE_RPS`` at each second, from the times and the rng."""


@dataclass(frozen=True, slots=True)
class Shape:
    """One member of the family.

    Attributes:
        name: Its name (what ``--trace shape:NAME`` takes).
        family: The kind of shape (``flash-single``, ``diurnal`` ...).
        duration_s: Its default length, seconds.
        rate: Its rate as a multiple of ``BASE_RPS``.
        learnable: Whether its history shows what comes next (a day that repeats,
            bursts that recur): a forecast can learn it.
    """

    name: str
    family: str
    duration_s: int
    rate: Rate
    learnable: bool


def _pulse(t: FloatArray, start: float, height: float, width_s: float) -> FloatArray:
    """A flash crowd's extra rate: a one-minute rise to ``height - 1``, then exponential decay."""
    since = t - start
    rising = np.clip(since / 60.0, 0.0, 1.0)
    decaying = np.exp(-np.clip(since - 60.0, 0.0, None) / width_s)
    return np.where(since < 0, 0.0, (height - 1.0) * rising * decaying)


def _flashes(starts: tuple[float, ...], height: float, width_s: float) -> Rate:
    def rate(t: FloatArray, rng: np.random.Generator) -> FloatArray:
        span = float(t[-1]) + 1.0 if t.size else 1.0
        extra = sum(
            (_pulse(t, share * span, height, width_s) for share in starts), np.zeros_like(t)
        )
        return 1.0 + extra

    return rate


def _periodic(every_s: float, height: float, width_s: float) -> Rate:
    def rate(t: FloatArray, rng: np.random.Generator) -> FloatArray:
        span = float(t[-1]) + 1.0 if t.size else 1.0
        starts = np.arange(every_s / 2.0, span, every_s)
        return 1.0 + sum((_pulse(t, s, height, width_s) for s in starts), np.zeros_like(t))

    return rate


def _ramp_cliff(top: float) -> Rate:
    """From 1 up a straight line to ``top`` over three quarters of the run, then back to 1."""

    def rate(t: FloatArray, rng: np.random.Generator) -> FloatArray:
        span = float(t[-1]) + 1.0 if t.size else 1.0
        edge = 0.75 * span
        return np.where(t < edge, 1.0 + (top - 1.0) * t / edge, 1.0)

    return rate


def _cliff_ramp(top: float) -> Rate:
    """At 1 for a quarter of the run, a jump to ``top``, then a straight line back to 1."""

    def rate(t: FloatArray, rng: np.random.Generator) -> FloatArray:
        span = float(t[-1]) + 1.0 if t.size else 1.0
        edge = 0.25 * span
        down = top - (top - 1.0) * (t - edge) / (span - edge)
        return np.where(t < edge, 1.0, down)

    return rate


def _step_decay(height: float, decay_s: float) -> Rate:
    """At 1 for a third of the run, a step to ``height``, decaying back with ``decay_s``."""

    def rate(t: FloatArray, rng: np.random.Generator) -> FloatArray:
        span = float(t[-1]) + 1.0 if t.size else 1.0
        since = t - span / 3.0
        return np.where(since < 0, 1.0, 1.0 + (height - 1.0) * np.exp(-since / decay_s))

    return rate


def _noise(t: FloatArray, rng: np.random.Generator, sigma: float, block_s: int) -> FloatArray:
    """Multiplicative log-normal noise, one draw per ``block_s`` block, mean 1."""
    blocks = math.ceil((float(t[-1]) + 1.0) / block_s) if t.size else 0
    draws = rng.normal(-0.5 * sigma * sigma, sigma, blocks)
    return np.exp(draws[(t // block_s).astype(np.int64)]) if t.size else np.ones_like(t)


def _diurnal(amplitude: float, sigma: float, dip: float | None, day_s: float) -> Rate:
    """A cosine day peaking at 14:00 with noise per 5 minutes, and perhaps a dip.

    The dip cuts the rate to ``dip`` x for an hour around the last day's peak (a
    region's outage, a holiday afternoon).
    """

    def rate(t: FloatArray, rng: np.random.Generator) -> FloatArray:
        day = 1.0 + amplitude * np.cos(2.0 * math.pi * (t - 14 * HOUR_S * day_s / DAY_S) / day_s)
        out = day * _noise(t, rng, sigma, 300)
        if dip is not None and t.size:
            last_peak = (math.floor(float(t[-1]) / day_s)) * day_s + 14 * HOUR_S * day_s / DAY_S
            out = np.where(np.abs(t - last_peak) < HOUR_S / 2, dip * out, out)
        return out

    return rate


def _weekly(weekend: float, sigma: float) -> Rate:
    """A week pressed into one real day, with noise per 5 minutes.

    Seven cosine days of ``DAY_S / 7`` each, the last two at ``weekend`` x the
    weekdays' level.
    """
    day_s = DAY_S / 7.0

    def rate(t: FloatArray, rng: np.random.Generator) -> FloatArray:
        level = np.where((t // day_s) % 7 >= 5, weekend, 1.0)
        day = 1.0 + 0.6 * np.cos(2.0 * math.pi * (t - 0.6 * day_s) / day_s)
        return level * day * _noise(t, rng, sigma, 300)

    return rate


def _family() -> dict[str, Shape]:
    shapes: list[Shape] = []
    two_hours = 2 * HOUR_S
    for height in (3.0, 6.0, 10.0):
        for width in (120.0, 600.0):
            h, w = f"h{height:g}", f"w{width:g}"
            shapes.append(
                Shape(f"flash-single-{h}-{w}", "flash-single", two_hours,
                      _flashes((0.5,), height, width), learnable=False)
            )  # fmt: skip
            shapes.append(
                Shape(f"flash-double-{h}-{w}", "flash-double", two_hours,
                      _flashes((1 / 3, 2 / 3), height, width), learnable=False)
            )  # fmt: skip
            for every in (900.0, 1800.0):
                shapes.append(
                    Shape(f"flash-periodic-{h}-{w}-p{every:g}", "flash-periodic", two_hours,
                          _periodic(every, height, width), learnable=True)
                )  # fmt: skip
    for top in (3.0, 6.0):
        shapes.append(
            Shape(f"ramp-cliff-x{top:g}", "ramp-cliff", two_hours, _ramp_cliff(top), True)
        )
        shapes.append(
            Shape(f"cliff-ramp-x{top:g}", "ramp-cliff", two_hours, _cliff_ramp(top), True)
        )
    for height in (3.0, 6.0):
        for decay in (900.0, 2700.0):
            shapes.append(
                Shape(f"step-decay-h{height:g}-d{decay:g}", "step-decay", two_hours,
                      _step_decay(height, decay), learnable=False)
            )  # fmt: skip
    for amplitude in (0.5, 0.8):
        for sigma in (0.05, 0.15):
            for dip in (None, 0.4):
                suffix = "" if dip is None else f"-dip{dip:g}"
                shapes.append(
                    Shape(f"diurnal-a{amplitude:g}-n{sigma:g}{suffix}", "diurnal", 2 * DAY_S,
                          _diurnal(amplitude, sigma, dip, DAY_S), learnable=True)
                )  # fmt: skip
    for weekend in (0.3, 0.6):
        for sigma in (0.05, 0.15):
            shapes.append(
                Shape(f"weekly-compressed-e{weekend:g}-n{sigma:g}", "weekly-compressed", 2 * DAY_S,
                      _weekly(weekend, sigma), learnable=True)
            )  # fmt: skip
    return {s.name: s for s in shapes}


SHAPES = MappingProxyType(_family())
"""Every shape by name."""


def split_of(name: str) -> str:
    """Which set a shape belongs to, by the module's fixed rule (its name's SHA-256).

    Returns:
        ``HELD_BACK`` or ``TRAIN``.
    """
    digest = int(hashlib.sha256(name.encode()).hexdigest(), 16)
    return HELD_BACK if digest % HELD_BACK_EVERY == 0 else TRAIN


def names(split: str | None = None) -> list[str]:
    """The shapes' names, in the family's order.

    Args:
        split: ``TRAIN`` or ``HELD_BACK``; None for all.

    Returns:
        The names.
    """
    return [n for n in SHAPES if split is None or split_of(n) == split]


def generate(
    name: str,
    *,
    duration_s: int | None = None,
    scale: float = 1.0,
    seed: int = 0,
    service_s: float = DEFAULT_SERVICE_S,
) -> Workload:
    """Build one shape's workload.

    Args:
        name: A shape's name, with or without ``PREFIX``.
        duration_s: Length in seconds (default: the shape's own; longer repeats it).
        scale: Multiplies the rate before arrivals are sampled.
        seed: Seed of the shape's noise and of the arrivals.
        service_s: GPU seconds per request on the reference GPU.

    Returns:
        The workload on the one-second grid, named ``shape:NAME``.

    Raises:
        ConfigError: No shape has that name.
    """
    bare = name.removeprefix(PREFIX)
    shape = SHAPES.get(bare)
    if shape is None:
        families = ", ".join(sorted({s.family for s in SHAPES.values()}))
        raise config_error(
            f"--trace {name}",
            "no such shape",
            f"name one of the {len(SHAPES)} shapes ({families}; e.g. {PREFIX}{next(iter(SHAPES))})",
        )
    length = shape.duration_s if duration_s is None else duration_s
    rng = np.random.default_rng(seed)
    if length <= shape.duration_s:
        multiple = shape.rate(np.arange(length, dtype=np.float64), rng)
    else:  # the shape recurs: whole passes of its own length, each with its own noise
        one = np.arange(shape.duration_s, dtype=np.float64)
        passes = [shape.rate(one, rng) for _ in range(math.ceil(length / shape.duration_s))]
        multiple = np.concatenate(passes)[: math.ceil(length)]
    return from_rate(PREFIX + bare, BASE_RPS * scale * multiple, service_s=service_s, seed=seed + 1)
