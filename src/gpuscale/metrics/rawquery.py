"""A raw PromQL signal (``Signal.query``): the series it reads, and what the in-process store runs.

Prometheus runs a raw query as written (``promql.compile_signal``). Two questions
about it are ours to answer, both from its syntax tree (GreptimeTeam's
``promql-parser``):

* **How fresh is it?** A computed expression's result carries the evaluation
  time, not its data's, so the result cannot say. A raw query is judged like a
  signal built from parts: by the newest raw sample among the series its
  selectors match, ``max(timestamp(selector))`` over every selector it names
  (offsets kept). A query that names no selector (``vector(1)``) is never stale.
* **Can the in-process store run it?** The store evaluates a Signal built from
  parts. A raw query of that shape, a metric with ``=`` matchers, optionally
  ``avg_over_time`` over a range, optionally one ``sum``/``avg``/``max``/``min``/
  ``count`` ``by`` labels, is read as that Signal. Any other construct (``rate()``,
  ``histogram_quantile()``, a ``=~`` matcher, an operator) is refused, naming it,
  when the simulator is set up (``check_in_process``), never halfway through a run.
"""

import functools
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

import promql_parser as pp

from gpuscale.errors import config_error
from gpuscale.metrics.signal import Aggregation, Signal

_AGGREGATIONS: frozenset[str] = frozenset(("sum", "avg", "max", "min", "count"))
SELECTOR_LABEL = "gpuscale_selector"
"""Tags each selector's timestamps apart in a freshness query (``or`` would merge them)."""


class NotInProcess(ValueError):  # noqa: N818 - reads as what the query is
    """A raw query uses a construct the in-process store does not evaluate.

    Args:
        construct: The construct, as a user reads it (``rate()``, ``the =~ matcher``).
    """

    def __init__(self, construct: str) -> None:
        super().__init__(construct)
        self.construct = construct


@functools.lru_cache(maxsize=256)
def parse(query: str) -> Any:  # noqa: ANN401 - promql_parser's Expr
    """The syntax tree of a query.

    Returns:
        The parsed expression (cached per text).

    Raises:
        ValueError: The text is not PromQL; the parser's reason, on one line.
    """
    try:
        return pp.parse(query)
    except ValueError as exc:
        raise ValueError(f"not valid PromQL: {' '.join(str(exc).split())}") from None


def _children(node: Any) -> Iterator[Any]:  # noqa: ANN401 - a syntax tree node
    if isinstance(node, pp.ParenExpr | pp.UnaryExpr | pp.SubqueryExpr):
        yield node.expr
    elif isinstance(node, pp.BinaryExpr):
        yield from (node.lhs, node.rhs)
    elif isinstance(node, pp.AggregateExpr):
        yield node.expr
        if node.param is not None:
            yield node.param
    elif isinstance(node, pp.Call):
        yield from node.args
    elif isinstance(node, pp.MatrixSelector):
        yield node.vector_selector


def selectors(query: str) -> tuple[str, ...]:
    """The instant selectors a query reads (a range selector's too), each once, in order.

    Returns:
        Selector texts, offsets kept, e.g. ``('x_bucket{le!=""}',)``.

    Raises:
        ValueError: The text is not PromQL.
    """
    found: dict[str, None] = {}
    stack = [parse(query)]
    while stack:
        node = stack.pop()
        if isinstance(node, pp.VectorSelector):
            found[str(node)] = None
        stack.extend(reversed(list(_children(node))))
    return tuple(found)


def newest_expr(query: str, by: str | None = None) -> str:
    """PromQL for the newest raw sample among the series a raw query's selectors match.

    Args:
        query: The raw query.
        by: Keep this label apart (``max by (label)``); None for one result.

    Returns:
        The expression, or ``""`` when the query names no selector.
    """
    sels = selectors(query)
    if not sels:
        return ""
    if len(sels) == 1:
        inner = f"timestamp({sels[0]})"
    else:
        inner = " or ".join(
            f'label_replace(timestamp({s}), "{SELECTOR_LABEL}", "{i}", "", "")'
            for i, s in enumerate(sels)
        )
    return f"max by ({by}) ({inner})" if by else f"max({inner})"


