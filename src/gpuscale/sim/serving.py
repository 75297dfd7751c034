"""What one replica can serve: LLM cost figures, the serving config, the oracle's need.

Demand arrives as reference-GPU seconds of work (``Workload.work_s``). This module
says what a request costs (``llm_work_seconds``, from published per-GPU
throughput), how a replica serves (``ServingConfig``: batch slots, service-time
variability, memory footprint), how fast other GPU models are than the reference,
and how many Ready replicas each second needs to keep the SLO
(``required_replicas``, the oracle's input). The queue itself is ``fluid.py``.
"""

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gpuscale.errors import ConfigError, check_ranges
from gpuscale.sim.fluid import residual_arrival_scv
from gpuscale.sim.latency import centred_mean
from gpuscale.sim.llm import (
    LLAMA2_70B_BYTES,
    LLAMA2_70B_KV_BYTES_PER_TOKEN,
    STEP_MODELS,
    TENSOR_PARALLEL,
    LlmScoring,
    LlmSlo,
    request_work_s,
    step_model,
    tpot_s,
)
from gpuscale.sim.queueing import erfc, erlang_c, shaped_latency_cdf, stationary_attainment
from gpuscale.sim.workload import FloatArray, RequestProfile, Workload

if TYPE_CHECKING:
    from gpuscale.sim.engine import Scenario

logger = logging.getLogger(__name__)

_MAX_REPLICAS = 1_000_000


@dataclass(frozen=True, slots=True)
class LlmThroughput:
    """Batched LLM serving cost on one GPU: ``ctx/prefill + gen/decode + gen*(ctx+gen/2)*kv``.

    Attributes:
        prefill_tokens_per_s: Prompt tokens processed per second at full batch.
        decode_tokens_per_s: Generated tokens per second at full batch, short contexts.
        kv_s_per_token2: Extra seconds per generated token per token of context it
            attends to (KV-cache reads grow with context).
    """

    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    kv_s_per_token2: float


# Source: NVIDIA TensorRT-LLM "Performance of TensorRT-LLM" (docs/source/performance.md,
# v0.6.1 tables), LLaMA 7B on one GPU, peak-throughput output tokens/s at the listed
# batch sizes for (input, output) lengths (128,128), (128,2048), (2048,128), (2048,2048):
# H100 SXM FP8: 19,694 / 6,818 / 2,244 / 2,740; A100 FP16: 5,586 / 1,928 / 591.
# The three constants are the least-squares fit of time per request
# (out_len / throughput) to the cost model above; it reproduces the H100 figures within
# 8 % (the 128/128 point at batch 768 is the outlier) and the A100 ones exactly. The
# H100 batch-1 first-token latency of 36 ms at 2,048 tokens in the same document
# agrees with the fitted prefill rate. H200 shares the H100's compute with 4.8 vs
# 3.35 TB/s of HBM (datasheets), so its decode and KV terms scale by bandwidth; L4 is
# the H100 fit scaled by FP8 dense TFLOPS (242 vs 1,979) for prefill and by memory
# bandwidth (300 GB/s vs 3.35 TB/s) for the rest; A10G (600 GB/s, FP16) is the A100
# fit scaled by bandwidth. The last three are estimates, not measurements.
LLM_THROUGHPUT: dict[str, LlmThroughput] = {
    "H100": LlmThroughput(81_644.0, 45_918.0, 1.077e-7),
    "H200": LlmThroughput(81_644.0, 45_918.0 * 4.8 / 3.35, 1.077e-7 * 3.35 / 4.8),
    "A100": LlmThroughput(20_241.0, 19_077.0, 4.021e-7),
    "L4": LlmThroughput(81_644.0 * 242 / 1979, 45_918.0 * 0.3 / 3.35, 1.077e-7 * 3.35 / 0.3),
    "A10G": LlmThroughput(20_241.0 * 0.6 / 2.04, 19_077.0 * 0.6 / 2.04, 4.021e-7 * 2.04 / 0.6),
}
LLM_BATCH_SLOTS = 64
"""Concurrent sequences per replica the throughput figures above were measured near (48-112)."""

