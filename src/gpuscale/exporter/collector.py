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

from gpuscale.fields.amd import (
    AMD_FIELDS,
    AMD_LABELS,
    CLUSTER_LABEL,
    NODE_GPUS,
    split_labelled_key,
)
from gpuscale.fields.counters import Counter
from gpuscale.telemetry.base import DeviceSample, GpuInfo, Snapshot

GPU_UP = "gpuscale_gpu_up"
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"


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


def _label_value(counter: Counter, info: GpuInfo) -> str | None:
    if counter.name == "DCGM_FI_DRIVER_VERSION":
        return info.driver_version
    return None


class SnapshotFamilies:
    """Builds families from snapshots for a fixed set of enabled counters.

    Args:
        counters: Enabled rows of the counters file (label rows become labels).
        pods: Optional device-to-pod lookup for ``--kubernetes``.
        xid_window_ms: Window reported in DCGM_EXP_XID_ERRORS_COUNT's label.
    """

    def __init__(
        self,
        counters: Sequence[Counter],
        *,
        pods: PodLookup | None = None,
        xid_window_ms: int = 300_000,
    ) -> None:
        self._series = [c for c in counters if c.type != "label" and c.name != XID_COUNT]
        self._label_rows = [c for c in counters if c.type == "label"]
        self._pods = pods
        self._xid_window = str(xid_window_ms)

    def labels(self, info: GpuInfo, hostname: str) -> dict[str, str]:
        """The label set of every series of one entity, in dcgm-exporter's order."""
        if info.vendor == "amd":
            return self._amd_labels(info, hostname)
        labels = {
            "gpu": str(info.index),
            "UUID": str(info.uuid),
            "pci_bus_id": info.pci_bus_id,
            "device": info.device,
            "modelName": info.model,
        }
        if info.mig_profile is not None and info.mig_instance_id is not None:
            labels["GPU_I_PROFILE"] = info.mig_profile
            labels["GPU_I_ID"] = str(info.mig_instance_id)
        labels["Hostname"] = hostname
        for row in self._label_rows:
            value = _label_value(row, info)
            if value is not None:
                labels[row.name] = value
        self._add_pod(labels, info)
        return labels

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
        if CLUSTER_LABEL in known:
            labels[CLUSTER_LABEL] = known[CLUSTER_LABEL]
        return labels

    def _add_pod(self, labels: dict[str, str], info: GpuInfo) -> None:
        if self._pods is None:
            return
        ref = self._pods.lookup(str(info.uuid), info.index, info.mig_instance_id)
        if ref is not None:
            labels["container"] = ref.container
            labels["namespace"] = ref.namespace
            labels["pod"] = ref.pod

    def build(
        self, snapshot: Snapshot, xid_counts: Mapping[str, TallyCounter[int]]
    ) -> list[Metric]:
        """All GPU families for one snapshot.

        Args:
            snapshot: The latest collect.
            xid_counts: XID events per entity key inside the trailing window.

        Returns:
            Families in a stable order; a family with no samples is still returned
            and skipped at render time.
        """
        entities = [(d, self.labels(d.info, snapshot.hostname)) for d in snapshot.devices]
        families: list[Metric] = []
        nvidia = [(d, lb) for d, lb in entities if d.info.vendor == "nvidia"]
        amd = [(d, lb) for d, lb in entities if d.info.vendor == "amd"]
        if nvidia:
            families.extend(self._dcgm_families(nvidia))
            families.append(self._xid_family(nvidia, xid_counts))
        if amd:
            families.extend(_amd_families(amd))
        up = Metric(
            GPU_UP, "1 when the GPU answered the last collect, 0 when it was lost.", "gauge"
        )
        for device, labels in entities:
            up.add_sample(GPU_UP, labels, 1.0 if device.up else 0.0)
        families.append(up)
        return families

    def _dcgm_families(
        self, entities: Sequence[tuple[DeviceSample, dict[str, str]]]
    ) -> Iterable[Metric]:
        for counter in self._series:
            mtype = counter.type if counter.type in ("gauge", "counter") else "unknown"
            family = Metric(counter.name, counter.help, mtype)
            name = counter.name
            for device, labels in entities:
                value = device.values.get(name)
                if value is not None:
                    family.add_sample(name, labels, value)
            yield family

    def _xid_family(
        self,
        entities: Sequence[tuple[DeviceSample, dict[str, str]]],
        xid_counts: Mapping[str, TallyCounter[int]],
    ) -> Metric:
        family = Metric(
            XID_COUNT, "Count of XID errors within the trailing window, by XID code.", "gauge"
        )
        for device, labels in entities:
            for xid, count in sorted(xid_counts.get(device.info.key, TallyCounter()).items()):
                sample_labels = {**labels, "xid": str(xid), "window_size_in_ms": self._xid_window}
                family.add_sample(XID_COUNT, sample_labels, float(count))
        return family


def _amd_families(entities: Sequence[tuple[DeviceSample, dict[str, str]]]) -> Iterable[Metric]:
    """device-metrics-exporter's families; per-index values carry their index labels."""
    families = {name: Metric(name, field.help, "gauge") for name, field in AMD_FIELDS.items()}
    first = entities[0][1]  # a snapshot is one node's
    node = {k: first[k] for k in ("hostname", CLUSTER_LABEL) if k in first}
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
        latest: Returns the current (snapshot, xid counts), or None before the first collect.
    """

    def __init__(
        self,
        families: SnapshotFamilies,
        latest: Callable[[], tuple[Snapshot, Mapping[str, TallyCounter[int]]] | None],
    ) -> None:
        self._families = families
        self._latest = latest

    def collect(self) -> Iterable[Metric]:
        """Families of the latest snapshot (none before the first collect)."""
        current = self._latest()
        if current is None:
            return []
        return self._families.build(*current)
