"""PromQL instant queries evaluated in process, with Prometheus 2.42's semantics.

The simulator and ``gpuscale up`` run the alert catalogue without a Prometheus,
so the catalogue's expressions are evaluated here, over the raw samples of the
in-process store. The parser is GreptimeTeam's (``promql-parser``); this module
walks its syntax tree and reproduces Prometheus's evaluator for the constructs
the catalogue uses: instant selectors with the 5-minute lookback and staleness,
range selectors over ``[t - range, t]`` (closed, as in 2.x), ``offset``,
aggregations with ``by``/``without``, binary operators with ``on``/``ignoring``
and ``group_left``/``group_right``, comparison filters and ``bool``, and the
set operators. Anything else is refused with ``UnsupportedQuery`` naming the
construct, so a result is never silently wrong. Times are integer milliseconds,
as in Prometheus.
"""

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt
import promql_parser as pp

from gpuscale.alerts.evaluate_binary import QueryError, binary
from gpuscale.alerts.evaluate_functions import AGGREGATIONS, RANGE_FUNCTIONS, aggregate
from gpuscale.errors import GpuscaleError

Labels = tuple[tuple[str, str], ...]
"""A label set, sorted by name, without empty values (``__name__`` included when kept)."""
Vector = list[tuple[Labels, float]]
Matrix = list[tuple[Labels, npt.NDArray[np.int64], npt.NDArray[np.float64]]]
Value = Vector | Matrix | float | str

LOOKBACK_MS = 300_000
"""Prometheus's default ``--query.lookback-delta``: 5 minutes."""
NAME = "__name__"


class UnsupportedQuery(GpuscaleError):  # noqa: N818 (reads as what happened, like MetricsUnavailable)
    """An expression uses a construct this evaluator does not implement."""


class SampleSource(Protocol):
    """Raw samples by family: what a PromQL selector reads (``MetricStore.samples``)."""

    def samples(
        self, metric: str, start: float, end: float
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], Sequence[Mapping[str, str]]]:
        """Rows of ``metric`` with ``start <= time <= end``: times, values (NaN: absent), labels."""
        ...


class RemoteSelectors(Protocol):
    """Selectors answered elsewhere (a real Prometheus: ``evaluate_remote``)."""

    def instant(self, text: str, ts_ms: int) -> Vector:
        """An instant selector's samples at ``ts_ms``, sorted by labels."""
        ...

    def range(self, text: str, ts_ms: int) -> Matrix:
        """A range selector's raw samples at ``ts_ms``, sorted by labels."""
        ...


def _ms(delta: object) -> int:
    """A parser duration (``timedelta`` or None) in milliseconds."""
    if delta is None:
        return 0
    seconds: float = delta.total_seconds()  # type: ignore[attr-defined]
    return round(seconds * 1000)


def without_name(labels: Labels) -> Labels:
    """``labels`` without ``__name__``."""
    return tuple(p for p in labels if p[0] != NAME)


@dataclass(slots=True)
class _Columns:
    labels: Sequence[Mapping[str, str]]
    seen: int
    columns: list[int]
    sets: list[Labels]


def _matcher(m: pp.Matcher) -> Callable[[str], bool]:
    op, value = str(m.op).rsplit(".", 1)[-1], m.value
    if op == "Equal":
        return lambda v: v == value
    if op == "NotEqual":
        return lambda v: v != value
    pattern = re.compile(f"(?:{value})", re.DOTALL)
    if op == "Re":
        return lambda v: pattern.fullmatch(v) is not None
    if op == "NotRe":
        return lambda v: pattern.fullmatch(v) is None
    raise UnsupportedQuery(f"label matcher {m}")


