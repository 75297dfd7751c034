"""The in-process store answers like Prometheus: lookback, staleness, windows, aggregation."""

from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.metrics.signal import Signal
from gpuscale.metrics.store import LOOKBACK_S, MetricStore

UTIL = "DCGM_FI_DEV_GPU_UTIL"


def pods(*names: str, node: str = "n1") -> list[dict[str, str]]:
    return [{"pod": n, "namespace": "default", "Hostname": node} for n in names]


@pytest.fixture
def store() -> MetricStore:
    return MetricStore(retention_s=3600.0)


def values(results) -> dict[str, float]:
    return {r.labels.get("pod", ""): r.points[-1][1] for r in results}


def test_instant_returns_latest_sample_at_or_before_time(store):
    labels = pods("a")
    store.ingest(0.0, UTIL, labels, np.array([10.0]))
    store.ingest(15.0, UTIL, labels, np.array([20.0]))
    store.ingest(30.0, UTIL, labels, np.array([30.0]))
    assert values(store.instant(Signal(UTIL), 29.9)) == {"a": 20.0}
    assert values(store.instant(Signal(UTIL), 30.0)) == {"a": 30.0}
    assert store.instant(Signal(UTIL), -1.0) == []
    [res] = store.instant(Signal(UTIL), 20.0)
    assert res.points == ((20.0, 20.0),)
    assert res.labels == {"pod": "a", "namespace": "default", "Hostname": "n1"}


def test_sample_older_than_lookback_is_absent(store):
    store.ingest(0.0, UTIL, pods("a"), np.array([50.0]))
    assert values(store.instant(Signal(UTIL), LOOKBACK_S)) == {"a": 50.0}
    assert store.instant(Signal(UTIL), LOOKBACK_S + 0.5) == []


def test_series_missing_from_a_scrape_is_stale_at_once(store):
    store.ingest(0.0, UTIL, pods("a", "b"), np.array([10.0, 20.0]))
    store.ingest(15.0, UTIL, pods("a"), np.array([11.0]))  # b disappeared
    assert values(store.instant(Signal(UTIL), 16.0)) == {"a": 11.0}
    assert values(store.instant(Signal(UTIL), 14.0)) == {"a": 10.0, "b": 20.0}


def test_nan_means_absent_never_zero(store):
    store.ingest(0.0, UTIL, pods("a", "b"), np.array([10.0, 20.0]))
    store.ingest(15.0, UTIL, pods("a", "b"), np.array([np.nan, 30.0]))
    got = values(store.instant(Signal(UTIL), 15.0))
    assert got == {"b": 30.0}
    total = store.instant(Signal(UTIL, aggregation="sum"), 15.0)
    assert total[0].points == ((15.0, 30.0),)
    count = store.instant(Signal(UTIL, aggregation="count"), 15.0)
    assert count[0].points == ((15.0, 1.0),)


def test_window_averages_samples_in_half_open_interval(store):
    labels = pods("a")
    for t, v in [(0.0, 10.0), (15.0, 20.0), (30.0, 60.0), (45.0, 90.0)]:
        store.ingest(t, UTIL, labels, np.array([v]))
    # (15, 45] holds the samples at 30 and 45, not the one at 15.
    assert values(store.instant(Signal(UTIL, window=30.0), 45.0)) == {"a": 75.0}
    # (0, 30] holds 15 and 30.
    assert values(store.instant(Signal(UTIL, window=30.0), 30.0)) == {"a": 40.0}


def test_window_skips_absent_samples(store):
    labels = pods("a")
    for t, v in [(0.0, 10.0), (15.0, np.nan), (30.0, 40.0)]:
        store.ingest(t, UTIL, labels, np.array([v]))
    assert values(store.instant(Signal(UTIL, window=60.0), 30.0)) == {"a": 25.0}
    assert store.instant(Signal(UTIL, window=10.0), 20.0) == []


