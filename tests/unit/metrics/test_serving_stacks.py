"""The serving-stack presets: names, buckets and the PromQL they compile to."""

import re
from pathlib import Path

import pytest

from gpuscale.alerts.config import DEFAULT_SLOS, TTFT_SLO_BOUND_S
from gpuscale.metrics import serving_stacks
from gpuscale.metrics.promql import METRIC_NAME, compile_signal
from gpuscale.metrics.serving_stacks import (
    COMPLETED,
    IN_FLIGHT,
    STACKS,
    TGI,
    TRITON,
    VLLM,
    VLLM_TTFT,
    BusyTime,
    Series,
    quantile_query,
    substitute,
)
from gpuscale.metrics.signal import Signal
from tests.support import vllm as stand_in


def test_vllm_buckets_match_the_stand_ins_own_transcription():
    # Two transcriptions of vllm/v1/metrics/loggers.py, made apart, must agree.
    assert [h.buckets for h in VLLM.histograms()] == [
        stand_in.TTFT_BUCKETS,
        stand_in.TPOT_BUCKETS,
        stand_in.REQUEST_LATENCY_BUCKETS,
    ]
    assert VLLM.model_label in stand_in.LABELS


def test_tgi_buckets_are_its_geometric_series():
    # router/src/server.rs: start at 0.0001, multiply by 1.5 before each of 35 pushes.
    value, expected = 0.0001, []
    for _ in range(35):
        value *= 1.5
        expected.append(value)
    assert TGI.e2e is not None
    assert TGI.e2e.buckets == pytest.approx(expected, rel=1e-12)
    assert TGI.e2e.buckets[0] == pytest.approx(0.00015)


def test_triton_first_response_default_buckets_are_milliseconds():
    assert TRITON.ttft is not None
    assert TRITON.ttft.buckets == (100.0, 500.0, 2000.0, 5000.0)
    assert TRITON.ttft.to_seconds == 0.001


@pytest.mark.parametrize("stack", STACKS.values(), ids=list(STACKS))
def test_every_name_is_a_prometheus_metric_name(stack):
    names = [
        r.name
        for r in (stack.running, stack.waiting, stack.completed, stack.kv_cache)
        if isinstance(r, Series)
    ]
    names += [h.name for h in stack.histograms()]
    assert names
    for name in names:
        assert METRIC_NAME.fullmatch(name), name


def test_quantile_query_groups_escapes_and_drops_the_empty_windows_nan():
    query = quantile_query(VLLM.ttft, {"model_name": 'a"b\\c'}, 0.9, 30.0, by=("pod",))
    assert query == (
        "(histogram_quantile(0.9, sum by (le, pod) (rate(vllm:time_to_first_token_seconds_bucket"
        '{model_name="a\\"b\\\\c"}[30s])))) >= 0'
    )


@pytest.mark.parametrize("quantile", [0.0, 1.0, -0.5, 1.5])
def test_a_quantile_outside_zero_and_one_is_refused(quantile):
    with pytest.raises(ValueError, match="quantile must be between 0 and 1"):
        quantile_query(VLLM.ttft, {}, quantile, 60.0)


def test_substitute_keeps_the_signals_shape_for_a_gauge():
    sig = Signal(COMPLETED, {"namespace": "ml"}, "sum", ("pod",), window=30.0, optional=True)
    out = substitute(VLLM, sig, quantile=0.99, window_s=60.0)
    assert out == Signal(
        "vllm:request_success_total",
        {"namespace": "ml"},
        "sum",
        ("pod",),
        window=30.0,
        optional=True,
    )


def test_substitute_leaves_raw_queries_and_unknown_series_alone():
    raw = Signal(IN_FLIGHT, query="sum(my_in_flight)")
    other = Signal("DCGM_FI_DEV_GPU_UTIL", {"namespace": "ml"}, "avg", ("pod",))
    assert substitute(VLLM, raw, quantile=0.99, window_s=60.0) is raw
    assert substitute(VLLM, other, quantile=0.99, window_s=60.0) is other


def test_triton_busy_time_keeps_the_signals_grouping():
    sig = Signal(IN_FLIGHT, {"namespace": "ml"}, "sum", ("pod",))
    out = substitute(TRITON, sig, quantile=0.99, window_s=60.0)
    assert compile_signal(out) == (
        'sum by (pod) ((rate(nv_inference_request_duration_us{namespace="ml"}[60s]) - '
        'rate(nv_inference_queue_duration_us{namespace="ml"}[60s])) * 1e-06)'
    )
    assert out.metric == "nv_inference_request_duration_us"


def test_the_module_docstring_names_the_sources_checked():
    doc = serving_stacks.__doc__ or ""
    for source in (
        "vllm/v1/metrics/loggers.py",
        "router/src/server.rs",
        "docs/user_guide/metrics.md",
    ):
        assert source in doc


AUTOSCALER_GUIDE = Path(__file__).parents[3] / "docs" / "autoscaler.md"


@pytest.mark.parametrize("stack", STACKS.values(), ids=list(STACKS))
def test_the_autoscaler_guide_tables_every_name_the_preset_reads(stack):
    text = AUTOSCALER_GUIDE.read_text()
    names = [stack.waiting.name, stack.completed.name, *(h.name for h in stack.histograms())]
    names += [stack.running.name] if isinstance(stack.running, Series) else []
    names += (
        [stack.running.total, stack.running.queued] if isinstance(stack.running, BusyTime) else []
    )
    names += [stack.kv_cache.name] if stack.kv_cache is not None else []
    for name in names:
        assert f"`{name}`" in text, name
    version = re.search(r"\d+\.\d+(\.\d+)?", stack.checked_against)
    assert version is not None
    assert version.group() in text


def test_the_default_ttft_slo_counts_a_bucket_vllm_serves():
    # A ``le`` that is not one of the histogram's bounds selects no series: the SLO
    # would read nothing, silently.
    assert TTFT_SLO_BOUND_S in VLLM_TTFT.buckets
    (slo,) = DEFAULT_SLOS
    assert slo.good == 'vllm:time_to_first_token_seconds_bucket{le="2.5"}'
    assert slo.total == "vllm:time_to_first_token_seconds_count"
