"""Turns a telemetry Snapshot into metric families named as dcgm-exporter names them.

This is a prometheus_client custom collector: ``collect()`` yields families
built from the latest snapshot the sampler published, so scraping never
touches the GPUs. NVIDIA entities get dcgm-exporter's names and labels; AMD
entities get the names and labels of AMD's device-metrics-exporter.
"""

from collections import Counter as TallyCounter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from prometheus_client.metrics_core import Metric

from gpuscale.exporter.dcgm import (
    CLOCK_EVENTS_COUNT,
    Entity,
    LabelStyle,
    Windows,
    compose,
    dcgm_families,
    identity_labels,
    pod_keys,
    row_labels,
)
from gpuscale.exporter.health import HealthJudge
from gpuscale.exporter.hpc import HPC_JOB, JobMap, job_key
from gpuscale.fields.amd import (
    AMD_FIELDS,
    AMD_LABELS,
    NODE_GPUS,
    split_labelled_key,
)
from gpuscale.fields.counters import Counter
from gpuscale.telemetry.base import DeviceSample, GpuInfo, Snapshot

GPU_UP = "gpuscale_gpu_up"

Counts = Mapping[str, TallyCounter[int]]
Rendering = tuple[Snapshot, Counts, Counts]
"""What one render needs: the snapshot, XID counts and clock-event counts per entity key."""


class PodAssignment(Protocol):
    """Who holds a device: the three labels dcgm-exporter adds with --kubernetes."""

    @property
    def pod(self) -> str:
        """Pod name."""
        ...

    @property
    def namespace(self) -> str:
        """Pod namespace."""
        ...

    @property
    def container(self) -> str:
        """Container name."""
        ...


class PodLookup(Protocol):
    """Maps a device to the pod holding it; a dict read, never a network call."""

    def lookup(
        self, uuid: str, index: int, mig_instance_id: int | None = None
    ) -> PodAssignment | None:
        """The pod holding the device, or None."""
        ...


class SharedPodLookup(PodLookup, Protocol):
    """Also every pod sharing a device, for ``--kubernetes-virtual-gpus``."""

    def lookup_all(
        self, uuid: str, index: int, mig_instance_id: int | None = None
    ) -> Sequence["SharedAssignment"]:
        """Each holder of the device, one per replica, or none."""
        ...


class PodMeta(Protocol):
    """UID and labels of a pod, from the API server; a dict read."""

    def get(self, namespace: str, name: str) -> tuple[str | None, dict[str, str]] | None:
        """(UID when asked for, sanitized labels), or None before it is known."""
        ...


class SharedAssignment(PodAssignment, Protocol):
    """A holder of one replica of a shared (time-sliced) GPU."""

    @property
    def vgpu(self) -> str | None:
        """The replica id, None for a whole device."""
        ...


