"""The telemetry's flushes in scalars add up to what numpy's arrays give, bit for bit.

``Telemetry`` keeps the flushes to one Ready set as scalars and adds them to the
GPUs' busy and sequence-seconds when the set changes or at a collect; the arrays must
then hold, bit for bit, what ``seconds[devs] += flushed`` at every flush holds. A
flush of a few seconds sums them in Python (``add_reduce``) as numpy would.
"""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.sim.engine import _Run
from gpuscale.sim.scrape import SMALL_SUM, add_reduce
from tests.support.sim import Recorder, scenario, workload

# (which Ready set: one of three arrays, or a fresh copy of the first; busy s; seq s;
# whether the pending flushes are settled after it)
FLUSHES = st.lists(
    st.tuples(
        st.integers(0, 3),
        st.floats(0.0, 2.0, allow_nan=False),
        st.floats(0.0, 9.0, allow_nan=False),
        st.booleans(),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(flushes=FLUSHES)
def test_pending_flushes_add_as_each_flush_at_once(
    flushes: list[tuple[int, float, float, bool]],
) -> None:
    tel = _Run(scenario(workload(np.full(10, 1.0))), Recorder()).tel
    n = tel._busy.size
    sets = [np.array([0, 1, 2]), np.array([1, 2, 3]), np.array([3]), None]
    busy, seq = np.zeros(n), np.zeros(n)
    for which, busy_s, seq_s, settle in flushes:
        devs = sets[which] if which < 3 else sets[0].copy()  # equal, but another set
        assert devs is not None
        tel._credit(devs, busy_s, seq_s)
        busy[devs] += busy_s
        seq[devs] += seq_s
        if settle:
            tel._settle()
            assert tel._busy.tobytes() == busy.tobytes()
    tel._settle()
    assert tel._busy.tobytes() == busy.tobytes()
    assert tel._seq.tobytes() == seq.tobytes()


def test_a_collect_takes_the_pending_flushes_first() -> None:
    tel = _Run(scenario(workload(np.full(10, 1.0))), Recorder()).tel
    devs = np.array([0, 1])
    for share in (0.25, 0.5, 0.125):  # one Ready set, three flushes of one second each
        tel.occupancy.append(share)
        tel.flush(devs, devs, devs, np.array([0.5, 0.5]))
    assert tel._pending is not None  # kept as scalars so far
    seen: dict[str, np.ndarray] = {}

    def step(dt: float, load: np.ndarray, *args: object, **kw: object) -> None:
        seen["load"] = load.copy()

    tel.physics.step = step  # type: ignore[method-assign]
    tel.collect(4.0, devs, np.zeros(0, np.int64), (np.zeros(0, np.int64),) * 3, 0.0)
    assert tel._pending is None
    # the GPUs' busy seconds: each flush added in turn, over the collect's interval
    assert seen["load"][:2].tolist() == [0.25 + 0.5 + 0.125] * 2
    assert seen["load"][2:].tolist() == [0.0] * (seen["load"].size - 2)


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(
        st.floats(0.0, 1e6, allow_nan=False) | st.floats(0.0, 1.0, allow_nan=False),
        min_size=1,
        max_size=SMALL_SUM - 1,
    )
)
def test_a_small_sum_adds_as_numpy_does(values: list[float]) -> None:
    # numpy's order (pairwise_sum: one by one below 8 values, eight in a tree above)
    # is what the arrays held before: a numpy that adds otherwise fails here
    assert add_reduce(values) == float(np.add.reduce(np.asarray(values)))


def test_a_small_sum_is_not_a_plain_sum() -> None:
    """Where the orders differ, ``add_reduce`` follows numpy, not a running total."""
    rng = np.random.default_rng(5)
    differ = 0
    for _ in range(2000):
        values = (rng.random(12) * rng.choice([1e-3, 1.0, 1e3], 12)).tolist()
        running = 0.0
        for v in values:
            running += v
        assert add_reduce(values) == float(np.add.reduce(np.asarray(values)))
        differ += running != add_reduce(values)
    assert differ > 0  # twelve values: a running total is not numpy's sum
