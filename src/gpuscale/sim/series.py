"""What the simulated deployment exposes to Prometheus, written into the metric store.

Policies must see the simulator exactly as they would see production: the GPU
series dcgm-exporter would export for each pod's GPU (with its ``pod``,
``namespace``, ``gpu``, ``UUID``, ``Hostname`` and ``modelName`` labels), the
serving metrics each Ready pod's server would export, and the deployment's queue,
all sampled at the scrape interval. This module owns those names and labels.
Scaling code must not import the simulator, so policies spell the same names as
plain strings.
"""

import uuid
from collections.abc import Collection, Mapping

import numpy as np

from gpuscale.metrics.store import MetricStore
from gpuscale.sim.cluster import READY, Cluster, Pod

IN_FLIGHT = "gpuscale_serving_requests_in_flight"
"""Requests a pod is serving now (gauge, label ``pod``)."""
REQUESTS_TOTAL = "gpuscale_serving_requests_total"
"""Requests a pod has completed (counter, label ``pod``)."""
QUEUE = "gpuscale_serving_queue_requests"
"""Requests waiting for a free slot in the deployment (gauge, label ``deployment``)."""
RECEIVED = "gpuscale_serving_requests_received_total"
"""Requests that reached the deployment, served, queued or dropped alike (counter, label
``deployment``): what a gateway in front of it counts, the arrival rate's source."""
GPU_UP = "gpuscale_gpu_up"
"""1 while a pod's GPU answers, 0 once it fell off the bus (the exporter's, per GPU)."""

DCGM_SERIES: tuple[str, ...] = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_THERMAL_VIOLATION",
    "DCGM_FI_DEV_POWER_VIOLATION",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
)
"""DCGM fields scraped per pod GPU (a subset of what the physics computes, to stay fast)."""


