import gzip
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.errors import ConfigError
from gpuscale.sim import generators
from gpuscale.sim.serving import llm_work_seconds
from gpuscale.sim.traces import (
    GENTD26_SERVICE_S,
    RateSeries,
    gentd26_workload,
    load_trace,
    read_azure_llm,
    read_gentd26_qps,
    read_rate_file,
    resolve_traces_dir,
)

TRACES = Path(
    os.environ.get("GPUSCALE_TRACES_DIR", Path(__file__).parents[3] / ".." / "shared" / "traces")
)
needs_traces = pytest.mark.skipif(
    not TRACES.is_dir(), reason=f"shared trace directory {TRACES} is absent"
)


# --- real traces -----------------------------------------------------------------------------


def expected_work_each(raw: pd.DataFrame) -> np.ndarray:
    return llm_work_seconds(
        raw["ContextTokens"].to_numpy(float), raw["GeneratedTokens"].to_numpy(float)
    )


@needs_traces
def test_azure_conv_reads_every_request_into_one_second_bins():
    path = TRACES / "azure_llm_2023_conv.csv"
    w, marks = read_azure_llm(path, name="azure-conv")
    raw = pd.read_csv(path)
    assert w.arrivals.sum() == len(raw) == 19_366
    assert 3_300 <= w.duration_s <= 3_600  # the same hour, counted from the first request
    assert w.arrivals.sum() / w.duration_s == pytest.approx(5.5, rel=0.05)
    expected_work = expected_work_each(raw).sum()
    assert w.work_s.sum() == pytest.approx(expected_work, rel=1e-9)
    assert w.tokens is not None
    assert w.tokens.shape == (w.duration_s, 2)
    assert w.tokens[:, 0].sum() == raw["ContextTokens"].sum()
    assert w.tokens[:, 1].sum() == raw["GeneratedTokens"].sum()
    # One mark per request, carrying its own work and tokens, not its second's mean.
    assert marks.second.size == len(raw)
    assert np.array_equal(np.bincount(marks.second, minlength=w.duration_s), w.arrivals)
    assert np.sort(marks.work_s) == pytest.approx(np.sort(expected_work_each(raw)), rel=1e-12)
    assert marks.tokens is not None
    assert marks.tokens[:, 0].sum() == raw["ContextTokens"].sum()


@needs_traces
def test_azure_code_by_name_through_load_trace_is_scaled():
    base = load_trace("azure-code", traces_dir=TRACES)
    scaled = load_trace("azure-code", traces_dir=TRACES, scale=4.0)
    assert base.arrivals.sum() == 8_819
    # Scaled Azure arrivals are Poisson (sim.demand): total ~ Poisson(4 x 8,819), sd 188;
    # 4 sd either side. Work sums the drawn requests: its relative sd is under
    # sqrt(2 / 35,276) = 0.75 % while the drawn requests' SCV is below 1; 4 sd is 3 %.
    assert scaled.arrivals.sum() == pytest.approx(4 * 8_819, abs=4 * math.sqrt(4 * 8_819))
    assert scaled.work_s.sum() == pytest.approx(4 * base.work_s.sum(), rel=0.03)
    assert np.array_equal(scaled.arrivals, np.rint(scaled.arrivals))
    assert scaled.name == "azure-code"


@needs_traces
def test_gentd26_sums_generative_containers_and_holds_each_57s_step():
    path = TRACES / "gentd26_qps.csv.gz"
    series = read_gentd26_qps(path)
    assert series.step_s == 57.0
    assert len(series.rps) * series.step_s / 3600 == pytest.approx(22.3, abs=0.1)
    raw = pd.read_csv(path)
    generative = raw[raw["request_type"] == "Generative Requests"]
    assert series.rps.sum() == pytest.approx(generative["value"].sum())
    first = generative.groupby("timestamp_anon")["value"].sum()
    slot = int((first.index[0] - series.start_s) / 57)
    assert series.rps[slot] == pytest.approx(first.iloc[0])
    w = gentd26_workload(path)
    assert w.duration_s == len(series.rps) * 57
    assert np.all(w.arrivals[slot * 57 : slot * 57 + 57] == series.rps[slot])
    assert w.work_s == pytest.approx(w.arrivals * GENTD26_SERVICE_S)