class Engine:
    """Evaluates parsed expressions at one time over a ``SampleSource``.

    Args:
        source: Where selectors read samples.
        lookback_ms: How far back an instant selector looks for a sample.
        remote: Where selectors of metrics not in ``local`` are answered instead, if set.
        local: Metric names always read from ``source`` (the rules' own records).
    """

    def __init__(
        self,
        source: SampleSource,
        lookback_ms: int = LOOKBACK_MS,
        remote: RemoteSelectors | None = None,
        local: frozenset[str] = frozenset(),
    ) -> None:
        self.source = source
        self.lookback_ms = lookback_ms
        self.remote, self.local = remote, local
        self._columns: dict[tuple[str, str], _Columns] = {}

    def _is_remote(self, node: pp.VectorSelector) -> bool:
        if self.remote is None:
            return False
        name = node.name or next((m.value for m in node.matchers.matchers if m.name == NAME), "")
        return name not in self.local

    # ------------------------------------------------------------- selectors
    def _select(
        self, node: pp.VectorSelector, start_ms: int, end_ms: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], list[int], list[Labels]]:
        name = node.name
        tests: list[tuple[str, Callable[[str], bool]]] = []
        for m in node.matchers.matchers:
            if m.name == NAME:
                if name is None and str(m.op).endswith(".Equal"):
                    name = m.value
                    continue
                raise UnsupportedQuery(f"a selector by metric-name pattern ({node})")
            tests.append((m.name, _matcher(m)))
        if node.matchers.or_matchers:
            raise UnsupportedQuery(f"'or' inside a selector ({node})")
        if node.at is not None:
            raise UnsupportedQuery(f"the @ modifier ({node})")
        if name is None:
            raise UnsupportedQuery(f"a selector without a metric name ({node})")
        # One millisecond of slack each side; the exact bounds are applied on the ms grid.
        times, values, sets = self.source.samples(
            name, (start_ms - 1) / 1000.0, (end_ms + 1) / 1000.0
        )
        t_ms = np.rint(np.asarray(times) * 1000.0).astype(np.int64)
        keep = (t_ms >= start_ms) & (t_ms <= end_ms)
        t_ms, values = t_ms[keep], values[keep]
        key = (name, str(node.matchers.matchers))
        cached = self._columns.get(key)
        if cached is None or cached.labels is not sets or cached.seen > len(sets):
            cached = self._columns[key] = _Columns(sets, 0, [], [])
        for col in range(cached.seen, len(sets)):
            lab = sets[col]
            if all(test(lab.get(k, "")) for k, test in tests):
                cached.columns.append(col)
                pairs = [(k, v) for k, v in lab.items() if v != ""]
                cached.sets.append(tuple(sorted([*pairs, (NAME, name)])))
        cached.seen = len(sets)
        return t_ms, values, cached.columns, cached.sets

    def _instant(self, node: pp.VectorSelector, ts: int) -> Vector:
        if self.remote is not None and self._is_remote(node):
            return self.remote.instant(str(node), ts)
        ref = ts - _ms(node.offset)
        t_ms, values, columns, sets = self._select(node, ref - self.lookback_ms, ref)
        if t_ms.size == 0 or not columns:
            return []
        # A family's rows are its scrapes: a series without a value in the newest row was
        # missing from that scrape, which Prometheus marks stale.
        row = values[-1]
        out = [(lab, float(row[c])) for c, lab in zip(columns, sets, strict=True)]
        return sorted((lab, v) for lab, v in out if not math.isnan(v))

    def _range(self, node: pp.MatrixSelector, ts: int) -> Matrix:
        vs = node.vector_selector
        if self.remote is not None and self._is_remote(vs):
            return self.remote.range(str(node), ts)
        end = ts - _ms(vs.offset)
        t_ms, values, columns, sets = self._select(vs, end - _ms(node.range), end)
        out: Matrix = []
        for c, lab in sorted(zip(columns, sets, strict=True), key=lambda p: p[1]):
            col = values[:, c]
            present = ~np.isnan(col)
            if present.any():
                out.append((lab, t_ms[present], np.asarray(col[present], dtype=np.float64)))
        return out

    # ------------------------------------------------------------- evaluation
    def evaluate(self, node: pp.Expr, ts: int) -> Value:
        """The value of ``node`` at ``ts`` (milliseconds).

        Returns:
            A vector (sorted label sets and values), a matrix, a scalar or a string.

        Raises:
            UnsupportedQuery: The expression uses a construct not implemented here.
            QueryError: Prometheus would fail on it too.
        """
        if isinstance(node, pp.NumberLiteral):
            return float(node.val)
        if isinstance(node, pp.StringLiteral):
            return str(node.val)
        if isinstance(node, pp.ParenExpr):
            return self.evaluate(node.expr, ts)
        if isinstance(node, pp.VectorSelector):
            return self._instant(node, ts)
        if isinstance(node, pp.MatrixSelector):
            return self._range(node, ts)
        if isinstance(node, pp.UnaryExpr):
            inner = self.evaluate(node.expr, ts)
            if isinstance(inner, float):
                return -inner
            return [(without_name(lab), -v) for lab, v in _vector(inner)]
        if isinstance(node, pp.Call):
            return self._call(node, ts)
        if isinstance(node, pp.AggregateExpr):
            return self._aggregate(node, ts)
        if isinstance(node, pp.BinaryExpr):
            return binary(node, self.evaluate(node.lhs, ts), self.evaluate(node.rhs, ts))
        raise UnsupportedQuery(f"{type(node).__name__} ({node})")

    def _call(self, node: pp.Call, ts: int) -> Value:
        name = node.func.name
        args = node.args
        if name in RANGE_FUNCTIONS:
            ms = args[0]
            if not isinstance(ms, pp.MatrixSelector):
                raise UnsupportedQuery(f"{name}() over a subquery ({node})")
            end = ts - _ms(ms.vector_selector.offset)
            window = (end - _ms(ms.range), end, _ms(ms.range))
            fn = RANGE_FUNCTIONS[name]
            out: Vector = []
            for lab, t_ms, vals in self._range(ms, ts):
                value = fn(t_ms, vals, window)
                if value is not None:
                    out.append((lab if name == "last_over_time" else without_name(lab), value))
            return _unique(out, name)
        if name == "label_replace":
            vec = _vector(self.evaluate(args[0], ts))
            dst, repl, src, regex = (str(self.evaluate(a, ts)) for a in args[1:5])
            return _unique(label_replace(vec, dst, repl, src, regex), name)
        if name == "time":
            return ts / 1000.0
        if name == "vector":
            empty: Labels = ()
            return [(empty, _scalar(self.evaluate(args[0], ts), node))]
        if name == "scalar":
            vec = _vector(self.evaluate(args[0], ts))
            return vec[0][1] if len(vec) == 1 else math.nan
        if name == "absent":
            return self._absent(node, ts)
        if name in ("abs", "ceil", "floor", "exp", "sqrt", "ln", "log2", "log10"):
            fn1: Callable[[float], float] = (
                abs if name == "abs" else getattr(math, "log" if name == "ln" else name)
            )
            vec = _vector(self.evaluate(args[0], ts))
            return _unique([(without_name(lab), _safe(fn1, v)) for lab, v in vec], name)
        if name in ("clamp_min", "clamp_max"):
            vec = _vector(self.evaluate(args[0], ts))
            bound = _scalar(self.evaluate(args[1], ts), node)
            pick = max if name == "clamp_min" else min
            return _unique([(without_name(lab), pick(v, bound)) for lab, v in vec], name)
        raise UnsupportedQuery(f"function {name}()")

    def _absent(self, node: pp.Call, ts: int) -> Vector:
        if _vector(self.evaluate(node.args[0], ts)):
            return []
        arg = node.args[0]
        labels: dict[str, str] = {}
        if isinstance(arg, pp.VectorSelector):
            # Prometheus keeps the equality matchers' labels, except a label matched twice.
            seen: dict[str, int] = {}
            for m in arg.matchers.matchers:
                seen[m.name] = seen.get(m.name, 0) + 1
                if str(m.op).endswith(".Equal") and m.name != NAME:
                    labels[m.name] = m.value
            labels = {k: v for k, v in labels.items() if seen[k] == 1}
        return [(tuple(sorted(labels.items())), 1.0)]

    def _aggregate(self, node: pp.AggregateExpr, ts: int) -> Vector:
        op = str(node.op)
        if op not in AGGREGATIONS:
            raise UnsupportedQuery(f"aggregation {op}")
        param = None if node.param is None else self.evaluate(node.param, ts)
        vec = _vector(self.evaluate(node.expr, ts))
        mod = node.modifier
        without = mod is not None and str(mod.type).endswith("Without")
        grouping = sorted(mod.labels) if mod is not None else []
        return aggregate(op, vec, grouping, without, param)


