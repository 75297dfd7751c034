"""The per-request queue is the discrete-event reference, driven by a changing fleet.

On a fixed fleet it must give the same requests the same latencies as
``des.simulate_requests`` with the same seed (both draw with ``des.draw_requests``;
only the queueing code differs), up to float rounding of the service time
(``work x servers / capacity`` against ``work x slots / speed``), so the bound is
1e-9 s. With scaling, failures and drains every arrival must end exactly once, in
whole requests.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.errors import ConfigError
from gpuscale.scaling.static import StaticPolicy
from gpuscale.sim.cluster import ClusterConfig, ColdStart
from gpuscale.sim.des import draw_requests, simulate_requests
from gpuscale.sim.engine import Scenario, simulate
from gpuscale.sim.faults import parse_sim_fault
from gpuscale.sim.queue_model import AUTO_FLUID_MIN_BUSY, AUTO_MAX_RATE, choose
from gpuscale.sim.request_latency import summarise_requests
from gpuscale.sim.requests import RequestQueue
from gpuscale.sim.serving import ServingConfig
from gpuscale.sim.workload import RequestProfile, Workload
from tests.support.sim import Script

ROUNDING_S = 1e-9


def poisson(rate: float, seconds: int, service_s: float, seed: int = 0) -> Workload:
    a = np.random.default_rng(seed).poisson(np.full(seconds, rate)).astype(float)
    return Workload("steady", a, a * service_s)


def serve(wl: Workload, servers: int, capacity: float, timeout_s: float, seed: int, scv=1.0):
    q = RequestQueue(wl, timeout_s=timeout_s, seed=seed, service_scv=scv)
    for t in range(wl.duration_s):
        q.step(t, float(wl.arrivals[t]), float(wl.work_s[t]), servers, capacity)
    return q, q.finish()


MEASURED = RequestProfile.from_samples(np.random.default_rng(0).gamma(1 / 0.41, 0.41, 6000))


@pytest.mark.parametrize(
    ("replicas", "slots", "load", "timeout_s", "scv", "profile"),
    [
        (1, 1, 0.9, 120.0, 1.0, None),
        (4, 1, 0.95, 120.0, 1.0, None),
        (8, 1, 1.3, 10.0, 1.0, None),  # overload: timeouts drop a quarter
        (2, 16, 0.8, 120.0, 1.0, None),  # batch slots at 1/16 of the GPU each
        (4, 1, 0.9, 120.0, 0.0, None),  # deterministic work
        (4, 1, 0.9, 120.0, 1.0, MEASURED),  # the measured shape
    ],
)
def test_fixed_fleet_gives_each_request_the_discrete_event_latency(
    replicas, slots, load, timeout_s, scv, profile
):
    service_s = 1.0
    wl = poisson(load * replicas / service_s, 3000, service_s, seed=replicas)
    wl = Workload("case", wl.arrivals, wl.work_s, profile=profile)
    des = simulate_requests(
        wl, replicas=replicas, slo_s=2.0, timeout_s=timeout_s, slots=slots, service_scv=scv, seed=5
    )
    q, in_flight = serve(wl, replicas * slots, float(replicas), timeout_s, 5, scv)
    arrival = draw_requests(wl, np.random.default_rng(5), scv).arrival_s
    assert np.array_equal(arrival, q.records.arrival_s)
    des_latency = np.full(arrival.size, np.nan)
    des_latency[np.searchsorted(arrival, des.arrival_s)] = des.latency_s
    end = np.asarray(q.records.end_s)
    done = ~np.isnan(end)
    assert done.sum() > 0.9 * arrival.size * min(1.0, 1.0 / load)
    assert np.abs(end[done] - arrival[done] - des_latency[done]).max() < ROUNDING_S
    # What has not completed is in flight at the end: the DES serves or drops it later.
    later_served = int((~done & ~np.isnan(des_latency)).sum())
    later_dropped = des.dropped - int(q.dropped)
    assert later_dropped >= 0
    assert later_served + later_dropped == in_flight
    if timeout_s < 60:
        assert q.dropped > 0.2 * arrival.size
    s = summarise_requests(q.records, slo_s=2.0, row_steps=3000, n_rows=1)
    within_des = int((des_latency[done] <= 2.0).sum())
    assert s.within_slo == within_des
    assert s.completed == done.sum()


def queue_seed(seed: int) -> int:
    """The engine seeds its queue with the fourth child of the scenario's seed."""
    return int(np.random.SeedSequence(seed).spawn(4)[3].generate_state(1)[0])


