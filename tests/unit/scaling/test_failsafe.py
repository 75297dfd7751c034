"""Fail-safe rules: bounds and step limits always hold; unfit data is named."""

import math

from hypothesis import given
from hypothesis import strategies as st

from gpuscale.metrics.signal import MetricsUnavailable, Signal
from gpuscale.metrics.store import MetricStore
from gpuscale.scaling import failsafe
from gpuscale.scaling.policy import Observation, PodStatus, SeriesSum, TargetStatus

steps = st.one_of(st.none(), st.integers(1, 20))


@given(
    current=st.integers(0, 200),
    wanted=st.integers(0, 400),
    lo=st.integers(0, 50),
    span=st.integers(0, 100),
    up=steps,
    down=steps,
)
def test_bound_stays_in_min_max_and_within_steps_when_current_is_inside(
    current, wanted, lo, span, up, down
):
    hi = lo + span
    replicas, _ = failsafe.bound(current, wanted, lo, hi, up_step=up, down_step=down)
    assert lo <= replicas <= hi
    if lo <= current <= hi:
        # From inside the bounds, one sync moves at most one step (the bounds only narrow it).
        if up is not None:
            assert replicas - current <= up
        if down is not None:
            assert current - replicas <= down
        # And never past what was wanted.
        assert min(current, wanted) <= replicas <= max(current, wanted)


@given(current=st.integers(0, 200), lo=st.integers(0, 50), span=st.integers(0, 100))
def test_hold_never_scales_in_except_to_a_lowered_max(current, lo, span):
    hi = lo + span
    held = failsafe.hold(current, lo, hi)
    assert lo <= held <= hi
    assert held >= min(current, hi)


def target(*ready: bool) -> TargetStatus:
    return TargetStatus(len(ready), tuple(PodStatus(f"p{i}", r, 0.0) for i, r in enumerate(ready)))


SIG = {"q": Signal("q", aggregation="sum")}
POD = {"u": Signal("u", aggregation="avg", by=("pod",))}


def test_values_problem_names_the_signal():
    ok = Observation(10.0, target(True), {"u": {"p0": 3.0}}, {"q": ((9.0, 1.0), (10.0, 2.0))})
    assert failsafe.check_values(ok, SIG, POD) is None
    nan = Observation(10.0, target(True), {"u": {"p0": 3.0}}, {"q": ((10.0, math.nan),)})
    assert str(failsafe.check_values(nan, SIG, POD)) == "nan: q = nan"
    pod_inf = Observation(10.0, target(True), {"u": {"p0": math.inf}}, {"q": ((10.0, 1.0),)})
    assert failsafe.check_values(pod_inf, SIG, POD).reason == failsafe.NAN
    empty = Observation(10.0, target(True), {"u": {"p0": 3.0}}, {"q": ()})
    assert str(failsafe.check_values(empty, SIG, POD)) == "missing: q (query sum (q)): no series"


def summed(series: dict[str, tuple[tuple[float, float], ...]]) -> Observation:
    """An observation whose series come with their sums, as a ring of totals gives them."""
    of = tuple(series.values())
    times = [t for t, _ in of[0]]
    totals = [sum(v for s in of for t2, v in s if t2 == t) for t in times]
    sums = {tuple(series): SeriesSum(of, times, totals)}
    return Observation(10.0, target(True), {}, series, sums=sums)


TWO = {"a": Signal("a", aggregation="sum"), "b": Signal("b", aggregation="sum")}


def test_values_with_sums_find_the_same_first_bad_value_as_without():
    fine = {"a": ((9.0, 1.0), (10.0, 2.0)), "b": ((9.0, 3.0), (10.0, 4.0))}
    assert failsafe.check_values(summed(fine), TWO, {}) is None
    # A NaN, an infinity, or infinities of both signs that cancel into NaN: each makes
    # a total not finite, so the series are read value by value and the first is named.
    for bad, named in [
        ({"a": ((9.0, 1.0), (10.0, math.nan)), "b": fine["b"]}, "nan: a = nan"),
        ({"a": fine["a"], "b": ((9.0, math.inf), (10.0, 4.0))}, "nan: b = inf"),
        ({"a": ((9.0, math.inf),), "b": ((9.0, -math.inf),)}, "nan: a = inf"),
    ]:
        assert str(failsafe.check_values(summed(bad), TWO, {})) == named


