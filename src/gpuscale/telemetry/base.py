"""The seam between GPU backends and everything that reads GPU telemetry.

A source answers with a whole ``Snapshot``: every field of every entity at
one timestamp. Absence carries meaning here: a field the device does not
support, or that failed this time, is missing from ``values``; it is never 0.
A device that stopped answering stays in the snapshot with ``up=False`` so
consumers can say "lost" instead of silently dropping it.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from gpuscale.ids import GpuUuid

Vendor = Literal["nvidia", "amd"]


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """Static identity of one GPU entity (a whole GPU or a MIG instance).

    Attributes:
        index: Device index on the host (dcgm-exporter's ``gpu`` label).
        uuid: GPU UUID; for a MIG instance, its parent GPU's UUID, as dcgm-exporter labels it.
        model: Product name (``modelName``), e.g. ``NVIDIA H100 80GB HBM3``.
        pci_bus_id: PCI bus id, e.g. ``00000000:3B:00.0``.
        device: Device node name, e.g. ``nvidia0``.
        vendor: ``nvidia`` or ``amd``.
        driver_version: Driver version string.
        serial: Board serial number, when known.
        mig_profile: MIG profile name (``GPU_I_PROFILE``), e.g. ``1g.10gb``; None for a whole GPU.
        mig_instance_id: MIG GPU-instance id (``GPU_I_ID``); None for a whole GPU.
        memory_total_bytes: Framebuffer size in bytes, when known.
        vendor_labels: Further identity labels the vendor's exporter puts on every
            series (AMD: ``card_model``, ``gpu_partition_id`` ...), as (name, value).
        attributes: Static strings by DCGM field name (``DCGM_FI_DEV_SERIAL``, ``..._VBIOS_VERSION``
            ...), which counters files turn into labels; a field the device lacks is absent.
    """

    index: int
    uuid: GpuUuid
    model: str
    pci_bus_id: str
    device: str
    vendor: Vendor
    driver_version: str
    serial: str | None = None
    mig_profile: str | None = None
    mig_instance_id: int | None = None
    memory_total_bytes: int | None = None
    vendor_labels: tuple[tuple[str, str], ...] = ()
    attributes: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        """Unique key of the entity on its host: the UUID, plus ``/GI`` for a MIG instance."""
        if self.mig_instance_id is None:
            return str(self.uuid)
        return f"{self.uuid}/{self.mig_instance_id}"


@dataclass(frozen=True, slots=True)
class XidEvent:
    """One XID error reported by the driver.

    Attributes:
        timestamp: When it happened, seconds since the epoch.
        xid: The XID code (e.g. 79: GPU fell off the bus; 48: double-bit ECC error).
    """

    timestamp: float
    xid: int


@dataclass(frozen=True, slots=True)
class ProcessUsage:
    """Per-process GPU use, where the driver reports it.

    Pids never become labels (they are unbounded); the exporter aggregates these.

    Attributes:
        pid: Host process id.
        used_memory_bytes: Framebuffer held by the process, when known.
        sm_utilization: Share of SM time, 0 to 1, when known.
    """

    pid: int
    used_memory_bytes: int | None = None
    sm_utilization: float | None = None


@dataclass(frozen=True, slots=True)
class DeviceSample:
    """What one entity reported in one collect.

    Attributes:
        info: Which entity.
        values: Field name to value, in the field's catalogue unit. Absent means unknown.
        up: False when the device did not answer at all.
        error: Why the device is down, or which fields failed; None when all is well.
        failed_fields: Fields that raised this time (counted by the exporter).
        xid_events: XID errors first seen since the previous sample.
        processes: Per-process use, when the driver gives it.
    """

    info: GpuInfo
    values: Mapping[str, float]
    up: bool = True
    error: str | None = None
    failed_fields: tuple[str, ...] = ()
    xid_events: tuple[XidEvent, ...] = ()
    processes: tuple[ProcessUsage, ...] = ()


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every entity's sample at one instant.

    Attributes:
        timestamp: Seconds since the epoch (or simulated seconds).
        hostname: Host the devices belong to (dcgm-exporter's ``Hostname`` label).
        devices: One sample per entity, in index order.
    """

    timestamp: float
    hostname: str
    devices: tuple[DeviceSample, ...] = field(default_factory=tuple)


@runtime_checkable
class GpuSource(Protocol):
    """A backend that can enumerate GPUs and sample all their fields at once."""

    vendor: Vendor

    def devices(self) -> list[GpuInfo]:
        """Entities this source reports, discovered at start-up."""
        ...

    def sample(self) -> Snapshot:
        """Read every field of every entity.

        A failure on one device or field stays with that device or field; this
        call raises only when the whole backend has failed.

        Raises:
            gpuscale.errors.TransientError: The backend as a whole did not answer.
        """
        ...

    def close(self) -> None:
        """Release the backend (NVML shutdown, handles)."""
        ...
