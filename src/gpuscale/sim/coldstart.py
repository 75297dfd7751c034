"""How long a GPU inference pod takes from scheduling to Ready, from measured data.

Cold start (pulling the image, loading the model onto the GPU) is the delay that
makes reactive scaling hard, so its distribution comes from production
measurements rather than a guess, and is shipped here as a handful of quantiles.

Those measurements are of diffusion models (GenTD26's Stable Diffusion pods, a few
GB of weights), and they stay the default. An LLM replica's load is ruled by the
size of its weights instead: ``ColdStart.from_model`` takes a model (``MODELS``:
parameters times bytes per parameter) and the node's read bandwidth
(``READ_BANDWIDTHS``) and gives ``weights / bandwidth + container start``. The
figures and their sources:

* parameters, from each model's card and published weights: Llama-2-7B 6.74 B and
  Llama-2-70B 69 B (Touvron et al. 2023, "Llama 2", table 1 and the released
  checkpoints); Llama-3-8B 8.03 B and Llama-3-70B 70.6 B (Meta's Llama 3 model card;
  the totals of the published bf16 safetensors, 16.1 GB and 141.1 GB); Mistral-7B
  7.24 B (Mistral AI's model card). Served in bf16/fp16: 2 bytes per parameter.
* read bandwidth of the node's storage: a local PCIe 4.0 NVMe SSD reads up to
  6,500 MB/s sequentially (Samsung PM9A3 U.2, Samsung's specification); an AWS EBS
  gp3 volume up to 1,000 MiB/s provisioned (EC2 ``CreateVolume`` API reference;
  125 MiB/s by default). A load rarely reaches a device's peak (safetensors reads
  are sequential, but the file system and the copy to the GPU cost), so these are
  lower bounds on the load time.

A tensor-parallel replica loads all its shards from the one node, so the node's
bandwidth divides the whole model.
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

BF16_BYTES = 2.0
"""Bytes per parameter of weights served in bf16 or fp16."""


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A model's weights, as its loader reads them.

    Attributes:
        name: The model's name.
        parameters: Parameters, a count.
        bytes_per_parameter: Bytes each takes as stored (2 for bf16/fp16, 1 for fp8).
    """

    name: str
    parameters: float
    bytes_per_parameter: float = BF16_BYTES

    def __post_init__(self) -> None:
        if not (self.parameters > 0 and self.bytes_per_parameter > 0):
            raise ConfigError(
                f"model {self.name!r}: parameters and bytes_per_parameter must be > 0, got "
                f"{self.parameters:g} and {self.bytes_per_parameter:g}"
            )

    @property
    def weights_bytes(self) -> float:
        """Size of the weights, bytes."""
        return self.parameters * self.bytes_per_parameter


MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        ModelSpec("llama-2-7b", 6.74e9),
        ModelSpec("llama-2-70b", 69e9),
        ModelSpec("llama-3-8b", 8.03e9),
        ModelSpec("llama-3-70b", 70.6e9),
        ModelSpec("mistral-7b", 7.24e9),
    )
}
"""Models by name, in bf16 (sources in the module docstring)."""

READ_BANDWIDTHS: dict[str, float] = {
    "nvme": 6.5e9,
    "ebs-gp3": 1000 * 2**20,
    "ebs-gp3-default": 125 * 2**20,
}
"""A node's storage read bandwidth by kind, bytes per second (sources in the module docstring)."""


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
    def from_model(
        cls,
        model: ModelSpec,
        read_bandwidth_bytes_per_s: float,
        extra_s: float = CONTAINER_START_S,
    ) -> "ColdStart":
        """The load of ``model``'s weights at the node's read bandwidth, plus ``extra_s``.

        Args:
            model: The model served.
            read_bandwidth_bytes_per_s: What the node's storage reads, bytes per second.
            extra_s: Container start and the first readiness probe, seconds.

        Returns:
            A fixed cold start of ``weights_bytes / read_bandwidth + extra_s`` seconds.

        Raises:
            ConfigError: The bandwidth is not positive.
        """
        if not read_bandwidth_bytes_per_s > 0:
            raise ConfigError(
                f"read bandwidth {read_bandwidth_bytes_per_s:g} B/s for model {model.name!r}: "
                "give a positive number of bytes per second"
            )
        load = model.weights_bytes / read_bandwidth_bytes_per_s
        return cls((load, load), extra_s)

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


class ColdStartStream:
    """The cold starts of a cluster's pods, in the order the pods are created.

    The ``k``-th pod a cluster creates (0-based) takes the ``k``-th draw, whenever
    it is scheduled; a pod that never cold-starts (Ready from the start, or deleted
    while Pending) leaves its draw unused. So the draws are fixed by the seed alone,
    not by what a policy does, and anyone holding the seed can read them in advance
    (``draws``): the hindsight oracle does. Draws are made in blocks from one
    generator; a block boundary does not change them.

    Args:
        cold_start: The distribution.
        seed: Seed of the stream.
    """

    def __init__(self, cold_start: ColdStart, seed: int) -> None:
        self.cold_start = cold_start
        self._rng = np.random.default_rng(seed)
        self._drawn = np.zeros(0)

    def draws(self, n: int) -> np.ndarray:
        """The first ``n`` draws, seconds.

        Returns:
            A copy; the stream is unchanged by reading it.
        """
        if n > self._drawn.size:
            more = max(n - self._drawn.size, 64, self._drawn.size)
            self._drawn = np.concatenate([self._drawn, self.cold_start.sample(self._rng, more)])
        return self._drawn[:n].copy()

    def draw(self, k: int) -> float:
        """The cold start of the ``k``-th pod created (0-based), seconds."""
        if k >= self._drawn.size:
            self.draws(k + 1)
        return float(self._drawn[k])


def cluster_seed(run_seed: int) -> int:
    """The seed ``sim.engine.simulate`` gives the cluster of a run seeded ``run_seed``.

    It mirrors the engine's own derivation; tests/unit/scaling/test_oracle.py checks
    that the pods of a simulated run take exactly these draws.

    Returns:
        The first of the run seed's three spawned streams, as an integer.
    """
    return int(np.random.SeedSequence(run_seed).spawn(3)[0].generate_state(1)[0])


def pod_cold_starts(cold_start: ColdStart, run_seed: int, n: int) -> np.ndarray:
    """The cold starts of the first ``n`` pods that a run seeded ``run_seed`` creates.

    The initial replicas are the first pods (they start Ready and leave their draws
    unused); every pod created later takes its own draw when it is scheduled.

    Returns:
        Seconds, indexed by creation order (pod uid - 1).
    """
    return ColdStartStream(cold_start, cluster_seed(run_seed)).draws(n)