MEASURED_SERVICE_SCV = 0.41
"""Service-time SCV of a one-request-at-a-time GPU service, as measured in the shared data.

GenTD26's ``model_predict_ms`` (6,254 diffusion inferences, SCV 0.414): ``gpuscale
evaluate`` gives it to traces that measure none (the generators, rate files). An
exponential's 1 would put 1 - e^-4 = 1.8 % of requests past an SLO of 4 x the mean
service time on an idle fleet, a ceiling that hides every difference in capacity.
"""
_TYPICAL_REQUEST = (1024.0, 256.0)  # context, generated tokens: sets relative GPU speeds


def llm_throughput(gpu_model: str) -> LlmThroughput:
    """The LLM cost constants of a GPU model.

    Raises:
        ConfigError: No figures for that model.

    Returns:
        Its throughput constants.
    """
    found = LLM_THROUGHPUT.get(gpu_model) or LLM_THROUGHPUT.get(gpu_model.upper())
    if found is None:
        raise ConfigError(
            f"gpu model {gpu_model!r}: no LLM throughput figures; "
            f"choose one of {', '.join(LLM_THROUGHPUT)}"
        )
    return found


def llm_work_seconds(
    context_tokens: np.ndarray, generated_tokens: np.ndarray, gpu_model: str = "H100"
) -> FloatArray:
    """Replica time an LLM request costs on a replica of ``gpu_model`` GPUs at full batch.

    The continuous-batching step model of ``llm.STEP_MODELS`` (Splitwise's measured
    Llama-2-70B step times): the request's share of its decode steps in a batch as
    full as the KV cache allows for these requests' mean length, plus its prefill.

    Args:
        context_tokens: Prompt tokens per request.
        generated_tokens: Output tokens per request.
        gpu_model: GPU short name (``H100``).

    Returns:
        Seconds of that replica per request (amortised over the batch).
    """
    model = step_model(gpu_model)
    ctx = np.asarray(context_tokens, dtype=float)
    gen = np.asarray(generated_tokens, dtype=float)
    per_seq = float(ctx.mean() + gen.mean()) if ctx.size else 1.0
    batch = model.max_batch(per_seq)
    kv = batch * float(ctx.mean() + 0.5 * gen.mean()) if ctx.size else 0.0
    return request_work_s(ctx, gen, model, batch, kv)


def relative_speed(gpu_model: str, reference_model: str = "H100") -> float:
    """How much work of the reference GPU one ``gpu_model`` GPU does per second.

    Where both GPUs have measured LLM step times (``llm.STEP_MODELS``) the ratio is
    theirs; otherwise it comes from the ``LLM_THROUGHPUT`` table.

    Returns:
        Speed ratio for a typical request (1,024 prompt and 256 output tokens).
    """
    ctx, gen = np.array([_TYPICAL_REQUEST[0]]), np.array([_TYPICAL_REQUEST[1]])
    if gpu_model.upper() in STEP_MODELS and reference_model.upper() in STEP_MODELS:
        ref = float(llm_work_seconds(ctx, gen, reference_model.upper())[0])
        return ref / float(llm_work_seconds(ctx, gen, gpu_model.upper())[0])
    ref = float(_table_work_seconds(ctx, gen, reference_model)[0])
    return ref / float(_table_work_seconds(ctx, gen, gpu_model)[0])


def _table_work_seconds(context: np.ndarray, generated: np.ndarray, gpu_model: str) -> FloatArray:
    """Per-request GPU seconds from the ``LLM_THROUGHPUT`` cost constants."""
    t = llm_throughput(gpu_model)
    ctx, gen = np.asarray(context, dtype=float), np.asarray(generated, dtype=float)
    return np.asarray(
        ctx / t.prefill_tokens_per_s
        + gen / t.decode_tokens_per_s
        + gen * (ctx + 0.5 * gen) * t.kv_s_per_token2,
        dtype=float,
    )


