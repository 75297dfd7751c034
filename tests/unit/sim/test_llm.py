"""The LLM step model against the measurements it cites, the KV bound, TTFT and TPOT scoring.

Figures: median of five runs per point of splitwise-sim ``data/perf_model.csv``
(Patel et al., Splitwise, ISCA 2024), Llama-2-70B, tensor parallel 2, milliseconds.
Key: (batch size, prompt tokens) -> (prompt_time, token_time).
"""

import numpy as np
import pytest

from gpuscale.sim.llm import LlmScoring, LlmSlo, step_model, tpot_ok_per_second
from gpuscale.sim.workload import RequestProfile

SPLITWISE_TP2_MS = {
    "H100": {
        (1, 128): (48.33, 37.24), (1, 256): (51.85, 37.84), (1, 512): (83.83, 37.00),
        (2, 512): (155.84, 37.39), (4, 512): (299.82, 39.98), (8, 512): (606.02, 40.40),
        (16, 512): (1191.98, 41.97), (32, 512): (2397.77, 52.30), (1, 1024): (157.95, 37.39),
        (1, 2048): (310.32, 37.37), (1, 4096): (642.66, 37.54), (1, 8192): (1339.84, 37.80),
    },
    "A100": {
        (1, 128): (81.08, 53.68), (1, 256): (112.93, 54.10), (1, 512): (196.86, 54.86),
        (2, 512): (416.49, 59.92), (4, 512): (845.37, 60.52), (8, 512): (1596.83, 61.69),
        (16, 512): (3238.85, 65.46), (32, 512): (6632.63, 72.19), (1, 1024): (377.06, 54.77),
        (1, 2048): (688.05, 54.89), (1, 4096): (1485.35, 55.87), (1, 8192): (2990.18, 57.32),
    },
}  # fmt: skip


@pytest.mark.parametrize("gpu", ["H100", "A100"])
def test_step_model_matches_the_cited_splitwise_figures_within_10_percent(gpu):
    model = step_model(gpu)
    for (batch, prompt), (prefill_ms, decode_ms) in SPLITWISE_TP2_MS[gpu].items():
        prefill = float(model.prefill_step_s(batch, prompt)) * 1e3
        decode = float(model.decode_step_s(batch, batch * (prompt + 64))) * 1e3
        assert prefill == pytest.approx(prefill_ms, rel=0.10), (batch, prompt)
        assert decode == pytest.approx(decode_ms, rel=0.10), (batch, prompt)


def test_kv_cache_bounds_the_batch_by_sequence_length_and_memory():
    h100, h200 = step_model("H100"), step_model("H200")
    assert h100.max_batch(1000.0) > h100.max_batch(2000.0) >= 1
    assert h200.max_batch(2000.0) > h100.max_batch(2000.0)
    # 0.9 x 160 GiB - 138 GB of weights, at 327,680 bytes per token: about 50,700 tokens.
    assert h100.max_batch(1000.0) == 50


def test_tpot_fails_where_the_batch_and_prefills_stretch_each_token():
    profile = RequestProfile.from_samples(np.ones(10), np.full(10, 1000.0), np.full(10, 200.0))
    scoring = LlmScoring(step_model("H100"), LlmSlo(tpot_slowdown=1.5), slots=40)
    ok = tpot_ok_per_second(
        scoring, busy=[1.0] * 30 + [40.0] * 30, arrivals=[0.1] * 30 + [8.0] * 30,
        servers=[40] * 60, profile=profile,
    )  # fmt: skip
    assert ok[:20].tolist() == [1.0] * 20
    assert ok[-20:].tolist() == [0.0] * 20


def test_ttft_budget_is_slowdown_minus_one_idle_prefills():
    scoring = LlmScoring(step_model("H100"), LlmSlo(ttft_slowdown=6.0), slots=40)
    idle = float(step_model("H100").prefill_step_s(1, 2048))
    assert float(scoring.ttft_budget_s(np.array([2048.0]))[0]) == pytest.approx(5 * idle)