def test_engine_run_on_a_fixed_fleet_is_the_discrete_event_run():
    wl = poisson(0.9 * 4, 3600, 1.0, seed=3)
    sc = Scenario(
        wl,
        ClusterConfig(gpus_per_node=4, initial_nodes=1, max_nodes=1),
        ServingConfig(),
        slo_latency_s=2.0,
        timeout_s=120.0,
        seed=7,
        initial_replicas=4,
        queue_model="requests",
    )
    res = simulate(sc, StaticPolicy(4))
    des = simulate_requests(wl, replicas=4, slo_s=2.0, timeout_s=120.0, seed=queue_seed(7))
    assert res.requests == des.requests
    ends = des.arrival_s + des.latency_s
    # The engine's GPUs run within 1e-6 of full speed (physics), so a latency can move by
    # about that: a request that close to the SLO or to the end could count either way.
    near = int(np.count_nonzero(np.abs(des.latency_s - 2.0) < 1e-3))
    in_time = ends < wl.duration_s
    assert res.completed_requests == pytest.approx(in_time.sum(), abs=near + 1)
    within = int(np.count_nonzero(in_time & (des.latency_s <= 2.0)))
    assert res.within_slo == pytest.approx(within, abs=near + 1)
    assert res.dropped == des.dropped == 0


# --------------------------------------------------------------------- the engine


def run(wl: Workload, plan, *, replicas: int, grace_s: float = 30.0, **kw):
    sc = Scenario(
        workload=wl,
        cluster=ClusterConfig(
            gpus_per_node=8,
            initial_nodes=2,
            max_nodes=2,
            termination_grace_s=grace_s,
            cold_start=ColdStart.fixed(2.0),
        ),
        serving=ServingConfig(
            slots_per_replica=kw.pop("slots", 1), service_scv=kw.pop("service_scv", 1.0)
        ),
        slo_latency_s=20.0,
        timeout_s=kw.pop("timeout_s", 600.0),
        initial_replicas=replicas,
        record_interval_s=1.0,
        queue_model="requests",
        **kw,
    )
    return simulate(sc, Script(plan))


def assert_whole_requests_end_once(res) -> None:
    for x in (res.requests, res.completed_requests, res.dropped, res.in_flight_requests):
        assert x == int(x)
    assert res.completed_requests + res.dropped + res.in_flight_requests == res.requests
    assert res.latency_counts.sum() == res.completed_requests
    assert res.timeline.completed.sum() == res.completed_requests


