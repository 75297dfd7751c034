"""A retried request's wait is its own: it does not delay the first tries around it."""

import pytest

from gpuscale.sim.latency import LatencyRecords, summarise_latency

SECONDS = 120
PER_SECOND = 100.0
SLO_S = 2.0


def records(retry_wait_s: float | None) -> LatencyRecords:
    """100 servers at half load, no request waiting; optionally one retried portion.

    The retried portion (100 requests whose pod was deleted) re-enters service at
    second 60 with ``retry_wait_s`` since its first arrival, as ``FluidQueue`` records it.
    """
    rec = LatencyRecords()
    for t in range(SECONDS):
        rec.add_portion(t, PER_SECOND, 0.0, 0.5, 0.0)
        if t == 60 and retry_wait_s is not None:
            rec.retried.add(rec.portions)
            rec.add_portion(t, PER_SECOND, retry_wait_s, 0.5, 0.0)
        rec.add_second(1.0, 50.0, 100, 50.0, PER_SECOND)
    return rec


def within(rec: LatencyRecords) -> float:
    summary = summarise_latency(rec, slo_s=SLO_S, timeout_s=30.0, row_steps=60, n_rows=2)
    return summary.within_slo


def test_a_retry_does_not_delay_the_first_tries_of_its_window():
    firsts = within(records(None))
    # Before: the retry's 20 s wait entered the windowed backlog of every request of
    # the surrounding minute (100 x 20 s over 6,100 requests: 0.33 s each), and 55 of
    # them missed a 2 s SLO they met without the retry.
    with_retry = within(records(20.0))
    # The retried requests waited 20 s > the SLO: none of them is within it, and the
    # first tries are exactly as without the retry.
    assert with_retry == pytest.approx(firsts, rel=1e-12)
    assert firsts == pytest.approx(SECONDS * PER_SECOND, rel=0.05)  # half load: almost all


def test_a_retry_keeps_its_own_wait():
    # Waited 1.9 s: within the 2 s SLO only if its service (exponential, mean 0.5 s)
    # takes under 0.1 s, probability 1 - e^-0.2 = 0.18 of its 100 requests.
    extra = within(records(1.9)) - within(records(None))
    assert 0.0 < extra < 0.25 * PER_SECOND
