"""KPA's windowed averages over summed columns equal the point-by-point originals exactly."""

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.scaling.baseline import summed_columns, summed_series
from gpuscale.scaling.kpa import window_average, window_mean
from gpuscale.scaling.policy import Observation, PodStatus, TargetStatus

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