@needs_traces
def test_gentd26_service_time_constant_is_the_measured_mean():
    predict_ms = pd.read_csv(TRACES / "gentd26_model_predict_ms.csv.gz")["value"]
    assert predict_ms.mean() / 1000 == pytest.approx(GENTD26_SERVICE_S, rel=0.01)
    assert predict_ms.median() / 1000 == pytest.approx(35.0, rel=0.01)


@needs_traces
def test_duration_longer_than_the_trace_is_rejected():
    with pytest.raises(ConfigError, match=r"--duration 999999: trace 'azure-conv' lasts only"):
        load_trace("azure-conv", traces_dir=TRACES, duration_s=999_999)


def test_named_trace_without_its_file_names_the_directory(tmp_path):
    with pytest.raises(
        ConfigError,
        match=r"none of azure_llm_2023_conv.csv, AzureLLMInferenceTrace_conv.csv found in "
        r".*--traces-dir",
    ):
        load_trace("azure-conv", traces_dir=tmp_path)


@needs_traces
@pytest.mark.parametrize(
    ("trace", "shared", "upstream"),
    [
        ("azure-code", "azure_llm_2023_code.csv", "AzureLLMInferenceTrace_code.csv"),
        ("gentd26", "gentd26_qps.csv.gz", "qps.csv"),
    ],
)
def test_a_trace_is_found_under_its_dataset_file_name(tmp_path, trace, shared, upstream):
    data = (TRACES / shared).read_bytes()
    if shared.endswith(".gz"):
        data = gzip.decompress(data)
        # the service times beside it, under their dataset name too
        predict = gzip.decompress((TRACES / "gentd26_model_predict_ms.csv.gz").read_bytes())
        (tmp_path / "model_predict_data_anon.csv").write_bytes(predict)
    (tmp_path / upstream).write_bytes(data)
    renamed = load_trace(trace, traces_dir=tmp_path, duration_s=600)
    shared_copy = load_trace(trace, traces_dir=TRACES, duration_s=600)
    assert renamed.arrivals.tolist() == shared_copy.arrivals.tolist()
    assert renamed.work_s.tolist() == shared_copy.work_s.tolist()
    assert (renamed.profile is None) == (shared_copy.profile is None)


def test_traces_dir_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUSCALE_TRACES_DIR", str(tmp_path))
    assert resolve_traces_dir() == tmp_path
    assert resolve_traces_dir(Path("/x")) == Path("/x")


# --- rate files and malformed input ----------------------------------------------------------


