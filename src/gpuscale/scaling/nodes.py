"""Node-filling arithmetic: how many replicas a count of nodes surely holds.

Where a node pool serves one workload, its nodes are paid for whole, so the
policies that fill nodes (``predictive``, ``hybrid``, ``oracle``) count in nodes.
Most nodes hold ``node_size`` replicas; one whose GPU fell off the bus holds fewer
(``TargetStatus.node_slots``). Which nodes the scheduler fills and the ReplicaSet
empties is not the policy's to choose, so a count of nodes is priced at its
smallest members: asking for a replica more than the nodes hold leaves a pod
pending, and the cluster autoscaler opens a node for it alone.
"""

import math
from collections.abc import Sequence


def known_slots(node_slots: Sequence[int], size: int) -> list[int]:
    """The nodes that hold a replica, smallest first, each at most ``size``.

    The form the functions below take. A node larger than ``size`` is counted as
    ``size``: the plans count in nodes of that size.
    """
    return sorted(min(s, size) for s in node_slots if s > 0)


def held_by(nodes: int, known: Sequence[int], size: int) -> int:
    """Replicas that ``nodes`` nodes surely hold: the smallest ``known`` first, then ``size`` each.

    Args:
        nodes: How many nodes.
        known: Replicas each known node holds (``known_slots``).
        size: Replicas a node beyond those known holds.
    """
    return sum(known[:nodes]) + max(0, nodes - len(known)) * size


def fewest_nodes(replicas: int, known: Sequence[int], size: int) -> int:
    """The fewest nodes that surely hold ``replicas`` (``held_by``)."""
    held = 0
    for count, slots in enumerate(known):
        if held >= replicas:
            return count
        held += slots
    return len(known) + max(0, math.ceil((replicas - held) / size))


def short_by(replicas: int, known: Sequence[int], size: int) -> int:
    """Replicas the nodes that hold ``replicas`` lack against ``size`` each (0 when whole)."""
    nodes = fewest_nodes(replicas, known, size)
    return nodes * size - held_by(nodes, known, size)


def on_nodes(nominal: int, known: Sequence[int], size: int) -> int:
    """Replicas ``nominal`` comes to on these nodes: less what its nodes lack.

    ``nominal`` counts every node as ``size``, as a plan made in whole nodes does. It
    undoes ``short_by``: ``on_nodes(r + short_by(r, ...), ...) == r``.
    """
    nodes = math.ceil(nominal / size)
    return nominal - (nodes * size - held_by(nodes, known, size))
