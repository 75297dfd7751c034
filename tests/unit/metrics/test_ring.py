"""Per-second totals in a ring answer instant and range queries like the metric store."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.metrics.ring import SecondTotals
from gpuscale.metrics.signal import Signal

IN_FLIGHT = Signal("in_flight", aggregation="sum")
QUEUE = Signal("queue", aggregation="sum")


def filled(seconds: int, capacity: int = 10) -> SecondTotals:
    ring = SecondTotals(("in_flight", "queue"), capacity)
    for t in range(seconds):
        ring.record(t, (float(t), 100.0 + t))
    return ring


def test_instant_is_the_newest_sample_at_or_before():
    ring = filled(5)
    assert ring.instant(IN_FLIGHT, 3.5)[0].points == ((3.5, 3.0),)
    assert ring.instant(QUEUE, 99.0)[0].points == ((99.0, 104.0),)
    assert ring.instant(IN_FLIGHT, -1.0) == []
    assert ring.instant(Signal("other", aggregation="sum"), 3.0) == []


def test_range_wraps_and_keeps_only_the_capacity():
    ring = filled(25, capacity=10)  # samples 15..24 remain
    (res,) = ring.range(IN_FLIGHT, 10.0, 24.0, 1.0)
    assert res.points == tuple((float(t), float(t)) for t in range(15, 25))
    (coarse,) = ring.range(QUEUE, 16.5, 24.0, 3.0)
    assert coarse.points == ((16.5, 116.0), (19.5, 119.0), (22.5, 122.0))
    assert ring.instant(IN_FLIGHT, 14.0) == []
    assert ring.range(IN_FLIGHT, 0.0, 10.0, 1.0) == []


def test_only_plain_totals_are_answered():
    ring = filled(3)
    with pytest.raises(ValueError, match="sum"):
        ring.instant(Signal("in_flight", aggregation="avg"), 1.0)
    with pytest.raises(ValueError, match="sum"):
        ring.range(Signal("in_flight", aggregation="sum", window=5.0), 0.0, 2.0, 1.0)
    with pytest.raises(ValueError, match="distinct"):
        SecondTotals(("a", "a"), 5)
    with pytest.raises(ValueError, match="capacity_s"):
        SecondTotals(("a",), 0)


RECORDINGS = {
    "recorded": st.lists(st.booleans(), min_size=1, max_size=60),
    "capacity": st.integers(1, 25),
    "start": st.integers(-5, 65),
    "length": st.integers(0, 30),
}
"""Which seconds were recorded, the ring's size, and the range read."""
VALUES = st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=120, max_size=120)
"""Two values per second for ``paired``."""


def paired(recorded: list[bool], capacity: int, values: list[float]) -> SecondTotals:
    """A two-metric ring holding ``values[2t], values[2t + 1]`` at each recorded second t."""
    ring = SecondTotals(("in_flight", "queue"), capacity)
    for t, kept in enumerate(recorded):
        if kept:
            ring.record(t, (values[2 * t], values[2 * t + 1]))
    return ring


@settings(max_examples=60, deadline=None)
@given(**RECORDINGS)
def test_one_second_range_is_each_seconds_stored_value_with_gaps(
    recorded: list[bool], capacity: int, start: int, length: int
) -> None:
    # Reference: the documented meaning, "the newest sample at or before each second",
    # read from the slot each second maps to, whether or not that second was recorded
    # (a skipped second reads what its slot last held): what the ring stored, not a copy.
    ring = SecondTotals(("in_flight",), capacity)
    slots: list[float] = [0.0] * capacity
    seconds = [t for t, kept in enumerate(recorded) if kept]
    for t in seconds:
        ring.record(t, (t * 1.5 + 0.25,))
        slots[t % capacity] = t * 1.5 + 0.25
    got = ring.range(IN_FLIGHT, float(start), float(start + length), 1.0)
    if not seconds:
        assert got == []
        return
    oldest = max(seconds[0], seconds[-1] - capacity + 1)
    lo, hi = max(start, oldest), min(start + length, seconds[-1])
    want = tuple((float(s), slots[s % capacity]) for s in range(lo, hi + 1))
    assert (got[0].points if got else ()) == want


