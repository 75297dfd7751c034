"""The DCGM field catalogue.

Every field that any counters file dcgm-exporter 4.x ships names (its etc/*.csv,
the Helm chart's ConfigMap, the 1.x compatibility names), plus the few fields
dashboards read beside them, with the numeric id from ``dcgm_fields.h``, the
Prometheus type dcgm-exporter gives it, and its unit as DCGM reports it. Units
are DCGM's, not base units, because compatibility with existing dashboards is
the point of these names; our own ``gpuscale_*`` series use base units.

``DCGM_EXP_*`` rows are dcgm-exporter's own derived families (field id 0 here:
DCGM has no such field). Legacy names (``dcgm_sm_clock``, and
``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS``, which DCGM renamed) resolve to the field
they stand for and are exported under the name the counters file uses.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

MetricType = Literal["gauge", "counter", "label"]

DEFAULT_CSV_PATH = Path(__file__).with_name("data") / "default-counters.csv"
"""dcgm-exporter 4.5.3-4.8.2's etc/default-counters.csv, unchanged (Apache-2.0, see data/)."""


@dataclass(frozen=True, slots=True)
class Field:
    """One telemetry field.

    Attributes:
        name: Series name as exported (e.g. ``DCGM_FI_DEV_GPU_UTIL``).
        field_id: DCGM numeric field id; 0 for dcgm-exporter's own ``DCGM_EXP_*`` families.
        type: Prometheus type, or ``label`` for fields that become a label.
        unit: Unit of the exported value (``%``, ``MHz``, ``W``, ``mJ``, ``ns`` ...).
        help: One-line meaning, written for operators.
        default: Whether dcgm-exporter's default counters file enables it.
    """

    name: str
    field_id: int
    type: MetricType
    unit: str
    help: str
    default: bool = False


_G: MetricType = "gauge"
_C: MetricType = "counter"
_L: MetricType = "label"
_D = "DCGM_FI_DEV_"
# DCGM_FI_DEV_NVLINK_BANDWIDTH_L0..L17: ids 440-445, then 475-480, 446-448 and 494-496.
_LINK_IDS = (*range(440, 446), *range(475, 481), 446, 447, 448, 494, 495, 496)
_VIOLATION = "Time clocks were held below the requested clock"