class SnapshotFamilies:
    """Builds families from snapshots for a fixed set of enabled counters.

    Args:
        counters: Enabled rows of the counters file (label rows become labels).
        pods: Optional device-to-pod lookup for ``--kubernetes``.
        xid_window_ms: Window reported in DCGM_EXP_XID_ERRORS_COUNT's label.
        clock_window_ms: Window reported in DCGM_EXP_CLOCK_EVENTS_COUNT's label.
        style: Spelling of the identity labels (host label, 1.x names, model blanks).
        keep: Keys of the NVIDIA entities to export (``--devices``); None: all.
        jobs: HPC job mapping (``--hpc-job-mapping-dir``): one copy of each series per job.
        shared: ``--kubernetes-virtual-gpus``: a GPU that pods share is written once per
            holder with a ``vgpu`` label; ``pods`` must then answer ``lookup_all``.
        pod_meta: Pod labels (among the labels) and ``pod_uid`` (an attribute), as
            ``--kubernetes-enable-pod-labels`` / ``-pod-uid`` ask.
    """

    def __init__(
        self,
        counters: Sequence[Counter],
        *,
        pods: PodLookup | None = None,
        xid_window_ms: int = 300_000,
        clock_window_ms: int = 300_000,
        style: LabelStyle | None = None,
        keep: frozenset[str] | None = None,
        jobs: JobMap | None = None,
        shared: SharedPodLookup | None = None,
        pod_meta: PodMeta | None = None,
    ) -> None:
        self._series = [c for c in counters if c.type != "label"]
        self._label_rows = [c for c in counters if c.type == "label"]
        self._pods = pods
        self._xid_window_ms = xid_window_ms
        self.clock_window_ms = clock_window_ms
        self._style = style or LabelStyle()
        self._keep = keep
        self._jobs = jobs
        self._shared = shared
        self._pod_meta = pod_meta
        self._health = HealthJudge()
        self._cache: dict[str, tuple[GpuInfo, str, Entity]] = {}
        self.wants_clock_events = any(c.field.name == CLOCK_EVENTS_COUNT for c in self._series)

    def labels(self, info: GpuInfo, hostname: str) -> dict[str, str]:
        """The label set of every plain series of one entity, in the exporter's order."""
        if info.vendor == "amd":
            return self._amd_labels(info, hostname)
        return self._entity(DeviceSample(info, {}), hostname).full

    def _entity(self, device: DeviceSample, hostname: str) -> Entity:
        info = device.info
        cached = self._cache.get(info.key)
        # Sources hand out the same GpuInfo each collect: identity first, equality is the fallback.
        if (
            cached is not None
            and (cached[0] is info or cached[0] == info)
            and cached[1] == hostname
        ):
            entity = cached[2]
            if self._pods is None:  # labels are static without pods: reuse, new sample
                return Entity(
                    device, entity.head, entity.labels, entity.attrs, entity.full, entity.xid_labels
                )
        head = identity_labels(info, hostname, self._style)
        labels = row_labels(self._label_rows, info)
        attrs: dict[str, str] = {}
        if self._pods is not None:
            ref = self._pods.lookup(str(info.uuid), info.index, info.mig_instance_id)
            if ref is not None:
                labels, attrs = self._holder(labels, ref)
        entity = Entity(device, head, labels, attrs, compose(head, labels, attrs))
        self._cache[info.key] = (info, hostname, entity)
        return entity

    def _amd_labels(self, info: GpuInfo, hostname: str) -> dict[str, str]:
        """device-metrics-exporter's labels: the mandatory ones always, empty when unknown."""
        known = dict(info.vendor_labels)
        known.update(
            gpu_id=str(info.index),
            serial_number=info.serial or "",
            hostname=hostname,
            gpu_uuid=str(info.uuid),
            driver_version=info.driver_version,
        )
        known.setdefault("card_model", info.model)
        if info.mig_instance_id is not None:
            known["gpu_partition_id"] = str(info.mig_instance_id)
        self._add_pod(known, info)
        labels = {name: known.get(name, "") for name in AMD_LABELS}
        # Custom labels (cluster_name and config.json's CustomLabels) follow, in the source's order.
        labels.update((k, v) for k, v in info.vendor_labels if k not in labels)
        return labels

    def _add_pod(self, labels: dict[str, str], info: GpuInfo) -> None:
        if self._pods is None:
            return
        ref = self._pods.lookup(str(info.uuid), info.index, info.mig_instance_id)
        if ref is not None:
            labels["container"] = ref.container
            labels["namespace"] = ref.namespace
            labels["pod"] = ref.pod

    def _holder(
        self, labels: dict[str, str], ref: PodAssignment, vgpu: str | None = None
    ) -> tuple[dict[str, str], dict[str, str]]:
        """Labels and attributes of an entity held by ``ref``, as upstream fills them."""
        pod, namespace, container = pod_keys(self._style)
        attrs = {pod: ref.pod, namespace: ref.namespace, container: ref.container}
        if vgpu is not None:
            attrs["vgpu"] = vgpu
        meta = None if self._pod_meta is None else self._pod_meta.get(ref.namespace, ref.pod)
        if meta is not None:
            uid, pod_labels = meta
            if uid is not None:
                attrs["pod_uid"] = uid
            # A pod label never overrides an attribute or a label row of the same name.
            labels = {**{k: v for k, v in pod_labels.items() if k not in attrs}, **labels}
        return labels, attrs

    def _with_replicas(self, entities: list[Entity], shared: SharedPodLookup) -> list[Entity]:
        """Each entity once per pod sharing its GPU; unshared ones as they are."""
        out: list[Entity] = []
        for e in entities:
            info = e.device.info
            refs = shared.lookup_all(str(info.uuid), info.index, info.mig_instance_id)
            shared_gpu = len(refs) > 1 or (len(refs) == 1 and refs[0].vgpu is not None)
            if not shared_gpu:
                out.append(e)
                continue
            rows = row_labels(self._label_rows, info)
            for ref in refs:
                labels, attrs = self._holder(rows, ref, ref.vgpu)
                full = compose(e.head, labels, attrs)
                out.append(Entity(e.device, e.head, labels, attrs, full))
        return out

    def build(
        self,
        snapshot: Snapshot,
        xid_counts: Mapping[str, TallyCounter[int]],
        clock_event_counts: Mapping[str, TallyCounter[int]] | None = None,
    ) -> list[Metric]:
        """All GPU families for one snapshot.

        Args:
            snapshot: The latest collect.
            xid_counts: XID events per entity key inside the trailing window.
            clock_event_counts: Clock-event bits per entity key inside their window.

        Returns:
            Families in a stable order; a family with no samples is still returned
            and skipped at render time.
        """
        keep = self._keep
        nvidia = [
            self._entity(d, snapshot.hostname)
            for d in snapshot.devices
            if d.info.vendor == "nvidia" and (keep is None or d.info.key in keep)
        ]
        amd = [
            (d, self._amd_labels(d.info, snapshot.hostname))
            for d in snapshot.devices
            if d.info.vendor == "amd"
        ]
        if self._shared is not None:
            nvidia = self._with_replicas(nvidia, self._shared)
        if self._jobs is not None:
            nvidia = _with_jobs(nvidia, self._jobs.read())
        families: list[Metric] = []
        if nvidia:
            windows = Windows(
                xid_counts,
                clock_event_counts or {},
                self._xid_window_ms,
                self.clock_window_ms,
                snapshot.timestamp,
            )
            families.extend(dcgm_families(self._series, nvidia, windows, self._health))
        if amd:
            families.extend(_amd_families(amd))
        up = Metric(
            GPU_UP, "1 when the GPU answered the last collect, 0 when it was lost.", "gauge"
        )
        for e in nvidia:
            up.add_sample(GPU_UP, e.full, 1.0 if e.device.up else 0.0)
        for device, labels in amd:
            up.add_sample(GPU_UP, labels, 1.0 if device.up else 0.0)
        families.append(up)
        return families


