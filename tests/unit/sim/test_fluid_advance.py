"""``FluidQueue.advance`` over a block of seconds is ``step`` once per second, bit for bit.

The engine advances the queue over the seconds between two events in one call;
its results must be those of the per-second model, not an approximation of it,
so these tests compare the full state and records exactly (``==`` on floats).
"""

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.sim.fluid import FluidQueue

COLUMNS = (
    "step",
    "count",
    "wait_s",
    "size_s",
    "log_g_at_entry",
    "entered",
    "per_size_s",
    "offered_s",
    "servers",
    "busy",
    "arrivals",
)


def _state(q: FluidQueue) -> dict[str, object]:
    rec: dict[str, object] = {name: getattr(q.records, name).tolist() for name in COLUMNS}
    rec["retried"] = q.records.retried
    return {
        "records": rec,
        "scalars": (q.in_system, q.busy, q.dropped, q.departed, q.last_departures, q.retried),
        "work": (q._queued_work, q._service_work),
        "fifo": q._fifo[q._head : q._tail].tolist(),
        "retry": [list(c) for c in q._retry],
        "ledger": (q.in_service.log_g, q.in_service.live),
    }


def _blocks(n: int, cuts: list[int]) -> list[tuple[int, int]]:
    edges = sorted({0, n, *(c % n for c in cuts)})
    return list(itertools.pairwise(edges))


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    load=st.floats(0.2, 1.6),
    timeout=st.sampled_from([3.0, 20.0, 1e6]),
    cuts=st.lists(st.integers(0, 10_000), max_size=12),
)
def test_advance_equals_stepping_each_second(
    seed: int, load: float, timeout: float, cuts: list[int]
) -> None:
    rng = np.random.default_rng(seed)
    n, servers = 300, 8
    arrivals = rng.poisson(load * servers / 2.0, n).astype(float)
    arrivals[rng.random(n) < 0.1] = 0.0  # idle seconds too
    work = arrivals * rng.gamma(4.0, 0.5, n)
    arrivals_l, work_l = arrivals.tolist(), work.tolist()
    stepped = FluidQueue(timeout_s=timeout, service_scv=0.6, arrival_scv=0.3)
    blocked = FluidQueue(timeout_s=timeout, service_scv=0.6, arrival_scv=0.3)
    busy_s, dep_s, busy_b, dep_b = [], [], [], []
    for t0, t1 in _blocks(n, cuts):
        k = 0 if t0 >= 200 and t0 < 220 else servers  # an outage: no capacity at all
        for t in range(t0, t1):
            stepped.step(t, arrivals_l[t], work_l[t], k, float(k) * 0.5)
            busy_s.append(stepped.busy)
            dep_s.append(stepped.last_departures)
        b, d = blocked.advance(t0, t1, arrivals, work, k, float(k) * 0.5)
        busy_b += b
        dep_b += d
    assert busy_b == busy_s
    assert dep_b == dep_s
    assert _state(blocked) == _state(stepped)


def test_advance_in_overload_drops_as_stepping_does() -> None:
    """Twice the capacity with a 3 s timeout: drops every second, the same drops."""
    arrivals, work = [8.0] * 120, [8.0] * 120  # 8 s of work a second on 4 s of capacity
    stepped, blocked = FluidQueue(timeout_s=3.0), FluidQueue(timeout_s=3.0)
    busy_s = []
    for t in range(120):
        stepped.step(t, arrivals[t], work[t], 4, 4.0)
        busy_s.append(stepped.busy)
    busy_b, _ = blocked.advance(0, 120, np.array(arrivals), np.array(work), 4, 4.0)
    assert stepped.dropped > 100.0  # the case drops (about half of 960 arrivals)
    assert busy_b == busy_s
    assert _state(blocked) == _state(stepped)


def test_advance_with_a_retry_waiting_steps_each_second() -> None:
    """A retry queued by an interrupt is served first, as ``step`` serves it."""
    args = {"timeout_s": 50.0}
    stepped, blocked = FluidQueue(**args), FluidQueue(**args)
    arrivals, work = [3.0] * 60, [6.0] * 60
    for q in (stepped, blocked):
        for t in range(20):
            q.step(t, arrivals[t], work[t], 4, 2.0)
        q.interrupt(20, 1.5)  # a replica stopped: its requests retry
    assert blocked._retry  # the block starts with a retry waiting
    for t in range(20, 60):
        stepped.step(t, arrivals[t], work[t], 4, 2.0)
    blocked.advance(20, 60, np.array(arrivals), np.array(work), 4, 2.0)
    assert _state(blocked) == _state(stepped)
    assert stepped.records.retried  # the retried portions were recorded


