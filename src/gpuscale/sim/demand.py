"""Scale a trace's demand to fleet size without copying its requests.

A trace of a few requests per second must drive fleets a hundred times larger.
Multiplying each second's count by the scale copies every request ``scale``
times into the same second: the per-second counts keep the trace's relative
noise (azure-conv at ``--scale 100``: per-second CV 0.44 around the minute
trend, where Poisson arrivals at that rate have 0.043), which punishes
policies that run a fleet hot.

Requests from many independent users arrive as a Poisson stream around a
slowly varying rate, so ``poisson_demand`` draws new arrivals:

* **Rate.** The trace's counts are summed over blocks of ``window_s`` seconds
  (default 60, counted from the trace's start) and the block rates joined by
  straight lines through the block centres, held flat before the first centre
  and after the last. Variation slower than the window is the trace's shape and
  is kept; variation within it is taken as sampling noise and replaced. Each
  block's rate is its requests over the mass of its hat function on the grid,
  so the rate sums to the trace's requests and the expected total is ``scale``
  times the trace's.
* **Counts.** Each second's arrivals are Poisson with mean ``scale`` times that
  rate: integers whose variance equals their mean, independent across seconds.
* **Requests.** Each arrival is a request of the trace drawn uniformly from one
  of the two blocks whose centres bracket its second, each block chosen in
  proportion to its share of the rate there. The work and token mix follow the
  trace through time, and each second's ``work_s`` and ``tokens`` are the sums
  over the requests drawn for it.

Why not superpose time-shifted copies of the trace? Keeping minute-scale shape
bounds the shifts to a range of about ``W`` = 1-2 minutes, and ``N`` copies
then replay each request's arrival time ``N`` times within ``W`` seconds. On
azure-conv with 100 copies at distinct whole-second shifts within 120 s,
per-second counts are under-dispersed (variance/mean 0.28 around the minute
trend: each second is nearly a moving sum of the trace) and 30 s counts
over-dispersed (3.9); a one-hour shift range comes closer to Poisson but
blurs the shape far beyond minutes. Poisson arrivals have Poisson dispersion
at every time scale below the window.

A trace that is already a rate (GenTD26's 57 s samples, rate files) carries no
per-second noise: the fluid model adds Poisson variability to it, so
``scale_demand`` multiplies it by the scale.
"""

import itertools
import logging
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpuscale.errors import require
from gpuscale.sim.workload import FloatArray, Workload

logger = logging.getLogger(__name__)

IntArray = npt.NDArray[np.int64]

DEFAULT_WINDOW_S = 60
"""Seconds over which a trace's rate is averaged; slower variation is kept as shape."""

_STREAM = 0x64656D616E64
"""Seed-sequence tag ("demand") that keeps these draws apart from other uses of a seed."""

_CHUNK_REQUESTS = 2_000_000
"""Arrivals whose requests are drawn per batch, to bound memory on long scaled traces."""


@dataclass(frozen=True, slots=True)
class RequestMarks:
    """The trace's requests that scaled arrivals are drawn from.

    Attributes:
        second: Arrival second of each request on the workload's grid, ascending.
        work_s: Each request's work, reference-GPU seconds.
        tokens: Each request's (context, generated) tokens, shape (requests, 2), or None.
    """

    second: IntArray
    work_s: FloatArray
    tokens: FloatArray | None = None

    def __post_init__(self) -> None:
        if self.second.ndim != 1 or self.work_s.shape != self.second.shape:
            raise ValueError("second and work_s must be 1-D arrays of the same length")
        if self.tokens is not None and self.tokens.shape != (self.second.size, 2):
            raise ValueError("tokens must have shape (requests, 2)")
        if self.second.size and bool(np.any(np.diff(self.second) < 0)):
            raise ValueError("second must be ascending")

    def head(self, duration_s: int) -> "RequestMarks":
        """The requests of the first ``duration_s`` seconds.

        Returns:
            Those marks (the others dropped).
        """
        n = int(np.searchsorted(self.second, duration_s, side="left"))
        tokens = None if self.tokens is None else self.tokens[:n]
        return RequestMarks(self.second[:n], self.work_s[:n], tokens)

    @classmethod
    def from_workload(cls, workload: Workload) -> "RequestMarks":
        """Requests recovered from per-second totals.

        A second's ``n`` requests each get ``1/n`` of its work and tokens: exact
        when the second holds one request or alike requests, and the second's
        mean request otherwise, since per-second totals keep no more.

        Args:
            workload: A workload whose arrivals are whole counts.

        Returns:
            One mark per request, in second order.
        """
        counts = np.rint(workload.arrivals).astype(np.int64)
        second = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
        per = np.divide(
            workload.work_s, counts, out=np.zeros_like(workload.work_s), where=counts > 0
        )
        tokens = None
        if workload.tokens is not None:
            mean_tokens = np.divide(
                workload.tokens,
                counts[:, None],
                out=np.zeros_like(workload.tokens),
                where=counts[:, None] > 0,
            )
            tokens = mean_tokens[second]
        return cls(second, per[second], tokens)


def shape_rate(counts: FloatArray, window_s: int = DEFAULT_WINDOW_S) -> FloatArray:
    """The trace's rate with sub-window noise removed, requests per second.

    Args:
        counts: Requests arriving in each second.
        window_s: Block length, seconds.

    Returns:
        The rate at each second (see the module docstring); it sums to ``counts.sum()``.
    """
    lower, upper, weight, block_rate = _blocks(np.asarray(counts, dtype=np.float64), window_s)
    return np.asarray((1.0 - weight) * block_rate[lower] + weight * block_rate[upper])