def replica_slots(serving: "ServingConfig", gpu_model: str, workload: Workload) -> int:
    """Batch slots of one replica: the configured slots, bounded by the KV cache for LLMs.

    For an LLM config (``llm_slo`` set) serving a trace with token counts, a replica
    batches at most as many sequences as its KV cache holds at the trace's mean
    prompt plus output length (``StepModel.max_batch``).

    Returns:
        Slots, at least 1.
    """
    slots = serving.slots_per_replica
    profile = workload.profile
    if serving.llm_slo is None or profile is None or profile.context_q is None:
        return slots
    gen = 0.0 if profile.generated_q is None else float(profile.generated_q.mean())
    bound = step_model(gpu_model).max_batch(float(profile.context_q.mean()) + gen)
    return max(min(slots, bound), 1)


@dataclass(frozen=True, slots=True)
class ServingConfig:
    """How one replica serves.

    Attributes:
        reference_model: GPU whose seconds ``Workload.work_s`` counts.
        slots_per_replica: Requests a replica serves at once (continuous batching); each
            slot runs at 1/slots of the GPU, so a request takes ``work * slots`` seconds.
            1 suits one-at-a-time models (diffusion); ``for_llm()`` sets LLM batching.
        service_scv: Squared coefficient of variation of per-request work (1: exponential).
        gpus_per_replica: GPUs one replica holds, all on one node (tensor parallelism);
            each is counted in GPU-hours and reports the replica's activity.
        model_bytes: Framebuffer the loaded model holds on each of its GPUs, bytes.
        kv_bytes_per_request: Framebuffer per request in flight (KV cache) on each GPU, bytes.
        slo_quantile: For ``required_replicas``: waiting may cost at most ``1 - slo_quantile``
            of the requests that would meet the SLO with no waiting at all.
        rate_window_s: ``required_replicas`` plans for the arrival rate averaged over a
            centred window of this many seconds.
        llm_slo: For LLM serving, the TTFT and TPOT objectives a request must meet
            (with a trace's token counts, attainment is scored on them); None: the
            end-to-end latency SLO of the scenario.
    """

    reference_model: str = "H100"
    slots_per_replica: int = 1
    service_scv: float = 1.0
    gpus_per_replica: int = 1
    model_bytes: float = 16e9
    kv_bytes_per_request: float = 1e9
    slo_quantile: float = 0.99
    rate_window_s: int = 60
    llm_slo: LlmSlo | None = None

    def __post_init__(self) -> None:
        llm_throughput(self.reference_model)
        checks = {
            "slots_per_replica": self.slots_per_replica >= 1,
            "service_scv": self.service_scv >= 0.0,
            "gpus_per_replica": self.gpus_per_replica >= 1,
            "slo_quantile": 0.0 < self.slo_quantile < 1.0,
            "rate_window_s": self.rate_window_s >= 1,
        }
        check_ranges("serving", self, checks, "see ServingConfig")

    @classmethod
    def for_llm(cls, slots: int = LLM_BATCH_SLOTS, **kwargs: float | str) -> "ServingConfig":
        """The LLM step model's server: Llama-2-70B, tensor parallel 2, batching ``slots``.

        Each replica holds ``llm.TENSOR_PARALLEL`` (2) GPUs; each GPU holds half the
        weights (69 GB) and half the KV cache of a request of 1,024 cached tokens
        (0.17 GB).

        Returns:
            The config.
        """
        defaults: dict[str, float | str] = {
            "gpus_per_replica": TENSOR_PARALLEL,
            "model_bytes": LLAMA2_70B_BYTES / TENSOR_PARALLEL,
            "kv_bytes_per_request": LLAMA2_70B_KV_BYTES_PER_TOKEN * 1024 / TENSOR_PARALLEL,
        }
        defaults.update(kwargs)
        return cls(slots_per_replica=slots, llm_slo=LlmSlo(), **defaults)  # type: ignore[arg-type]


def service_scv(serving: "ServingConfig", workload: Workload) -> float:
    """Service-time variability: the trace's measured one if it has a profile, else the config's.

    Returns:
        Squared coefficient of variation of work per request.
    """
    return workload.profile.scv if workload.profile is not None else serving.service_scv


