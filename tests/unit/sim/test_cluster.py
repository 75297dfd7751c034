"""The simulated cluster gives pods the life Kubernetes gives them."""

import gzip
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.errors import ConfigError
from gpuscale.scaling.policy import PodStatus, TargetStatus
from gpuscale.sim.cluster import (
    NODE_READY,
    PENDING,
    READY,
    STARTING,
    TERMINATING,
    Cluster,
    ClusterConfig,
    ColdStart,
)
from gpuscale.sim.coldstart import GENTD26_MODEL_LOAD_QUANTILES_S

TRACES = Path(__file__).resolve().parents[3] / ".." / "shared" / "traces"
MODEL_LOAD = TRACES / "gentd26_base_model_load_ms.csv.gz"


def small(**kw) -> ClusterConfig:
    base = dict(
        gpus_per_node=2,
        initial_nodes=1,
        max_nodes=3,
        node_provision_s=180.0,
        termination_grace_s=30.0,
        cold_start=ColdStart.fixed(60.0),
    )
    base.update(kw)
    return ClusterConfig(**base)


def run_until(cluster: Cluster, end: float) -> None:
    for t in range(int(end) + 1):
        cluster.advance(t)


def test_pod_is_pending_while_no_gpu_is_free_then_node_joins_after_provisioning():
    c = Cluster(small())
    c.start(2)
    c.scale(3, now=10.0)
    new = max(c.pods.values(), key=lambda p: p.uid)
    assert new.state == PENDING
    assert new.slot == -1
    assert c.nodes_up() == 2  # the autoscaler asked for one more node
    run_until(c, 10 + 180 - 1)
    assert new.state == PENDING
    c.advance(190.0)
    assert new.state == STARTING
    assert new.slot >= 0
    c.advance(190.0 + 59.0)
    assert new.state == STARTING
    c.advance(250.0)
    assert new.state == READY
    assert new.ready_at == 250.0
    assert c.status().ready == 3


def test_pod_is_ready_only_after_its_sampled_cold_start():
    cold = ColdStart.from_gentd26()
    c = Cluster(small(initial_nodes=3, cold_start=cold), seed=7)
    c.scale(4, now=0.0)
    expected = cold.sample(np.random.default_rng(7), 4)  # the cluster's own draws
    for pod, want in zip(sorted(c.pods.values(), key=lambda p: p.uid), expected, strict=True):
        assert pod.state == STARTING
        assert pod.due == pytest.approx(want)
    run_until(c, 200)
    ready_at = sorted(p.ready_at for p in c.pods.values())
    assert ready_at == pytest.approx(sorted(expected))
    assert min(ready_at) >= cold.quantile(0.0)


def test_scale_down_stops_traffic_at_once_and_frees_the_gpu_after_grace():
    c = Cluster(small())
    c.start(2)
    c.scale(1, now=100.0)
    gone = [p for p in c.pods.values() if p.state == TERMINATING]
    assert len(gone) == 1
    assert c.status().ready == 1
    assert len(c.status().pods) == 1
    slot = gone[0].slot
    c.advance(129.0)
    assert c.slot_pod[slot] == gone[0].uid
    c.advance(130.0)
    assert c.slot_pod[slot] == -1
    assert gone[0].uid not in c.pods


def test_drained_pod_is_released_before_its_grace_and_the_grace_event_is_then_a_no_op():
    c = Cluster(small(initial_nodes=1, max_nodes=1))
    c.start(2)
    c.scale(1, now=100.0)
    gone = next(p for p in c.pods.values() if p.state == TERMINATING)
    slot, version = gone.slot, c.version
    c.scale(2, now=101.0)  # no GPU free while the deleted pod holds it: Pending
    waiting = next(p for p in c.pods.values() if p.state == PENDING)
    assert c.release(gone.uid, now=105.0)
    assert c.version > version
    assert gone.uid not in c.pods
    assert c.slot_pod[slot] == waiting.uid  # the freed GPU goes to the pending pod
    assert waiting.state == STARTING
    assert not c.release(waiting.uid, now=106.0)  # only a terminating pod is released
    run_until(c, 140)  # the grace event at 130 finds nothing to do
    assert c.slot_pod[slot] == waiting.uid