def test_aggregations_group_by_label(store):
    labels = pods("a", "b", node="n1") + pods("c", node="n2")
    store.ingest(0.0, UTIL, labels, np.array([10.0, 30.0, 50.0]))
    by_node = {
        agg: {
            r.labels["Hostname"]: r.points[0][1]
            for r in store.instant(Signal(UTIL, aggregation=agg, by=("Hostname",)), 0.0)
        }
        for agg in ("sum", "avg", "max", "min", "count")
    }
    assert by_node["sum"] == {"n1": 40.0, "n2": 50.0}
    assert by_node["avg"] == {"n1": 20.0, "n2": 50.0}
    assert by_node["max"] == {"n1": 30.0, "n2": 50.0}
    assert by_node["min"] == {"n1": 10.0, "n2": 50.0}
    assert by_node["count"] == {"n1": 2.0, "n2": 1.0}
    [overall] = store.instant(Signal(UTIL, aggregation="avg"), 0.0)
    assert overall.labels == {}
    assert overall.points == ((0.0, 30.0),)


def test_aggregated_result_keeps_only_by_labels(store):
    store.ingest(0.0, UTIL, pods("a", "b"), np.array([1.0, 2.0]))
    got = store.instant(Signal(UTIL, aggregation="sum", by=("pod",)), 0.0)
    assert [(r.labels, r.points[0][1]) for r in got] == [({"pod": "a"}, 1.0), ({"pod": "b"}, 2.0)]


def test_matchers_select_series_by_label_equality(store):
    labels = [
        {"pod": "a", "namespace": "prod"},
        {"pod": "b", "namespace": "dev"},
        {"pod": "c", "namespace": "prod"},
    ]
    store.ingest(0.0, UTIL, labels, np.array([1.0, 2.0, 4.0]))
    got = store.instant(Signal(UTIL, matchers={"namespace": "prod"}, aggregation="sum"), 0.0)
    assert got[0].points[0][1] == 5.0
    assert store.instant(Signal(UTIL, matchers={"namespace": "none"}), 0.0) == []
    assert store.instant(Signal("no_such_metric"), 0.0) == []


def test_range_evaluates_each_step_and_skips_absent_points(store):
    labels = pods("a")
    store.ingest(0.0, UTIL, labels, np.array([1.0]))
    store.ingest(15.0, UTIL, labels, np.array([2.0]))
    store.ingest(30.0, UTIL, labels, np.array([np.nan]))
    store.ingest(45.0, UTIL, labels, np.array([4.0]))
    [res] = store.range(Signal(UTIL), 0.0, 50.0, 10.0)
    assert res.points == ((0.0, 1.0), (10.0, 1.0), (20.0, 2.0), (50.0, 4.0))
    [avg] = store.range(Signal(UTIL, window=30.0), 30.0, 45.0, 15.0)
    assert avg.points == ((30.0, 2.0), (45.0, 4.0))


@pytest.mark.parametrize("step", [15.0, 5.0, 30.0, 7.0])
def test_range_points_are_instant_queries_at_each_step(store, step):
    # At the scrape spacing each time reads the next row (a run of rows); finer steps
    # read a row twice, coarser ones skip rows: every way, each point is the instant
    # query's value at its time, a series absent there included.
    labels = pods("a", "b", "c")
    for i in range(12):
        b = np.nan if i in (4, 5) else 10.0 + i
        store.ingest(15.0 * i, UTIL, labels, np.array([float(i), b, 100.0 - i]))
    for sig in (Signal(UTIL, aggregation="sum"), Signal(UTIL, aggregation="max", by=("pod",))):
        got = {tuple(r.labels.items()): r.points for r in store.range(sig, 20.0, 160.0, step)}
        want: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
        for k in range(int((160.0 - 20.0) / step + 1e-9) + 1):
            at = 20.0 + step * k
            for r in store.instant(sig, at):
                want.setdefault(tuple(r.labels.items()), []).append(r.points[0])
        assert got == {k: tuple(v) for k, v in want.items()}