def _safe(fn: Callable[[float], float], v: float) -> float:
    try:
        return fn(v)
    except (ValueError, OverflowError):
        return math.nan


def _vector(value: Value) -> Vector:
    if not isinstance(value, list) or (value and len(value[0]) != 2):
        raise QueryError(f"expected an instant vector, got {type(value).__name__}")
    return value  # type: ignore[return-value]


def _scalar(value: Value, node: object) -> float:
    if not isinstance(value, float):
        raise QueryError(f"expected a scalar in {node}")
    return value


def _unique(vec: Vector, where: str) -> Vector:
    if len({lab for lab, _ in vec}) != len(vec):
        raise QueryError(f"{where}: vector cannot contain metrics with the same labelset")
    return vec


def label_replace(vec: Vector, dst: str, repl: str, src: str, regex: str) -> Vector:
    """Prometheus's ``label_replace``: on a full match of ``src``, set ``dst`` to the expansion.

    Returns:
        The vector with ``dst`` replaced where ``regex`` matched (deleted when it expands empty).
    """
    pattern = re.compile(f"(?:{regex})", re.DOTALL)
    # Go's $1 / ${1} expansion; a name that is not a group expands to nothing.
    template = re.sub(r"\$(\d+|\{\w+\})", lambda m: "\\g<" + m.group(1).strip("{}") + ">", repl)
    out: Vector = []
    for lab, v in vec:
        labels = dict(lab)
        match = pattern.fullmatch(labels.get(src, ""))
        if match is not None:
            try:
                res = match.expand(template)
            except (IndexError, re.error):
                res = ""
            labels.pop(dst, None)
            if res:
                labels[dst] = res
        out.append((tuple(sorted(labels.items())), v))
    return out


