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

import functools
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


def nan_to(values: np.ndarray | float, nan: float) -> np.ndarray:
    """``np.nan_to_num(values, nan=nan)`` as float, without its cost when all are finite.

    The simulator calls this on every collect; ``nan_to_num`` costs ten times a
    plain array operation. When the sum of the values is finite, none is NaN or
    infinite, and the values come back as they are (the same array when it
    already is float, not a copy); otherwise ``nan_to_num`` decides.

    Returns:
        Float values, NaN replaced by ``nan`` and infinities by the largest finite
        floats, shaped like ``values``.
    """
    a = np.asarray(values, dtype=float)
    if a.ndim and np.logical_and.reduce(np.isfinite(a), axis=None):
        return a
    return np.asarray(np.nan_to_num(a, nan=nan), dtype=float)


@functools.lru_cache(maxsize=8)
def _phase_table(activity: "ServingActivity") -> tuple[np.ndarray, ...]:
    """Per-phase levels as columns, in ``PROFILED`` order: one, full - one (prefill, decode)."""
    cols = []
    for phase in (activity.prefill, activity.decode):
        pairs = [getattr(phase, name) for name in PROFILED]
        cols.append(np.array([one for one, _ in pairs]))
        cols.append(np.array([full - one for one, full in pairs]))
    for col in cols:
        col.flags.writeable = False
    return tuple(cols)


@functools.lru_cache(maxsize=64)
def _log_factorials(slots: int) -> tuple[np.ndarray, np.ndarray]:
    """``j = 0..slots`` and ``log(j!)``, read-only."""
    j = np.arange(slots + 1, dtype=float)
    log_fact = np.concatenate(([0.0], np.cumsum(np.log(j[1:]))))
    j.flags.writeable = log_fact.flags.writeable = False
    return j, log_fact


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
    # np.clip's values (but perhaps -0.0 for a 0.0, which adds, multiplies and
    # compares as 0.0: each level is the same), without its wrapper's cost
    f = np.minimum(np.maximum(nan_to(batch_fill, 0.0), 0.0), 1.0)
    p = np.minimum(np.maximum(nan_to(prefill_share, 0.0), 0.0), 1.0)
    # All four ratios at once, one row each: the same arithmetic per element as
    # ``p * (p1 + (pn - p1) * f) + (1 - p) * (d1 + (dn - d1) * f)`` per ratio.
    column = (len(PROFILED),) + (1,) * max(f.ndim, p.ndim)
    p1, dp, d1, dd = (c.reshape(column) for c in _phase_table(activity))
    rows = p * (p1 + dp * f) + (1.0 - p) * (d1 + dd * f)
    return {name: rows[i] for i, name in enumerate(PROFILED)}


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


RATIO_FIELDS = tuple(
    f"DCGM_FI_PROF_{k}"
    for k in (
        "GR_ENGINE_ACTIVE",
        "SM_ACTIVE",
        "SM_OCCUPANCY",
        "PIPE_TENSOR_ACTIVE",
        "DRAM_ACTIVE",
        "PIPE_FP64_ACTIVE",
        "PIPE_FP32_ACTIVE",
        "PIPE_FP16_ACTIVE",
    )
)
"""The profiling ratio fields ``ratio_rows`` computes, one row each, in its order."""


def ratio_rows(
    busy: np.ndarray, levels: Levels, mix: ActivityMix, wiggle: np.ndarray
) -> np.ndarray:
    """The ``RATIO_FIELDS`` over a step, idle time included, one row per field.

    Each is ``clip(busy * level * wiggle, 0, 1)`` with ``level`` the ratio while busy:
    1 for GR_ENGINE_ACTIVE, ``levels`` for the ``PROFILED`` ones, and the mix's FP64,
    FP32 and FP16 shares scaled as SM_ACTIVE is (the FP pipes follow the SMs).

    Args:
        busy: Busy share per GPU, 0 to 1.
        levels: The ``PROFILED`` ratios while busy, per GPU.
        mix: The activity mix (its FP pipe shares and SM_ACTIVE while busy).
        wiggle: Step jitter per GPU, about 1.

    Returns:
        Ratios 0 to 1, shape ``(len(RATIO_FIELDS), GPUs)``.
    """
    pipes = levels["sm_active"] / mix.sm_active if mix.sm_active > 0 else 1.0
    rows = np.empty((len(RATIO_FIELDS), np.size(busy)))
    rows[0] = 1.0
    for row, key in enumerate(PROFILED, start=1):
        rows[row] = levels[key]
    for row, share in enumerate((mix.fp64_active, mix.fp32_active, mix.fp16_active), start=5):
        rows[row] = share * pipes
    return np.asarray(np.clip(busy * rows * wiggle, 0.0, 1.0), dtype=float)


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
    a = np.clip(nan_to(in_flight, 0.0), 0.0, None)
    k = int(slots)
    j, log_fact = _log_factorials(k)
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
    # np.clip's values (a 0.0 may come out -0.0, equal to it), without its wrapper's cost
    return np.asarray(np.minimum(np.maximum(nan_to(fill, 0.0), 0.0), 1.0), dtype=float)