def test_range_on_uneven_scrapes_reads_a_row_twice_where_one_is_skipped(store):
    # Rows at 0, 10, 40, 45 and 60 s: times 15 and 30 both read the row at 10 s and the
    # one at 40 s is never read, so as many rows as times span the range but not as a run.
    for t in (0.0, 10.0, 40.0, 45.0, 60.0):
        store.ingest(t, UTIL, pods("a"), np.array([t]))
    [res] = store.range(Signal(UTIL), 15.0, 60.0, 15.0)
    assert res.points == ((15.0, 10.0), (30.0, 10.0), (45.0, 45.0), (60.0, 60.0))


def test_range_with_bad_arguments_raises(store):
    with pytest.raises(ValueError, match="bad range"):
        store.range(Signal(UTIL), 10.0, 0.0, 1.0)


def test_ingest_rejects_mismatched_lengths_and_time_travel(store):
    with pytest.raises(ValueError, match="label sets"):
        store.ingest(0.0, UTIL, pods("a"), np.array([1.0, 2.0]))
    store.ingest(10.0, UTIL, pods("a"), np.array([1.0]))
    with pytest.raises(ValueError, match="older"):
        store.ingest(5.0, UTIL, pods("a"), np.array([1.0]))


def test_retention_drops_old_rows_and_dead_series():
    store = MetricStore(retention_s=60.0)
    for i in range(200):
        names = [f"pod-{i}"]  # a new pod every scrape
        store.ingest(i * 15.0, UTIL, pods(*names), np.array([float(i)]))
    assert store.series_count(UTIL) <= 64  # at most one column per row held
    assert values(store.instant(Signal(UTIL), 199 * 15.0)) == {"pod-199": 199.0}
    assert store.latest_time() == 199 * 15.0


def test_same_label_list_object_reuses_columns_and_new_pods_append(store):
    labels = pods("a", "b")
    store.ingest(0.0, UTIL, labels, np.array([1.0, 2.0]))
    store.ingest(15.0, UTIL, labels, np.array([3.0, 4.0]))
    store.ingest(30.0, UTIL, pods("b", "c"), np.array([5.0, 6.0]))
    assert values(store.instant(Signal(UTIL), 30.0)) == {"b": 5.0, "c": 6.0}
    assert values(store.instant(Signal(UTIL), 15.0)) == {"a": 3.0, "b": 4.0}
    assert store.series_count(UTIL) == 3


@dataclass(frozen=True)
class RateSignal:
    """A Signal with the optional ``rate`` flag (the field policies may add to Signal)."""

    metric: str
    matchers: dict = field(default_factory=dict)
    aggregation: str = "sum"
    by: tuple = ()
    window: float = 60.0
    rate: bool = True


def test_rate_of_counter_handles_resets(store):
    labels = pods("a")
    for t, v in [(0.0, 100.0), (15.0, 130.0), (30.0, 10.0), (45.0, 40.0)]:
        store.ingest(t, "requests_total", labels, np.array([v]))
    # (14, 45] holds 15, 30, 45: +10 after the reset, +30 -> 40 over 30 s.
    [res] = store.instant(RateSignal("requests_total", window=31.0), 45.0)
    assert res.points[0][1] == pytest.approx(40.0 / 30.0)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(st.floats(0.0, 100.0, allow_nan=False), st.just(float("nan"))),
        min_size=1,
        max_size=12,
    )
)
def test_sum_and_count_match_numpy_over_present_series(vals):
    store = MetricStore()
    arr = np.array(vals)
    store.ingest(0.0, UTIL, pods(*[f"p{i}" for i in range(arr.size)]), arr)
    present = ~np.isnan(arr)
    total = store.instant(Signal(UTIL, aggregation="sum"), 0.0)
    count = store.instant(Signal(UTIL, aggregation="count"), 0.0)
    if not present.any():
        assert total == []
        assert count == []
    else:
        assert total[0].points[0][1] == pytest.approx(float(arr[present].sum()))
        assert count[0].points[0][1] == float(present.sum())
    assert len(store.instant(Signal(UTIL), 0.0)) == int(present.sum())