VECTOR_FUNCTIONS = frozenset(
    {"label_replace", "time", "vector", "scalar", "absent", "abs", "ceil", "floor", "exp"}
    | {"sqrt", "ln", "log2", "log10", "clamp_min", "clamp_max"}
)
BINARY_OPS = frozenset({"+", "-", "*", "/", "%", "^", "atan2", "==", "!=", ">", "<", ">=", "<="})


def check_supported(node: pp.Expr) -> None:
    """Walk ``node`` and refuse any construct ``Engine`` does not implement.

    Raises:
        UnsupportedQuery: Naming the first such construct.
    """
    if isinstance(node, pp.NumberLiteral | pp.StringLiteral):
        return
    if isinstance(node, pp.ParenExpr | pp.UnaryExpr):
        check_supported(node.expr)
    elif isinstance(node, pp.VectorSelector):
        names = [m for m in node.matchers.matchers if m.name == NAME]
        if node.at is not None:
            raise UnsupportedQuery(f"the @ modifier ({node})")
        if node.matchers.or_matchers:
            raise UnsupportedQuery(f"'or' inside a selector ({node})")
        if (node.name is None and not names) or any(
            not str(m.op).endswith(".Equal") for m in names
        ):
            raise UnsupportedQuery(f"a selector by metric-name pattern ({node})")
    elif isinstance(node, pp.MatrixSelector):
        check_supported(node.vector_selector)
    elif isinstance(node, pp.Call):
        name = node.func.name
        if name not in RANGE_FUNCTIONS and name not in VECTOR_FUNCTIONS:
            raise UnsupportedQuery(f"function {name}()")
        if name in RANGE_FUNCTIONS and not isinstance(node.args[0], pp.MatrixSelector):
            raise UnsupportedQuery(f"{name}() over a subquery ({node})")
        for arg in node.args:
            check_supported(arg)
    elif isinstance(node, pp.AggregateExpr):
        if str(node.op) not in AGGREGATIONS:
            raise UnsupportedQuery(f"aggregation {node.op}")
        if node.param is not None:
            check_supported(node.param)
        check_supported(node.expr)
    elif isinstance(node, pp.BinaryExpr):
        op = str(node.op)
        if op not in BINARY_OPS and op not in ("and", "or", "unless"):
            raise UnsupportedQuery(f"operator {op}")
        check_supported(node.lhs)
        check_supported(node.rhs)
    else:
        raise UnsupportedQuery(f"{type(node).__name__} ({node})")