def write(tmp_path, text, name="rate.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_rate_file_holds_each_rate_until_the_next_row(tmp_path):
    path = write(tmp_path, "time_s,rps\n0,2\n3,5\n6,1\n")
    w = read_rate_file(path, service_s=0.5)
    assert w.name == "rate"
    assert list(w.arrivals) == [2, 2, 2, 5, 5, 5, 1, 1, 1]
    assert w.work_s == pytest.approx(w.arrivals * 0.5)


def test_rate_file_service_column_overrides_the_default(tmp_path):
    path = write(tmp_path, "time_s,rps,service_s\n10,4,2.0\n12,1,3.0\n")
    w = read_rate_file(path, service_s=1.0)
    assert list(w.arrivals) == [4, 4, 1, 1]
    assert list(w.work_s) == [8, 8, 3, 3]


def test_rate_file_by_path_through_load_trace_applies_scale_and_duration(tmp_path):
    path = write(tmp_path, "time_s,rps\n0,1\n10,3\n")
    w = load_trace(str(path), scale=2.0, duration_s=15, service_s=2.0)
    assert w.duration_s == 15
    assert w.arrivals[0] == 2
    assert w.arrivals[14] == 6
    assert w.work_s[14] == 12


@pytest.mark.parametrize(
    ("text", "where", "reason"),
    [
        ("time_s,rps\n0,1\n1,abc\n", ":3:2:", "rps is not a finite number"),
        ("time_s,rps\n0,1\n1,-2\n", ":3:2:", "rps is not a finite number >= 0"),
        ("time_s,rps\n0,1\n\n5,2\n5,3\n", ":5:", "time_s 5 is not after"),
        ("time,rps\n0,1\n", ":1:", "header lacks column(s) time_s"),
        ("time_s,rps\n", ":2:", "no data rows"),
        ("time_s,rps\n0,1\n1,2,3\n", ":3: malformed CSV", "saw 3"),
        ("time_s,rps\n0,nan\n", ":2:2:", "rps is not a finite number"),
    ],
)
def test_malformed_rate_file_names_file_line_and_reason(tmp_path, text, where, reason):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        read_rate_file(path, service_s=1.0)
    message = str(info.value)
    assert message.startswith(str(path))
    assert where in message
    assert reason in message
    assert "\n" not in message


def test_malformed_azure_file_names_the_bad_timestamp_line(tmp_path):
    path = write(
        tmp_path,
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,10,2\nyesterday,4,4\n",
        "azure.csv",
    )
    with pytest.raises(ConfigError, match=r"azure.csv:3:1: TIMESTAMP is not a date-time"):
        read_azure_llm(path)


def test_azure_file_with_negative_tokens_is_rejected(tmp_path):
    path = write(
        tmp_path,
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,10,-2\n",
        "azure.csv",
    )
    with pytest.raises(ConfigError, match=r"azure.csv:2:3: GeneratedTokens is not"):
        read_azure_llm(path)


def test_small_azure_file_bins_requests_by_second(tmp_path):
    path = write(
        tmp_path,
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:17:03.5,100,10\n"
        "2023-11-16 18:17:03.9,200,20\n"
        "2023-11-16 18:17:06.4,300,30\n",
        "azure.csv",
    )
    w, marks = read_azure_llm(path)
    assert list(w.arrivals) == [2, 0, 1]  # seconds counted from the first request
    assert w.tokens is not None
    assert w.tokens[0].tolist() == [300, 30]
    work = llm_work_seconds(np.array([100.0, 200.0, 300.0]), np.array([10.0, 20.0, 30.0]))
    assert w.work_s[0] == pytest.approx(work[0] + work[1])
    assert w.work_s[2] == pytest.approx(work[2])
    assert marks.second.tolist() == [0, 0, 2]
    assert marks.work_s == pytest.approx(work)
    assert marks.tokens is not None
    assert marks.tokens.tolist() == [[100, 10], [200, 20], [300, 30]]
    assert marks.head(1).second.tolist() == [0, 0]


def test_unknown_name_lists_the_choices():
    with pytest.raises(
        ConfigError, match=r"--trace nosuch: neither a trace name nor a file; use one of"
    ):
        load_trace("nosuch")


@pytest.mark.parametrize(
    ("kwargs", "flag"),
    [
        ({"scale": 0.0}, "--scale"),
        ({"scale": math.nan}, "--scale"),
        ({"duration_s": 0}, "--duration"),
    ],
)
def test_bad_scale_or_duration_is_a_config_error(kwargs, flag):
    with pytest.raises(ConfigError, match=flag):
        load_trace("ramp", **kwargs)


@settings(max_examples=50, deadline=None)
@given(
    steps=st.lists(st.integers(min_value=1, max_value=20), min_size=1, max_size=8),
    rates=st.lists(st.floats(min_value=0, max_value=1e4, allow_nan=False), min_size=8, max_size=8),
)
def test_rate_file_round_trip_preserves_requests_per_row(tmp_path_factory, steps, rates):
    times = np.concatenate([[0], np.cumsum(steps)[:-1]])
    lines = ["time_s,rps"] + [f"{t},{r!r}" for t, r in zip(times, rates, strict=False)]
    path = tmp_path_factory.mktemp("rt") / "r.csv"
    path.write_text("\n".join(lines) + "\n")
    w = read_rate_file(path, service_s=1.0)
    last_step = float(np.median(steps[:-1])) if len(steps) > 1 else 1.0
    spans = [*steps[:-1], math.ceil(last_step)]
    for i, (t, span) in enumerate(zip(times, spans, strict=True)):
        assert np.all(w.arrivals[t : t + span] == rates[i])
    assert w.duration_s == int(times[-1]) + math.ceil(last_step)


def test_rate_series_holds_values_over_fractional_steps():
    s = RateSeries(start_s=100.0, step_s=2.5, rps=np.array([1.0, 2.0]))
    assert list(s.per_second()) == [1.0, 1.0, 1.0, 2.0, 2.0]


# --- generators ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(generators.GENERATORS))
def test_same_seed_gives_the_same_generated_workload(name):
    a = load_trace(name, seed=3, duration_s=1_800)
    b = load_trace(name, seed=3, duration_s=1_800)
    c = load_trace(name, seed=4, duration_s=1_800)
    assert np.array_equal(a.arrivals, b.arrivals)
    assert not np.array_equal(a.arrivals, c.arrivals)
    assert a.name == name
    assert a.work_s == pytest.approx(a.arrivals * generators.DEFAULT_SERVICE_S)


def test_generator_scale_multiplies_the_mean_rate():
    base = load_trace("ramp", seed=1)
    scaled = load_trace("ramp", seed=1, scale=10.0, service_s=0.25)
    assert base.duration_s == 3_600
    assert scaled.arrivals.mean() == pytest.approx(10 * base.arrivals.mean(), rel=0.02)
    assert scaled.work_s == pytest.approx(scaled.arrivals * 0.25)


def test_diurnal_peaks_in_the_afternoon_and_lasts_a_day():
    w = load_trace("diurnal", seed=0)
    assert w.duration_s == 86_400
    hourly = w.arrivals.reshape(24, 3_600).mean(axis=1)
    assert int(np.argmax(hourly)) in (13, 14)
    assert int(np.argmin(hourly)) in (1, 2)
    assert hourly.max() / hourly.min() == pytest.approx(1.6 / 0.4, rel=0.1)


def test_flash_crowd_surges_tenfold_a_third_in_then_decays():
    t = np.arange(3_600, dtype=float)
    rate = generators.flash_crowd_rate(t)
    assert rate[1_000] == pytest.approx(10.0)
    assert rate[1_260] == pytest.approx(100.0)
    assert rate[1_260 + 600] == pytest.approx(10 + 90 / math.e)


def test_ramp_grows_linearly_from_start_to_end():
    rate = generators.ramp_rate(np.arange(101, dtype=float))
    assert rate[0] == 1.0
    assert rate[100] == 20.0
    assert rate[50] == pytest.approx(10.5)


def test_bursty_alternates_between_base_and_burst_rates():
    rate = generators.bursty_rate(np.arange(36_000, dtype=float), np.random.default_rng(0))
    assert set(np.unique(rate)) == {10.0, 40.0}
    share = float((rate == 40.0).mean())
    assert 0.03 < share < 0.2  # about 60 s of burst per 660 s


def test_a_bad_time_names_no_bound_since_time_has_none(tmp_path):
    path = write(tmp_path, "time_s,rps\n0,1\nsoon,2\n")
    with pytest.raises(ConfigError) as info:
        read_rate_file(path, service_s=1.0)
    assert str(info.value) == (f"{path}:3:1: time_s is not a finite number; fix or remove the row")


def test_missing_columns_name_the_required_ones_and_the_optional_one(tmp_path):
    path = write(tmp_path, "t,rps\n0,1\n")
    with pytest.raises(ConfigError) as info:
        read_rate_file(path, service_s=1.0)
    assert str(info.value) == (
        f"{path}:1: header lacks column(s) time_s; expected time_s,rps (optional: service_s)"
    )


@pytest.mark.parametrize("spec", ["/nonexistent.csv", "rates.csv", "data/rates", "r.CSV.gz"])
def test_a_missing_file_given_as_a_path_says_no_such_file(spec):
    with pytest.raises(ConfigError) as info:
        load_trace(spec)
    assert str(info.value) == (
        f"--trace {spec}: no such file: {spec}; check the path to the time_s,rps CSV"
    )
