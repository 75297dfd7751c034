"""Compile a ``Signal`` to PromQL, the one place its query text is written.

A Signal is written once and read from either the in-process store or a
Prometheus-compatible server (Prometheus, VictoriaMetrics, Thanos, Mimir), so
the PromQL here must mean exactly what the store computes: the latest sample
(or ``avg_over_time`` over the window) of every series with the given label
values, then one aggregation over series, grouped ``by`` the given labels.

Names are checked against Prometheus' grammar rather than quoted, because a name
that is not valid there is a mistake in the Signal, not something to escape.
Label values are arbitrary strings and are escaped as PromQL double-quoted
strings (Go string-literal rules).
"""

import math
import re

from gpuscale.metrics.rawquery import newest_expr
from gpuscale.metrics.signal import Signal

METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
"""Prometheus' metric name grammar (data model docs)."""

LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
"""Prometheus' label name grammar (data model docs)."""

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def quote(value: str) -> str:
    """A PromQL double-quoted string literal holding exactly ``value``.

    Backslash, double quote and control characters are escaped, since PromQL
    strings follow Go's escape rules and may not hold a raw newline.

    Returns:
        The literal, quotes included.
    """
    out = []
    for ch in value:
        esc = _ESCAPES.get(ch)
        if esc is not None:
            out.append(esc)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _check_name(kind: str, name: str, grammar: re.Pattern[str]) -> None:
    if not grammar.fullmatch(name) or (kind == "label" and name.startswith("__")):
        raise ValueError(f"{kind} name {name!r} is not valid in PromQL ({grammar.pattern})")


def duration(seconds: float) -> str:
    """A PromQL duration for ``seconds``: whole seconds, else milliseconds.

    Returns:
        E.g. ``60s`` or ``1500ms``.

    Raises:
        ValueError: Not positive, not finite, or below Prometheus' 1 ms resolution.
    """
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"window must be a positive number of seconds, got {seconds}")
    ms = round(seconds * 1000)
    if ms < 1:
        raise ValueError(f"window {seconds} s is below PromQL's 1 ms resolution")
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def selector(signal: Signal) -> str:
    """The series selector of a signal: its metric and label equality matchers.

    Returns:
        E.g. ``DCGM_FI_DEV_GPU_UTIL{namespace="a",pod="b"}`` (matchers sorted by name).

    Raises:
        ValueError: The metric or a label name is not valid PromQL.
    """
    _check_name("metric", signal.metric, METRIC_NAME)
    parts = []
    for name in sorted(signal.matchers):
        _check_name("label", name, LABEL_NAME)
        parts.append(f"{name}={quote(signal.matchers[name])}")
    return f"{signal.metric}{{{','.join(parts)}}}" if parts else signal.metric


def compile_signal(signal: Signal) -> str:
    """The PromQL expression that evaluates ``signal`` as the in-process store does.

    Returns:
        E.g. ``sum by (pod) (avg_over_time(M{a="b"}[60s]))``; a bare selector for
        ``aggregation="none"`` without a window; a raw query as it was given.

    Raises:
        ValueError: An invalid metric or label name, or a bad window.
    """
    if signal.query:
        return signal.query
    expr = selector(signal)
    if signal.window > 0:
        expr = f"avg_over_time({expr}[{duration(signal.window)}])"
    elif signal.window < 0 or math.isnan(signal.window):
        raise ValueError(f"window must be >= 0 seconds, got {signal.window}")
    if signal.aggregation == "none":
        return expr
    if signal.aggregation not in ("sum", "avg", "max", "min", "count"):
        raise ValueError(f"unknown aggregation {signal.aggregation!r}")
    for name in signal.by:
        _check_name("label", name, LABEL_NAME)
    by = f" by ({', '.join(signal.by)})" if signal.by else ""
    return f"{signal.aggregation}{by} ({expr})"


def newest_query(signal: Signal) -> str:
    """PromQL for the time of the newest raw sample among a signal's series.

    Returns:
        ``max(timestamp(<selector>))``: seconds, or no result when no series has a
        sample within the server's lookback. For a raw query, the same over every
        selector it names (``rawquery.newest_expr``); ``""`` when it names none.
    """
    if signal.query:
        return newest_expr(signal.query)
    return f"max(timestamp({selector(signal)}))"


def newest_by_query(signal: Signal, label: str) -> str:
    """PromQL for the time of the newest raw sample of a signal's series, per ``label``.

    Returns:
        ``max by (label) (timestamp(<selector>))``; for a raw query, over every selector
        it names (``""`` when it names none).

    Raises:
        ValueError: ``label`` is not a valid label name.
    """
    _check_name("label", label, LABEL_NAME)
    if signal.query:
        return newest_expr(signal.query, label)
    return f"max by ({label}) (timestamp({selector(signal)}))"