def llm_scoring(
    serving: "ServingConfig", gpu_model: str, slots: int, workload: Workload
) -> LlmScoring | None:
    """How to score TTFT and TPOT, for an LLM config on a trace with token counts.

    Returns:
        The scoring inputs, or None (score end-to-end latency).
    """
    profile = workload.profile
    if serving.llm_slo is None or profile is None or profile.context_q is None:
        return None
    return LlmScoring(step_model(gpu_model), serving.llm_slo, slots)


def llm_meets(
    llm: LlmScoring,
    profile: RequestProfile,
    replicas: np.ndarray,
    rate: np.ndarray,
    service_s: np.ndarray,
    scv: float,
    count_variance: float = 0.0,
) -> FloatArray:
    """Stationary share of LLM requests meeting TTFT and TPOT with ``replicas`` replicas.

    The queue is M/G/k with ``k = replicas x slots`` and offered load ``a = rate x
    service_s`` (``service_s``: seconds per request on one slot). As the fluid scores
    it (``latency.summarise_latency``), a request waits with probability Erlang C,
    exponentially with mean ``theta = (1 + scv) / 2 x service_s / (k - a)``, and meets
    its TTFT when the wait is within its budget (``LlmScoring.ttft_budget_s``),
    averaged over the profile's prompt lengths. TPOT holds for every request or none:
    each replica decodes ``a / replicas`` sequences while prefills take ``rate /
    replicas x`` the mean prefill of its time (``llm.tpot_s``), and that must be at
    most ``tpot_slowdown`` idle decode steps. That bounds a second's arrivals at
    ``n* = replicas x (1 - step / bound) / prefill``; with per-second counts of
    variance ``count_variance x rate`` (1 for Poisson counts, 0 for a smooth rate)
    the share of requests arriving in seconds within it is, in the normal
    approximation, ``Phi(z) - sigma / rate x phi(z)`` with ``z = (n* - rate) /
    sigma`` (the size-biased count: a busy second holds more requests). An
    unstable queue (``k <= a``) meets nothing.

    Returns:
        The share meeting both, 0 to 1, per element.
    """
    model = llm.model
    ctx = profile.context_q if profile.context_q is not None else np.zeros(1)
    gen = profile.generated_q if profile.generated_q is not None else np.ones(1)
    r = np.maximum(np.asarray(replicas, dtype=float), 1e-9)
    k = r * llm.slots
    a = rate * service_s
    stable = k > a
    c = erlang_c(k, np.minimum(a, k))
    with np.errstate(divide="ignore", invalid="ignore"):
        theta = np.where(stable, 0.5 * (1.0 + scv) * service_s / (k - a), np.inf)
    budget = llm.ttft_budget_s(ctx)
    tail = np.exp(-budget[None, :] / np.maximum(theta, 1e-12)[:, None]).mean(axis=1)
    ttft = 1.0 - c * tail
    prefill = float(model.prefill_cost_s(ctx).mean())
    kv_per_seq = float(ctx.mean() + 0.5 * gen.mean())
    step = tpot_s(model, a / r, kv_per_seq, np.zeros_like(a))
    bound = llm.slo.tpot_slowdown * float(model.decode_step_s(1.0, float(ctx.mean())))
    n_max = r * np.clip(1.0 - step / bound, 0.0, 0.95) / prefill  # arrivals per second
    sigma = np.sqrt(max(count_variance, 0.0) * rate)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(sigma > 0, (n_max - rate) / sigma, np.where(n_max >= rate, np.inf, -np.inf))
    phi = np.exp(-0.5 * np.minimum(z * z, 1e4)) / math.sqrt(2.0 * math.pi)
    tpot_share = 0.5 * erfc(-z / math.sqrt(2.0)) - np.where(sigma > 0, sigma / rate * phi, 0.0)
    tpot_share = np.where(step < bound, np.clip(tpot_share, 0.0, 1.0), 0.0)
    return np.asarray(np.where(stable, ttft * tpot_share, 0.0), dtype=float)


