"""DCGM's activity fields as DCGM measures them, from a serving GPU's busy time, batch and phase.

``DCGM_FI_DEV_GPU_UTIL`` (NVML's ``utilization.gpu``) measures time, not hardware: the
share of the sample period in which one or more kernels ran. A server decoding a
single sequence keeps some kernel running nearly all the time, so it reads ~100 %
while most of its SMs are idle. The profiling fields (``DCGM_FI_PROF_*``) measure
cycles and hardware: SM_ACTIVE the cycles an SM has a warp resident (averaged over
SMs), SM_OCCUPANCY the resident warps over the SM maximum, PIPE_TENSOR_ACTIVE the
cycles the tensor pipe is busy, DRAM_ACTIVE the cycles the memory interface moves
data. Those depend on how much work each kernel carries (the batch) and on its kind:
prefill is compute-bound, decode is memory-bound. This module holds the per-phase
levels and the formulas the device physics applies; docs/telemetry-model.md states
each formula with its unit and its source.
"""

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from gpuscale.telemetry.loads import ActivityMix

PROFILED = ("sm_active", "sm_occupancy", "tensor_active", "dram_active")
"""The profiling ratios that depend on batch and phase (``ActivityMix`` attribute names)."""

Levels = Mapping[str, np.ndarray]


@dataclass(frozen=True, slots=True)
class PhaseLevels:
    """DCGM profiling ratios while one phase's kernels run, from one sequence to a full batch.

    Each attribute is ``(one sequence, full batch)``, ratios 0 to 1 averaged over the
    time kernels run; between the two the ratio is linear in the batch fill.
    """

    sm_active: tuple[float, float]
    sm_occupancy: tuple[float, float]
    tensor_active: tuple[float, float]
    dram_active: tuple[float, float]


@dataclass(frozen=True, slots=True)
class ServingActivity:
    """How a serving GPU's busy time spreads over DCGM's profiling counters, by phase.

    Attributes:
        prefill: Levels while prompt tokens are processed (compute-bound).
        decode: Levels while one token per sequence is generated (memory-bound).
        typical_prefill_share: Share of busy time in prefill when the caller gives a
            batch fill but no phase.
        power_weights: Weights of SM_ACTIVE, PIPE_TENSOR_ACTIVE and DRAM_ACTIVE in the
            activity index that drives dynamic power.
    """

    prefill: PhaseLevels
    decode: PhaseLevels
    typical_prefill_share: float = 0.25
    power_weights: tuple[float, float, float] = (0.40, 0.30, 0.30)


# Estimates for a 7-13B model served with continuous batching on a Hopper-class GPU;
# docs/telemetry-model.md gives the reasoning (roofline: decode does ~1 FLOP per weight
# byte per sequence, H100's ridge point is ~295 FLOP/byte) and the sources.
LLM_PHASES = ServingActivity(
    prefill=PhaseLevels((0.90, 0.95), (0.25, 0.35), (0.55, 0.65), (0.25, 0.35)),
    decode=PhaseLevels((0.30, 0.80), (0.10, 0.30), (0.03, 0.25), (0.45, 0.80)),
)


def mix_levels(mix: ActivityMix, n: int) -> dict[str, np.ndarray]:
    """The profiled ratios of an ``ActivityMix`` while busy, one value per GPU.

    Returns:
        Field key (``PROFILED``) to an array of ``n`` ratios, 0 to 1.
    """
    return {name: np.full(n, float(getattr(mix, name))) for name in PROFILED}


