"""Each PromQL construct of the in-process evaluator against hand-computed values.

Expectations follow Prometheus 2.42's documented semantics (querying basics,
functions and operators pages) and its ``extrapolatedRate``; each case says
how its number comes about.
"""

import math

import numpy as np
import promql_parser as pp
import pytest

from gpuscale.alerts.evaluate_binary import QueryError
from gpuscale.alerts.evaluate_promql import Engine, UnsupportedQuery, check_supported
from gpuscale.metrics.store import MetricStore


@pytest.fixture
def store() -> MetricStore:
    return MetricStore(retention_s=3600)


def _scrape(store: MetricStore, metric: str, samples: dict[float, dict[str, float]]) -> None:
    """``samples[t][gpu]``: one scrape per time; a GPU missing from a scrape goes stale."""
    for t, values in sorted(samples.items()):
        labels = [{"gpu": g, "host": "h"} for g in values]
        store.ingest(t, metric, labels, np.array(list(values.values()), dtype=float))


def _q(store: MetricStore, expr: str, t: float) -> dict[str, float] | float:
    value = Engine(store).evaluate(pp.parse(expr), round(t * 1000))
    if isinstance(value, float):
        return value
    return {",".join(f"{k}={v}" for k, v in lab): v for lab, v in value}  # type: ignore[misc]


def test_instant_selector_looks_back_five_minutes_inclusive(store):
    _scrape(store, "x", {0.0: {"0": 7.0}})
    assert _q(store, "x", 300.0) == {"__name__=x,gpu=0,host=h": 7.0}
    assert _q(store, "x", 300.001) == {}


def test_a_series_missing_from_a_scrape_is_stale_at_once(store):
    _scrape(store, "x", {0.0: {"0": 1.0, "1": 2.0}, 15.0: {"0": 1.0}})
    assert _q(store, "x", 20.0) == {"__name__=x,gpu=0,host=h": 1.0}
    # Before the scrape that missed it, it is there.
    assert _q(store, "x", 14.0) == {"__name__=x,gpu=0,host=h": 1.0, "__name__=x,gpu=1,host=h": 2.0}


def test_range_selector_is_closed_at_both_ends_and_offset_shifts_it(store):
    _scrape(store, "x", {float(t): {"0": float(t)} for t in range(0, 121, 15)})
    # [60 - 30, 60] holds the samples at 30, 45 and 60 (2.x ranges include the start).
    assert _q(store, "count_over_time(x[30s])", 60.0) == {"gpu=0,host=h": 3.0}
    # offset 30s: [0, 30] holds 0, 15, 30.
    assert _q(store, "sum_over_time(x[30s] offset 30s)", 60.0) == {"gpu=0,host=h": 45.0}
    assert _q(store, "x offset 1m", 120.0) == {"__name__=x,gpu=0,host=h": 60.0}


def test_rate_over_a_window_fully_sampled_is_increase_over_range(store):
    _scrape(store, "c", {t: {"0": t * 10 / 15} for t in (0.0, 15.0, 30.0, 45.0, 60.0)})
    # 40 over 60 s, samples at both ends: no extrapolation.
    assert _q(store, "rate(c[1m])", 60.0) == pytest.approx({"gpu=0,host=h": 40 / 60}, rel=1e-12)


def test_rate_extrapolates_to_a_window_start_within_1_1_intervals(store):
    _scrape(store, "c", {t: {"0": 10 * t / 15} for t in (15.0, 30.0, 45.0, 60.0)})
    # Window [10, 60]: first sample 5 s after its start (< 1.1 x 15 s), so the 30 over
    # 45 s is extrapolated over 50 s; the zero point (15 s back) is further than 5 s.
    got = _q(store, "increase(c[50s])", 60.0)
    assert got == pytest.approx({"gpu=0,host=h": 30 * 50 / 45}, rel=1e-12)


def test_increase_extrapolates_half_an_interval_and_not_below_zero(store):
    _scrape(store, "c", {15.0: {"0": 10.0}, 30.0: {"0": 20.0}})
    # Window [0, 60]: 10 over 15 s. Start: 15 s to the edge (< 16.5) but the counter would
    # reach 0 15 s back, so +15 s; end: 30 s to the edge (>= 16.5), so half an interval.
    assert _q(store, "increase(c[1m])", 60.0) == {"gpu=0,host=h": 10 * (15 + 15 + 7.5) / 15}


def test_counter_resets_add_the_value_before_the_reset(store):
    _scrape(store, "c", {0.0: {"0": 0.0}, 15.0: {"0": 10.0}, 30.0: {"0": 5.0}, 45.0: {"0": 15.0}})
    assert _q(store, "increase(c[45s])", 45.0) == {"gpu=0,host=h": 25.0}
    assert _q(store, "resets(c[45s])", 45.0) == {"gpu=0,host=h": 1.0}


def test_rate_needs_two_samples(store):
    _scrape(store, "c", {0.0: {"0": 1.0}})
    assert _q(store, "rate(c[1m])", 30.0) == {}


def test_over_time_functions(store):
    _scrape(store, "x", {float(15 * i): {"0": v} for i, v in enumerate([1.0, 2.0, 2.0, 4.0, 1.0])})
    assert _q(store, "avg_over_time(x[1m])", 60.0) == {"gpu=0,host=h": 2.0}
    assert _q(store, "changes(x[1m])", 60.0) == {"gpu=0,host=h": 3.0}
    # Population standard deviation: mean 2, squared deviations 1+0+0+4+1 over 5.
    got = _q(store, "stddev_over_time(x[1m])", 60.0)
    assert got == pytest.approx({"gpu=0,host=h": math.sqrt(6 / 5)}, rel=1e-12)
    assert _q(store, "max_over_time(x[1m])", 60.0) == {"gpu=0,host=h": 4.0}
    # last_over_time keeps the metric name, the other functions drop it.
    assert _q(store, "last_over_time(x[1m])", 60.0) == {"__name__=x,gpu=0,host=h": 1.0}


