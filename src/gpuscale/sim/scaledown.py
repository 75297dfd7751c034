"""Which nodes cluster-autoscaler would drain as under-used: one vector function.

cluster-autoscaler calls a node unneeded when the GPUs its pods request are below
``--scale-down-gpu-utilization-threshold`` of its allocatable GPUs (for a GPU node
only GPUs count) and every pod on it could be scheduled on another node; a node
unneeded for ``--scale-down-unneeded-time`` is drained (its pods evicted, their
controllers recreate them elsewhere) and deleted. It re-checks every
``--scan-interval`` (10 s by default) and drains one non-empty node at a time
(``--max-drain-parallelism`` 1). ``sim.cluster`` keeps the timers and the node
states; this module answers the question it asks at each scan.
"""

import numpy as np

SCAN_INTERVAL_S = 10.0
"""cluster-autoscaler's default ``--scan-interval``: how often it re-checks nodes."""


def drain_candidates(
    used: np.ndarray, working: np.ndarray, ready: np.ndarray, threshold: float, gpus_per_pod: int
) -> np.ndarray:
    """Nodes under-used now whose pods would fit, whole pods to a node, on the other nodes.

    An empty node is not a candidate: it is removed without a drain (``Cluster``'s
    idle timer). A threshold of 0 gives none.

    Args:
        used: GPUs held by pods on each node.
        working: Working (allocatable) GPUs of each node.
        ready: Whether each node takes pods (joined, not draining).
        threshold: Share of a node's working GPUs below which it is under-used.
        gpus_per_pod: GPUs each pod needs on one node.

    Returns:
        One bool per node.
    """
    room = np.where(ready, (working - used) // gpus_per_pod, 0) * gpus_per_pod
    under = ready & (used > 0) & (used < threshold * working)
    fits = room.sum() - room >= used  # the room on every node but itself
    found: np.ndarray = under & fits
    return found
