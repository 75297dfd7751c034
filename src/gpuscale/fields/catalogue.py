"""The DCGM field catalogue.

Every field that dcgm-exporter's default counters file enables, plus the ones
it ships commented out, with the numeric id from ``dcgm_fields.h``, the
Prometheus type dcgm-exporter gives it, and its unit as DCGM reports it. Units
are DCGM's, not base units, because compatibility with existing dashboards is
the point of these names; our own ``gpuscale_*`` series use base units.
"""

from dataclasses import dataclass
from typing import Literal

MetricType = Literal["gauge", "counter", "label"]


@dataclass(frozen=True, slots=True)
class Field:
    """One telemetry field.

    Attributes:
        name: Series name as exported (e.g. ``DCGM_FI_DEV_GPU_UTIL``).
        field_id: DCGM numeric field id; 0 for fields that are not DCGM's.
        type: Prometheus type, or ``label`` for fields that become a label.
        unit: Unit of the exported value (``%``, ``MHz``, ``W``, ``mJ`` ...).
        help: One-line meaning, written for operators.
        default: Whether dcgm-exporter's default counters file enables it.
    """

    name: str
    field_id: int
    type: MetricType
    unit: str
    help: str
    default: bool = False


def _f(name: str, field_id: int, type_: MetricType, unit: str, help_: str, *, on: bool) -> Field:
    return Field(name, field_id, type_, unit, help_, on)