def _blocks(counts: FloatArray, window_s: int) -> tuple[IntArray, IntArray, FloatArray, FloatArray]:
    """Each second's bracketing blocks, the upper one's weight, and each block's rate."""
    duration = counts.size
    starts = np.arange(0, duration, window_s, dtype=np.int64)
    lengths = np.minimum(starts + window_s, duration) - starts
    centres = starts + (lengths - 1) / 2.0
    t = np.arange(duration, dtype=np.float64)
    lower = np.clip(np.searchsorted(centres, t, side="right") - 1, 0, max(centres.size - 1, 0))
    upper = np.minimum(lower + 1, max(centres.size - 1, 0))
    gap = centres[upper] - centres[lower] if duration else np.zeros(0)
    weight = np.divide(t - centres[lower], gap, out=np.zeros(duration), where=gap > 0)
    weight = np.clip(weight, 0.0, 1.0)
    mass = np.bincount(lower, weights=1.0 - weight, minlength=centres.size) + np.bincount(
        upper, weights=weight, minlength=centres.size
    )
    block_counts = np.add.reduceat(counts, starts) if duration else np.zeros(0)
    block_rate = np.divide(block_counts, mass, out=np.zeros(centres.size), where=mass > 0)
    return lower.astype(np.int64), upper.astype(np.int64), weight, block_rate


def poisson_demand(
    workload: Workload,
    scale: float,
    *,
    seed: int,
    window_s: int = DEFAULT_WINDOW_S,
    marks: RequestMarks | None = None,
) -> Workload:
    """Poisson arrivals at ``scale`` times the trace's shape, carrying its requests.

    Args:
        workload: A trace whose arrivals are whole counts per second.
        scale: Multiplies the request rate, > 0.
        seed: Seed of the draws, >= 0; the same seed gives the same workload.
        window_s: Seconds over which the rate is averaged (see the module docstring).
        marks: The trace's individual requests; recovered from per-second totals
            when not given (see ``RequestMarks.from_workload``).

    Returns:
        A workload of the same length, name and request profile with integer
        arrivals; ``work_s`` and ``tokens`` (when the marks have tokens) sum the
        drawn requests.

    Raises:
        ConfigError: ``scale``, ``seed`` or ``window_s`` is out of range.
    """
    require(math.isfinite(scale) and scale > 0, f"scale {scale}", "must be > 0", "e.g. 10")
    require(seed >= 0, f"seed {seed}", "must be >= 0", "e.g. 0")
    require(window_s >= 1, f"window {window_s} s", "must be >= 1 s", "e.g. 60")
    if marks is None:
        marks = RequestMarks.from_workload(workload)
    duration = workload.duration_s
    counts = np.bincount(marks.second, minlength=duration)[:duration].astype(np.float64)
    lower, upper, weight, block_rate = _blocks(counts, window_s)
    low_part = (1.0 - weight) * block_rate[lower]
    rate = low_part + weight * block_rate[upper]
    p_upper = np.divide(rate - low_part, rate, out=np.zeros(duration), where=rate > 0)
    block_of = marks.second // window_s
    blocks = np.arange(block_rate.size)
    first = np.searchsorted(block_of, blocks, side="left")
    size = np.searchsorted(block_of, blocks, side="right") - first

    rng = np.random.default_rng(np.random.SeedSequence([seed, _STREAM]))
    arrivals = rng.poisson(scale * rate).astype(np.int64)
    work_s = np.zeros(duration)
    tokens = None if marks.tokens is None else np.zeros((duration, 2))
    total = int(arrivals.sum())
    cuts = np.searchsorted(np.cumsum(arrivals), np.arange(_CHUNK_REQUESTS, total, _CHUNK_REQUESTS))
    for begin, end in itertools.pairwise(np.unique(np.r_[0, cuts, duration])):
        second = np.repeat(np.arange(begin, end, dtype=np.int64), arrivals[begin:end])
        block = np.where(rng.random(second.size) < p_upper[second], upper[second], lower[second])
        pick = first[block] + (rng.random(second.size) * size[block]).astype(np.int64)
        work_s += np.bincount(second, weights=marks.work_s[pick], minlength=duration)
        if tokens is not None and marks.tokens is not None:  # both or neither
            for column in (0, 1):
                tokens[:, column] += np.bincount(
                    second, weights=marks.tokens[pick, column], minlength=duration
                )
    logger.debug(
        "scaled %s x%g: %d requests drawn from %d", workload.name, scale, total, marks.second.size
    )
    return Workload(
        workload.name, arrivals.astype(np.float64), work_s, tokens, profile=workload.profile
    )


def scale_demand(
    workload: Workload,
    scale: float,
    *,
    seed: int,
    counts: bool,
    window_s: int = DEFAULT_WINDOW_S,
    marks: RequestMarks | None = None,
) -> Workload:
    """A trace's demand at ``scale`` times its rate.

    Args:
        workload: The trace.
        scale: Multiplies the request rate, > 0; 1 returns the trace unchanged.
        seed: Seed of the draws.
        counts: Whether the arrivals are counted requests (Azure), which are redrawn
            by ``poisson_demand``; False for a rate (GenTD26, rate files), which is
            multiplied by ``scale``.
        window_s: Seconds over which a count trace's rate is averaged.
        marks: A count trace's individual requests, when known.

    Returns:
        The scaled workload.
    """
    if scale == 1.0:
        return workload
    if not counts:
        return workload.scaled(scale)
    return poisson_demand(workload, scale, seed=seed, window_s=window_s, marks=marks)
