"""PromQL binary operators between scalars and vectors, as Prometheus 2.42 evaluates them.

Vector matching follows ``engine.go``: a sample's match signature is the values
of the ``on`` labels, or of every label but ``__name__`` and the ``ignoring``
ones; one-to-one matching keeps only the ``on`` labels (drops the ``ignoring``
ones); ``group_left``/``group_right`` copy the listed labels from the "one"
side; arithmetic and ``bool`` comparisons drop the metric name, filters keep it.
"""

import math
import operator
from collections.abc import Callable

import promql_parser as pp

from gpuscale.alerts.evaluate_functions import Labels
from gpuscale.errors import GpuscaleError

Vector = list[tuple[Labels, float]]
NAME = "__name__"

_ARITH: dict[str, Callable[[float, float], float]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": lambda a, b: _divide(a, b),
    "%": lambda a, b: math.fmod(a, b) if b != 0 and not math.isinf(a) else math.nan,
    "^": lambda a, b: _power(a, b),
    "atan2": math.atan2,
}
_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    "<": operator.lt,
    ">=": operator.ge,
    "<=": operator.le,
}
SET_OPS = ("and", "or", "unless")


class QueryError(GpuscaleError):
    """An expression fails where Prometheus fails too (duplicate series in a match and the like)."""


def _divide(a: float, b: float) -> float:
    if b == 0:  # IEEE 754, as Go: x/0 is +-Inf, 0/0 is NaN
        if a == 0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _power(a: float, b: float) -> float:
    try:
        return math.pow(a, b)
    except (OverflowError, ValueError):
        return math.inf if a > 0 else math.nan


def _elem(op: str, lhs: float, rhs: float) -> tuple[float, bool]:
    if op in _ARITH:
        return _ARITH[op](lhs, rhs), True
    return lhs, _COMPARE[op](lhs, rhs)


def _drop_name(labels: Labels) -> Labels:
    return tuple(p for p in labels if p[0] != NAME)


def _signature(mod: pp.BinModifier | None) -> Callable[[Labels], Labels]:
    matching = None if mod is None else mod.matching
    if matching is not None and str(matching.type).endswith("Include"):
        on = set(matching.labels)
        return lambda lab: tuple(p for p in lab if p[0] in on)
    ignoring = {NAME, *(matching.labels if matching is not None else ())}
    return lambda lab: tuple(p for p in lab if p[0] not in ignoring)


def binary(node: pp.BinaryExpr, lhs: object, rhs: object) -> Vector | float:
    """``lhs <op> rhs`` for evaluated operands (scalars are floats, vectors lists).

    Returns:
        A float for two scalars, else a vector.

    Raises:
        QueryError: An operation Prometheus refuses (many-to-many matching and the like).
    """
    op = str(node.op)
    mod = node.modifier
    return_bool = bool(mod is not None and mod.return_bool)
    if isinstance(lhs, float) and isinstance(rhs, float):
        value, keep = _elem(op, lhs, rhs)
        return float(keep) if op in _COMPARE else value
    if isinstance(lhs, float) or isinstance(rhs, float):
        swap = isinstance(lhs, float)
        vec, scalar = (rhs, lhs) if swap else (lhs, rhs)
        return _vector_scalar(op, vec, float(scalar), swap, return_bool)  # type: ignore[arg-type]
    if op in SET_OPS:
        return _set_op(op, lhs, rhs, _signature(mod))  # type: ignore[arg-type]
    return _vector_vector(op, lhs, rhs, mod, return_bool)  # type: ignore[arg-type]


def _vector_scalar(op: str, vec: Vector, scalar: float, swap: bool, return_bool: bool) -> Vector:
    out: Vector = []
    drop = op in _ARITH or return_bool
    for lab, v in vec:
        lv, rv = (scalar, v) if swap else (v, scalar)
        value, keep = _elem(op, lv, rv)
        if op in _COMPARE and swap:
            value = rv
        if return_bool:
            value, keep = float(keep), True
        if keep:
            out.append((_drop_name(lab) if drop else lab, value))
    return out


def _set_op(op: str, lhs: Vector, rhs: Vector, sig: Callable[[Labels], Labels]) -> Vector:
    if op == "and":
        if not lhs or not rhs:
            return []
        right = {sig(lab) for lab, _ in rhs}
        return [s for s in lhs if sig(s[0]) in right]
    if op == "or":
        if not lhs or not rhs:
            return lhs + rhs
        left = {sig(lab) for lab, _ in lhs}
        return lhs + [s for s in rhs if sig(s[0]) not in left]
    if not lhs or not rhs:
        return list(lhs)
    right = {sig(lab) for lab, _ in rhs}
    return [s for s in lhs if sig(s[0]) not in right]


def _vector_vector(
    op: str, lhs: Vector, rhs: Vector, mod: pp.BinModifier | None, return_bool: bool
) -> Vector:
    if not lhs or not rhs:
        return []
    card = str(mod.card).rsplit(".", 1)[-1] if mod is not None else "OneToOne"
    if card == "ManyToMany":
        raise QueryError("many-to-many only allowed for set operators")
    sig = _signature(mod)
    one_to_many = card == "OneToMany"
    many, one = (rhs, lhs) if one_to_many else (lhs, rhs)
    right: dict[Labels, tuple[Labels, float]] = {}
    for lab, v in one:
        s = sig(lab)
        if s in right:
            raise QueryError(
                f"found duplicate series for the match group {dict(s)} on the "
                f"{'left' if one_to_many else 'right'} hand-side of the operation; "
                "many-to-many matching not allowed: matching labels must be unique on one side"
            )
        right[s] = (lab, v)
    matching = None if mod is None else mod.matching
    on = matching is not None and str(matching.type).endswith("Include")
    match_labels = set(matching.labels) if matching is not None else set()
    include = list(mod.group_labels or ()) if mod is not None else []
    matched: dict[Labels, set[Labels] | None] = {}
    out: Vector = []
    for lab, v in many:
        s = sig(lab)
        hit = right.get(s)
        if hit is None:
            continue
        olab, ov = hit
        vl, vr = (ov, v) if one_to_many else (v, ov)
        value, keep = _elem(op, vl, vr)
        if return_bool:
            value = float(keep)
        elif not keep:
            continue
        metric = _result_metric(lab, olab, op, card, on, match_labels, include)
        if return_bool:
            metric = _drop_name(metric)
        if card == "OneToOne":
            if s in matched:
                raise QueryError(
                    "multiple matches for labels: many-to-one matching must be explicit "
                    "(group_left/group_right)"
                )
            matched[s] = None
        else:
            seen = matched.setdefault(s, set())
            assert seen is not None  # noqa: S101 - many-to-one entries are always sets
            if metric in seen:
                raise QueryError(
                    "multiple matches for labels: grouping labels must ensure unique matches"
                )
            seen.add(metric)
        out.append((metric, value))
    return out


def _result_metric(
    lhs: Labels,
    rhs: Labels,
    op: str,
    card: str,
    on: bool,
    match_labels: set[str],
    include: list[str],
) -> Labels:
    labels = dict(lhs)
    if op in _ARITH:
        labels.pop(NAME, None)
    if card == "OneToOne":
        if on:
            labels = {k: v for k, v in labels.items() if k in match_labels}
        else:
            for k in match_labels:
                labels.pop(k, None)
    other = dict(rhs)
    for name in include:
        if other.get(name, ""):
            labels[name] = other[name]
        else:
            labels.pop(name, None)
    return tuple(sorted(labels.items()))