def test_aggregations_by_and_without(store):
    _scrape(store, "x", {0.0: {"0": 1.0, "1": 2.0, "2": 3.0, "3": 4.0}})
    assert _q(store, "sum by (host) (x)", 0.0) == {"host=h": 10.0}
    assert _q(store, "max without (gpu) (x)", 0.0) == {"host=h": 4.0}
    assert _q(store, "count(x)", 0.0) == {"": 4.0}
    # Rank 0.5 * (4 - 1) = 1.5: halfway between 2 and 3.
    assert _q(store, "quantile(0.5, x)", 0.0) == {"": 2.5}
    assert _q(store, "avg by (gpu) (x)", 0.0)["gpu=3"] == 4.0  # type: ignore[index]


def test_comparisons_filter_or_return_bool(store):
    _scrape(store, "x", {0.0: {"0": 1.0, "1": 5.0}})
    assert _q(store, "x > 2", 0.0) == {"__name__=x,gpu=1,host=h": 5.0}
    # A scalar on the left still returns the vector's value.
    assert _q(store, "2 < x", 0.0) == {"__name__=x,gpu=1,host=h": 5.0}
    assert _q(store, "x > bool 2", 0.0) == {"gpu=0,host=h": 0.0, "gpu=1,host=h": 1.0}
    assert _q(store, "x / 10", 0.0) == {"gpu=0,host=h": 0.1, "gpu=1,host=h": 0.5}
    assert _q(store, "1 - x", 0.0) == {"gpu=0,host=h": 0.0, "gpu=1,host=h": -4.0}
    assert _q(store, "2 > bool 1", 0.0) == 1.0


def test_one_to_one_and_group_left_matching(store):
    _scrape(store, "a", {0.0: {"0": 10.0, "1": 20.0}})
    store.ingest(0.0, "b", [{"host": "h", "model": "H100"}], np.array([5.0]))
    assert _q(store, "a / a", 0.0) == {"gpu=0,host=h": 1.0, "gpu=1,host=h": 1.0}
    got = _q(store, "a / on (host) group_left (model) b", 0.0)
    assert got == {"gpu=0,host=h,model=H100": 2.0, "gpu=1,host=h,model=H100": 4.0}
    # One-to-one with on(): the result keeps only the on() labels.
    assert _q(store, "b / on (host) b", 0.0) == {"host=h": 1.0}
    with pytest.raises(QueryError, match="many-to-one matching must be explicit"):
        _q(store, "a / on (host) b", 0.0)
    with pytest.raises(QueryError, match="duplicate series"):
        _q(store, "b / on (host) a", 0.0)


def test_set_operators_match_on_labels(store):
    _scrape(store, "a", {0.0: {"0": 1.0, "1": 2.0}})
    _scrape(store, "b", {0.0: {"1": 9.0, "2": 9.0}})
    assert _q(store, "a and b", 0.0) == {"__name__=a,gpu=1,host=h": 2.0}
    assert _q(store, "a unless b", 0.0) == {"__name__=a,gpu=0,host=h": 1.0}
    assert set(_q(store, "a or b", 0.0)) == {  # type: ignore[arg-type]
        "__name__=a,gpu=0,host=h",
        "__name__=a,gpu=1,host=h",
        "__name__=b,gpu=2,host=h",
    }
    # on (host): every series of b matches every series of a.
    assert len(_q(store, "a and on (host) b", 0.0)) == 2  # type: ignore[arg-type]
    assert _q(store, "a or on (host) b", 0.0) == _q(store, "a", 0.0)


def test_label_matchers_and_label_replace(store):
    _scrape(store, "x", {0.0: {"0": 1.0, "1": 2.0, "10": 3.0}})
    assert set(_q(store, 'x{gpu=~"1.*"}', 0.0)) == {  # type: ignore[arg-type]
        "__name__=x,gpu=1,host=h",
        "__name__=x,gpu=10,host=h",
    }
    assert len(_q(store, 'x{gpu!~"1.*", gpu!="0"}', 0.0)) == 0  # type: ignore[arg-type]
    got = _q(store, 'label_replace(x{gpu="1"}, "card", "gpu-$1", "gpu", "(.+)")', 0.0)
    assert got == {"__name__=x,card=gpu-1,gpu=1,host=h": 2.0}
    # No match: unchanged; an empty expansion deletes the label.
    assert _q(store, 'label_replace(x{gpu="1"}, "gpu", "", "host", "h")', 0.0) == {
        "__name__=x,host=h": 2.0
    }


def test_absent_and_scalar_functions(store):
    _scrape(store, "x", {0.0: {"0": 1.0}})
    assert _q(store, 'absent(nope{job="a"})', 0.0) == {"job=a": 1.0}
    assert _q(store, "absent(x)", 0.0) == {}
    assert _q(store, "time()", 12.5) == 12.5
    assert _q(store, "scalar(x)", 0.0) == 1.0


@pytest.mark.parametrize(
    ("expr", "construct"),
    [
        ("topk(1, x)", "aggregation topk"),
        ("max_over_time(x[5m:1m])", "subquery"),
        ("deriv(x[5m])", "function deriv()"),
        ("x @ 100", "@ modifier"),
        ('{__name__=~"x.*"}', "metric-name pattern"),
    ],
)
def test_unsupported_constructs_are_named(expr, construct):
    with pytest.raises(UnsupportedQuery, match=construct.replace("(", r"\(").replace(")", r"\)")):
        check_supported(pp.parse(expr))
