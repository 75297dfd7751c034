"""PromQL's range functions and aggregations, computed the way Prometheus 2.42 computes them.

Each function follows the arithmetic of ``promql/functions.go`` and ``engine.go``
step by step (the same sums in the same order, the same Kahan compensation), so
the in-process evaluator's values agree with a real Prometheus's to the last
few bits, not just approximately: a z-score of two nearly equal means would
otherwise amplify a rounding difference into a visible one.
"""

import math
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

Labels = tuple[tuple[str, str], ...]
Window = tuple[int, int, int]
"""A range selector's ``(start ms, end ms, range ms)``."""
RangeFunction = Callable[[npt.NDArray[np.int64], npt.NDArray[np.float64], Window], float | None]


def _extrapolated(
    t: npt.NDArray[np.int64], v: npt.NDArray[np.float64], w: Window, counter: bool, rate: bool
) -> float | None:
    """``extrapolatedRate``: the increase over the window, extrapolated to its edges."""
    n = len(v)
    if n < 2:
        return None
    vals: list[float] = v.tolist()
    result = vals[-1] - vals[0]
    if counter:
        prev = vals[0]
        for cur in vals[1:]:
            if cur < prev:
                result += prev
            prev = cur
    first_t, last_t = int(t[0]), int(t[-1])
    to_start = (first_t - w[0]) / 1000
    to_end = (w[1] - last_t) / 1000
    sampled = (last_t - first_t) / 1000
    average = sampled / (n - 1)
    if counter and result > 0 and vals[0] >= 0:
        to_zero = sampled * (vals[0] / result)
        to_start = min(to_start, to_zero)
    threshold = average * 1.1
    interval = sampled
    interval += to_start if to_start < threshold else average / 2
    interval += to_end if to_end < threshold else average / 2
    factor = interval / sampled
    if rate:
        factor /= w[2] / 1000
    return result * factor


def _instant_delta(
    t: npt.NDArray[np.int64], v: npt.NDArray[np.float64], rate: bool
) -> float | None:
    """``irate``/``idelta``: from the last two samples."""
    if len(v) < 2:
        return None
    last, prev = float(v[-1]), float(v[-2])
    result = last - prev if not (rate and last < prev) else last
    if not rate:
        return result
    interval = int(t[-1]) - int(t[-2])
    return None if interval == 0 else result / (interval / 1000)


def _kahan_inc(inc: float, total: float, c: float) -> tuple[float, float]:
    t = total + inc
    c += (total - t) + inc if abs(total) >= abs(inc) else (inc - t) + total
    return t, c


def _avg(values: list[float]) -> float:
    mean = c = count = 0.0
    for x in values:
        count += 1
        if math.isinf(mean):
            if math.isinf(x) and (mean > 0) == (x > 0):
                continue
            if not math.isinf(x) and not math.isnan(x):
                continue
        mean, c = _kahan_inc(x / count - mean / count, mean, c)
    return mean if math.isinf(mean) else mean + c


def _sum(values: list[float]) -> float:
    total = c = 0.0
    for x in values:
        total, c = _kahan_inc(x, total, c)
    return total if math.isinf(total) else total + c


def _stdvar(values: list[float]) -> float:
    count = mean = c_mean = aux = c_aux = 0.0
    for x in values:
        count += 1
        delta = x - (mean + c_mean)
        mean, c_mean = _kahan_inc(delta / count, mean, c_mean)
        aux, c_aux = _kahan_inc(delta * (x - (mean + c_mean)), aux, c_aux)
    return (aux + c_aux) / count


def _max(values: list[float]) -> float:
    out = values[0]
    for x in values[1:]:
        if x > out or math.isnan(out):
            out = x
    return out


def _min(values: list[float]) -> float:
    out = values[0]
    for x in values[1:]:
        if x < out or math.isnan(out):
            out = x
    return out


def _changes(values: list[float]) -> float:
    n, prev = 0, values[0]
    for cur in values[1:]:
        if cur != prev and not (math.isnan(cur) and math.isnan(prev)):
            n += 1
        prev = cur
    return float(n)


def _resets(values: list[float]) -> float:
    n, prev = 0, values[0]
    for cur in values[1:]:
        if cur < prev:
            n += 1
        prev = cur
    return float(n)


def _over_time(fn: Callable[[list[float]], float]) -> RangeFunction:
    def apply(t: npt.NDArray[np.int64], v: npt.NDArray[np.float64], w: Window) -> float:
        return fn(v.tolist())

    return apply


