"""Every arrival ends exactly once: completed, dropped, or in flight when the run ends.

Scale-in drains: a deleted pod takes no new work, finishes what it serves within
the termination grace and holds its GPU until then; what it still serves at the
end of the grace, or on a pod that failed, is retried once and dropped if
interrupted again.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.sim.cluster import ClusterConfig, ColdStart
from gpuscale.sim.engine import Scenario, simulate
from gpuscale.sim.faults import parse_sim_fault
from gpuscale.sim.fixed import serve_fixed
from gpuscale.sim.fluid import FluidQueue
from gpuscale.sim.outcome import ConservationError, RunResult, check_conservation
from gpuscale.sim.serving import ServingConfig
from gpuscale.sim.workload import Workload
from tests.support.sim import Script


def poisson(rate: float, seconds: int, service_s: float, seed: int = 0) -> Workload:
    a = np.random.default_rng(seed).poisson(np.full(seconds, rate)).astype(float)
    return Workload("steady", a, a * service_s)


def run(
    wl: Workload,
    plan,
    *,
    replicas: int,
    grace_s: float = 30.0,
    cold_s: float = 10.0,
    slots: int = 1,
    **kw,
) -> RunResult:
    sc = Scenario(
        workload=wl,
        cluster=ClusterConfig(
            gpus_per_node=8,
            initial_nodes=2,
            max_nodes=2,
            termination_grace_s=grace_s,
            cold_start=ColdStart.fixed(cold_s),
        ),
        serving=ServingConfig(slots_per_replica=slots),
        slo_latency_s=kw.pop("slo_latency_s", 20.0),
        timeout_s=kw.pop("timeout_s", 600.0),
        initial_replicas=replicas,
        record_interval_s=1.0,
        queue_model=kw.pop("queue_model", "fluid"),  # these pin the fluid's behaviour
        **kw,
    )
    return simulate(sc, Script(plan))


def assert_each_request_ends_once(res: RunResult) -> None:
    ended = res.completed_requests + res.dropped_requests + res.in_flight_requests
    assert ended == pytest.approx(res.requests, rel=1e-9, abs=1e-6)
    # Served requests are the latency histogram: none twice, none beyond the arrivals.
    assert float(res.latency_counts.sum()) == pytest.approx(res.completed_requests, rel=1e-9)
    assert float(res.latency_counts.sum()) + res.dropped <= res.requests + 1e-6


@pytest.mark.parametrize(
    ("service_s", "grace_s", "retries"),
    [(1.0, 30.0, False), (20.0, 3.0, True)],
)
def test_scaling_in_and_out_every_few_seconds_under_load_serves_each_request_once(
    service_s, grace_s, retries
):
    rate = 6.0 / service_s  # 6 busy slots: 12 replicas are 50 % busy, 3 are overloaded
    wl = poisson(rate, 1800, service_s, seed=1)
    res = run(
        wl, lambda now: 12 if (now // 8) % 2 == 0 else 3, replicas=12, grace_s=grace_s, cold_s=2.0
    )
    assert res.scale_events > 100
    assert_each_request_ends_once(res)
    assert res.completed_requests > 0.9 * res.requests
    if retries:  # pods deleted mid-request past a short grace: their requests retried
        assert res.retried_requests > 10
    else:
        assert res.retried_requests == 0.0


def test_draining_pod_takes_no_new_work_and_frees_its_gpu_once_drained():
    # 4 replicas of 4 slots, 6 slots busy with 10 s requests; at t=600 two are deleted
    # with 1.5 requests each in flight, and the other two (8 slots) carry the load.
    wl = poisson(0.6, 1200, 2.5, seed=2)
    res = run(wl, lambda now: 4 if now < 600 else 2, replicas=4, slots=4)
    tl = res.timeline
    assert tl.ready_replicas[599] == 4
    assert tl.ready_replicas[600] == 2  # deleted pods take no new work at once
    assert tl.capacity_rps[600] == pytest.approx(0.8)  # two pods' 0.4 requests/s each
    assert tl.allocated_gpus[600] == 4  # but hold their GPUs while they finish
    drained = int(np.argmax(tl.allocated_gpus[600:] == 2))
    assert 5 <= drained < 30  # freed once drained (about 10 s x ln 3), within the grace
    assert res.retried_requests == 0.0  # everything in flight finished on them
    assert res.dropped == pytest.approx(0.0, abs=1e-6)
    assert_each_request_ends_once(res)


def test_what_a_pod_still_serves_when_its_grace_ends_is_retried_once():
    # The same with 100 s requests: 1.5 in flight on each deleted pod cannot finish
    # within the 30 s grace; about 1.5 x e^-0.3 each are retried.
    wl = poisson(0.06, 1500, 25.0, seed=3)
    res = run(wl, lambda now: 4 if now < 900 else 2, replicas=4, slots=4)
    alloc = res.timeline.allocated_gpus
    assert alloc[929] == 4  # held for the whole grace
    assert alloc[931] == 2
    assert res.retried_requests == pytest.approx(2 * 1.5 * np.exp(-0.3), rel=0.25)
    assert_each_request_ends_once(res)


def test_requests_on_a_lost_gpu_are_retried_and_counted_once():
    wl = poisson(3.2, 900, 1.0, seed=4)
    faults = (parse_sim_fault("gpu-lost@300"),)
    res = run(wl, lambda now: 4, replicas=4, faults=faults)
    assert res.retried_requests > 0.1
    assert_each_request_ends_once(res)


def served(q: FluidQueue) -> float:
    return float(sum(q.records.count))


def test_a_request_interrupted_twice_is_dropped_once():
    q = FluidQueue(timeout_s=1e6)
    q.step(0, 10.0, 1000.0, 100, 100.0)  # 10 requests of 100 s on 100 slots
    first = q.busy
    assert first > 9.0
    q.interrupt(1, q.busy)  # their pods fail: they queue again, keeping their arrival
    assert q.retried == pytest.approx(first)
    assert served(q) == pytest.approx(10.0 - first)
    q.step(1, 0.0, 0.0, 100, 100.0)  # retried ahead of anything else
    retry = max(q.records.retried)
    assert q.records.wait_s[retry] >= 1.0  # waited from the first arrival, not the retry
    q.interrupt(2, q.busy)  # interrupted again: a retry is dropped, a first try retried
    assert q.dropped_interrupted == pytest.approx(first, rel=0.03)  # ~2 % finished meanwhile
    in_flight = q.finish()
    assert served(q) + q.dropped + in_flight == pytest.approx(10.0)
    assert q.dropped == pytest.approx(q.dropped_interrupted)


def test_constant_servers_never_put_a_request_back_in_the_queue():
    # The stationary split of busy and waiting moves with the load; a request in
    # service must stay there (it used to be queued and served again).
    wl = poisson(0.7 * 8, 20_000, 1.0, seed=1)
    run_ = serve_fixed(wl, replicas=8, slo_s=3.0, timeout_s=120.0)
    assert run_.completed + run_.dropped + run_.in_flight == pytest.approx(run_.requests, rel=1e-12)


def test_conservation_check_names_the_counts():
    res = run(poisson(1.0, 60, 1.0), lambda now: 2, replicas=2)
    check_conservation(res)  # the engine's own run adds up
    broken = RunResult(
        policy="p",
        timeline=res.timeline,
        requests=100.0,
        within_slo=90.0,
        dropped=2.0,
        latency_edges_s=res.latency_edges_s,
        latency_counts=res.latency_counts,
        gpu_seconds=1.0,
        busy_gpu_seconds=1.0,
        scale_events=0,
        completed_requests=101.0,
        in_flight_requests=1.0,
    )
    with pytest.raises(
        ConservationError, match=r"p: 100\.0+ requests arrived but 101\.0+ completed"
    ):
        check_conservation(broken)


def test_every_run_checks_conservation(monkeypatch):
    finish = FluidQueue.finish
    monkeypatch.setattr(FluidQueue, "finish", lambda q: finish(q) + 5.0)  # count 5 twice
    with pytest.raises(ConservationError, match=r"in flight differ by -5$"):
        run(poisson(1.0, 60, 1.0), lambda now: 2, replicas=2)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0.0, 20.0),  # arrivals this second
            st.integers(0, 12),  # Ready slots
            st.sampled_from(["step", "step", "step", "interrupt", "drain", "stop"]),
            st.floats(0.0, 1.0),  # share of the busy slots the event hits
        ),
        min_size=1,
        max_size=120,
    ),
    st.floats(0.2, 30.0),  # service seconds
    st.floats(2.0, 60.0),  # timeout
)
def test_fluid_queue_conserves_requests_under_any_sequence(events, service_s, timeout_s):
    q = FluidQueue(timeout_s=timeout_s)
    arrived, key = 0.0, 0
    for t, (a, slots, event, share) in enumerate(events):
        if event == "interrupt":
            q.interrupt(t, share * q.busy)
        elif event == "drain":
            key += 1
            q.start_drain(key, share * q.busy, 1.0)
        elif event == "stop" and q.drains:
            q.stop_drain(t, next(iter(q.drains)))
        q.step(t, a, a * service_s, slots, float(slots))
        q.drained.clear()
        arrived += a
    in_flight = q.finish()
    counts = np.asarray(q.records.count)
    assert counts.min(initial=0.0) >= 0.0
    assert served(q) + q.dropped + in_flight == pytest.approx(arrived, rel=1e-9, abs=1e-6)
