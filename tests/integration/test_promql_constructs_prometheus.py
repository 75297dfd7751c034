"""Every PromQL construct the in-process evaluator implements, against Prometheus's own engine.

The catalogue's differential test covers what the catalogue uses; this one asks
each supported function, aggregation and operator (including those the
catalogue does not use today) over a small history with counter resets, a
series that appears late and goes stale, negative values and a division by
zero, at several times, of the evaluator and of promtool (Prometheus 2.42's
query engine), and wants the same samples or the same failure.
"""

import math

import numpy as np
import promql_parser as pp
import pytest

from gpuscale.alerts.evaluate_binary import QueryError
from gpuscale.alerts.evaluate_promql import Engine, check_supported
from gpuscale.metrics.store import MetricStore
from tests.support import promtool
from tests.support.promtool import promtool_values, series_text

pytestmark = pytest.mark.integration

STEP_S = 15.0
STEPS = 41  # ten minutes
TIMES = (0.0, 45.0, 150.0, 300.0, 465.0, 600.0)
REL = 1e-9

EXPRS = (
    # range functions
    "rate(c[1m])",
    "increase(c[2m])",
    "delta(g[1m])",
    "irate(c[1m])",
    "idelta(g[1m])",
    "resets(c[5m])",
    "changes(g[5m])",
    "avg_over_time(g[2m])",
    "sum_over_time(g[2m])",
    "min_over_time(g[2m])",
    "max_over_time(g[1m] offset 1m)",
    "count_over_time(c[5m])",
    "last_over_time(c[1m])",
    "present_over_time(g[1m])",
    "stddev_over_time(g[2m])",
    "stdvar_over_time(g[2m])",
    # aggregations
    "sum(g)",
    "sum by (host) (g)",
    "avg without (gpu) (g)",
    "max by (host) (g)",
    "min(g)",
    "count by (host) (g)",
    "group by (host) (g)",
    "stddev(g)",
    "stdvar by (host) (g)",
    "quantile(0.25, g)",
    "quantile by (host) (0.9, g)",
    'count_values("v", round_g)',
    'count_values by (host) ("v", round_g)',
    'count_values without () ("v", round_g)',
    'count_values without (gpu) ("v", g)',
    # operators
    "g + g",
    "g - on (gpu, host) g",
    "g * 2",
    "2 - g",
    "g / 0",
    "g % 3",
    "g ^ 2",
    "-g",
    "g > 0",
    "0 < g",
    "g > bool 0",
    "g == bool g",
    "g / on (host) group_left (model) info",
    "info * on (host) group_right (model) g",
    "g and c",
    "g or c",
    "g unless on (gpu) c",
    "g and on (gpu) c",
    "c unless on (gpu) g",
    "g and on () c",
    "g / ignoring (host) g",
    "g / on (host) g",
    "sum(g) > bool 1",
    "1 + 2 * 3",
    "g offset 2m",
    # functions of instant vectors and scalars
    'label_replace(g, "x", "h-$1", "host", "(.*)")',
    'label_replace(g, "host", "", "gpu", "1")',
    "abs(g)",
    "ceil(g)",
    "floor(g)",
    "clamp_min(g, 0)",
    "clamp_max(g, 0.5)",
    "sqrt(abs(g))",
    "exp(g)",
    "ln(abs(g))",
    "log2(abs(g))",
    "log10(abs(g))",
    'absent(nope{a="b"})',
    "absent(g)",
    "vector(1)",
    "scalar(sum(g))",
    "time()",
    "time() - 100",
)


def _history() -> dict[str, dict[tuple[tuple[str, str], ...], np.ndarray]]:
    rng = np.random.default_rng(7)
    i = np.arange(STEPS, dtype=float)
    counter_reset = np.where(i < 20, 5 * i, 5 * (i - 20) + 1)
    late = np.full(STEPS, np.nan)
    late[10:30] = 3 * np.arange(20)
    g = {}
    for host in ("a", "b"):
        for gpu in ("0", "1"):
            values = np.round(rng.normal(0.5, 1.0, STEPS), 3)
            values[5:8] = values[4]  # flat: changes() and stddev of 0
            g[(("gpu", gpu), ("host", host))] = values
    return {
        "c": {
            (("gpu", "0"),): 2 * i,
            (("gpu", "1"),): counter_reset,
            (("gpu", "2"),): late,
        },
        "g": g,
        # Few distinct values, so count_values groups several series under one value.
        "round_g": {
            key: np.array([[0.0, 119.0, 2.5, 1e-7][int(j) % 4] for j in i + n])
            for n, key in enumerate(g)
        },
        "info": {
            (("host", "a"), ("model", "H100")): np.ones(STEPS),
            (("host", "b"), ("model", "A100")): np.ones(STEPS),
        },
    }


def _mine(history, expr: str, t: float) -> dict | str:
    store = MetricStore(retention_s=86400)
    for name, rows in history.items():
        labels = [dict(k) for k in rows]
        matrix = np.vstack(list(rows.values()))
        for i in range(STEPS):
            store.ingest(i * STEP_S, name, labels, matrix[:, i])
    node = pp.parse(expr)
    check_supported(node)
    try:
        value = Engine(store).evaluate(node, round(t * 1000))
    except QueryError as exc:
        return f"error: {exc}"
    if isinstance(value, float):
        return {(): value}
    return dict(value)  # type: ignore[arg-type]


def _same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or abs(a - b) <= REL * max(abs(a), abs(b))


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    history = _history()
    series = [
        {"series": series_text(name, key), "values": promtool_values(values)}
        for name, rows in history.items()
        for key, values in rows.items()
    ]
    workdir = tmp_path_factory.mktemp("constructs")
    return history, promtool.evaluate(workdir, series, EXPRS, TIMES, STEP_S)


@pytest.mark.parametrize("expr", EXPRS)
def test_the_evaluator_agrees_with_prometheus(prometheus, expr):
    history, theirs = prometheus
    for t in TIMES:
        expected, got = theirs[(expr, t)], _mine(history, expr, t)
        if isinstance(expected, str):
            assert isinstance(got, str), f"{expr} at {t}: Prometheus failed ({expected}), got {got}"
            continue
        assert isinstance(got, dict), f"{expr} at {t}: {got}; Prometheus: {expected}"
        assert got.keys() == expected.keys(), f"{expr} at {t}: {got} != {expected}"
        for key, value in expected.items():
            assert _same(got[key], value), f"{expr} at {t} {dict(key)}: {got[key]} != {value}"
