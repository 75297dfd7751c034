"""The cluster's incrementally kept sets equal what a scan of every pod gives."""

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.sim.cluster import (
    NODE_DRAINING,
    NODE_READY,
    PENDING,
    READY,
    STARTING,
    TERMINATING,
    Cluster,
    ClusterConfig,
    ColdStart,
    Pod,
)

OPS = st.lists(
    st.tuples(
        st.sampled_from(["scale", "advance", "release", "fail", "restart", "delete"]),
        st.integers(0, 9),
    ),
    min_size=1,
    max_size=50,
)


def deletion_order(live: list[Pod], node_gpus: int) -> list[Pod]:
    """Kubernetes' scale-in order, from scratch: a stable sort of every live pod.

    Unscheduled first, not Ready next, then the lower deletion cost, the more pods on
    the same node, the most recently Ready, the newest.
    """
    node = {p.uid: p.slot // node_gpus if p.slot >= 0 else -1 for p in live}
    on_node = {n: sum(1 for q in live if node[q.uid] == n) for n in node.values()}
    return sorted(
        live,
        key=lambda p: (
            p.slot >= 0,
            p.state == READY,
            p.deletion_cost,
            -on_node[node[p.uid]],
            -(math.inf if p.ready_at is None else p.ready_at),
            -p.created_at,
        ),
    )


@settings(max_examples=150, deadline=None)
@given(OPS, st.sampled_from([1, 2]))
def test_kept_sets_equal_a_fresh_scan_after_any_changes(ops, gpus_per_pod):
    # held_count, live_pods, on_ready_node, the GPUs held and working per node, the
    # scale-in victims (found among the starting pods alone when they suffice) and
    # take_left_ready are kept as pods change instead of scanning every pod; after each
    # change they must equal the scan, whatever the sequence.
    config = ClusterConfig(
        gpus_per_node=4,
        initial_nodes=2,
        max_nodes=4,
        node_provision_s=30.0,
        termination_grace_s=30.0,
        node_idle_remove_s=5.0,  # short, so that nodes are drained and removed in a sequence
        scale_down_delay_after_add_s=5.0,
        cold_start=ColdStart.fixed(20.0),
    )
    c = Cluster(config, gpus_per_pod=gpus_per_pod)
    c.start(2)
    now = 0.0
    for op, k in ops:
        now += 3.0 + k  # pods created at different times, some still starting
        ready_before = {p.uid for p in c.pods.values() if p.state == READY}
        live_before = [p for p in c.pods.values() if p.state in (PENDING, STARTING, READY)]
        expected_victims: list[int] = []
        if op == "scale":
            want = k % 7
            if want < len(live_before):
                victims = deletion_order(live_before, config.gpus_per_node)[
                    : len(live_before) - want
                ]
                expected_victims = [p.uid for p in victims]
            c.scale(want, now)
        elif op == "advance":
            c.advance(now)
        elif op == "release":
            stopping = [p for p in c.pods.values() if p.state == TERMINATING]
            if stopping:
                c.release(stopping[k % len(stopping)].uid, now)
        elif op == "fail":
            c.fail_gpu(k % c.n_slots, now, replace_after=40.0)
        elif op == "restart":
            if live_before:
                c.restart_pod(live_before[k % len(live_before)], now)
        elif live_before:
            c.delete_named([live_before[k % len(live_before)].name], now)
        for uid in expected_victims:  # each chosen pod is deleted (terminating or gone)
            assert uid not in c.pods or c.pods[uid].state == TERMINATING
        deleted = [p.uid for p in live_before if p.uid not in c.pods or p.state == TERMINATING]
        if op == "scale":
            assert sorted(deleted) == sorted(expected_victims)
        assert c.held_count() == int(np.count_nonzero(c.slot_pod >= 0))
        joined = (c.node_state == NODE_READY) | (c.node_state == NODE_DRAINING)
        assert np.array_equal(c.on_ready_node(), np.repeat(joined, config.gpus_per_node))
        per_node = (-1, config.gpus_per_node)  # GPUs held and working, kept per node
        assert c.use.used == (c.slot_pod >= 0).reshape(per_node).sum(axis=1).tolist()
        assert c.use.working == (~c.slot_broken).reshape(per_node).sum(axis=1).tolist()
        live = [p for p in c.pods.values() if p.state in (PENDING, STARTING, READY)]
        assert c.live_pods() == live
        ready_now = {p.uid for p in c.pods.values() if p.state == READY}
        assert ready_before - ready_now <= set(c.take_left_ready())
        assert c.take_left_ready() == []  # taken: the next call starts afresh


def test_scale_in_takes_the_most_recently_ready_pods_one_by_one():
    # Pods turn Ready at different times; each scale-in by one must take the pod a full
    # ranking of every live pod puts first (the newest Ready, not one already deleted).
    c = Cluster(
        ClusterConfig(
            gpus_per_node=8, initial_nodes=2, max_nodes=2, cold_start=ColdStart.fixed(20.0)
        )
    )
    c.start(2)
    for i in range(6):  # one pod created every 7 s: each turns Ready 20 s later
        c.scale(3 + i, 7.0 * i)
        c.advance(7.0 * i)
    c.advance(100.0)
    assert len(c.ready_pods()) == 8
    for want in range(7, -1, -1):
        live = [p for p in c.pods.values() if p.state in (PENDING, STARTING, READY)]
        expected = deletion_order(live, c.config.gpus_per_node)[0]
        c.scale(want, 101.0 + want)
        assert expected.state == TERMINATING
        assert [p.uid for p in c.live_pods()] == [p.uid for p in live if p is not expected]