def _op(matcher: Any) -> str:  # noqa: ANN401 - promql_parser's Matcher
    return {"Equal": "=", "NotEqual": "!=", "Re": "=~", "NotRe": "!~"}.get(
        str(matcher.op).rsplit(".", 1)[-1], str(matcher.op)
    )


def _construct(node: Any) -> str:  # noqa: ANN401 - a syntax tree node
    """How a refused node is named to the user."""
    if isinstance(node, pp.Call):
        return f"{node.func.name}()"
    if isinstance(node, pp.BinaryExpr):
        return f"the {node.op} operator"
    if isinstance(node, pp.AggregateExpr):
        return f"{node.op}()"
    if isinstance(node, pp.SubqueryExpr):
        return "a subquery"
    if isinstance(node, pp.NumberLiteral | pp.StringLiteral):
        return "a literal"
    if isinstance(node, pp.MatrixSelector):
        return "a range selector outside avg_over_time()"
    if isinstance(node, pp.UnaryExpr):
        return "a unary minus"
    return type(node).__name__


def _from_selector(node: Any, window: float) -> Signal:  # noqa: ANN401 - VectorSelector
    if node.offset is not None:
        raise NotInProcess("the offset modifier")
    if node.at is not None:
        raise NotInProcess("the @ modifier")
    if node.matchers.or_matchers:
        raise NotInProcess("'or' inside a selector")
    matchers: dict[str, str] = {}
    for m in node.matchers.matchers:
        if _op(m) != "=":
            raise NotInProcess(f"the {_op(m)} matcher ({m.name}{_op(m)}{m.value!r})")
        if m.name == "__name__" or m.name in matchers:
            raise NotInProcess(f"a second matcher on {m.name}")
        matchers[m.name] = m.value
    if node.name is None:
        raise NotInProcess("a selector without a metric name")
    return Signal(node.name, matchers, window=window)


def _from_node(node: Any) -> Signal:  # noqa: ANN401 - a syntax tree node
    while isinstance(node, pp.ParenExpr):
        node = node.expr
    if isinstance(node, pp.VectorSelector):
        return _from_selector(node, 0.0)
    if isinstance(node, pp.Call) and node.func.name == "avg_over_time":
        arg = node.args[0]
        if not isinstance(arg, pp.MatrixSelector):
            raise NotInProcess("avg_over_time() over a subquery")
        return _from_selector(arg.vector_selector, arg.range.total_seconds())
    if isinstance(node, pp.AggregateExpr) and str(node.op) in _AGGREGATIONS:
        mod = node.modifier
        if mod is not None and not str(mod.type).endswith("By"):
            raise NotInProcess(f"{node.op} without (...)")
        inner = _from_node(node.expr)
        if inner.aggregation != "none":
            raise NotInProcess(f"{node.op}() of an aggregation")
        agg: Aggregation = str(node.op)  # type: ignore[assignment] # checked above
        by = tuple(mod.labels) if mod is not None else ()
        return replace(inner, aggregation=agg, by=by)
    raise NotInProcess(_construct(node))


@functools.lru_cache(maxsize=256)
def _structured(query: str) -> Signal:
    return _from_node(parse(query))


def structured(signal: Signal) -> Signal:
    """The Signal from parts a raw query stands for; a signal from parts as it is.

    Returns:
        The equivalent Signal (``optional`` kept).

    Raises:
        NotInProcess: Naming the first construct that has no such equivalent.
        ValueError: The query is not PromQL.
    """
    if not isinstance(signal, Signal) or not signal.query:  # a look-alike has no query
        return signal
    return replace(_structured(signal.query), optional=signal.optional)


def check_in_process(signals: Mapping[str, Signal], where: str) -> None:
    """Refuse a raw query the in-process store cannot evaluate, naming the construct.

    Args:
        signals: The signals to be read from the store, by key.
        where: What reads them (the policy), for the message.

    Raises:
        ConfigError: One line: the signal, the construct and what to do.
    """
    for key, sig in signals.items():
        try:
            structured(sig)
        except NotInProcess as exc:
            raise config_error(
                f"{where} signal {key} (query {sig.query!r})",
                f"the in-process store cannot evaluate {exc.construct}",
                "read it from Prometheus, or write the signal from its parts (metric, "
                "matchers, aggregation, by, window)",
            ) from None
        except ValueError as exc:
            raise config_error(f"{where} signal {key}", str(exc), "fix the query") from None