def test_scale_down_deletes_unscheduled_then_starting_then_newest_ready():
    c = Cluster(small(initial_nodes=2, max_nodes=2))
    c.start(2)
    c.scale(3, now=10.0)  # starting (cold start 60 s)
    c.advance(70.0)
    c.scale(4, now=80.0)  # starting
    c.scale(5, now=90.0)  # no GPU left and no node to add: pending
    states = sorted((p.uid, p.state) for p in c.pods.values())
    assert [s for _, s in states] == [READY, READY, READY, STARTING, PENDING]
    c.scale(2, now=100.0)
    remaining = sorted(p.uid for p in c.pods.values() if p.state == READY)
    terminating = sorted(p.uid for p in c.pods.values() if p.state == TERMINATING)
    assert remaining == [1, 2]  # the oldest Ready pods stay
    assert terminating == [3, 4]  # the newest Ready pod and the starting one go
    assert all(p.state != PENDING for p in c.pods.values())  # the pending one went first


def test_empty_node_is_removed_after_idle_time_but_not_below_the_floor():
    c = Cluster(small(initial_nodes=1, node_idle_remove_s=600.0))
    c.start(2)
    c.scale(4, now=0.0)
    run_until(c, 300)
    assert c.nodes_up() == 2
    c.scale(2, now=300.0)
    run_until(c, 300 + 30 + 599)
    assert c.nodes_up() == 2
    c.advance(930.0)
    assert c.nodes_up() == 1
    c.scale(0, now=1000.0)
    run_until(c, 3000)
    assert c.nodes_up() == 1  # min_nodes defaults to the initial node count


def test_a_node_emptied_again_waits_the_whole_idle_time_from_its_last_emptying():
    # cluster-autoscaler's unneeded timer restarts when a node holds a pod again: a
    # node emptied at 330 s, refilled and emptied again at 630 s stays until 1230 s.
    c = Cluster(small(initial_nodes=1, node_idle_remove_s=600.0))
    c.start(2)
    c.scale(4, now=0.0)
    run_until(c, 300)
    c.scale(2, now=300.0)  # the second node's pods drain; it is empty from 330 s
    run_until(c, 400)
    c.scale(4, now=400.0)  # they come back onto it before its idle time ends
    run_until(c, 600)
    assert c.nodes_up() == 2
    c.scale(2, now=600.0)  # empty again from 630 s
    run_until(c, 1229)
    assert c.nodes_up() == 2  # 330 s + 600 s passed, but only 599 s of this emptiness
    c.advance(1230.0)
    assert c.nodes_up() == 1


def test_lost_gpu_fails_its_pod_which_is_replaced_elsewhere_and_repaired_later():
    c = Cluster(small(initial_nodes=2, max_nodes=2), spare_gpus=1)
    c.start(2)
    victim = c.pods[1]
    slot = victim.slot
    gone = c.fail_gpu(slot, now=50.0, replace_after=1000.0)
    assert gone is victim
    assert 1 not in c.pods
    assert c.slot_broken[slot]
    replacement = max(c.pods.values(), key=lambda p: p.uid)
    assert replacement.state == STARTING
    assert replacement.slot != slot
    assert len(c.live_pods()) == 2
    run_until(c, 1050)
    assert not c.slot_broken[slot]
    assert c.slot_phys[slot] == c.n_slots  # a new device: the spare


def test_restarted_pod_cold_starts_again_in_place():
    c = Cluster(small())
    c.start(1)
    pod = c.pods[1]
    slot = pod.slot
    c.restart_pod(pod, now=20.0)
    assert pod.state == STARTING
    assert pod.slot == slot
    assert c.status().ready == 0
    c.advance(80.0)
    assert pod.state == READY
    assert pod.ready_at == 80.0


