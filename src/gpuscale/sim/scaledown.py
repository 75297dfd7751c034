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


class NodeUse:
    """GPUs held and working per node, kept as pods come and go, and each node's timer.

    ``under`` holds the nodes below the threshold now, so that the cluster asks for a
    scan only while one may be drained; ``due`` is the scan itself.

    Args:
        nodes: Nodes in the pool.
        gpus_per_node: Working GPUs of a node with none broken.
        threshold: ``ClusterConfig.scale_down_gpu_utilization_threshold``.
    """

    def __init__(self, nodes: int, gpus_per_node: int, threshold: float) -> None:
        self.used = [0] * nodes
        self.working = [gpus_per_node] * nodes
        self.under: set[int] = set()
        self.threshold = threshold
        # When each non-empty node was first found a candidate at a scan; inf while not.
        self._since = np.full(nodes, np.inf)

    def note(self, node: int, gpus: int = 0, working: int = 0) -> None:
        """Count ``gpus`` more held and ``working`` more working GPUs on ``node``."""
        self.used[node] += gpus
        self.working[node] += working
        if 0 < self.used[node] < self.threshold * self.working[node]:
            self.under.add(node)
        else:
            self.under.discard(node)

    def forget(self, node: int) -> None:
        """``node`` left the pool: its timer stops."""
        self._since[node] = np.inf

    def due(self, when: float, ready: np.ndarray, gpus_per_pod: int, unneeded_s: float) -> int:
        """One scan at ``when``: time the candidates; the first one unneeded for ``unneeded_s``.

        Returns:
            That node, -1 when none is due, or -2 when no node is a candidate (no more
            scans are needed until a pod or node changes).
        """
        found = drain_candidates(
            np.array(self.used), np.array(self.working), ready, self.threshold, gpus_per_pod
        )
        if not found.any():
            self._since[:] = np.inf
            return -2
        self._since = np.where(found, np.minimum(self._since, when), np.inf)
        due = np.flatnonzero(found & (self._since + unneeded_s <= when))
        return int(due[0]) if due.size else -1
