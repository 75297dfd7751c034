"""Continuous-batching LLM serving: step times, the KV-cache bound, TTFT and TPOT.

An LLM replica (vLLM-style continuous batching) runs one forward pass ("step")
at a time over every sequence in its batch. A step that only decodes takes
longer the more sequences and cached tokens it reads; a step that also prefills
prompts takes longer with the prompt tokens it computes. The batch is bounded
by the KV cache: the memory left after the weights, divided by the tokens each
sequence holds.

The step times are fitted to the measurements Splitwise (Patel et al., ISCA
2024) released with its simulator (``data/perf_model.csv`` of
github.com/Mutinifni/splitwise-sim): Llama-2-70B, tensor parallel 2, on DGX-H100
and DGX-A100 (median of 5 runs per point). docs/serving-model.md lists the
figures and tests/unit/sim/test_llm.py checks the fit against them within 10 %.
A replica here is that 2-GPU serving unit.

The SLO follows Splitwise's: a request is within it when its time to first
token is at most ``ttft_slowdown`` times its prefill on an idle replica, and
its time per output token at most ``tpot_slowdown`` times an idle replica's
decode step (the paper's P99 slowdown bounds, 6x and 5x, which it applies to
both the coding and the conversation service).
"""

from dataclasses import dataclass

import numpy as np

from gpuscale.errors import ConfigError
from gpuscale.sim.workload import FloatArray, RequestProfile

LLAMA2_70B_BYTES = 138e9
"""Llama-2-70B weights in FP16: 69 billion parameters x 2 bytes."""

LLAMA2_70B_KV_BYTES_PER_TOKEN = 2 * 80 * 8 * 128 * 2
"""K and V, 80 layers, 8 grouped KV heads of 128, FP16: 327,680 bytes per cached token."""

GPU_MEMORY_UTILISATION = 0.9
"""vLLM's default ``gpu_memory_utilization``: share of GPU memory it may use."""

MAX_NUM_SEQS = 256
"""vLLM's default ``max_num_seqs``: sequences per batch at most."""

TENSOR_PARALLEL = 2
"""GPUs per replica in the measurements (Splitwise's smallest Llama-2-70B setting)."""