def test_values_whose_sum_overflows_are_finite_still():
    huge = {"a": ((10.0, 1e308),), "b": ((10.0, 1e308),)}  # their total is inf
    assert math.isinf(1e308 + 1e308)
    assert failsafe.check_values(summed(huge), TWO, {}) is None
    pods = Observation(10.0, target(True, True), {"u": {"p0": 1e308, "p1": 1e308}}, {})
    assert failsafe.check_values(pods, {}, POD) is None
    pods_nan = Observation(10.0, target(True, True), {"u": {"p0": 1.0, "p1": math.nan}}, {})
    assert str(failsafe.check_values(pods_nan, {}, POD)) == "nan: u{pod='p1'} = nan"


def test_per_pod_gaps_are_the_policys_but_no_ready_pod_sample_is_missing():
    partial = Observation(10.0, target(True, True), {"u": {"p0": 3.0}}, {"q": ((10.0, 1.0),)})
    assert failsafe.check_values(partial, SIG, POD) is None
    none = Observation(10.0, target(True, True), {"u": {}}, {"q": ((10.0, 1.0),)})
    assert failsafe.check_values(none, SIG, POD).reason == failsafe.MISSING
    # No Ready pod: nothing is expected per pod (a workload starting, or at zero).
    starting = Observation(10.0, target(False), {"u": {}}, {"q": ((10.0, 1.0),)})
    assert failsafe.check_values(starting, SIG, POD) is None


def test_freshness_reads_the_newest_sample_time_from_the_source():
    store = MetricStore()
    store.ingest(100.0, "q", [{"a": "1"}], [1.0])
    assert failsafe.check_fresh(store, SIG, 120.0, stale_after_s=30.0) is None
    stale = failsafe.check_fresh(store, SIG, 140.0, stale_after_s=30.0)
    assert str(stale) == "stale: q (query sum (q)): newest sample 40 s old"
    # A signal with no sample at all is for check_values to call missing.
    assert failsafe.check_fresh(store, {"x": Signal("absent")}, 140.0, 30.0) is None


def test_hold_reasons_name_the_key_the_metric_and_the_query():
    util = {"util": Signal("DCGM_FI_DEV_GPU_UTIL", {"namespace": "llm"}, "avg")}
    empty = Observation(10.0, target(True), {}, {"util": ()})
    assert str(failsafe.check_values(empty, util, {})) == (
        "missing: util (metric DCGM_FI_DEV_GPU_UTIL, "
        'query avg (DCGM_FI_DEV_GPU_UTIL{namespace="llm"})): no series'
    )
    # A raw query: the metric only names it, the query is what was sent.
    raw = {"waiting": Signal("vllm_waiting", query="sum(vllm:num_requests_waiting)")}
    none = Observation(10.0, target(True), {}, {"waiting": ()})
    assert str(failsafe.check_values(none, raw, {})) == (
        "missing: waiting (metric vllm_waiting, query sum(vllm:num_requests_waiting)): no series"
    )
    pods = Observation(10.0, target(True, True), {"u": {}}, {"q": ((10.0, 1.0),)})
    assert str(failsafe.check_values(pods, SIG, POD)) == (
        "missing: u (query avg by (pod) (u)): no sample for any of 2 Ready pods"
    )


def test_an_unanswered_source_holds_with_the_cause_first():
    exc = MetricsUnavailable("http://p:9090/api/v1/query: cannot connect (refused)", "connect")
    problem = failsafe.unavailable(exc)
    assert problem.reason == failsafe.UNAVAILABLE
    assert str(problem) == (
        "metrics unavailable: connect: http://p:9090/api/v1/query: cannot connect (refused)"
    )
