"""How long a GPU inference pod takes from scheduling to Ready, from measured data.

Cold start (pulling the image, loading the model onto the GPU) is the delay that
makes reactive scaling hard, so its distribution comes from production
measurements rather than a guess, and is shipped here as a handful of quantiles.
"""

from dataclasses import dataclass

import numpy as np

from gpuscale.errors import ConfigError

# Base-model load time of production Stable Diffusion pods, Alibaba GenTD26
# (gentd26_base_model_load_ms.csv.gz, 7,531 samples), seconds at the 0, 2.5, ..., 100th
# percentiles (np.quantile of value / 1000). The distribution is bimodal: a third of
# loads hit a warm cache (about 3 s), the rest read from remote storage (20-45 s), so
# quantiles are kept rather than a lognormal fit, which would miss both modes. Linear
# interpolation between them is within 0.02 of the data's CDF (Kolmogorov-Smirnov).
GENTD26_MODEL_LOAD_QUANTILES_S: tuple[float, ...] = (
    1.329, 1.748, 2.287, 2.539, 2.629, 2.698, 2.762, 2.833, 2.918, 3.022,
    3.144, 3.328, 3.643, 4.666, 7.599, 18.829, 20.056, 20.800, 21.434, 22.110,
    22.718, 23.368, 24.215, 25.252, 26.910, 30.111, 33.017, 34.529, 35.390, 36.193,
    36.921, 37.632, 38.295, 39.062, 39.825, 40.852, 41.988, 43.369, 45.446, 48.683,
    79.436,
)  # fmt: skip
CONTAINER_START_S = 10.0
"""Added to the model load: container start plus the first readiness probe, whose
Kubernetes default period is 10 s (an estimate, not from the trace)."""


@dataclass(frozen=True, slots=True)
class ColdStart:
    """Distribution of the time from a pod's scheduling to Ready.

    Attributes:
        quantiles_s: Load time at evenly spaced probabilities from 0 to 1, seconds.
        extra_s: Fixed time added to every draw, seconds.
    """

    quantiles_s: tuple[float, ...] = GENTD26_MODEL_LOAD_QUANTILES_S
    extra_s: float = CONTAINER_START_S

    def __post_init__(self) -> None:
        q = np.asarray(self.quantiles_s, dtype=float)
        if q.size < 2 or np.any(np.diff(q) < 0) or q[0] < 0 or self.extra_s < 0:
            raise ConfigError(
                f"cold start quantiles {self.quantiles_s!r} (extra {self.extra_s}): "
                "give at least two non-negative, non-decreasing seconds"
            )

    @classmethod
    def from_gentd26(cls, extra_s: float = CONTAINER_START_S) -> "ColdStart":
        """The GenTD26 model-load distribution plus ``extra_s`` of container start.

        Returns:
            The distribution.
        """
        return cls(GENTD26_MODEL_LOAD_QUANTILES_S, extra_s)

    @classmethod
    def fixed(cls, seconds: float) -> "ColdStart":
        """Every cold start takes exactly ``seconds``.

        Returns:
            The distribution.
        """
        return cls((float(seconds), float(seconds)), 0.0)

    def _probabilities(self) -> np.ndarray:
        return np.linspace(0.0, 1.0, len(self.quantiles_s))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Draw ``n`` cold-start times by inverse transform (linear between quantiles).

        Returns:
            Seconds, one per draw.
        """
        u = rng.random(n)
        q = np.asarray(self.quantiles_s, dtype=float)
        return np.asarray(np.interp(u, self._probabilities(), q) + self.extra_s, dtype=float)

    def quantile(self, q: float) -> float:
        """The ``q`` quantile of the cold start, seconds."""
        return float(np.interp(q, self._probabilities(), self.quantiles_s)) + self.extra_s

    @property
    def mean_s(self) -> float:
        """Mean cold start, seconds."""
        q = np.asarray(self.quantiles_s, dtype=float)
        return float(0.5 * (q[1:] + q[:-1]).mean()) + self.extra_s
