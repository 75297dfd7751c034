"""Raw PromQL signals: their freshness query, and what the in-process store runs or refuses."""

import numpy as np
import pytest

from gpuscale.errors import ConfigError
from gpuscale.metrics.promql import newest_by_query, newest_query
from gpuscale.metrics.rawquery import NotInProcess, check_in_process, selectors, structured
from gpuscale.metrics.signal import Signal
from gpuscale.metrics.store import MetricStore

FLIGHT = "gpuscale_serving_requests_in_flight"


@pytest.fixture
def store() -> MetricStore:
    s = MetricStore()
    labels = [{"pod": "a", "model": "x"}, {"pod": "b", "model": "x"}, {"pod": "c", "model": "y"}]
    for k in range(8):
        s.ingest(15.0 * k, FLIGHT, labels, np.array([1.0 + k, 2.0 * k, 10.0]))
    return s


@pytest.mark.parametrize(
    ("query", "parts"),
    [
        (FLIGHT, Signal(FLIGHT)),
        (f'{FLIGHT}{{model="x"}}', Signal(FLIGHT, {"model": "x"})),
        (f'sum by (pod) ({FLIGHT}{{model="x"}})', Signal(FLIGHT, {"model": "x"}, "sum", ("pod",))),
        (f"max(avg_over_time({FLIGHT}[45s]))", Signal(FLIGHT, aggregation="max", window=45.0)),
        (f"(count({FLIGHT}))", Signal(FLIGHT, aggregation="count")),
    ],
)
def test_the_store_reads_a_raw_query_of_a_signals_shape_as_that_signal(store, query, parts):
    raw = Signal("q", query=query)
    assert structured(raw) == parts
    assert store.instant(raw, 100.0) == store.instant(parts, 100.0)
    assert store.range(raw, 30.0, 105.0, 15.0) == store.range(parts, 30.0, 105.0, 15.0)
    assert store.newest(raw, 100.0) == store.newest(parts, 100.0) == 105.0 - 15.0
    assert store.instant(raw, 100.0)  # not vacuous: the store holds these series


@pytest.mark.parametrize(
    ("query", "construct"),
    [
        (f"sum(rate({FLIGHT}[1m]))", "rate()"),
        (f'{FLIGHT}{{model=~"x|y"}}', "the =~ matcher"),
        (f'{FLIGHT}{{model!="x"}}', "the != matcher"),
        (f'{FLIGHT}{{model!~"x"}}', "the !~ matcher"),
        (
            f"histogram_quantile(0.9, sum by (le) (rate({FLIGHT}_bucket[5m])))",
            "histogram_quantile()",
        ),
        (f"sum({FLIGHT}) + sum({FLIGHT})", "the + operator"),
        (f"{FLIGHT} offset 1m", "the offset modifier"),
        (f"sum without (pod) ({FLIGHT})", "sum without"),
        (f"max_over_time({FLIGHT}[1m:15s])", "max_over_time()"),
        (f"topk(2, {FLIGHT})", "topk()"),
        ("vector(1)", "vector()"),
    ],
)
def test_the_store_refuses_each_other_construct_naming_it(store, query, construct):
    raw = Signal("q", query=query)
    with pytest.raises(NotInProcess) as info:
        store.instant(raw, 100.0)
    assert construct in str(info.value)
    with pytest.raises(ConfigError) as refused:
        check_in_process({"load": raw}, "policy keda")
    message = str(refused.value)
    assert "\n" not in message
    assert f"cannot evaluate {construct}" in message
    assert "policy keda signal load" in message


def test_a_query_that_is_not_promql_is_refused_at_setup_with_the_parsers_reason():
    with pytest.raises(ConfigError, match=r"signal load: not valid PromQL: .*; fix the query"):
        check_in_process({"load": Signal("q", query="sum(rate(x[1m])")}, "policy keda")


def test_freshness_of_a_raw_query_is_judged_on_every_selector_it_names():
    q = 'histogram_quantile(0.9, sum by (le) (rate(ttft_bucket{model=~"l.*"}[5m]))) / on() x'
    assert selectors(q) == ('ttft_bucket{model=~"l.*"}', "x{}")
    both = (
        'label_replace(timestamp(ttft_bucket{model=~"l.*"}), "gpuscale_selector", "0", "", "")'
        ' or label_replace(timestamp(x{}), "gpuscale_selector", "1", "", "")'
    )
    assert newest_query(Signal("q", query=q)) == f"max({both})"
    assert newest_by_query(Signal("q", query=q), "pod") == f"max by (pod) ({both})"
    one = Signal("q", query="sum(rate(requests[1m] offset 5m))")
    assert newest_query(one) == "max(timestamp(requests{} offset 5m))"
    assert newest_query(Signal("q", query="vector(1)")) == ""  # nothing can be stale


def test_the_simulator_refuses_a_raw_query_it_cannot_run_before_it_starts():
    from gpuscale.scaling.keda import KedaConfig, KedaPolicy
    from gpuscale.sim.engine import simulate
    from tests.support.sim import scenario, smooth

    query = f'sum(rate({FLIGHT}{{model=~"llama.*"}}[1m]))'
    policy = KedaPolicy(KedaConfig(threshold=5.0, query_signal=Signal("load", query=query)))
    with pytest.raises(ConfigError, match=r"policy keda signal query_0 .*cannot evaluate rate\(\)"):
        simulate(scenario(smooth(np.full(60, 2.0))), policy)
