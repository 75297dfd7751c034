"""What a simulated run depends on besides the policy: the ``Scenario``.

The engine (``sim.engine``) runs one; the evaluation builds them from a trace and
fair defaults. It lives apart from the loop so each stays small; ``sim.engine``
re-exports it.
"""

from dataclasses import dataclass

from gpuscale.errors import check_ranges
from gpuscale.sim.cluster import ClusterConfig
from gpuscale.sim.faults import SimFault
from gpuscale.sim.queue_model import QUEUE_MODELS, QueueModel
from gpuscale.sim.serving import ServingConfig
from gpuscale.sim.workload import Workload


@dataclass(frozen=True, slots=True)
class Scenario:
    """Everything a run depends on except the policy.

    Attributes:
        workload: Demand per second.
        cluster: Node pool and pod lifecycle.
        serving: How a replica serves.
        slo_latency_s: A request is within the SLO when its latency is at most this.
        timeout_s: Requests waiting longer are dropped.
        seed: Seeds cold starts, fault targets, GPU variation and identities.
        initial_replicas: Ready replicas at the start (a warmed-up deployment).
        faults: Faults to inject.
        scrape_interval_s: Prometheus' scrape period, seconds.
        stale_after_s: The decision step's freshness bound (a GPUScaler's
            ``metrics.staleAfterSeconds``): older data holds the replicas, seconds.
        remediate: The decision step deletes pods whose GPU the series show broken
            (a GPUScaler's ``remediate: true``; ``scaling.remediate``).
        placement: Before a scale-in the decision step marks the pods to go with
            ``pod-deletion-cost`` so whole nodes empty (a GPUScaler's ``placement``;
            ``scaling.placement``), and the simulated ReplicaSet ranks its pods as
            Kubernetes' ``ActivePodsWithRanks`` does (the cost, then pods per node). Off
            (the default, as a GPUScaler's) leaves the choice to the ReplicaSet's order by
            readiness and age, the order every published comparison ran with.
        record_interval_s: Timeline row length, seconds.
        collect_interval_s: dcgm-exporter's collect period (``-c``, default 30 s):
            the GPU physics advances and the DCGM fields change only then, seconds.
        collect_offset_s: When the first periodic collect falls (one also runs at
            0 s), seconds; 7 s makes the age of the DCGM fields at a scrape average
            about 15 s, as with a collect phase unrelated to the scrape's.
        queue_model: The deployment's queue: ``fluid`` (``fluid.FluidQueue``),
            ``requests`` (one request at a time, exact: ``requests.RequestQueue``), or
            ``auto``: requests wherever that is cheap (``queue_model.choose``).
        alerting: Evaluate the alert catalogue over the run's store (``sim.alerting``):
            firing alerts become ``ALERTS`` series and the result times each fault's
            detection and mitigation. Off by default: it costs about ten times a
            small run's simulation (docs/alerts.md).
        alert_interval_s: Rule evaluation interval when alerting, seconds.
    """

    workload: Workload
    cluster: ClusterConfig
    serving: ServingConfig
    slo_latency_s: float
    timeout_s: float
    seed: int = 0
    initial_replicas: int = 1
    faults: tuple[SimFault, ...] = ()
    scrape_interval_s: float = 15.0
    stale_after_s: float = 60.0
    remediate: bool = False
    placement: bool = False
    record_interval_s: float = 10.0
    collect_interval_s: float = 30.0
    collect_offset_s: float = 7.0
    queue_model: QueueModel = "auto"
    alerting: bool = False
    alert_interval_s: float = 15.0

    def __post_init__(self) -> None:
        checks = {
            "slo_latency_s": self.slo_latency_s > 0,
            "timeout_s": self.timeout_s > 0,
            "initial_replicas": 0
            <= self.initial_replicas * self.serving.gpus_per_replica
            <= self.cluster.max_gpus,
            "scrape_interval_s": self.scrape_interval_s >= 1,
            "stale_after_s": self.stale_after_s > 0,
            "record_interval_s": self.record_interval_s >= 1,
            "collect_interval_s": self.collect_interval_s >= 1,
            "collect_offset_s": self.collect_offset_s >= 0,
            "queue_model": self.queue_model in QUEUE_MODELS,
            "alert_interval_s": self.alert_interval_s >= 1,
        }
        check_ranges(
            "scenario",
            self,
            checks,
            "times must be positive (intervals >= 1 s) and replicas fit the cluster",
        )