# (name, DCGM id, type, unit, meaning); ids from dcgm_fields.h.
_ROWS: tuple[tuple[str, int, MetricType, str, str], ...] = (
    # Static information that dcgm-exporter turns into labels.
    ("DCGM_FI_DRIVER_VERSION", 1, _L, "", "Version of the installed GPU driver."),
    ("DCGM_FI_NVML_VERSION", 2, _L, "", "Version of the NVML library."),
    (f"{_D}BRAND", 51, _L, "", "Product brand (Tesla, NVIDIA, Quadro ...)."),
    (f"{_D}SERIAL", 53, _L, "", "Board serial number."),
    (f"{_D}OEM_INFOROM_VER", 56, _L, "", "OEM inforom object version."),
    (f"{_D}ECC_INFOROM_VER", 80, _L, "", "ECC inforom object version."),
    (f"{_D}POWER_INFOROM_VER", 81, _L, "", "Power-management inforom object version."),
    (f"{_D}INFOROM_IMAGE_VER", 82, _L, "", "Inforom image version."),
    (f"{_D}VBIOS_VERSION", 85, _L, "", "VBIOS version."),
    # Clocks.
    (f"{_D}SM_CLOCK", 100, _G, "MHz", "Current streaming-multiprocessor clock."),
    (f"{_D}MEM_CLOCK", 101, _G, "MHz", "Current memory clock."),
    (f"{_D}CLOCKS_EVENT_REASONS", 112, _G, "bitmask", "Why clocks are below the maximum now."),
    # Temperature.
    (f"{_D}MEMORY_TEMP", 140, _G, "C", "HBM or GDDR memory temperature."),
    (f"{_D}GPU_TEMP", 150, _G, "C", "GPU die temperature."),
    # Power.
    (f"{_D}POWER_USAGE", 155, _G, "W", "Board power draw."),
    (f"{_D}TOTAL_ENERGY_CONSUMPTION", 156, _C, "mJ", "Energy used since the driver loaded."),
    (f"{_D}POWER_MGMT_LIMIT", 160, _G, "W", "Power limit the board enforces now."),
    # PCIe.
    (f"{_D}PCIE_TX_THROUGHPUT", 200, _C, "KB/s", "PCIe transmit rate, as sampled by NVML."),
    (f"{_D}PCIE_RX_THROUGHPUT", 201, _C, "KB/s", "PCIe receive rate, as sampled by NVML."),
    (f"{_D}PCIE_REPLAY_COUNTER", 202, _C, "1", "PCIe link retries."),
    # Utilisation.
    (f"{_D}GPU_UTIL", 203, _G, "%", "Share of time a kernel was running."),
    (f"{_D}MEM_COPY_UTIL", 204, _G, "%", "Share of time device memory was read or written."),
    (f"{_D}ENC_UTIL", 206, _G, "%", "Video encoder busy share."),
    (f"{_D}DEC_UTIL", 207, _G, "%", "Video decoder busy share."),
    # Errors and violations (nanoseconds, as DCGM reports them).
    (f"{_D}XID_ERRORS", 230, _G, "1", "Code of the most recent XID error."),
    (f"{_D}POWER_VIOLATION", 240, _C, "ns", f"{_VIOLATION} by the power limit."),
    (f"{_D}THERMAL_VIOLATION", 241, _C, "ns", f"{_VIOLATION} by temperature."),
    (f"{_D}SYNC_BOOST_VIOLATION", 242, _C, "ns", f"{_VIOLATION} by sync boost."),
    (f"{_D}BOARD_LIMIT_VIOLATION", 243, _C, "ns", f"{_VIOLATION} by a board limit."),
    (f"{_D}LOW_UTIL_VIOLATION", 244, _C, "ns", f"{_VIOLATION} because the GPU was idle."),
    (f"{_D}RELIABILITY_VIOLATION", 245, _C, "ns", f"{_VIOLATION} for reliability."),
    # Memory.
    (f"{_D}FB_TOTAL", 250, _G, "MiB", "Framebuffer size."),
    (f"{_D}FB_FREE", 251, _G, "MiB", "Framebuffer not in use."),
    (f"{_D}FB_USED", 252, _G, "MiB", "Framebuffer in use."),
    (f"{_D}FB_RESERVED", 253, _G, "MiB", "Framebuffer held by the driver."),
    (f"{_D}FB_USED_PERCENT", 254, _G, "ratio", "Used over (total - reserved) framebuffer, 0-1."),
    # ECC.
    (f"{_D}ECC_SBE_VOL_TOTAL", 310, _C, "1", "Single-bit ECC errors since the driver loaded."),
    (f"{_D}ECC_DBE_VOL_TOTAL", 311, _C, "1", "Double-bit ECC errors since the driver loaded."),
    (f"{_D}ECC_SBE_AGG_TOTAL", 312, _C, "1", "Single-bit ECC errors over the GPU's lifetime."),
    (f"{_D}ECC_DBE_AGG_TOTAL", 313, _C, "1", "Double-bit ECC errors over the GPU's lifetime."),
    # Retired pages and row remapping.
    (f"{_D}RETIRED_SBE", 390, _C, "1", "Pages retired for single-bit errors."),
    (f"{_D}RETIRED_DBE", 391, _C, "1", "Pages retired for double-bit errors."),
    (f"{_D}RETIRED_PENDING", 392, _C, "1", "Pages waiting to be retired."),
    (f"{_D}UNCORRECTABLE_REMAPPED_ROWS", 393, _C, "1", "Rows remapped after uncorrectable errors."),
    (f"{_D}CORRECTABLE_REMAPPED_ROWS", 394, _C, "1", "Rows remapped after correctable errors."),
    (
        f"{_D}ROW_REMAP_FAILURE",
        395,
        _G,
        "1",
        "1 when a row remap failed: service the GPU.",
    ),
    # NVLink.
    (f"{_D}NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", 409, _C, "1", "NVLink flow-control CRC errors."),
    (f"{_D}NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", 419, _C, "1", "NVLink data CRC errors."),
    (f"{_D}NVLINK_REPLAY_ERROR_COUNT_TOTAL", 429, _C, "1", "NVLink replays, all links."),
    (f"{_D}NVLINK_RECOVERY_ERROR_COUNT_TOTAL", 439, _C, "1", "NVLink recoveries, all links."),
    *(  # ids 440-445, 446-448, 475-480, 494-496 in link order
        (f"{_D}NVLINK_BANDWIDTH_L{link}", fid, _C, "MB/s", f"NVLink data rate, link {link}.")
        for link, fid in enumerate(
            (*range(440, 446), *range(475, 481), 446, 447, 448, 494, 495, 496)
        )
    ),
    (f"{_D}NVLINK_BANDWIDTH_TOTAL", 449, _C, "MB/s", "NVLink data rate, tx + rx, all links."),
    # vGPU.
    (f"{_D}VGPU_LICENSE_STATUS", 526, _G, "1", "1 when the vGPU holds a licence."),
    # Profiling (DCP) fields, ratios from 0 to 1.
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1001, _G, "ratio", "Share of time an engine was busy."),
    ("DCGM_FI_PROF_SM_ACTIVE", 1002, _G, "ratio", "Share of cycles an SM had a warp."),
    ("DCGM_FI_PROF_SM_OCCUPANCY", 1003, _G, "ratio", "Resident warps over the SM maximum."),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1004, _G, "ratio", "Share of cycles a tensor pipe ran."),
    ("DCGM_FI_PROF_DRAM_ACTIVE", 1005, _G, "ratio", "Share of cycles memory moved data."),
    ("DCGM_FI_PROF_PIPE_FP64_ACTIVE", 1006, _G, "ratio", "Share of cycles the FP64 pipe ran."),
    ("DCGM_FI_PROF_PIPE_FP32_ACTIVE", 1007, _G, "ratio", "Share of cycles the FP32 pipe ran."),
    ("DCGM_FI_PROF_PIPE_FP16_ACTIVE", 1008, _G, "ratio", "Share of cycles the FP16 pipe ran."),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", 1009, _G, "B/s", "PCIe transmit rate, headers and payload."),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", 1010, _G, "B/s", "PCIe receive rate, headers and payload."),
    ("DCGM_FI_PROF_NVLINK_TX_BYTES", 1011, _G, "B/s", "NVLink transmit rate, headers and payload."),
    ("DCGM_FI_PROF_NVLINK_RX_BYTES", 1012, _G, "B/s", "NVLink receive rate, headers and payload."),
    # dcgm-exporter's own families, derived from fields above.
    ("DCGM_EXP_XID_ERRORS_COUNT", 0, _C, "1", "XID errors in the trailing window, by code."),
    ("DCGM_EXP_CLOCK_EVENTS_COUNT", 0, _C, "1", "Collects in the window with each clock event."),
    ("DCGM_EXP_GPU_HEALTH_STATUS", 0, _C, "1", "Health by watch: 0 pass, 10 warn, 20 fail."),
    ("DCGM_EXP_P2P_STATUS", 0, _C, "1", "NVLink peer-to-peer status to each peer GPU; 0 OK."),
)