@settings(max_examples=40, deadline=None)
@given(
    scrapes=st.lists(
        st.lists(st.one_of(st.none(), st.floats(0.0, 100.0)), min_size=4, max_size=4),
        min_size=1,
        max_size=6,
    ),
    at=st.floats(-10.0, 400.0),
    agg=st.sampled_from(["avg", "sum", "max", "none"]),
)
def test_instant_by_label_is_instant_keyed_by_that_label(scrapes, at, agg):
    # Pods a..c on two nodes, d with no pod label; None is a pod absent from a scrape.
    store = MetricStore(retention_s=3600.0)
    labels = [*pods("a", "b"), *pods("c", node="n2"), {"Hostname": "n3"}]
    for i, row in enumerate(scrapes):
        vals = np.array([np.nan if v is None else v for v in row])
        store.ingest(15.0 * i, UTIL, labels, vals)
    sig = Signal(UTIL, aggregation=agg, by=("pod",) if agg != "none" else ())
    want = {r.labels["pod"]: r.points[-1][1] for r in store.instant(sig, at) if "pod" in r.labels}
    assert store.instant_by(sig, at, "pod") == want


@settings(max_examples=20, deadline=None)
@given(
    scrapes=st.lists(
        st.lists(st.one_of(st.none(), st.floats(-5.0, 100.0)), min_size=5, max_size=5),
        min_size=70,  # past 64 rows: the retention moves the rows kept to the front
        max_size=90,
    ),
    late=st.lists(st.integers(0, 89), max_size=4),
    agg=st.sampled_from(["avg", "sum", "max", "min", "count", "none"]),
    span=st.sampled_from([45.0, 120.0, 400.0]),
)
def test_ranges_asked_again_at_each_scrape_are_instant_queries_at_each_step(
    scrapes, late, agg, span
):
    # A policy asks for the same range after every scrape: rows aggregated for one
    # answer are reused by the next, through pods coming and going (None: absent), a
    # second write to the newest row, and rows dropped by the retention.
    store = MetricStore(retention_s=300.0)
    labels = [*pods("a", "b"), *pods("c", node="n2"), *pods("d", "e", node="n3")]
    sig = Signal(UTIL, aggregation=agg, by=("Hostname",) if agg != "none" else ())
    for i, row in enumerate(scrapes):
        t = 15.0 * i
        vals = np.array([np.nan if v is None else v for v in row])
        store.ingest(
            t, UTIL, labels[:3] if i % 7 == 3 else labels, vals[:3] if i % 7 == 3 else vals
        )
        if i in late:  # another write to the newest row, after a range read it
            store.range(sig, max(t - span, 0.0), t, 15.0)
            store.ingest(t, "other", pods("x"), np.array([1.0]))
            store.ingest(t, UTIL, pods("f", node="n3"), np.array([float(i)]))
        got = {tuple(r.labels.items()): r.points for r in store.range(sig, t - span, t, 15.0)}
        want: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
        for k in range(int(span / 15.0) + 1):
            for r in store.instant(sig, t - span + 15.0 * k):
                want.setdefault(tuple(r.labels.items()), []).append(r.points[0])
        assert got == {k: tuple(v) for k, v in want.items()}


@settings(max_examples=40, deadline=None)
@given(
    row=st.lists(st.one_of(st.none(), st.floats(-1e300, 1e300)), min_size=1, max_size=6),
    twice=st.booleans(),
)
def test_per_pod_values_of_a_full_row_are_each_pods_instant_value(row, twice):
    # Every series names its pod (one name twice: the last wins), present or not.
    store = MetricStore(retention_s=3600.0)
    names = [f"p{i}" for i in range(len(row))]
    if twice and len(names) > 1:
        names[-1] = names[0]
    labels = [{"pod": n, "namespace": "ns", "i": str(i)} for i, n in enumerate(names)]
    store.ingest(0.0, UTIL, labels, np.array([np.nan if v is None else v for v in row]))
    sig = Signal(UTIL, aggregation="max", by=("pod", "i"))
    want: dict[str, float] = {}
    for r in store.instant(sig, 10.0):
        want[r.labels["pod"]] = r.points[-1][1]
    got = store.instant_by(sig, 10.0, "pod")
    assert got == want
    assert list(got) == list(want)