def phase_levels(
    activity: ServingActivity, batch_fill: np.ndarray, prefill_share: np.ndarray
) -> dict[str, np.ndarray]:
    """Each profiled ratio while kernels run, at this batch fill and phase mix.

    ``level = p * prefill(f) + (1 - p) * decode(f)`` with ``phase(f) = one + (full - one) * f``.

    Args:
        activity: Per-phase levels.
        batch_fill: Mean sequences in the batch while busy over the batch limit, 0 to 1.
        prefill_share: Share of busy time spent in prefill, 0 to 1.

    Returns:
        Field key (``PROFILED``) to ratios 0 to 1, shaped like the inputs.
    """
    f = np.clip(np.nan_to_num(batch_fill, nan=0.0), 0.0, 1.0)
    p = np.clip(np.nan_to_num(prefill_share, nan=0.0), 0.0, 1.0)
    out = {}
    for name in PROFILED:
        (p1, pn), (d1, dn) = getattr(activity.prefill, name), getattr(activity.decode, name)
        out[name] = p * (p1 + (pn - p1) * f) + (1.0 - p) * (d1 + (dn - d1) * f)
    return out


def activity_index(levels: Levels, weights: tuple[float, float, float]) -> np.ndarray:
    """Weighted activity that drives dynamic power: ``w_sm*SM + w_tensor*TENSOR + w_dram*DRAM``.

    Returns:
        Dimensionless index, shaped like the levels.
    """
    w_sm, w_tensor, w_dram = weights
    return np.asarray(
        w_sm * levels["sm_active"]
        + w_tensor * levels["tensor_active"]
        + w_dram * levels["dram_active"],
        dtype=float,
    )


def kernel_busy_share(in_flight: np.ndarray | float, slots: int) -> np.ndarray:
    """Share of time a replica has at least one request in service, so some kernel runs.

    The requests in service on a replica of ``slots`` batch slots are taken as the busy
    servers of an M/M/k queue with ``k = slots`` and offered load ``a = in_flight``
    (the mean number in service); the answer is ``1 - P0`` with Erlang's
    ``P0 = 1 / (sum_{j<k} a^j/j! + a^k / (k! (1 - a/k)))``. It is ``in_flight`` exactly
    for one slot, ``~1 - exp(-in_flight)`` for many, and 1 from ``in_flight >= slots``.

    Args:
        in_flight: Mean requests in service per replica (time average), any shape.
        slots: Batch slots per replica, >= 1.

    Returns:
        Busy share 0 to 1 (what GPU_UTIL / 100 reads), shaped like ``in_flight``.

    Raises:
        ValueError: ``slots`` is below 1.
    """
    if slots < 1:
        raise ValueError(f"slots must be >= 1, got {slots}")
    a = np.clip(np.nan_to_num(np.asarray(in_flight, dtype=float), nan=0.0), 0.0, None)
    k = int(slots)
    j = np.arange(k + 1, dtype=float)
    log_fact = np.concatenate(([0.0], np.cumsum(np.log(j[1:]))))
    saturated = a >= k
    live = (a > 0.0) & ~saturated
    safe = np.where(live, a, 0.5 * k)[..., None]  # any value inside (0, k) for the others
    # Poisson(a) probabilities of 0..k in service, scaled by exp(-a) to stay in range.
    pmf = np.exp(j * np.log(safe) - safe - log_fact)
    rho = safe[..., 0] / k
    p0 = np.exp(-safe[..., 0]) / (pmf[..., :k].sum(axis=-1) + pmf[..., k] / (1.0 - rho))
    return np.where(saturated, 1.0, np.where(live, 1.0 - p0, 0.0))


def batch_fill(in_flight: np.ndarray | float, busy: np.ndarray | float, slots: int) -> np.ndarray:
    """Mean share of the batch slots in use while the GPU is busy.

    ``fill = in_flight / (slots * busy)``: sequence-seconds in service over busy
    seconds, as a share of the batch limit. Sum ``in_flight`` and ``busy`` over a
    window before dividing to get the window's fill.

    Returns:
        Fill 0 to 1; 0 where ``busy`` is 0.
    """
    m = np.asarray(in_flight, dtype=float)
    b = np.asarray(busy, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        fill = np.where(b > 0.0, m / (slots * b), 0.0)
    return np.asarray(np.clip(np.nan_to_num(fill, nan=0.0), 0.0, 1.0), dtype=float)
