"""``newest``: the freshness the controller's fail-safe reads, from the store and the ring."""

import numpy as np
import pytest

from gpuscale.metrics.ring import SecondTotals
from gpuscale.metrics.signal import Signal
from gpuscale.metrics.store import LOOKBACK_S, MetricStore

A = {"pod": "a", "ns": "x"}
B = {"pod": "b", "ns": "y"}


@pytest.fixture
def store() -> MetricStore:
    s = MetricStore(retention_s=3600.0)
    s.ingest(0.0, "m", [A, B], np.array([1.0, 2.0]))
    s.ingest(15.0, "m", [A, B], np.array([1.0, np.nan]))  # b absent from here: stale
    s.ingest(30.0, "m", [A], np.array([3.0]))
    return s


def test_newest_is_the_latest_sample_an_instant_query_sees(store):
    assert store.newest(Signal("m"), 29.9) == 15.0
    assert store.newest(Signal("m"), 30.0) == 30.0
    assert store.newest(Signal("m"), 1000.0) is None  # past the 5 min lookback of 30 s
    assert store.newest(Signal("m"), 30.0 + LOOKBACK_S) == 30.0
    assert store.newest(Signal("m"), -1.0) is None
    assert store.newest(Signal("other"), 30.0) is None


def test_newest_follows_matchers_and_staleness_not_window_or_aggregation(store):
    assert store.newest(Signal("m", {"pod": "b"}), 10.0) == 0.0
    assert store.newest(Signal("m", {"pod": "b"}), 20.0) is None  # stale since 15 s
    assert store.newest(Signal("m", {"pod": "zz"}), 20.0) is None
    windowed = Signal("m", {"ns": "x"}, "sum", ("pod",), 60.0)
    assert store.newest(windowed, 31.0) == 30.0


def test_ring_newest_is_the_second_of_the_newest_sample():
    ring = SecondTotals(("q",), 10)
    for t in range(5, 25):
        ring.record(t, (float(t),))
    assert ring.newest(Signal("q", aggregation="sum", window=30.0), 20.7) == 20.0
    assert ring.newest(Signal("q"), 99.0) == 24.0
    assert ring.newest(Signal("q"), 14.0) is None  # overwritten: the ring keeps 15..24
    assert ring.newest(Signal("other"), 20.0) is None
    with pytest.raises(ValueError, match="per-second totals"):
        ring.newest(Signal("q", {"pod": "a"}), 20.0)
