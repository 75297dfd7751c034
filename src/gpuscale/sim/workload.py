"""Demand as the simulator consumes it: requests and GPU work per second.

Trace readers and generators produce a ``Workload``; the engine consumes it.
Keeping this the only contract between them lets any trace drive any run.
"""

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Workload:
    """Demand on a one-second grid.

    Attributes:
        name: Trace or generator name, reported in results.
        arrivals: Requests arriving in each second (may be fractional after scaling).
        work_s: Service time those requests need in each second, in seconds of one
            reference GPU at full speed (sum over the second's requests).
        tokens: Optional per-second (context, generated) token totals for LLM traces.
    """

    name: str
    arrivals: FloatArray
    work_s: FloatArray
    tokens: FloatArray | None = None

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
        return Workload(self.name, self.arrivals * factor, self.work_s * factor, tokens)

    def window(self, start_s: int, duration_s: int) -> "Workload":
        """A slice of the workload, ``duration_s`` seconds from ``start_s``."""
        end = start_s + duration_s
        tokens = None if self.tokens is None else self.tokens[start_s:end]
        return Workload(self.name, self.arrivals[start_s:end], self.work_s[start_s:end], tokens)