def test_one_second_blocks_in_the_block_loop_step_as_step_does() -> None:
    """The engine's one-second blocks (a pod turning Ready mid-decision) run the loop too."""
    rng = np.random.default_rng(7)
    arrivals = rng.poisson(3.0, 200).astype(float).tolist()
    work = [a * 1.5 for a in arrivals]
    stepped = FluidQueue(timeout_s=4.0, service_scv=0.6, arrival_scv=0.3)
    blocked = FluidQueue(timeout_s=4.0, service_scv=0.6, arrival_scv=0.3)
    busy_s, busy_b = [], []
    for t in range(200):
        k = 2 + t % 3  # the Ready replicas change every second
        stepped.step(t, arrivals[t], work[t], k, k * 0.8)
        busy_s.append(stepped.busy)
        b, _ = blocked.advance(t, t + 1, np.array(arrivals), np.array(work), k, k * 0.8)
        busy_b += b
    assert stepped.dropped > 0.0  # overloaded at times: the drops are compared too
    assert busy_b == busy_s
    assert _state(blocked) == _state(stepped)


def test_long_blocks_past_the_first_rows_of_every_array() -> None:
    """Thousands of seconds and a backlog of hundreds of cohorts: the arrays grow and move.

    The records start with 1,024 rows and the FIFO with 64; overload with no timeout
    keeps every second's cohort waiting, so both grow (and the FIFO moves its cohorts
    to the front as its head advances) while the two queues must stay equal.
    """
    rng = np.random.default_rng(11)
    n = 2_500
    arrivals = rng.poisson(6.0, n).astype(float)
    work = arrivals * 1.0
    stepped, blocked = FluidQueue(timeout_s=1e6), FluidQueue(timeout_s=1e6)
    cuts = [0, 7, 8, 600, 601, 1_700, n]
    for t0, t1 in itertools.pairwise(cuts):
        k = 4 if t0 < 1_700 else 12  # overloaded (6 s of work a second on 4), then not
        for t in range(t0, t1):
            stepped.step(t, float(arrivals[t]), float(work[t]), k, float(k))
        blocked.advance(t0, t1, arrivals, work, k, float(k))
    assert blocked.records.portions > 1_024  # the records grew
    assert blocked._fifo.shape[0] > 64  # the FIFO grew (about 2 cohorts waited a second)
    assert _state(blocked) == _state(stepped)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    load=st.floats(0.2, 1.6),
    start=st.integers(1, 150),
    ahead=st.integers(1, 60),
    back=st.integers(0, 59),
)
def test_rewinding_to_a_mark_is_as_if_the_seconds_since_were_never_advanced(
    seed: int, load: float, start: int, ahead: int, back: int
) -> None:
    rng = np.random.default_rng(seed)
    n, servers = 300, 8
    arrivals = rng.poisson(load * servers / 2.0, n).astype(float)
    work = arrivals * rng.gamma(4.0, 0.5, n)
    straight = FluidQueue(timeout_s=20.0, service_scv=0.6, arrival_scv=0.3)
    rewound = FluidQueue(timeout_s=20.0, service_scv=0.6, arrival_scv=0.3)
    for q in (straight, rewound):
        q.advance(0, start, arrivals, work, servers, servers * 0.5)
    stop = start + min(back, ahead - 1) + 1  # the second a decision would cut the block at
    mark = rewound.mark()
    assert mark is not None
    rewound.advance(start, start + ahead, arrivals, work, servers, servers * 0.5)
    rewound.rewind(mark)
    got = rewound.advance(start, stop, arrivals, work, servers, servers * 0.5)
    want = straight.advance(start, stop, arrivals, work, servers, servers * 0.5)
    assert got == want
    assert _state(rewound) == _state(straight)
    # and both go on alike, at another capacity
    assert rewound.advance(stop, n, arrivals, work, 3, 1.5) == straight.advance(
        stop, n, arrivals, work, 3, 1.5
    )
    assert _state(rewound) == _state(straight)


def test_no_mark_while_a_replica_drains() -> None:
    q = FluidQueue(timeout_s=20.0)
    ones = np.full(10, 4.0)
    q.advance(0, 10, ones, ones, 8, 4.0)
    assert q.mark() is not None
    assert q.start_drain(1, q.busy, 0.5)
    assert q.mark() is None