def _default_names() -> frozenset[str]:
    names = set()
    for raw in DEFAULT_CSV_PATH.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            names.add(line.split(",", 1)[0].strip())
    return frozenset(names)


_ON = _default_names()

DCGM_FIELDS: dict[str, Field] = {
    name: Field(name, fid, type_, unit, help_, name in _ON)
    for name, fid, type_, unit, help_ in _ROWS
}

# dcgm-exporter 1.x names (etc/1.x-compatibility-metrics.csv) and DCGM's renamed fields.
_LEGACY: dict[str, str] = {
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": f"{_D}CLOCKS_EVENT_REASONS",
    "dcgm_sm_clock": f"{_D}SM_CLOCK",
    "dcgm_memory_clock": f"{_D}MEM_CLOCK",
    "dcgm_memory_temp": f"{_D}MEMORY_TEMP",
    "dcgm_gpu_temp": f"{_D}GPU_TEMP",
    "dcgm_power_usage": f"{_D}POWER_USAGE",
    "dcgm_total_energy_consumption": f"{_D}TOTAL_ENERGY_CONSUMPTION",
    "dcgm_pcie_tx_throughput": f"{_D}PCIE_TX_THROUGHPUT",
    "dcgm_pcie_rx_throughput": f"{_D}PCIE_RX_THROUGHPUT",
    "dcgm_pcie_replay_counter": f"{_D}PCIE_REPLAY_COUNTER",
    "dcgm_gpu_utilization": f"{_D}GPU_UTIL",
    "dcgm_mem_copy_utilization": f"{_D}MEM_COPY_UTIL",
    "dcgm_enc_utilization": f"{_D}ENC_UTIL",
    "dcgm_dec_utilization": f"{_D}DEC_UTIL",
    "dcgm_xid_errors": f"{_D}XID_ERRORS",
    "dcgm_fb_free": f"{_D}FB_FREE",
    "dcgm_fb_used": f"{_D}FB_USED",
    **{
        f"dcgm_{kind}_violation": f"{_D}{kind.upper()}_VIOLATION"
        for kind in ("power", "thermal", "sync_boost", "board_limit", "low_util", "reliability")
    },
    **{
        f"dcgm_ecc_{bits}_{span}_total": f"{_D}ECC_{bits.upper()}_{span[:3].upper()}_TOTAL"
        for bits in ("sbe", "dbe")
        for span in ("volatile", "aggregate")
    },
    **{f"dcgm_retired_pages_{k}": f"{_D}RETIRED_{k.upper()}" for k in ("sbe", "dbe", "pending")},
    "dcgm_nvlink_flit_crc_error_count_total": f"{_D}NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "dcgm_nvlink_data_crc_error_count_total": f"{_D}NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "dcgm_nvlink_replay_error_count_total": f"{_D}NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "dcgm_nvlink_recovery_error_count_total": f"{_D}NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    "dcgm_nvlink_bandwidth_total": f"{_D}NVLINK_BANDWIDTH_TOTAL",
    **{
        f"dcgm_fi_prof_{k}": f"DCGM_FI_PROF_{k.upper()}"
        for k in (
            "gr_engine_active",
            "sm_active",
            "sm_occupancy",
            "pipe_tensor_active",
            "dram_active",
            "pcie_tx_bytes",
            "pcie_rx_bytes",
        )
    },
}
LEGACY_NAMES: dict[str, Field] = {old: DCGM_FIELDS[new] for old, new in _LEGACY.items()}
"""Legacy series name to the field it stands for."""


def dcgm_field(name: str) -> Field:
    """Look up a DCGM field by its name or a legacy name dcgm-exporter still accepts.

    Raises:
        KeyError: The name is not in the catalogue.
    """
    field = DCGM_FIELDS.get(name) or LEGACY_NAMES.get(name)
    if field is None:
        raise KeyError(name)
    return field