@pytest.mark.parametrize(
    ("service_s", "grace_s", "timeout_s"),
    [(1.0, 30.0, 600.0), (20.0, 3.0, 600.0), (1.0, 30.0, 5.0)],
)
def test_scaling_in_and_out_every_few_seconds_under_load_ends_each_request_once(
    service_s, grace_s, timeout_s
):
    wl = poisson(6.0 / service_s, 1800, service_s, seed=1)  # 12 replicas 50 % busy, 3 overloaded
    res = run(
        wl,
        lambda now: 12 if (now // 8) % 2 == 0 else 3,
        replicas=12,
        grace_s=grace_s,
        timeout_s=timeout_s,
    )
    assert res.scale_events > 100
    assert_whole_requests_end_once(res)
    if service_s > grace_s:  # deleted mid-request past a short grace: retried, some twice
        assert res.retried_requests > 50
        assert res.dropped > 0
    elif timeout_s > 60:  # 1 s requests finish within a 30 s grace
        assert res.retried_requests == 0
        assert res.dropped == 0
        assert res.completed_requests > 0.98 * res.requests
    else:  # 3 slots for 6 requests a second: within 8 s the queue passes the 5 s timeout
        assert res.dropped > 0
        assert res.retried_requests == 0


def test_requests_on_a_lost_gpu_are_retried_and_counted_once():
    wl = poisson(3.2, 900, 1.0, seed=4)
    res = run(wl, lambda now: 4, replicas=4, faults=(parse_sim_fault("gpu-lost@300"),))
    assert res.retried_requests >= 1
    assert_whole_requests_end_once(res)


def test_same_seed_same_run_and_another_seed_another():
    wl = poisson(3.0, 600, 1.0, seed=2)

    def go(seed: int):
        return run(wl, lambda now: 4 if now < 300 else 3, replicas=4, seed=seed)

    a, b, c = go(1), go(1), go(2)
    assert a.within_slo == b.within_slo
    assert np.array_equal(a.latency_counts, b.latency_counts)
    assert np.array_equal(a.timeline.p99_latency_s, b.timeline.p99_latency_s, equal_nan=True)
    assert not np.array_equal(a.latency_counts, c.latency_counts)


# --------------------------------------------------------------------- one queue


def burst(n: int, work_s: float, seconds: int = 200) -> Workload:
    a = np.zeros(seconds)
    a[0] = n
    return Workload("burst", a, a * work_s)


def test_a_deleted_replica_takes_no_new_work_and_finishes_its_own():
    q = RequestQueue(burst(4, 10.0), timeout_s=1e6, seed=0, service_scv=0.0)
    q.step(0, 4.0, 40.0, 4, 4.0)  # 4 slots of speed 1: four 10 s requests start in [0, 1)
    ends = sorted(np.asarray(q.records.end_s))
    assert q.busy == 4
    assert q.start_drain(99, 2.0, 1.0)
    assert q.busy == 2
    assert q.draining == 2
    for t in range(1, 12):
        q.step(t, 0.0, 0.0, 2, 2.0)  # two slots left; the drain's are not Ready
    assert q.drained == [99]
    assert q.draining == 0
    assert sorted(np.asarray(q.records.end_s)) == ends  # each finished at its own time
    assert q.finish() == 0
    assert q.retried == q.dropped == 0


def test_what_a_deleted_replica_still_serves_at_the_end_of_its_grace_is_retried_once():
    q = RequestQueue(burst(2, 100.0), timeout_s=1e6, seed=0, service_scv=0.0)
    q.step(0, 2.0, 200.0, 2, 2.0)
    q.start_drain(7, 2.0, 1.0)
    for t in range(1, 30):
        q.step(t, 0.0, 0.0, 0, 0.0)
    q.stop_drain(30, 7)  # the grace is over: both go back to the queue, ahead of it
    assert q.retried == 2
    assert q.waiting == 2
    q.step(30, 0.0, 0.0, 2, 2.0)
    start = np.asarray(q.records.start_s)
    assert np.all(start >= 30.0)  # started again, from the retry
    q.interrupt(31, 2.0)  # interrupted on their retry: dropped, once
    assert q.dropped == q.dropped_interrupted == 2
    assert q.finish() == 0
    assert np.isnan(np.asarray(q.records.end_s)).all()


def test_a_request_waiting_past_the_timeout_is_dropped():
    q = RequestQueue(burst(3, 10.0, 40), timeout_s=5.0, seed=0, service_scv=0.0)
    for t in range(40):
        q.step(t, 0.0, 0.0, 1, 1.0)  # one slot: the second and third wait 10 s and 20 s
    assert q.dropped == 2
    assert np.count_nonzero(~np.isnan(np.asarray(q.records.end_s))) == 1


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 12),  # Ready slots
            st.sampled_from(["step", "step", "step", "interrupt", "drain", "stop"]),
            st.floats(0.0, 1.0),  # share of the busy slots the event hits
        ),
        min_size=1,
        max_size=120,
    ),
    st.floats(0.2, 30.0),  # service seconds
    st.floats(2.0, 60.0),  # timeout
    st.integers(0, 2**16),
)
def test_any_sequence_ends_each_request_once_in_arrival_order(events, service_s, timeout_s, seed):
    wl = poisson(4.0, len(events), service_s, seed=seed)
    q = RequestQueue(wl, timeout_s=timeout_s, seed=seed)
    key = 0
    for t, (slots, event, share) in enumerate(events):
        if event == "interrupt":
            q.interrupt(t, share * q.busy)
        elif event == "drain":
            key += 1
            q.start_drain(key, share * q.busy, 1.0)
        elif event == "stop" and q.drains:
            q.stop_drain(t, next(iter(q.drains)))
        before = q.busy
        q.step(t, 0.0, 0.0, slots, float(slots))
        assert q.busy <= max(slots, before)  # nothing starts on a slot that is not Ready
        q.drained.clear()
    in_flight = q.finish()
    end = np.asarray(q.records.end_s)
    completed = int(np.count_nonzero(~np.isnan(end)))
    assert completed + q.dropped + in_flight == q.records.arrival_s.size
    # First tries enter service in arrival order (FCFS) and never wait past the timeout.
    start = np.asarray(q.records.start_s)
    first = ~np.isnan(start)
    first[list(q.records.retried)] = False
    assert np.all(np.diff(start[first]) >= 0.0)
    assert np.all(start[first] - q.records.arrival_s[first] <= timeout_s)
    assert len(q.records.retried) == q.retried


