"""Synthetic demand shapes that stress scaling policies in known ways.

Real traces show what happened once; these generators isolate one behaviour
each, with a seed, so a policy's weakness is easy to see and to reproduce:
``diurnal`` (a slow daily swing), ``bursty`` (short on/off bursts),
``flash-crowd`` (a sudden surge that decays) and ``ramp`` (steady growth).
Arrivals are Poisson around the shape's rate; ``scale`` multiplies the rate
before sampling, so a scaled run keeps realistic relative noise.
"""

import logging
import math
from collections.abc import Callable

import numpy as np

from gpuscale.sim.workload import FloatArray, Workload

logger = logging.getLogger(__name__)

DEFAULT_SERVICE_S = 1.0
"""GPU seconds per request on the reference GPU, unless told otherwise."""

DAY_S = 86_400
HOUR_S = 3_600

RateShape = Callable[[FloatArray, np.random.Generator], FloatArray]


def diurnal_rate(
    t: FloatArray,
    *,
    mean_rps: float = 10.0,
    amplitude: float = 0.6,
    period_s: float = DAY_S,
    peak_at_s: float = 14 * HOUR_S,
) -> FloatArray:
    """A daily cosine swing around ``mean_rps``, highest at ``peak_at_s``.

    Returns:
        Requests per second at each time ``t`` (seconds).
    """
    return mean_rps * (1.0 + amplitude * np.cos(2.0 * math.pi * (t - peak_at_s) / period_s))


def bursty_rate(
    t: FloatArray,
    rng: np.random.Generator,
    *,
    base_rps: float = 10.0,
    burst_factor: float = 4.0,
    mean_gap_s: float = 600.0,
    mean_burst_s: float = 60.0,
) -> FloatArray:
    """On/off bursts: exponential gaps and burst lengths, ``burst_factor`` times the base.

    Returns:
        Requests per second at each time ``t`` (seconds).
    """
    rate = np.full(t.shape, base_rps)
    horizon = float(t[-1]) + 1.0 if t.size else 0.0
    now = float(rng.exponential(mean_gap_s))
    while now < horizon:
        length = float(rng.exponential(mean_burst_s))
        rate[(t >= now) & (t < now + length)] = base_rps * burst_factor
        now += length + float(rng.exponential(mean_gap_s))
    return rate


def flash_crowd_rate(
    t: FloatArray,
    *,
    base_rps: float = 10.0,
    peak_factor: float = 10.0,
    at_s: float | None = None,
    rise_s: float = 60.0,
    decay_s: float = 600.0,
) -> FloatArray:
    """A surge to ``peak_factor`` times the base within ``rise_s``, decaying with ``decay_s``.

    The surge starts a third into the run unless ``at_s`` is given.

    Returns:
        Requests per second at each time ``t`` (seconds).
    """
    start = (float(t[-1]) + 1.0) / 3.0 if at_s is None and t.size else (at_s or 0.0)
    since = t - start
    rising = np.clip(since / rise_s, 0.0, 1.0)
    decaying = np.exp(-np.clip(since - rise_s, 0.0, None) / decay_s)
    extra = np.where(since < 0, 0.0, rising * decaying)
    return base_rps * (1.0 + (peak_factor - 1.0) * extra)


def ramp_rate(t: FloatArray, *, start_rps: float = 1.0, end_rps: float = 20.0) -> FloatArray:
    """A straight line from ``start_rps`` to ``end_rps`` over the run.

    Returns:
        Requests per second at each time ``t`` (seconds).
    """
    span = max(float(t[-1]), 1.0) if t.size else 1.0
    return start_rps + (end_rps - start_rps) * t / span


GENERATORS: dict[str, tuple[RateShape, int]] = {
    "diurnal": (lambda t, rng: diurnal_rate(t), DAY_S),
    "bursty": (lambda t, rng: bursty_rate(t, rng), HOUR_S),
    "flash-crowd": (lambda t, rng: flash_crowd_rate(t), HOUR_S),
    "ramp": (lambda t, rng: ramp_rate(t), HOUR_S),
}
"""Generator name to (rate shape with its defaults, default duration in seconds)."""


def from_rate(
    name: str,
    rate_rps: FloatArray,
    *,
    service_s: float = DEFAULT_SERVICE_S,
    seed: int = 0,
) -> Workload:
    """Sample Poisson arrivals around a per-second rate.

    Args:
        name: Workload name.
        rate_rps: Mean requests per second, one entry per second.
        service_s: GPU seconds per request on the reference GPU.
        seed: Seed of the arrival sampling.

    Returns:
        The workload; ``work_s`` is arrivals times ``service_s``.
    """
    rng = np.random.default_rng(seed)
    arrivals = rng.poisson(np.clip(rate_rps, 0.0, None)).astype(np.float64)
    return Workload(name, arrivals, arrivals * service_s)


def generate(
    name: str,
    *,
    duration_s: int | None = None,
    scale: float = 1.0,
    seed: int = 0,
    service_s: float = DEFAULT_SERVICE_S,
) -> Workload:
    """Build a named synthetic workload.

    Args:
        name: One of ``GENERATORS``.
        duration_s: Length in seconds (default: the generator's own, a day for diurnal,
            an hour otherwise).
        scale: Multiplies the rate before arrivals are sampled.
        seed: Seed for bursts and arrivals; the same seed gives the same workload.
        service_s: GPU seconds per request on the reference GPU.

    Returns:
        The workload on the one-second grid.

    Raises:
        KeyError: ``name`` is not a generator.
    """
    shape, default_duration = GENERATORS[name]
    length = default_duration if duration_s is None else duration_s
    t = np.arange(length, dtype=np.float64)
    rng = np.random.default_rng(seed)
    rate = shape(t, rng) * scale
    logger.debug("generated %s: %d s, mean %.2f req/s", name, length, float(rate.mean()))
    return from_rate(name, rate, service_s=service_s, seed=seed + 1)