_CATALOGUE: tuple[Field, ...] = (
    # Static information that dcgm-exporter turns into labels.
    _f("DCGM_FI_DRIVER_VERSION", 1, "label", "", "Version of the installed GPU driver.", on=True),
    _f("DCGM_FI_NVML_VERSION", 2, "label", "", "Version of the NVML library.", on=False),
    # Clocks.
    _f(
        "DCGM_FI_DEV_SM_CLOCK",
        100,
        "gauge",
        "MHz",
        "Current streaming-multiprocessor clock.",
        on=True,
    ),
    _f("DCGM_FI_DEV_MEM_CLOCK", 101, "gauge", "MHz", "Current memory clock.", on=True),
    # Temperature.
    _f("DCGM_FI_DEV_MEMORY_TEMP", 140, "gauge", "C", "HBM or GDDR memory temperature.", on=True),
    _f("DCGM_FI_DEV_GPU_TEMP", 150, "gauge", "C", "GPU die temperature.", on=True),
    # Power.
    _f("DCGM_FI_DEV_POWER_USAGE", 155, "gauge", "W", "Board power draw.", on=True),
    _f(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        156,
        "counter",
        "mJ",
        "Energy used since the driver loaded.",
        on=True,
    ),
    # PCIe.
    _f(
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
        200,
        "counter",
        "KB",
        "PCIe bytes sent, as sampled by NVML.",
        on=False,
    ),
    _f(
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
        201,
        "counter",
        "KB",
        "PCIe bytes received, as sampled by NVML.",
        on=False,
    ),
    _f("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 202, "counter", "1", "PCIe link retries.", on=True),
    # Utilisation.
    _f("DCGM_FI_DEV_GPU_UTIL", 203, "gauge", "%", "Share of time a kernel was running.", on=True),
    _f(
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        204,
        "gauge",
        "%",
        "Share of time device memory was read or written.",
        on=True,
    ),
    _f("DCGM_FI_DEV_ENC_UTIL", 206, "gauge", "%", "Video encoder busy share.", on=True),
    _f("DCGM_FI_DEV_DEC_UTIL", 207, "gauge", "%", "Video decoder busy share.", on=True),
    # Errors and violations.
    _f(
        "DCGM_EXP_XID_ERRORS_COUNT",
        0,
        "gauge",
        "1",
        "XID errors seen in the trailing window, by XID code.",
        on=False,
    ),
    _f("DCGM_FI_DEV_XID_ERRORS", 230, "gauge", "1", "Code of the most recent XID error.", on=True),
    _f(
        "DCGM_FI_DEV_POWER_VIOLATION",
        240,
        "counter",
        "us",
        "Time clocks were held down by the power limit.",
        on=False,
    ),
    _f(
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        241,
        "counter",
        "us",
        "Time clocks were held down by temperature.",
        on=False,
    ),
    _f(
        "DCGM_FI_DEV_SYNC_BOOST_VIOLATION",
        242,
        "counter",
        "us",
        "Time clocks were held down by sync boost.",
        on=False,
    ),
    _f(
        "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION",
        243,
        "counter",
        "us",
        "Time clocks were held down by a board limit.",
        on=False,
    ),
    _f(
        "DCGM_FI_DEV_LOW_UTIL_VIOLATION",
        244,
        "counter",
        "us",
        "Time clocks were lowered because the GPU was idle.",
        on=False,
    ),
    _f(
        "DCGM_FI_DEV_RELIABILITY_VIOLATION",
        245,
        "counter",
        "us",
        "Time clocks were held down for reliability.",
        on=False,
    ),
    # Memory.
    _f("DCGM_FI_DEV_FB_TOTAL", 250, "gauge", "MiB", "Framebuffer size.", on=False),
    _f("DCGM_FI_DEV_FB_FREE", 251, "gauge", "MiB", "Framebuffer not in use.", on=True),
    _f("DCGM_FI_DEV_FB_USED", 252, "gauge", "MiB", "Framebuffer in use.", on=True),
    _f("DCGM_FI_DEV_FB_RESERVED", 253, "gauge", "MiB", "Framebuffer held by the driver.", on=True),
    # ECC.
    _f(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        310,
        "counter",
        "1",
        "Single-bit ECC errors since the last driver load.",
        on=False,
    ),
    _f(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        311,
        "counter",
        "1",
        "Double-bit ECC errors since the last driver load.",
        on=False,
    ),
    _f(
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        312,
        "counter",
        "1",
        "Single-bit ECC errors over the GPU's lifetime.",
        on=False,
    ),
    _f(
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        313,
        "counter",
        "1",
        "Double-bit ECC errors over the GPU's lifetime.",
        on=False,
    ),
    # Retired pages and row remapping.
    _f(
        "DCGM_FI_DEV_RETIRED_SBE",
        390,
        "counter",
        "1",
        "Pages retired for single-bit errors.",
        on=False,
    ),
    _f(
        "DCGM_FI_DEV_RETIRED_DBE",
        391,
        "counter",
        "1",
        "Pages retired for double-bit errors.",
        on=False,
    ),
    _f(
        "DCGM_FI_DEV_RETIRED_PENDING", 392, "counter", "1", "Pages waiting to be retired.", on=False
    ),
    _f(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        393,
        "counter",
        "1",
        "Memory rows remapped after uncorrectable errors.",
        on=True,
    ),
    _f(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        394,
        "counter",
        "1",
        "Memory rows remapped after correctable errors.",
        on=True,
    ),
    _f(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        395,
        "gauge",
        "1",
        "1 when a row remap failed and the GPU needs service.",
        on=True,
    ),
    # NVLink.
    _f(
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        409,
        "counter",
        "1",
        "NVLink flow-control CRC errors, all links.",
        on=False,
    ),
    _f(
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        419,
        "counter",
        "1",
        "NVLink data CRC errors, all links.",
        on=False,
    ),
    _f(
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        429,
        "counter",
        "1",
        "NVLink replays, all links.",
        on=False,
    ),
    _f(
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        439,
        "counter",
        "1",
        "NVLink recoveries, all links.",
        on=False,
    ),
    _f(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        449,
        "counter",
        "1",
        "NVLink bandwidth counter summed over all links.",
        on=True,
    ),
    # vGPU.
    _f(
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
        526,
        "gauge",
        "1",
        "1 when the vGPU holds a licence.",
        on=True,
    ),
    # Profiling (DCP) fields, ratios from 0 to 1.
    _f(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        1001,
        "gauge",
        "ratio",
        "Share of time the graphics or compute engine was busy.",
        on=True,
    ),
    _f(
        "DCGM_FI_PROF_SM_ACTIVE",
        1002,
        "gauge",
        "ratio",
        "Share of cycles an SM had at least one warp, averaged over SMs.",
        on=False,
    ),
    _f(
        "DCGM_FI_PROF_SM_OCCUPANCY",
        1003,
        "gauge",
        "ratio",
        "Resident warps as a share of the SM maximum.",
        on=False,
    ),
    _f(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        1004,
        "gauge",
        "ratio",
        "Share of cycles a tensor pipe was busy.",
        on=True,
    ),
    _f(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        1005,
        "gauge",
        "ratio",
        "Share of cycles the memory interface moved data.",
        on=True,
    ),
    _f(
        "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
        1006,
        "gauge",
        "ratio",
        "Share of cycles the FP64 pipe was busy.",
        on=False,
    ),
    _f(
        "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
        1007,
        "gauge",
        "ratio",
        "Share of cycles the FP32 pipe was busy.",
        on=False,
    ),
    _f(
        "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
        1008,
        "gauge",
        "ratio",
        "Share of cycles the FP16 pipe was busy.",
        on=False,
    ),
    _f(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        1009,
        "gauge",
        "B/s",
        "PCIe transmit rate, headers and payload.",
        on=True,
    ),
    _f(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        1010,
        "gauge",
        "B/s",
        "PCIe receive rate, headers and payload.",
        on=True,
    ),
    _f(
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        1011,
        "gauge",
        "B/s",
        "NVLink transmit rate, headers and payload.",
        on=False,
    ),
    _f(
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        1012,
        "gauge",
        "B/s",
        "NVLink receive rate, headers and payload.",
        on=False,
    ),
)

DCGM_FIELDS: dict[str, Field] = {f.name: f for f in _CATALOGUE}


def dcgm_field(name: str) -> Field:
    """Look up a DCGM field by name.

    Raises:
        KeyError: The name is not in the catalogue.
    """
    return DCGM_FIELDS[name]
