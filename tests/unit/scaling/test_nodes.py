"""Node-filling arithmetic: a count of nodes is priced at its smallest members."""

import math

from hypothesis import given
from hypothesis import strategies as st

from gpuscale.scaling.nodes import fewest_nodes, held_by, known_slots, on_nodes, short_by

SIZE = 8
slot_lists = st.lists(st.integers(0, 12), max_size=12)


def test_known_slots_drops_empty_nodes_caps_large_ones_and_sorts():
    assert known_slots((8, 0, 7, 16, 3), SIZE) == [3, 7, 8, 8]


def test_a_node_that_lost_a_gpu_is_counted_at_what_it_holds():
    known = known_slots((8, 7), SIZE)
    assert held_by(2, known, SIZE) == 15
    assert held_by(3, known, SIZE) == 23  # a node beyond those known holds SIZE
    assert fewest_nodes(15, known, SIZE) == 2
    assert fewest_nodes(16, known, SIZE) == 3  # 7 + 8 cannot hold 16
    assert short_by(16, known, SIZE) == 1
    assert on_nodes(24, known, SIZE) == 23


@given(slot_lists, st.integers(0, 200))
def test_fewest_nodes_is_the_least_count_that_holds_the_replicas(slots, replicas):
    known = known_slots(slots, SIZE)
    nodes = fewest_nodes(replicas, known, SIZE)
    assert held_by(nodes, known, SIZE) >= replicas
    assert nodes == 0 or held_by(nodes - 1, known, SIZE) < replicas


@given(st.integers(0, 200))
def test_whole_nodes_count_as_size_each(replicas):
    known = known_slots([SIZE] * 5, SIZE)
    nodes = fewest_nodes(replicas, known, SIZE)
    assert nodes == math.ceil(replicas / SIZE)
    assert held_by(nodes, known, SIZE) == nodes * SIZE
    assert short_by(replicas, known, SIZE) == 0
    assert on_nodes(replicas, known, SIZE) == replicas


@given(slot_lists, st.integers(0, 200))
def test_on_nodes_undoes_counting_every_node_whole(slots, replicas):
    known = known_slots(slots, SIZE)
    nominal = replicas + short_by(replicas, known, SIZE)
    assert math.ceil(nominal / SIZE) == fewest_nodes(replicas, known, SIZE)
    assert on_nodes(nominal, known, SIZE) == replicas