def required_replicas(workload: Workload, scenario: "Scenario") -> np.ndarray:
    """Per second, the fewest Ready replicas that keep the SLO, as the oracle needs.

    The arrival rate and work per request are averaged over a centred window of
    ``serving.rate_window_s`` seconds (the oracle plans for the rate, not the noise).
    For an LLM config on a trace with token counts (``llm_scoring``), the answer is
    the fewest replicas whose stationary queue has at least ``slo_quantile`` of the
    requests meet both TTFT and TPOT (``llm_meets``): enough replicas that each
    decodes a batch small enough, with few enough prefills interleaved, for TPOT,
    and a queue short enough for TTFT. Otherwise it is the fewest replicas whose
    stationary M/G/k queue (replicas x slots servers at the cluster GPU's speed, no
    throttling) serves at least ``slo_quantile`` of the share of requests that would
    meet the end-to-end SLO with no waiting (the service time's two-moment shape,
    ``queueing.service_phases``). Seconds
    without demand need 0.

    Returns:
        Integer replica counts, one per second of the workload.
    """
    serving = scenario.serving
    slots = replica_slots(serving, scenario.cluster.gpu_model, workload)
    speed = relative_speed(scenario.cluster.gpu_model, serving.reference_model)
    rate = centred_mean(workload.arrivals, serving.rate_window_s)
    work = centred_mean(workload.work_s, serving.rate_window_s)
    need = np.zeros(workload.duration_s, dtype=np.int64)
    active = np.flatnonzero(rate > 1e-9)
    if active.size == 0:
        return need
    lam = rate[active]
    service = work[active] / lam * slots / speed  # seconds per request on one slot
    scv = service_scv(serving, workload)
    llm = llm_scoring(serving, scenario.cluster.gpu_model, slots, workload)
    if llm is not None and workload.profile is not None:
        profile = workload.profile
        count_var = 1.0 - residual_arrival_scv(workload)  # Poisson counts: 1

        def meets(r: np.ndarray, idx: np.ndarray) -> np.ndarray:
            ok = llm_meets(llm, profile, r, lam[idx], service[idx], scv, count_var)
            return np.asarray(ok >= serving.slo_quantile - 1e-12)

    else:
        idle = np.zeros_like(service)
        best = shaped_latency_cdf(
            np.asarray(scenario.slo_latency_s), idle, idle, np.full_like(service, np.inf),
            service, scv,
        )  # fmt: skip
        goal = serving.slo_quantile * best

        def meets(r: np.ndarray, idx: np.ndarray) -> np.ndarray:
            got = stationary_attainment(
                r * slots, lam[idx], service[idx], scenario.slo_latency_s, scv
            )
            return np.asarray(got >= goal[idx] - 1e-12)

    # Fewer than the offered load in replicas is unstable, so ``fail`` never meets the SLO.
    fail = np.floor(lam * service / slots).astype(np.int64)
    step = np.ones_like(fail)
    ok_r = fail + step
    todo = np.flatnonzero(~meets(ok_r, np.arange(active.size)))
    while todo.size:  # gallop up to a count that meets it
        fail[todo] = ok_r[todo]
        step[todo] *= 2
        ok_r[todo] = fail[todo] + step[todo]
        if int(np.max(ok_r[todo])) > _MAX_REPLICAS:
            raise ConfigError(
                f"slo_latency_s={scenario.slo_latency_s}: no replica count meets it; raise it"
            )
        todo = todo[~meets(ok_r[todo], todo)]
    todo = np.flatnonzero(ok_r - fail > 1)
    while todo.size:  # bisect between a failing and a passing count
        mid = (fail[todo] + ok_r[todo]) // 2
        good = meets(mid, todo)
        ok_r[todo[good]] = mid[good]
        fail[todo[~good]] = mid[~good]
        todo = todo[ok_r[todo] - fail[todo] > 1]
    r = np.maximum(ok_r, 1)
    need[active] = r
    return need
