"""Signal -> PromQL: the table of shapes, and label values that survive any string."""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuscale.metrics.promql import compile_signal, duration, newest_query, quote, selector
from gpuscale.metrics.signal import Signal


@pytest.mark.parametrize(
    ("signal", "promql"),
    [
        (Signal("up"), "up"),
        (Signal("m", {"b": "2", "a": "1"}), 'm{a="1",b="2"}'),
        (Signal("m", aggregation="sum"), "sum (m)"),
        (Signal("m", aggregation="avg", by=("pod",)), "avg by (pod) (m)"),
        (
            Signal("M", {"a": "b"}, "sum", ("pod",), 60.0),
            'sum by (pod) (avg_over_time(M{a="b"}[60s]))',
        ),
        (Signal("m", window=1.5), "avg_over_time(m[1500ms])"),
        (Signal("m", aggregation="count", by=("node", "gpu")), "count by (node, gpu) (m)"),
        (Signal("ns:m:rate5m", aggregation="max"), "max (ns:m:rate5m)"),
        # ``by`` means nothing without an aggregation, as in the store
        (Signal("m", by=("pod",)), "m"),
    ],
)
def test_compiles_each_shape(signal, promql):
    assert compile_signal(signal) == promql


@pytest.mark.parametrize(
    ("value", "literal"),
    [
        ("plain", '"plain"'),
        ('say "hi"', r'"say \"hi\""'),
        ("C:\\dir", r'"C:\\dir"'),
        ("a\nb\tc", r'"a\nb\tc"'),
        ("\x01", r'"\x01"'),
        ("ünï", '"ünï"'),
    ],
)
def test_quotes_label_values_by_go_string_rules(value, literal):
    assert quote(value) == literal


def _unquote(literal: str) -> str:
    """Go's double-quoted string decoding for the escapes ``quote`` writes."""
    assert literal[0] == literal[-1] == '"'
    simple = {"\\": "\\", '"': '"', "n": "\n", "r": "\r", "t": "\t"}
    out, i, body = [], 0, literal[1:-1]
    while i < len(body):
        if body[i] == "\\":
            if body[i + 1] == "x":
                out.append(chr(int(body[i + 2 : i + 4], 16)))
                i += 4
            else:
                out.append(simple[body[i + 1]])
                i += 2
        else:
            assert body[i] != '"', "an unescaped quote would end the string"
            assert body[i] >= " ", "a raw control character is not allowed"
            out.append(body[i])
            i += 1
    return "".join(out)


@given(st.text())
def test_any_label_value_round_trips(value):
    assert _unquote(quote(value)) == value


@given(st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), st.text()))
def test_selector_has_one_matcher_per_label_in_name_order(matchers):
    sel = selector(Signal("m", matchers))
    if not matchers:
        assert sel == "m"
        return
    body = sel[2:-1]
    found = re.findall(r'([a-z][a-z0-9_]*)=("(?:[^"\\]|\\.)*")(?:,|$)', body)
    assert [name for name, _ in found] == sorted(matchers)
    assert {name: _unquote(lit) for name, lit in found} == dict(matchers)


@pytest.mark.parametrize(
    "signal",
    [
        Signal("bad-name"),
        Signal("0m"),
        Signal("m", {"bad-label": "x"}),
        Signal("m", {"__name__": "x"}),
        Signal("m", aggregation="sum", by=("a b",)),
        Signal("m", window=-1.0),
        Signal("m", window=0.0001),
        Signal("m", window=float("inf")),
        Signal("m", aggregation="median"),  # type: ignore[arg-type]
    ],
)
def test_rejects_what_promql_cannot_say(signal):
    with pytest.raises(ValueError, match=r"name|window|aggregation|resolution"):
        compile_signal(signal)


def test_durations_are_whole_seconds_or_milliseconds():
    assert [duration(s) for s in (60, 0.25, 90.5, 3600)] == ["60s", "250ms", "90500ms", "3600s"]


def test_newest_ignores_window_and_aggregation():
    sig = Signal("m", {"pod": "a"}, "sum", ("pod",), 60.0)
    assert newest_query(sig) == 'max(timestamp(m{pod="a"}))'