def test_auto_takes_requests_for_small_or_slow_fleets_and_the_fluid_beyond():
    day = 86_400
    slow = Workload("slow", np.full(day, 1.5), np.full(day, 1.5 * 39.0))  # 58 busy slots
    assert choose("auto", slow) == "requests"
    cheap = Workload("cheap", np.full(day, AUTO_MAX_RATE), np.full(day, AUTO_MAX_RATE * 10.0))
    assert choose("auto", cheap) == "requests"  # 200 busy slots, but few requests a second
    busy = 2 * AUTO_FLUID_MIN_BUSY
    big = Workload("big", np.full(3600, busy), np.full(3600, busy))  # 1 s each
    assert choose("auto", big) == "fluid"
    assert choose("auto", big, speed=4.0) == "requests"  # 4x faster GPUs: 30 busy
    assert choose("fluid", slow) == "fluid"
    assert choose("requests", big) == "requests"
    # LLM replicas of 64 slots: 40 requests/s of 0.25 s keep 10 replicas busy, 0.75 s 30
    few = Workload("few", np.full(3600, 40.0), np.full(3600, 10.0))
    assert choose("auto", few, slots=64) == "requests"
    many = Workload("many", np.full(3600, 40.0), np.full(3600, 30.0))
    assert choose("auto", many, slots=64) == "fluid"
    huge = Workload("huge", np.full(day, 30.0), np.full(day, 30.0))  # 2.6 M requests
    assert choose("auto", huge) == "fluid"


def test_an_unknown_queue_model_is_named():
    wl = poisson(1.0, 10, 1.0)
    with pytest.raises(ConfigError, match=r"scenario\.queue_model='exact'"):
        Scenario(wl, ClusterConfig(), ServingConfig(), 1.0, 4.0, queue_model="exact")


def llm_run(replicas: int, rate: float, seconds: int = 1800):
    """Llama-2-70B replicas (test_serving.steady_llm's requests) served request by request."""
    from gpuscale.sim.serving import llm_work_seconds

    rng = np.random.default_rng(1)
    ctx = np.rint(rng.lognormal(np.log(1024) - 0.5, 1.0, 20_000)).clip(1)
    gen = np.rint(rng.lognormal(np.log(256) - 0.5, 1.0, 20_000)).clip(1)
    work = llm_work_seconds(ctx, gen)
    a = np.full(seconds, rate)
    tokens = np.stack([a * ctx.mean(), a * gen.mean()], axis=1)
    profile = RequestProfile.from_samples(work, ctx, gen)
    wl = Workload("llm", a, a * work.mean(), tokens, profile)
    sc = Scenario(
        wl,
        ClusterConfig(initial_nodes=1, max_nodes=1, cold_start=ColdStart.fixed(30.0)),
        ServingConfig.for_llm(),
        slo_latency_s=60.0,
        timeout_s=600.0,
        initial_replicas=replicas,
        queue_model="requests",
    )
    return simulate(sc, StaticPolicy(replicas))


def test_llm_requests_are_scored_on_ttft_and_tpot_each():
    light, heavy = llm_run(2, 1.6), llm_run(2, 3.6)  # about 41 % and 92 % of the slots busy
    for res in (light, heavy):
        assert_whole_requests_end_once(res)
        assert res.ttft_within_slo is not None
        assert res.tpot_within_slo is not None
        assert res.within_slo <= min(res.ttft_within_slo, res.tpot_within_slo)
    ended = light.requests - light.in_flight_requests
    assert light.within_slo / ended >= 0.999  # hardly a wait: the SLO is attainable
    # Near saturation requests wait past the TTFT budget (5 idle prefills, about a second).
    assert heavy.ttft_within_slo < 0.99 * (heavy.requests - heavy.in_flight_requests)


def test_engine_deleted_pods_finish_their_requests_then_free_their_gpus():
    # 4 replicas of 4 slots, 6 slots busy with 10 s requests (2.5 GPU-s at 1/4 of a GPU,
    # deterministic); at t=600 two are deleted with a 30 s grace: what they serve ends
    # within 10 s, on them, and only then do their GPUs go.
    a = np.random.default_rng(2).poisson(np.full(1200, 0.6)).astype(float)
    wl = Workload("steady", a, a * 2.5)
    res = run(wl, lambda now: 4 if now < 600 else 2, replicas=4, slots=4, service_scv=0.0)
    alloc = res.timeline.allocated_gpus
    assert res.timeline.ready_replicas[600] == 2  # deleted pods take no new work at once
    assert alloc[599] == alloc[600] == 4  # they hold their GPUs while they finish
    assert np.all(alloc[612:] == 2)  # 10 s requests: drained by 611
    assert res.retried_requests == 0
    assert res.dropped == 0
    assert_whole_requests_end_once(res)
