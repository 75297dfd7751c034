"""KPA's windowed averages over summed columns equal the point-by-point originals exactly."""

import dataclasses
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.metrics.ring import SecondTotals
from gpuscale.scaling.baseline import summed_columns, summed_series
from gpuscale.scaling.kpa import KpaConfig, KpaPolicy, window_average, window_mean
from gpuscale.scaling.observe import observe
from gpuscale.scaling.policy import NO_SUMS, Observation, PodStatus, TargetStatus

VALUES = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


def observation(series: dict[str, tuple[tuple[float, float], ...]]) -> Observation:
    target = TargetStatus(1, (PodStatus("p", True, 0.0, 0.0),))
    return Observation(100.0, target, {}, series)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(VALUES, VALUES), min_size=1, max_size=70),
    st.integers(0, 40),
    st.sampled_from([6.0, 60.0, 0.5, 1000.0]),
)
def test_window_mean_of_summed_columns_is_window_average_of_summed_series(pairs, t0, window):
    times = [float(t0 + i) for i in range(len(pairs))]
    a = tuple(zip(times, [x for x, _ in pairs], strict=True))
    b = tuple(zip(times, [y for _, y in pairs], strict=True))
    obs = observation({"a": a, "b": b})
    points = summed_series(obs, ("a", "b"))
    columns = summed_columns(obs, ("a", "b"))
    assert points is not None
    assert columns is not None
    assert tuple(zip(*columns, strict=True)) == points
    # The sums as the original wrote them: sum() of each column, from 0.
    assert list(columns[1]) == [sum((x, y)) for x, y in pairs]
    expected = window_average(points, window)
    got = window_mean(*columns, window)
    assert got == expected or (math.isnan(got) and math.isnan(expected))


def test_misaligned_series_add_by_time_and_nan_means_missing():
    obs = observation({"a": ((1.0, 1.0), (2.0, 2.0)), "b": ((2.0, 10.0), (3.0, 5.0))})
    assert summed_series(obs, ("a", "b")) == ((1.0, 1.0), (2.0, 12.0), (3.0, 5.0))
    assert summed_columns(obs, ("a", "b")) == ([1.0, 2.0, 3.0], [1.0, 12.0, 5.0])
    nan = observation({"a": ((1.0, float("nan")),), "b": ((1.0, 1.0),)})
    assert summed_series(nan, ("a", "b")) is None


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(VALUES, VALUES), min_size=1, max_size=150),
    st.lists(st.integers(0, 149), max_size=3),
    st.integers(0, 6),
)
def test_kpa_decides_the_same_from_the_ring_s_sums_as_from_its_series(pairs, nans, ready):
    # The simulator's ring hands KPA its signals already added (Observation.sums); the
    # live controller has only the series. Every decision and state must be the same.
    policy = KpaPolicy(KpaConfig(target=10.0, max_replicas=50))
    ring = SecondTotals((policy.config.metric, policy.config.queue_metric), 64)
    target = TargetStatus(ready, tuple(PodStatus(f"p{i}", True, 0.0, 0.0) for i in range(ready)))
    with_sums = without = policy.initial_state()
    for t, (a, b) in enumerate(pairs):
        ring.record(t, (math.nan if t in nans else a, b))
        if t % 2:
            continue
        obs = observe(ring, policy, target, float(t), step_s=1.0)
        assert set(obs.sums) == {("concurrency", "queue")}
        bare = dataclasses.replace(obs, sums=NO_SUMS)
        fast, slow = summed_columns(obs, policy._keys), summed_columns(bare, policy._keys)
        assert (fast is None) == (slow is None)
        if fast is not None and slow is not None:
            assert [list(c) for c in fast] == [list(c) for c in slow]
        d1, d2 = policy.decide(obs, with_sums), policy.decide(bare, without)
        assert (d1.replicas, d1.reason, d1.state) == (d2.replicas, d2.reason, d2.state)
        with_sums, without = d1.state, d2.state


def test_sums_of_other_series_are_not_read():
    # An observation whose series were replaced (cut to a shorter window, as
    # demand.recent_view does) still carries the source's sums of the originals;
    # summed_columns must add the series it holds, not read those.
    policy = KpaPolicy(KpaConfig(target=10.0))
    ring = SecondTotals((policy.config.metric, policy.config.queue_metric), 64)
    for t in range(100):
        ring.record(t, (float(t), 0.5 * t))
    target = TargetStatus(1, (PodStatus("p", True, 0.0, 0.0),))
    obs = observe(ring, policy, target, 99.0, step_s=1.0)
    assert set(obs.sums) == {("concurrency", "queue")}
    cut = dataclasses.replace(obs, series={k: v[-10:] for k, v in obs.series.items()})
    columns = summed_columns(cut, policy._keys)
    assert columns is not None
    assert list(columns[0]) == [float(t) for t in range(90, 100)]
    assert list(columns[1]) == [t + 0.5 * t for t in range(90, 100)]
    full = summed_columns(obs, policy._keys)
    assert full is not None
    assert len(full[0]) == 61  # the uncut observation reads the ring's sums: 61 seconds
