"""Where the harness's fleet bounds come from: the node pool, sized as a user would.

A policy's ``max_replicas`` must not leak what only hindsight knows (the oracle's
plan), or every baseline inherits the oracle's foresight. So the bound every
policy shares is what the node pool holds, and the default pool is sized from
figures a user has before deploying: the trace's peak request rate and the mean
time a replica spends per request, with a stated headroom (``pool_replicas``).
"""

import math

import numpy as np

from gpuscale.sim.cluster import ClusterConfig
from gpuscale.sim.latency import centred_mean
from gpuscale.sim.serving import ServingConfig, relative_speed
from gpuscale.sim.workload import Workload

POOL_HEADROOM = 2.0
"""The default node pool holds this many times the peak load, in replicas."""

POOL_RATE_WINDOW_S = 60
"""The peak request rate a user knows: the highest mean over this many seconds."""


def gpus_per_replica(serving: ServingConfig) -> int:
    """GPUs one replica takes (``serving.gpus_per_replica`` where the model has it, else 1).

    Returns:
        GPUs, at least 1.
    """
    return max(int(getattr(serving, "gpus_per_replica", 1)), 1)


def pool_replicas(workload: Workload, serving: ServingConfig, gpu_model: str) -> int:
    """Replicas the default node pool holds, from what a user knows of the trace.

    The peak request rate (the highest ``POOL_RATE_WINDOW_S`` mean) times the mean
    time a replica spends per request (work per request over the GPU's speed, at
    full batch), times ``POOL_HEADROOM``. The oracle's plan is not read.

    Returns:
        Replicas, at least 1.
    """
    peak = float(np.max(centred_mean(workload.arrivals, POOL_RATE_WINDOW_S), initial=0.0))
    per_request = workload.mean_service_s() / relative_speed(gpu_model, serving.reference_model)
    return max(math.ceil(POOL_HEADROOM * peak * per_request - 1e-9), 1)


def fleet_replicas(cluster: ClusterConfig, serving: ServingConfig) -> int:
    """Replicas the node pool holds at its largest: every policy's ``max_replicas``.

    Returns:
        ``max_nodes x gpus_per_node`` over the GPUs per replica, at least 1.
    """
    return max(cluster.max_gpus // gpus_per_replica(serving), 1)
