"""Demand as the simulator consumes it: requests and GPU work per second.

Trace readers and generators produce a ``Workload``; the engine consumes it.
Keeping this the only contract between them lets any trace drive any run.
"""

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

PROFILE_POINTS = 128
"""Equal-probability bins a ``RequestProfile`` keeps of each distribution."""


def _midpoint_quantiles(samples: npt.ArrayLike, points: int) -> FloatArray:
    x = np.asarray(samples, dtype=float)
    return np.asarray(np.quantile(x, (np.arange(points) + 0.5) / points), dtype=float)


@dataclass(frozen=True, slots=True)
class RequestProfile:
    """Per-request distributions of a trace, as quantiles at equal-probability midpoints.

    Each array holds the ``(i + 0.5) / n`` quantiles of its distribution, so a mean
    over the array is an expectation over requests. The fluid model draws no
    requests; it scores against these.

    Attributes:
        work_q: Work per request relative to the mean (mean 1).
        context_q: Prompt tokens per request (LLM traces), else None.
        generated_q: Output tokens per request (LLM traces), else None.
    """

    work_q: FloatArray
    context_q: FloatArray | None = None
    generated_q: FloatArray | None = None

    @classmethod
    def from_samples(
        cls,
        work: npt.ArrayLike,
        context: npt.ArrayLike | None = None,
        generated: npt.ArrayLike | None = None,
        points: int = PROFILE_POINTS,
    ) -> "RequestProfile":
        """Summarise per-request samples.

        Returns:
            The profile; ``work_q`` rescaled to mean 1.
        """
        q = _midpoint_quantiles(work, points)
        q = q / max(float(q.mean()), 1e-300)
        ctx = None if context is None else _midpoint_quantiles(context, points)
        gen = None if generated is None else _midpoint_quantiles(generated, points)
        return cls(q, ctx, gen)

    @property
    def scv(self) -> float:
        """Squared coefficient of variation of work per request."""
        return float(self.work_q.var() / max(float(self.work_q.mean()) ** 2, 1e-300))


@dataclass(frozen=True, slots=True)
class Workload:
    """Demand on a one-second grid.

    Attributes:
        name: Trace or generator name, reported in results.
        arrivals: Requests arriving in each second (may be fractional after scaling).
        work_s: Service time those requests need in each second, in seconds of one
            reference GPU at full speed (sum over the second's requests).
        tokens: Optional per-second (context, generated) token totals for LLM traces.
        profile: Optional per-request distributions measured in the trace (service
            time shape, prompt and output lengths); None: exponential service.
    """

    name: str
    arrivals: FloatArray
    work_s: FloatArray
    tokens: FloatArray | None = None
    profile: RequestProfile | None = None

    def __post_init__(self) -> None:
        if self.arrivals.shape != self.work_s.shape or self.arrivals.ndim != 1:
            raise ValueError("arrivals and work_s must be 1-D arrays of the same length")

    @property
    def duration_s(self) -> int:
        """Length of the workload in seconds."""
        return int(self.arrivals.shape[0])

    def mean_service_s(self) -> float:
        """Mean service time per request on the reference GPU, seconds."""
        total = float(self.arrivals.sum())
        return float(self.work_s.sum()) / total if total > 0 else 0.0

    def scaled(self, factor: float) -> "Workload":
        """The same shape with the request rate multiplied by ``factor``."""
        tokens = None if self.tokens is None else self.tokens * factor
        return Workload(
            self.name, self.arrivals * factor, self.work_s * factor, tokens, self.profile
        )

    def window(self, start_s: int, duration_s: int) -> "Workload":
        """A slice of the workload, ``duration_s`` seconds from ``start_s``."""
        end = start_s + duration_s
        tokens = None if self.tokens is None else self.tokens[start_s:end]
        return Workload(
            self.name, self.arrivals[start_s:end], self.work_s[start_s:end], tokens, self.profile
        )