def _with_jobs(entities: list[Entity], jobs: Mapping[str, list[str]]) -> list[Entity]:
    """Each entity once per HPC job of its GPU, with ``hpc_job`` among its attributes."""
    out = []
    for e in entities:
        listed = jobs.get(job_key(e.device.info))
        if not listed:
            out.append(e)
        for job in listed or ():
            attrs = e.attrs | {HPC_JOB: job}
            out.append(Entity(e.device, e.head, e.labels, attrs, compose(e.head, e.labels, attrs)))
    return out


def _amd_families(entities: Sequence[tuple[DeviceSample, dict[str, str]]]) -> Iterable[Metric]:
    """device-metrics-exporter's families; per-index values carry their index labels."""
    families = {name: Metric(name, field.help, "gauge") for name, field in AMD_FIELDS.items()}
    first = entities[0][1]  # a snapshot is one node's
    # The node series carries the host and the custom labels, which go on every series.
    node = {k: v for k, v in first.items() if k == "hostname" or k not in AMD_LABELS}
    families[NODE_GPUS].add_sample(NODE_GPUS, node, float(len(entities)))
    for device, labels in entities:
        for key, value in device.values.items():
            name, extra = split_labelled_key(key)
            family = families.get(name)
            if family is not None:
                family.add_sample(name, {**extra, **labels} if extra else labels, value)
    return families.values()


class SnapshotCollector:
    """prometheus_client collector over the snapshot the sampler last collected.

    Args:
        families: Builds families from a snapshot.
        latest: Returns the current (snapshot, xid counts, clock-event counts), or None
            before the first collect.
    """

    def __init__(
        self,
        families: SnapshotFamilies,
        latest: Callable[[], "Rendering | None"],
    ) -> None:
        self.families = families  # replaced whole on a reload; one assignment, so no lock
        self._latest = latest

    def collect(self) -> Iterable[Metric]:
        """Families of the latest snapshot (none before the first collect)."""
        current = self._latest()
        if current is None:
            return []
        return self.families.build(*current)
