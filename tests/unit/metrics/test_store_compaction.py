"""The metric store keeps each series' samples in its own column when it drops old rows."""

from gpuscale.metrics.signal import Signal
from gpuscale.metrics.store import MetricStore


def test_a_scrape_that_makes_room_lands_in_its_own_series_columns():
    # Pod a leaves; b and c are scraped every 15 s. When the store drops old rows it
    # also forgets a's column, moving b's and c's; the scrape that triggered it must
    # still be written under b and c (it was written one column off, b's value under c).
    store = MetricStore(retention_s=100.0)
    a, b, c = {"pod": "a"}, {"pod": "b"}, {"pod": "c"}
    store.ingest(0.0, "m", [a, b, c], [1.0, 2.0, 3.0])
    scraped = [b, c]
    wrong = []
    for k in range(1, 200):
        t = 15.0 * k
        store.ingest(t, "m", scraped, [2.0, 3.0])
        seen = {r.labels["pod"]: r.points[-1][1] for r in store.instant(Signal("m"), t)}
        if seen != {"b": 2.0, "c": 3.0}:
            wrong.append((t, seen))
    assert wrong == []
    assert store.series_count("m") == 2  # a's column was dropped


def test_a_new_series_in_the_scrape_that_makes_room_is_kept():
    # A new pod every scrape: the one that arrives with the scrape that drops old rows
    # was dropped with them (its column was still empty) and its value went astray.
    store = MetricStore(retention_s=60.0)
    missing = []
    for k in range(200):
        t, pod = 15.0 * k, {"pod": f"pod-{k}"}
        store.ingest(t, "m", [pod], [float(k)])
        seen = {r.labels["pod"]: r.points[-1][1] for r in store.instant(Signal("m"), t)}
        if seen.get(f"pod-{k}") != float(k):
            missing.append(k)
    assert missing == []
