"""Load profiles: values, determinism, trace files and the CLI spec parser."""

import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.errors import ConfigError
from gpuscale.telemetry.loads import (
    ConstantLoad,
    SineLoad,
    TraceLoad,
    constant,
    from_trace_file,
    parse_load_spec,
    sine,
)


def write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_constant_gives_the_level_to_every_gpu():
    assert constant(0.7)(123.0, 4).tolist() == [0.7] * 4


@pytest.mark.parametrize("level", [-0.1, 1.5, math.nan])
def test_constant_outside_zero_to_one_is_a_config_error(level):
    with pytest.raises(ConfigError, match=r"0\.\.1"):
        constant(level)


def test_sine_swings_around_its_mean_with_a_phase_per_gpu():
    profile = sine(mean=0.5, amplitude=0.3, period_s=100.0, seed=1)
    samples = np.array([profile(t, 3) for t in np.arange(0.0, 100.0, 0.5)])
    np.testing.assert_allclose(samples.mean(axis=0), 0.5, atol=0.01)
    np.testing.assert_allclose(samples.max(axis=0), 0.8, atol=0.01)
    np.testing.assert_allclose(samples.min(axis=0), 0.2, atol=0.01)
    at_zero = profile(0.0, 3)
    assert len(set(at_zero.tolist())) == 3  # different phases
    np.testing.assert_allclose(profile(100.0, 3), at_zero)  # periodic


def test_sine_phases_follow_the_seed():
    a, b, c = sine(seed=4)(10.0, 5), sine(seed=4)(10.0, 5), sine(seed=5)(10.0, 5)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"mean": 1.2}, "mean"), ({"amplitude": -0.1}, "amplitude"), ({"period_s": 0.0}, "period")],
)
def test_sine_rejects_bad_parameters(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        sine(**kwargs)


@settings(max_examples=60, deadline=None)
@given(
    mean=st.floats(0.0, 1.0),
    amplitude=st.floats(0.0, 5.0),
    period_s=st.floats(0.01, 1e6),
    seed=st.integers(0, 2**32 - 1),
    t=st.floats(0.0, 1e7),
    n=st.integers(1, 64),
)
def test_sine_load_always_within_zero_and_one(mean, amplitude, period_s, seed, t, n):
    values = sine(mean, amplitude, period_s, seed)(t, n)
    assert values.shape == (n,)
    assert np.all((values >= 0.0) & (values <= 1.0))


def test_trace_is_held_between_rows_and_loops(tmp_path):
    path = write(tmp_path, "time_s,load\n0,0.1\n10,0.5\n30,0.9\n")
    profile = from_trace_file(path)
    expected = {
        0.0: 0.1,
        9.9: 0.1,
        10.0: 0.5,
        29.0: 0.5,
        30.0: 0.9,
        49.0: 0.9,
        50.0: 0.1,
        61.0: 0.5,
    }
    for t, load in expected.items():  # the last row lasts 20 s, like the gap before it
        assert profile(t, 2).tolist() == [load, load], t


def test_trace_in_percent_is_scaled_to_shares(tmp_path):
    path = write(tmp_path, "# utilisation from a real host\ntime_s,load\n0,25\n5,100\n\n10,0\n")
    profile = from_trace_file(path)
    assert [profile(t, 1)[0] for t in (0.0, 5.0, 10.0)] == [0.25, 1.0, 0.0]


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("time,util\n0,1\n", 1, "header"),
        ("time_s,load\n0,0.5\nten,0.5\n", 3, "not numeric"),
        ("time_s,load\n0,0.5\n5\n", 3, "2 columns"),
        ("time_s,load\n0,0.5\n5,0.2\n5,0.3\n", 4, "does not increase"),
        ("time_s,load\n-1,0.5\n", 2, ">= 0"),
        ("time_s,load\n0,0.5\n5,140\n", 3, "outside 0..1"),
        ("time_s,load\n", 1, "no data rows"),
    ],
)
def test_malformed_trace_names_file_line_and_fix(tmp_path, text, line, fragment):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        from_trace_file(path)
    message = str(err.value)
    assert message.startswith(f"{path}:{line}: ")
    assert fragment in message
    assert "\n" not in message


def test_missing_trace_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read load trace"):
        from_trace_file(tmp_path / "nope.csv")


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(st.floats(0.0, 100.0), min_size=1, max_size=20),
    t=st.floats(0.0, 1e6),
)
def test_trace_load_always_within_zero_and_one(tmp_path_factory, rows, t):
    body = "".join(f"{i * 7},{v!r}\n" for i, v in enumerate(rows))
    path = write(tmp_path_factory.mktemp("trace"), "time_s,load\n" + body)
    values = from_trace_file(path)(t, 3)
    assert np.all((values >= 0.0) & (values <= 1.0))


def test_parse_load_spec_builds_each_kind(tmp_path):
    path = write(tmp_path, "time_s,load\n0,0.3\n")
    assert parse_load_spec("constant:0.7", seed=0) == ConstantLoad(0.7)
    assert parse_load_spec("sine", seed=3) == SineLoad(0.5, 0.4, 300.0, 3)
    assert parse_load_spec("sine:0.6", seed=3) == SineLoad(0.6, 0.4, 300.0, 3)
    assert parse_load_spec("sine:0.5:0.2:60", seed=1) == SineLoad(0.5, 0.2, 60.0, 1)
    trace = parse_load_spec(f"trace:{path}", seed=0)
    assert isinstance(trace, TraceLoad)
    assert trace(0.0, 2).tolist() == [0.3, 0.3]


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "constant",
        "constant:",
        "constant:2",
        "constant:0.1:0.2",
        "sine:x",
        "sine:0.5:0.1:10:1",
        "sine:0.5:0.1:0",
        "random:0.5",
        "trace:",
    ],
)
def test_bad_load_spec_names_the_spec_and_the_accepted_forms(spec):
    with pytest.raises(ConfigError) as err:
        parse_load_spec(spec, seed=0)
    message = str(err.value)
    assert f"load spec {spec!r}" in message
    assert "constant:LEVEL" in message
    assert "trace:PATH" in message


def test_trace_spec_errors_point_at_the_file_line(tmp_path):
    path = write(tmp_path, "time_s,load\n0,abc\n")
    with pytest.raises(ConfigError, match=f"^{re.escape(str(path))}:2: "):
        parse_load_spec(f"trace:{path}", seed=0)
