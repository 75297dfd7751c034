"""bench/bench_placement.py's packed fleets: what whole nodes and the autoscaler's hold cost."""

import numpy as np
import pytest

from tests.support.bench import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("bench_placement")


def test_packed_fleet_rounds_the_pods_gpus_up_to_whole_nodes_above_the_floor(bench):
    starts = np.arange(5) * 10.0
    allocated = np.array([0.0, 8.0, 9.0, 16.0, 3.0])
    packed, _ = bench.packed_fleets(starts, allocated, 8, 1, 0.0)
    # 0 GPUs still keep the pool's one floor node; 9 GPUs need two nodes of 8
    assert packed.tolist() == [8.0, 8.0, 16.0, 16.0, 8.0]


def test_held_fleet_keeps_a_node_until_unneeded_for_the_hold(bench):
    starts = np.arange(8) * 10.0
    allocated = np.array([8.0, 24.0, 8.0, 8.0, 8.0, 8.0, 8.0, 8.0])
    packed, held = bench.packed_fleets(starts, allocated, 8, 1, 30.0)
    assert packed.tolist() == [8, 24, 8, 8, 8, 8, 8, 8]
    # the three nodes the row from 10 s needs are unneeded from 20 s and go 30 s later,
    # at 50 s: the rows from 20, 30 and 40 s still hold them
    assert held.tolist() == [8, 24, 24, 24, 24, 8, 8, 8]
    assert (held >= packed).all()