class SeriesWriter:
    """Builds label sets for the cluster's pods and writes one scrape into the store.

    Label lists are rebuilt only when the cluster changes, and the same list object is
    passed for every family, so the store takes its fast path on steady scrapes.

    Args:
        store: Where scrapes go.
        cluster: The cluster whose pods are scraped.
        model_name: ``modelName`` label of every GPU.
        seed: Seeds the GPU UUIDs.
        metrics: Write only these families (those some reader queries); None: all.
    """

    def __init__(
        self,
        store: MetricStore,
        cluster: Cluster,
        model_name: str,
        seed: int,
        metrics: Collection[str] | None = None,
    ) -> None:
        self.store = store
        keep = set(metrics) if metrics is not None else None
        self.dcgm_series = tuple(n for n in DCGM_SERIES if keep is None or n in keep)
        """The DCGM series written, in ``DCGM_SERIES`` order."""
        self._serving = {
            n: keep is None or n in keep for n in (IN_FLIGHT, REQUESTS_TOTAL, QUEUE, RECEIVED)
        }
        self._gpu_up = keep is None or GPU_UP in keep
        self.cluster = cluster
        rng = np.random.default_rng([seed, 0x6770])
        self.uuids = [
            f"GPU-{uuid.UUID(bytes=rng.bytes(16), version=4)}" for _ in range(cluster.n_devices)
        ]
        self.model_name = model_name
        cfg = cluster.config
        self._deployment = ({"namespace": cfg.namespace, "deployment": cfg.deployment},)
        self._version = -1
        self._shape: list[tuple[int, tuple[int, ...], int, int]] = []
        self._held: list[Pod] = []
        self._ready_slots = np.zeros(0, dtype=np.int64)
        self._held_devs = np.zeros(0, dtype=np.int64)
        self._held_slots = np.zeros(0, dtype=np.int64)
        self._ready: list[Pod] = []
        self._gpu_labels: list[Mapping[str, str]] = []
        self._pod_labels: list[Mapping[str, str]] = []
        self._label_cache: dict[tuple[int, int], tuple[dict[str, str], dict[str, str]]] = {}
        # Completions per GPU slot, and the pod they belong to (a new pod starts at 0).
        self._completed = np.zeros(cluster.n_slots)
        self._owner = np.full(cluster.n_slots, -1, dtype=np.int64)

    def _refresh(self) -> None:
        if self._version == self.cluster.version:
            return
        c, cfg = self.cluster, self.cluster.config
        self._version = c.version
        held = c.held_pods()
        shape = [(p.uid, p.gpus, p.state, int(c.slot_phys[p.slot])) for p in held]
        if shape == self._shape:  # same pods on the same GPUs: keep the same label lists
            return
        self._shape = shape
        self._held = held
        self._ready = [p for p in self._held if p.state == READY]
        gpu_labels: list[Mapping[str, str]] = []
        pod_labels: list[Mapping[str, str]] = []
        for pod, slot in ((p, s) for p in self._held for s in p.gpus):  # a series per GPU
            dev = int(c.slot_phys[slot])
            cached = self._label_cache.get((pod.uid, dev))
            if cached is None:
                node, gpu = divmod(slot, cfg.gpus_per_node)
                base = {"pod": pod.name, "namespace": cfg.namespace}
                gpu_lab = {
                    **base,
                    "container": cfg.deployment,
                    "gpu": str(gpu),
                    "UUID": self.uuids[dev],
                    "Hostname": c.node_name(node),
                    "modelName": self.model_name,
                }
                cached = self._label_cache[(pod.uid, dev)] = (gpu_lab, base)
            gpu_labels.append(cached[0])
        for pod in self._ready:
            dev = int(c.slot_phys[pod.slot])
            pod_labels.append(self._label_cache[(pod.uid, dev)][1])
        self._gpu_labels, self._pod_labels = gpu_labels, pod_labels
        self._ready_slots = np.array([p.slot for p in self._ready], dtype=np.int64)
        self._held_devs = c.devices(held)
        self._held_slots = np.array([s for p in held for s in p.gpus], dtype=np.int64)

    def add_completions(
        self, slots: np.ndarray, pods: np.ndarray, shares: np.ndarray, requests: float
    ) -> None:
        """Credit ``requests`` completions to the pods in ``slots`` in proportion to ``shares``.

        Args:
            slots: GPU slots of the Ready pods.
            pods: Their pod uids (a slot's counter restarts when its pod changes).
            shares: Share of completions of each.
            requests: Completions to credit.
        """
        if not self._serving[REQUESTS_TOTAL]:  # unread: not worth keeping
            return
        fresh = self._owner[slots] != pods
        if fresh.any():
            self._completed[slots[fresh]] = 0.0
            self._owner[slots[fresh]] = pods[fresh]
        self._completed[slots] += requests * shares

    def write(
        self,
        t: float,
        fields: Mapping[str, np.ndarray],
        in_flight: float,
        waiting: float,
        received: float = 0.0,
    ) -> None:
        """Write one scrape at ``t``.

        Args:
            t: Scrape time, seconds.
            fields: The fleet's DCGM fields, one value per device (NaN where absent);
                at least ``dcgm_series``.
            in_flight: Requests in service per Ready pod.
            waiting: Requests queued in the deployment.
            received: Requests that reached the deployment since the run began.
        """
        self._refresh()
        store = self.store
        devs = self._held_devs
        for name in self.dcgm_series:
            store.ingest(t, name, self._gpu_labels, fields[name][devs])
        if self._gpu_up:
            up = np.where(self.cluster.slot_broken[self._held_slots], 0.0, 1.0)
            store.ingest(t, GPU_UP, self._gpu_labels, up)
        if self._serving[IN_FLIGHT]:
            n_ready = len(self._ready)
            store.ingest(t, IN_FLIGHT, self._pod_labels, np.full(n_ready, in_flight))
        if self._serving[REQUESTS_TOTAL]:
            uids = np.array([p.uid for p in self._ready], dtype=np.int64)
            done = np.where(
                self._owner[self._ready_slots] == uids, self._completed[self._ready_slots], 0.0
            )
            store.ingest(t, REQUESTS_TOTAL, self._pod_labels, np.floor(done))
        if self._serving[QUEUE]:
            store.ingest(t, QUEUE, self._deployment, np.array([waiting]))
        if self._serving[RECEIVED]:
            store.ingest(t, RECEIVED, self._deployment, np.array([np.floor(received)]))