@dataclass(frozen=True, slots=True)
class StepModel:
    """Forward-pass time of one replica, fitted to measured step times.

    Decode step: ``decode_base_s + decode_per_seq_s * B + decode_per_kv_token_s * K``
    for ``B`` sequences holding ``K`` cached tokens. Prefill step of ``n`` prompts
    of ``L_i`` tokens: ``max(prefill_floor_s, per_token * sum(L) + per_token2 *
    sum(L^2) + per_prompt * n)`` (the floor is the weights' read time of a small pass).

    Attributes:
        decode_base_s: Seconds per decode step with an empty batch.
        decode_per_seq_s: Seconds per sequence in the batch.
        decode_per_kv_token_s: Seconds per cached token read.
        prefill_floor_s: Shortest prefill step, seconds.
        prefill_per_token_s: Seconds per prompt token.
        prefill_per_token2_s: Seconds per squared prompt token (attention).
        prefill_per_prompt_s: Seconds per prompt in the step.
        memory_bytes: Memory of the replica's GPUs together, bytes.
    """

    decode_base_s: float
    decode_per_seq_s: float
    decode_per_kv_token_s: float
    prefill_floor_s: float
    prefill_per_token_s: float
    prefill_per_token2_s: float
    prefill_per_prompt_s: float
    memory_bytes: float

    def decode_step_s(self, batch: FloatArray | float, kv_tokens: FloatArray | float) -> FloatArray:
        """Seconds of one decode step of ``batch`` sequences holding ``kv_tokens`` tokens.

        Returns:
            Step time, seconds.
        """
        b, k = np.asarray(batch, dtype=float), np.asarray(kv_tokens, dtype=float)
        return np.asarray(
            self.decode_base_s + self.decode_per_seq_s * b + self.decode_per_kv_token_s * k,
            dtype=float,
        )

    def prefill_step_s(
        self, prompts: FloatArray | float, prompt_tokens: FloatArray | float
    ) -> FloatArray:
        """Seconds of a prefill step of ``prompts`` equal prompts of ``prompt_tokens`` each.

        Returns:
            Step time, seconds.
        """
        n, length = np.asarray(prompts, dtype=float), np.asarray(prompt_tokens, dtype=float)
        work = (
            self.prefill_per_token_s * n * length
            + self.prefill_per_token2_s * n * length * length
            + self.prefill_per_prompt_s * n
        )
        return np.asarray(np.maximum(self.prefill_floor_s, work), dtype=float)

    def prefill_cost_s(self, prompt_tokens: FloatArray | float) -> FloatArray:
        """Replica time one prompt adds to a step it shares (no floor), seconds.

        Returns:
            Seconds per prompt.
        """
        length = np.asarray(prompt_tokens, dtype=float)
        return np.asarray(
            self.prefill_per_token_s * length
            + self.prefill_per_token2_s * length * length
            + self.prefill_per_prompt_s,
            dtype=float,
        )

    def max_batch(self, tokens_per_sequence: float) -> int:
        """Sequences the KV cache holds when each holds ``tokens_per_sequence`` tokens.

        Returns:
            At least 1, at most ``MAX_NUM_SEQS``.
        """
        free = GPU_MEMORY_UTILISATION * self.memory_bytes - LLAMA2_70B_BYTES
        tokens = free / LLAMA2_70B_KV_BYTES_PER_TOKEN
        return int(min(max(tokens // max(tokens_per_sequence, 1.0), 1), MAX_NUM_SEQS))


_GIB = 2.0**30
# Least-squares fits (relative error weights) to the median step times of
# splitwise-sim data/perf_model.csv, llama2-70b, tensor_parallel 2: decode on the
# token_time of batch 1-32 (prompt 128-8192 tokens), prefill on the prompt_time of
# 256-16,384 batch tokens (non-negative coefficients); the floor is the 128-token
# prompt_time. Batch 64 is left out: its TP2 rows are shorter than batch 32 (out of
# memory). H200 is the H100 fit with the memory-bound terms scaled by HBM bandwidth
# (3.35 vs 4.8 TB/s) and its 141 GB: an estimate, not a measurement.
STEP_MODELS: dict[str, StepModel] = {
    "H100": StepModel(
        0.0368835, 0.000407165, 5.93770e-8, 0.0483314, 1.25632e-4, 5.13114e-9, 0.0137358,
        TENSOR_PARALLEL * 80 * _GIB,
    ),
    "A100": StepModel(
        0.0551189, 0.000492492, 1.64773e-7, 0.0810758, 3.32890e-4, 3.44062e-9, 0.0306228,
        TENSOR_PARALLEL * 80 * _GIB,
    ),
    "H200": StepModel(
        0.0368835 * 3.35 / 4.8, 0.000407165, 5.93770e-8 * 3.35 / 4.8, 0.0483314 * 3.35 / 4.8,
        1.25632e-4, 5.13114e-9, 0.0137358, TENSOR_PARALLEL * 141e9,
    ),
}  # fmt: skip


def step_model(gpu_model: str) -> StepModel:
    """The step model of replicas on ``gpu_model``.

    Raises:
        ConfigError: No LLM step figures for that GPU.

    Returns:
        Its step model.
    """
    found = STEP_MODELS.get(gpu_model) or STEP_MODELS.get(gpu_model.upper())
    if found is None:
        raise ConfigError(
            f"gpu model {gpu_model!r}: no LLM step-time figures; "
            f"serve LLM traces on one of {', '.join(STEP_MODELS)}"
        )
    return found


@dataclass(frozen=True, slots=True)
class LlmSlo:
    """TTFT and TPOT objectives as slowdowns over an idle replica (Splitwise's P99 bounds).

    Attributes:
        ttft_slowdown: TTFT at most this many times the request's own idle prefill.
        tpot_slowdown: TPOT at most this many times an idle replica's decode step.
    """

    ttft_slowdown: float = 6.0
    tpot_slowdown: float = 5.0


def request_work_s(
    context: FloatArray, generated: FloatArray, model: StepModel, batch: int, kv_tokens: float
) -> FloatArray:
    """Replica seconds one request costs in a full batch: its share of decode plus its prefill.

    Args:
        context: Prompt tokens per request.
        generated: Output tokens per request.
        model: The replica's step model.
        batch: Sequences in a full batch.
        kv_tokens: Cached tokens in a full batch.

    Returns:
        Seconds per request.
    """
    step = float(model.decode_step_s(batch, kv_tokens))
    gen = np.asarray(generated, dtype=float)
    return np.asarray(gen * step / batch + model.prefill_cost_s(context), dtype=float)


def tpot_s(
    model: StepModel,
    batch: FloatArray,
    kv_per_seq: float,
    prefill_busy: FloatArray,
) -> FloatArray:
    """Mean time per output token of a replica with ``batch`` decoding sequences.

    A decode step takes ``decode_step_s``; prefills interleaved with the decodes take
    a share ``prefill_busy`` of the replica's time, which stretches every token by
    ``1 / (1 - prefill_busy)`` (capped at 0.95 busy).

    Returns:
        Seconds per output token.
    """
    b = np.maximum(np.asarray(batch, dtype=float), 1.0)
    busy = np.clip(np.asarray(prefill_busy, dtype=float), 0.0, 0.95)
    return np.asarray(model.decode_step_s(b, b * kv_per_seq) / (1.0 - busy), dtype=float)


@dataclass(frozen=True, slots=True)
class LlmScoring:
    """What scoring TTFT and TPOT needs besides the fluid queue's records.

    Attributes:
        model: Step model of the replicas.
        slo: The objectives.
        slots: Batch slots per replica (servers per replica in the records).
    """

    model: StepModel
    slo: LlmSlo
    slots: int

    def ttft_budget_s(self, context: FloatArray) -> FloatArray:
        """Wait a request of ``context`` prompt tokens may have and still meet its TTFT.

        Its TTFT is its wait plus its prefill; the objective is ``ttft_slowdown`` times
        that prefill on an idle replica, so the budget is ``slowdown - 1`` prefills.

        Returns:
            Seconds per context value.
        """
        idle = self.model.prefill_step_s(1.0, context)
        return np.asarray((self.slo.ttft_slowdown - 1.0) * idle, dtype=float)


def tpot_ok_per_second(
    scoring: LlmScoring,
    busy: list[float],
    arrivals: list[float],
    servers: list[int],
    profile: RequestProfile,
) -> FloatArray:
    """Per second, whether requests decoding then meet the TPOT objective (1 or 0).

    Each Ready replica decodes ``busy / replicas`` sequences holding the trace's mean
    prompt plus half its mean output; prefills of that second's arrivals take their
    share of the replica's time (``tpot_s``). The TPOT a request sees is averaged
    over a centred window as long as a mean decode on an idle replica.

    Returns:
        1.0 where the mean time per output token is within the objective, else 0.0.
    """
    model = scoring.model
    ctx_q = profile.context_q if profile.context_q is not None else np.zeros(1)
    gen_q = profile.generated_q if profile.generated_q is not None else np.ones(1)
    replicas = np.maximum(np.asarray(servers, dtype=float) / scoring.slots, 1e-9)
    batch = np.asarray(busy, dtype=float) / replicas
    prefill = float(model.prefill_cost_s(ctx_q).mean())
    prefill_busy = np.asarray(arrivals, dtype=float) / replicas * prefill
    kv_per_seq = float(ctx_q.mean() + 0.5 * gen_q.mean())
    tpot = tpot_s(model, batch, kv_per_seq, prefill_busy)
    idle = float(model.decode_step_s(1.0, float(ctx_q.mean())))
    window = max(round(float(gen_q.mean()) * idle), 1)
    if window > 1 and tpot.size:
        c = np.concatenate([[0.0], np.cumsum(tpot)])
        lo = np.clip(np.arange(tpot.size) - window // 2, 0, tpot.size)
        hi = np.clip(lo + window, 0, tpot.size)
        tpot = (c[hi] - c[lo]) / np.maximum(hi - lo, 1)
    return np.asarray(tpot <= scoring.slo.tpot_slowdown * idle, dtype=float)