RANGE_FUNCTIONS: dict[str, RangeFunction] = {
    "rate": lambda t, v, w: _extrapolated(t, v, w, counter=True, rate=True),
    "increase": lambda t, v, w: _extrapolated(t, v, w, counter=True, rate=False),
    "delta": lambda t, v, w: _extrapolated(t, v, w, counter=False, rate=False),
    "irate": lambda t, v, w: _instant_delta(t, v, rate=True),
    "idelta": lambda t, v, w: _instant_delta(t, v, rate=False),
    "avg_over_time": _over_time(_avg),
    "sum_over_time": _over_time(_sum),
    "max_over_time": _over_time(_max),
    "min_over_time": _over_time(_min),
    "count_over_time": _over_time(lambda v: float(len(v))),
    "last_over_time": _over_time(lambda v: v[-1]),
    "present_over_time": _over_time(lambda v: 1.0),
    "stddev_over_time": _over_time(lambda v: math.sqrt(_stdvar(v))),
    "stdvar_over_time": _over_time(_stdvar),
    "changes": _over_time(_changes),
    "resets": _over_time(_resets),
}
"""Functions of one range vector argument, by name (PromQL's ``*_over_time`` and rates)."""

AGGREGATIONS = (
    *("sum", "avg", "max", "min", "count", "group", "stddev", "stdvar", "quantile"),
    "count_values",
)


def go_float_text(value: float) -> str:
    """``strconv.FormatFloat(value, 'f', -1, 64)``: the shortest exact decimal, never an exponent.

    Returns:
        The text Prometheus writes into ``count_values``' label (``119``, ``0.5``, ``+Inf``).
    """
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(np.format_float_positional(value, unique=True, trim="-"))


def quantile(q: float, values: Sequence[float]) -> float:
    """Prometheus's ``quantile``: linear interpolation between the closest ranks.

    Returns:
        The ``q``-quantile; NaN for no values or a NaN ``q``; -Inf/+Inf for q outside [0, 1].
    """
    if not values or math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    # Go's sort.Sort over Less(i, j) = v[i] < v[j] || isNaN(v[i]) puts NaNs first.
    ordered = sorted(values, key=lambda x: (not math.isnan(x), 0.0 if math.isnan(x) else x))
    n = float(len(ordered))
    rank = q * (n - 1)
    lower = max(0.0, math.floor(rank))
    upper = min(n - 1, lower + 1)
    weight = rank - math.floor(rank)
    return ordered[int(lower)] * (1 - weight) + ordered[int(upper)] * weight


def _group_labels(labels: Labels, grouping: Sequence[str], without: bool) -> Labels:
    if without:
        drop = {*grouping, "__name__"}
        return tuple(p for p in labels if p[0] not in drop)
    keep = set(grouping)
    return tuple(p for p in labels if p[0] in keep)


def aggregate(
    op: str,
    vec: list[tuple[Labels, float]],
    grouping: Sequence[str],
    without: bool,
    param: object = None,
) -> list[tuple[Labels, float]]:
    """An aggregation over ``vec`` grouped ``by`` (or ``without``) ``grouping``.

    Returns:
        One sample per group, in the order groups first appear (as Prometheus).

    Raises:
        ValueError: ``quantile`` without a scalar parameter, or ``count_values`` without a label.
    """
    if op == "count_values":
        # Each sample's value becomes the label ``param``, which joins the grouping.
        if not isinstance(param, str):
            raise ValueError("count_values needs a label name")
        vec = [(tuple(sorted({**dict(lab), param: go_float_text(v)}.items())), v) for lab, v in vec]
        grouping = grouping if without else (*grouping, param)
        op = "count"
    groups: dict[Labels, list[float]] = {}
    for lab, v in vec:
        groups.setdefault(_group_labels(lab, grouping, without), []).append(v)
    out = []
    for lab, vals in groups.items():
        value: float
        if op == "sum":
            value = vals[0]
            for x in vals[1:]:
                value += x
        elif op == "avg":
            mean = vals[0]
            for i, x in enumerate(vals[1:], 2):
                if math.isinf(mean) and (
                    (math.isinf(x) and (mean > 0) == (x > 0))
                    or (not math.isinf(x) and not math.isnan(x))
                ):
                    continue
                mean += x / i - mean / i
            value = mean
        elif op == "max":
            value = _max(vals)
        elif op == "min":
            value = _min(vals)
        elif op in ("count", "group"):
            value = float(len(vals)) if op == "count" else 1.0
        elif op in ("stddev", "stdvar"):
            count, mean, acc = 0.0, 0.0, 0.0
            for x in vals:
                count += 1
                delta = x - mean
                mean += delta / count
                acc += delta * (x - mean)
            value = acc / count if op == "stdvar" else math.sqrt(acc / count)
        else:  # quantile
            if not isinstance(param, float):
                raise ValueError("quantile needs a scalar parameter")
            value = quantile(param, vals)
        out.append((lab, value))
    return out
