"""GPU telemetry sources behind one protocol: simulated, NVIDIA (NVML) and AMD (amdsmi)."""

from gpuscale.telemetry.base import (
    DeviceSample,
    GpuInfo,
    GpuSource,
    ProcessUsage,
    Snapshot,
    Vendor,
    XidEvent,
)

__all__ = [
    "DeviceSample",
    "GpuInfo",
    "GpuSource",
    "ProcessUsage",
    "Snapshot",
    "Vendor",
    "XidEvent",
]