def timeline(seed: int) -> list[tuple[str, float | None]]:
    c = Cluster(small(initial_nodes=1, max_nodes=3, cold_start=ColdStart.from_gentd26()), seed=seed)
    c.start(1)
    for t in range(0, 1200):
        if t % 100 == 0:
            c.scale(1 + (t // 100) % 5, now=float(t))
        c.advance(float(t))
    return [(p.name, p.ready_at) for p in c.pods.values()]


def test_same_seed_gives_the_same_pod_timeline():
    assert timeline(3) == timeline(3)
    assert timeline(3) != timeline(4)


def test_initial_replicas_beyond_initial_nodes_is_a_config_error():
    c = Cluster(small())
    with pytest.raises(ConfigError, match="initial_nodes"):
        c.start(3)


@pytest.mark.parametrize(
    ("key", "value"),
    [("gpus_per_node", 0), ("initial_nodes", 9), ("node_provision_s", -1.0), ("max_nodes", 0)],
)
def test_bad_cluster_config_is_a_config_error_naming_the_key(key, value):
    with pytest.raises(ConfigError, match=f"cluster.{key}"):
        small(**{key: value})


def test_bad_cold_start_is_a_config_error():
    with pytest.raises(ConfigError, match="cold start"):
        ColdStart((30.0, 10.0))


def test_fixed_cold_start_always_takes_the_same_time():
    cold = ColdStart.fixed(42.0)
    assert np.all(cold.sample(np.random.default_rng(0), 5) == 42.0)
    assert cold.mean_s == 42.0


@pytest.mark.skipif(not MODEL_LOAD.exists(), reason=f"shared trace {MODEL_LOAD} is not present")
def test_cold_start_constants_are_the_gentd26_model_load_quantiles():
    with gzip.open(MODEL_LOAD, "rt") as fh:
        rows = fh.read().splitlines()[1:]
    load_s = np.array([float(r.split(",")[1]) for r in rows]) / 1000.0
    probs = np.linspace(0.0, 1.0, len(GENTD26_MODEL_LOAD_QUANTILES_S))
    assert np.allclose(np.quantile(load_s, probs), GENTD26_MODEL_LOAD_QUANTILES_S, atol=1e-3)
    # Draws follow the data: Kolmogorov-Smirnov distance below 0.03.
    cold = ColdStart.from_gentd26(extra_s=0.0)
    draws = np.sort(cold.sample(np.random.default_rng(1), 20_000))
    data = np.sort(load_s)
    grid = np.concatenate([draws, data])
    ks = np.max(
        np.abs(
            np.searchsorted(draws, grid, side="right") / draws.size
            - np.searchsorted(data, grid, side="right") / data.size
        )
    )
    assert ks < 0.03
    assert cold.mean_s == pytest.approx(load_s.mean(), rel=0.05)


# GPUs per replica (tensor parallelism) ----------------------------------------------------------


def test_a_two_gpu_replica_holds_two_gpus_on_one_node_and_frees_both():
    c = Cluster(small(gpus_per_node=8, initial_nodes=1, max_nodes=2), gpus_per_pod=2)
    c.start(1)
    (pod,) = c.pods.values()
    assert len(pod.gpus) == 2
    assert {s // 8 for s in pod.gpus} == {0}
    assert c.held_count() == 2
    assert sorted(np.flatnonzero(c.slot_pod == pod.uid).tolist()) == sorted(pod.gpus)
    c.scale(0, now=5.0)
    assert c.release(pod.uid, 6.0)
    assert c.held_count() == 0
    assert np.all(c.slot_pod < 0)


def test_a_node_of_eight_gpus_fits_four_two_gpu_replicas_the_fifth_waits_for_a_node():
    c = Cluster(small(gpus_per_node=8, initial_nodes=1, max_nodes=3), gpus_per_pod=2)
    c.start(4)
    assert c.held_count() == 8
    c.scale(5, now=10.0)
    fifth = max(c.pods.values(), key=lambda p: p.uid)
    assert fifth.state == PENDING
    assert c.nodes_up() == 2  # one node fits the Pending pod
    c.advance(190.0)
    assert fifth.state == STARTING
    assert {s // 8 for s in fifth.gpus} == {1}
    assert c.held_count() == 10


def test_a_replica_needs_its_gpus_on_one_node_not_spread_over_two():
    c = Cluster(small(gpus_per_node=3, initial_nodes=2, max_nodes=2), gpus_per_pod=2)
    c.start(2)  # one per node: 1 GPU left free on each
    c.scale(3, now=1.0)
    third = max(c.pods.values(), key=lambda p: p.uid)
    assert third.state == PENDING  # 2 free GPUs, but on different nodes
    assert c.held_count() == 4


def test_initial_replicas_beyond_the_nodes_gpus_is_a_config_error():
    c = Cluster(small(gpus_per_node=8, initial_nodes=1), gpus_per_pod=2)
    with pytest.raises(ConfigError, match="initial replicas 5 of 2 GPU"):
        c.start(5)
    with pytest.raises(ConfigError, match="gpus_per_replica=4"):
        Cluster(small(gpus_per_node=2), gpus_per_pod=4)


def test_ready_changes_moves_exactly_when_the_ready_pods_change():
    # The engine keeps what it built from the Ready pods while this count holds, so
    # every change to the Ready set must move it, and pods that only start, stop or
    # free GPUs need not.
    c = Cluster(small(initial_nodes=2))
    c.start(2)

    def ready_ids() -> list[int]:
        return sorted(p.uid for p in c.pods.values() if p.state == READY)

    seen, before = c.ready_changes, ready_ids()
    c.scale(3, now=0.0)  # a new pod starts: no Ready pod changed
    assert ready_ids() == before
    assert c.ready_changes == seen
    c.advance(60.0)  # it turns Ready
    assert len(ready_ids()) == 3
    assert c.ready_changes > seen
    seen = c.ready_changes
    c.scale(2, now=61.0)  # the newest Ready pod terminates
    assert len(ready_ids()) == 2
    assert c.ready_changes > seen
    seen = c.ready_changes
    stopping = next(p for p in c.pods.values() if p.state == TERMINATING)
    assert c.release(stopping.uid, 62.0)  # freeing its GPU changes no Ready pod
    assert c.ready_changes == seen
    pod = next(p for p in c.pods.values() if p.state == READY)
    c.restart_pod(pod, 63.0)  # a crash takes it out of Ready
    assert pod.state == STARTING
    assert c.ready_changes > seen


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["scale", "advance", "release", "fail", "restart", "cost"]),
            st.integers(0, 7),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_cached_status_is_always_the_one_built_afresh(ops):
    # status() is rebuilt only where it can change (desired, live pods added, gone or
    # bound, Ready or not, costs); after any sequence of changes it must equal a fresh build.
    c = Cluster(small(initial_nodes=2, max_nodes=4, cold_start=ColdStart.fixed(20.0)))
    c.start(2)
    g = c.config.gpus_per_node
    now = 0.0
    for op, k in ops:
        now += 7.0
        if op == "scale":
            c.scale(k, now)
        elif op == "advance":
            c.advance(now)
        elif op == "release":
            stopping = [p for p in c.pods.values() if p.state == TERMINATING]
            if stopping:
                c.release(stopping[k % len(stopping)].uid, now)
        elif op == "fail":
            c.fail_gpu(k % c.n_devices, now, replace_after=30.0)
        elif op == "cost":
            live = c.live_pods()
            if live:
                c.set_deletion_costs({live[k % len(live)].name: -k or None})
        else:
            live = [p for p in c.pods.values() if p.state in (STARTING, READY)]
            if live:
                c.restart_pod(live[k % len(live)], now)
        fresh = TargetStatus(
            c.desired,
            tuple(
                PodStatus(
                    p.name,
                    p.state == READY,
                    p.created_at,
                    p.ready_at,
                    c.node_name(p.slot // g) if p.slot >= 0 else "",
                    "Running" if p.slot >= 0 else "Pending",
                    p.deletion_cost,
                )
                for p in c.pods.values()
                if p.state in (PENDING, STARTING, READY)
            ),
            tuple(  # each Ready node's GPUs not fallen off the bus
                sum(not c.slot_broken[n * g + i] for i in range(g)) // c.gpus_per_pod
                for n in range(len(c.node_state))
                if c.node_state[n] == NODE_READY
            ),
        )
        assert c.status() == fresh
