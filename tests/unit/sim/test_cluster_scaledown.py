"""cluster-autoscaler's scale-down of under-used nodes and its pause after a scale-up.

Each expectation follows the flags' documented meaning (cluster-autoscaler FAQ and
``main.go`` flag help): a GPU node is unneeded when its pods' GPU requests are below
``--scale-down-gpu-utilization-threshold`` of its allocatable GPUs and its pods fit
elsewhere; after ``--scale-down-unneeded-time`` it is drained (pods evicted and
recreated by their controller on other nodes) and deleted; ``--scan-interval`` is
10 s; no node is removed within ``--scale-down-delay-after-add`` of a scale-up.
"""

import numpy as np
import pytest

from gpuscale.errors import ConfigError
from gpuscale.sim.cluster import NODE_DRAINING, READY, TERMINATING, Cluster, ClusterConfig
from gpuscale.sim.coldstart import ColdStart
from gpuscale.sim.scaledown import SCAN_INTERVAL_S, drain_candidates


def pool(**kw) -> ClusterConfig:
    """A pool of 4-GPU nodes with cluster-autoscaler's defaults, but no pause after adds."""
    base = dict(
        scale_down_delay_after_add_s=0.0,
        gpus_per_node=4,
        initial_nodes=2,
        min_nodes=1,
        max_nodes=3,
        node_provision_s=180.0,
        termination_grace_s=30.0,
        node_idle_remove_s=600.0,
        cold_start=ColdStart.fixed(60.0),
    )
    base.update(kw)
    return ClusterConfig(**base)


def run_until(cluster: Cluster, start: float, end: float) -> None:
    for t in range(int(start), int(end) + 1):
        cluster.advance(float(t))


def node_of(cluster: Cluster, pod_uid: int) -> int:
    return cluster.pods[pod_uid].slot // cluster.config.gpus_per_node


def two_on_first_one_on_second(c: Cluster) -> None:
    """Node 0 holds two Ready pods and node 1 one, from t = 100 s on."""
    c.start(5)  # pods 1-4 fill node 0, pod 5 takes node 1's first GPU
    c.delete_named([c.pods[1].name, c.pods[2].name], now=0.0)  # replacements 6, 7 on node 1
    c.scale(3, now=0.0)  # the two starting replacements go first: 3, 4 on node 0 and 5 on 1
    run_until(c, 0, 100)
    assert sorted(p.uid for p in c.live_pods()) == [3, 4, 5]
    assert [node_of(c, u) for u in (3, 4, 5)] == [0, 0, 1]


def candidates(used, working=(4, 4, 4), ready=(True, True, True), threshold=0.5, per_pod=1):
    arrays = (np.array(used), np.array(working), np.array(ready))
    return drain_candidates(*arrays, threshold, per_pod).tolist()


def test_a_candidate_holds_under_the_threshold_share_and_is_never_empty():
    assert candidates([4, 1, 0]) == [False, True, False]  # the empty one goes by idle time
    assert candidates([2, 1, 3]) == [False, True, False]  # "below which": 2 of 4 is not
    assert candidates([3, 1, 3], threshold=0.0) == [False, False, False]
    assert candidates([1, 1, 3], ready=(True, False, True)) == [True, False, False]


def test_a_candidates_pods_must_fit_whole_on_the_other_nodes():
    assert candidates([4, 1, 4]) == [False, False, False]  # no room elsewhere
    assert candidates([3, 1, 4]) == [False, True, False]  # node 0's free GPU takes it
    # Two-GPU pods: 1 free GPU on each of two nodes holds no pod.
    assert candidates([2, 3, 2], working=(3, 4, 3), per_pod=2, threshold=0.9) == [
        False,
        False,
        False,
    ]
    assert candidates([2, 2, 4], working=(4, 4, 4), per_pod=2) == [False, False, False]
    assert candidates([2, 2, 0], working=(4, 4, 4), per_pod=2, threshold=0.6) == [True, True, False]