@settings(max_examples=60, deadline=None)
@given(**RECORDINGS, values=VALUES)
def test_summed_range_is_the_ranges_added_as_summed_columns_adds_them(
    recorded: list[bool], capacity: int, start: int, length: int, values: list[float]
) -> None:
    # Reference: the two ``range`` results added point by point from 0, as
    # ``summed_columns`` (and ``sum``) adds them; gaps and wrapping included.
    ring = paired(recorded, capacity, values)
    end = float(start + length)
    got = ring.summed_range((IN_FLIGHT, QUEUE), float(start), end, 1.0)
    a, b = ring.range(IN_FLIGHT, float(start), end, 1.0), ring.range(QUEUE, float(start), end, 1.0)
    if not a:
        assert got == ([], [])
        return
    times = [t for t, _ in a[0].points]
    sums = [sum((x, y)) for (_, x), (_, y) in zip(a[0].points, b[0].points, strict=True)]
    assert got == (times, sums)


def test_summed_range_answers_only_every_metric_in_order_at_whole_seconds():
    ring = filled(5)
    assert ring.summed_range((IN_FLIGHT, QUEUE), 0.0, 4.0, 1.0) == (
        [0.0, 1.0, 2.0, 3.0, 4.0],
        [100.0, 102.0, 104.0, 106.0, 108.0],
    )
    assert ring.summed_range((QUEUE, IN_FLIGHT), 0.0, 4.0, 1.0) is None  # another order
    assert ring.summed_range((IN_FLIGHT,), 0.0, 4.0, 1.0) is None  # not every metric
    assert ring.summed_range((IN_FLIGHT, QUEUE), 0.0, 4.0, 2.0) is None  # not 1 s steps
    assert ring.summed_range((IN_FLIGHT, QUEUE), 0.5, 4.0, 1.0) is None  # not whole seconds
    with pytest.raises(ValueError, match="sum"):
        ring.summed_range((IN_FLIGHT, Signal("queue", aggregation="avg")), 0.0, 4.0, 1.0)


@settings(max_examples=60, deadline=None)
@given(**RECORDINGS, values=VALUES)
def test_summed_window_is_each_range_and_the_summed_range(
    recorded: list[bool], capacity: int, start: int, length: int, values: list[float]
) -> None:
    # Reference: the separate queries it stands for, gaps and wrapping included.
    ring = paired(recorded, capacity, values)
    end = float(start + length)
    got = ring.summed_window((IN_FLIGHT, QUEUE), float(start), end, 1.0)
    assert got is not None
    ranges = [ring.range(s, float(start), end, 1.0) for s in (IN_FLIGHT, QUEUE)]
    assert got[0] == tuple(r[0].points if r else () for r in ranges)
    assert got[1:] == ring.summed_range((IN_FLIGHT, QUEUE), float(start), end, 1.0)


def test_summed_window_checks_its_signals_at_every_call():
    # The signals checked last are remembered; other signals are checked again.
    ring = filled(5)
    assert ring.summed_window((IN_FLIGHT, QUEUE), 0.0, 4.0, 1.0) is not None
    assert ring.summed_window((QUEUE, IN_FLIGHT), 0.0, 4.0, 1.0) is None
    with pytest.raises(ValueError, match="sum"):
        ring.summed_window((IN_FLIGHT, Signal("queue", aggregation="avg")), 0.0, 4.0, 1.0)
    assert ring.summed_window((IN_FLIGHT, QUEUE), 0.0, 4.0, 2.0) is None
    window = ring.summed_window((IN_FLIGHT, QUEUE), 0.0, 4.0, 1.0)
    assert window is not None
    (a, _), times, sums = window
    assert times == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert sums == [100.0, 102.0, 104.0, 106.0, 108.0]
    assert a == tuple((float(t), float(t)) for t in range(5))
