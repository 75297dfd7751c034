"""The GPU node pool's size and the pod lifecycle's timings, as one frozen config.

Kept apart from ``sim.cluster`` (which re-exports it) so that the cluster module
holds only the pods' and nodes' behaviour.
"""

from dataclasses import dataclass, field
from typing import Literal

from gpuscale.errors import check_ranges
from gpuscale.sim.coldstart import ColdStart


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """The GPU node pool and pod lifecycle timings.

    Attributes:
        gpu_model: GPU short name of every node (``H100``).
        gpus_per_node: GPUs per node.
        initial_nodes: Nodes up at the start.
        max_nodes: The node pool's upper bound.
        min_nodes: Nodes never removed below this; None means ``initial_nodes``.
        node_provision_s: Time from the scale-up decision to a schedulable node, seconds.
        node_idle_remove_s: An empty node is removed after this long, seconds
            (cluster-autoscaler's ``--scale-down-unneeded-time``, 10 min).
        scale_down_gpu_utilization_threshold: A node whose pods hold less than this
            share of its working GPUs, and fit on the other nodes, for
            ``node_idle_remove_s`` is drained and removed (cluster-autoscaler's
            ``--scale-down-gpu-utilization-threshold``, default 0.5). 0: only empty
            nodes are removed.
        scale_down_delay_after_add_s: No node is removed within this long of the last
            node asked for (cluster-autoscaler's ``--scale-down-delay-after-add``,
            default 10 min), seconds.
        termination_grace_s: A deleted pod holds its GPU at most this long, seconds.
        cold_start: Time from scheduling to Ready.
        namespace: Namespace of the deployment (a label on its series).
        deployment: Deployment name; pods are named after it.
        lost_gpu_pod: What happens to the pod on a GPU that fell off the bus.
            ``replaced``: it fails and its ReplicaSet replaces it on another GPU at
            once, as if something deleted it the moment the GPU went (remediation at
            its fastest). ``stuck``: what Kubernetes does by itself: the pod stays
            bound to the broken GPU, its container crash-looping, never Ready, and
            holds the GPU until something deletes it (remediation, a policy that
            replaces it, an operator).
    """

    gpu_model: str = "H100"
    gpus_per_node: int = 8
    initial_nodes: int = 2
    max_nodes: int = 16
    min_nodes: int | None = None
    node_provision_s: float = 180.0
    node_idle_remove_s: float = 600.0
    scale_down_gpu_utilization_threshold: float = 0.5
    scale_down_delay_after_add_s: float = 600.0
    termination_grace_s: float = 30.0
    cold_start: ColdStart = field(default_factory=ColdStart.from_gentd26)
    namespace: str = "default"
    deployment: str = "inference"
    lost_gpu_pod: Literal["replaced", "stuck"] = "replaced"

    def __post_init__(self) -> None:
        floor = self.initial_nodes if self.min_nodes is None else self.min_nodes
        checks = {
            "max_nodes": self.max_nodes >= 1,
            "gpus_per_node": self.gpus_per_node >= 1,
            "initial_nodes": 0 <= self.initial_nodes <= self.max_nodes,
            "min_nodes": 0 <= floor <= self.max_nodes,
            "node_provision_s": self.node_provision_s >= 0,
            "node_idle_remove_s": self.node_idle_remove_s >= 0,
            "scale_down_gpu_utilization_threshold": (
                0 <= self.scale_down_gpu_utilization_threshold <= 1
            ),
            "scale_down_delay_after_add_s": self.scale_down_delay_after_add_s >= 0,
            "termination_grace_s": self.termination_grace_s >= 0,
            "lost_gpu_pod": self.lost_gpu_pod in ("replaced", "stuck"),
        }
        check_ranges(
            "cluster",
            self,
            checks,
            "need 0 <= min_nodes, initial_nodes <= max_nodes, non-negative times, a "
            "utilisation threshold in [0, 1] and lost_gpu_pod replaced or stuck",
        )

    @property
    def floor_nodes(self) -> int:
        """Nodes the pool never shrinks below."""
        return self.initial_nodes if self.min_nodes is None else self.min_nodes

    @property
    def max_gpus(self) -> int:
        """GPUs in the pool at its largest."""
        return self.max_nodes * self.gpus_per_node