def test_an_under_used_node_is_drained_onto_another_and_removed_after_the_unneeded_time():
    c = Cluster(pool())
    two_on_first_one_on_second(c)
    # Node 1 holds 1 of 4 GPUs (< 0.5) and node 0 has room for its pod since ~30 s, when
    # the deleted pods freed their GPUs; the first scan after that starts its timer.
    run_until(c, 101, 600)
    assert c.nodes_up() == 2
    assert c.pods[5].state == READY
    run_until(c, 601, 30 + 600 + 2 * SCAN_INTERVAL_S)
    assert c.pods[5].state == TERMINATING  # evicted; its GPU held until it drains
    assert c.node_state[1] == NODE_DRAINING
    replacement = max(c.pods)
    assert node_of(c, replacement) == 0  # recreated on the node with room, not the tainted one
    assert len(c.live_pods()) == 3  # spec.replicas kept throughout
    run_until(c, 30 + 600 + 2 * SCAN_INTERVAL_S + 1, 30 + 600 + 2 * SCAN_INTERVAL_S + 31)
    assert 5 not in c.pods
    assert c.nodes_up() == 1  # deleted as soon as its pod left, no second idle wait
    assert c.ready_node_gpus == 4
    assert c.use.used == (c.slot_pod >= 0).reshape(-1, 4).sum(axis=1).tolist()


def test_a_drained_node_is_billed_until_its_pods_have_left():
    c = Cluster(pool())
    two_on_first_one_on_second(c)
    run_until(c, 101, 30 + 600 + 2 * SCAN_INTERVAL_S)
    assert c.node_state[1] == NODE_DRAINING
    assert c.ready_node_gpus == 8
    assert c.on_ready_node()[4:8].all()  # powered and counted
    assert c.node_slots() == (4,)  # but no longer offered to the scheduler or the policies


def test_no_drain_without_room_for_the_pods_on_other_nodes():
    c = Cluster(pool())
    c.start(5)  # node 0 full, node 1 holds one pod: under-used, but nowhere to move it
    run_until(c, 0, 2000)
    assert c.nodes_up() == 2
    assert c.pods[5].state == READY


def test_a_node_back_above_the_threshold_restarts_its_timer():
    c = Cluster(pool())
    two_on_first_one_on_second(c)
    run_until(c, 101, 400)
    c.scale(5, now=400.0)  # two more pods: node 0 fills, node 1 back to... 1 of 4
    run_until(c, 401, 500)
    c.scale(7, now=500.0)  # node 1 now holds 3 of 4: not under-used
    run_until(c, 501, 700)
    c.scale(3, now=700.0)  # the four newest go: node 1 back to its one pod at ~730 s
    run_until(c, 701, 1300)
    assert c.nodes_up() == 2  # not due before ~730 s + 600 s
    run_until(c, 1301, 1400)
    assert c.nodes_up() == 1


def test_threshold_zero_removes_only_empty_nodes():
    c = Cluster(pool(scale_down_gpu_utilization_threshold=0.0))
    two_on_first_one_on_second(c)
    run_until(c, 101, 3000)
    assert c.nodes_up() == 2


def test_no_node_is_removed_within_the_delay_after_a_scale_up():
    c = Cluster(pool(initial_nodes=1, scale_down_delay_after_add_s=1000.0))
    c.start(4)
    c.scale(5, now=0.0)  # a second node is asked for at 0 s and joins at 180 s
    c.scale(4, now=10.0)  # the pending pod goes: the new node joins empty
    run_until(c, 0, 999)
    assert c.nodes_up() == 2  # empty since 180 s, due at 780 s, held until 1000 s
    c.advance(1000.0)
    assert c.nodes_up() == 1


def test_out_of_range_scale_down_settings_name_the_key():
    with pytest.raises(ConfigError, match=r"scale_down_gpu_utilization_threshold=1\.5"):
        pool(scale_down_gpu_utilization_threshold=1.5)
    with pytest.raises(ConfigError, match=r"scale_down_delay_after_add_s=-1\.0"):
        pool(scale_down_delay_after_add_s=-1.0)
