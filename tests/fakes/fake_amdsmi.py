# ruff: noqa: N818 - class names mirror amdsmi
"""A fake of AMD's ``amdsmi`` Python package that behaves like it on a ROCm host.

Tests install it with ``monkeypatch.setitem(sys.modules, "amdsmi", module)``.
It follows amdsmi 6.x/7.x (``amdsmi_interface.py``): the same function names and
argument order, the same enums and values (``AmdSmiInitFlags``,
``AmdSmiClkType``, ``AmdSmiTemperatureType``, ``AmdSmiTemperatureMetric``), the
exception classes with ``err_code``, dict answers with the real keys, and the
string ``"N/A"`` where the library reports a sentinel (0xFFFF activity or power,
max-uint clocks).

Configure it with ``configure([FakeAmdGpu(...), ...])``. Per device you can
make the GPU lost, make a function unsupported or fail with any status code.
``calls`` counts every API call by name.
"""

from collections import Counter
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

# --- status codes (amdsmi_wrapper.AMDSMI_STATUS_*) ------------------------------
AMDSMI_STATUS_SUCCESS = 0
AMDSMI_STATUS_INVAL = 1
AMDSMI_STATUS_NOT_SUPPORTED = 2
AMDSMI_STATUS_NOT_YET_IMPLEMENTED = 3
AMDSMI_STATUS_FAIL_LOAD_MODULE = 4
AMDSMI_STATUS_DRM_ERROR = 6
AMDSMI_STATUS_API_FAILED = 7
AMDSMI_STATUS_TIMEOUT = 8
AMDSMI_STATUS_RETRY = 9
AMDSMI_STATUS_NO_PERM = 10
AMDSMI_STATUS_IO = 12
AMDSMI_STATUS_INIT_ERROR = 18
AMDSMI_STATUS_NOT_FOUND = 31
AMDSMI_STATUS_NOT_INIT = 32
AMDSMI_STATUS_DRIVER_NOT_LOADED = 34
AMDSMI_STATUS_NO_DATA = 40
AMDSMI_STATUS_AMDGPU_RESTART_ERR = 54

_INFO = {
    AMDSMI_STATUS_INVAL: "AMDSMI_STATUS_INVAL - Invalid parameters",
    AMDSMI_STATUS_NOT_SUPPORTED: "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported",
    AMDSMI_STATUS_TIMEOUT: "AMDSMI_STATUS_TIMEOUT - Timeout in API call",
    AMDSMI_STATUS_NO_PERM: "AMDSMI_STATUS_NO_PERM - Permission Denied",
    AMDSMI_STATUS_IO: "AMDSMI_STATUS_IO - I/O Error",
    AMDSMI_STATUS_INIT_ERROR: "AMDSMI_STATUS_INIT_ERROR - Initialization error",
    AMDSMI_STATUS_NOT_FOUND: "AMDSMI_STATUS_NOT_FOUND - Device Not found",
    AMDSMI_STATUS_DRIVER_NOT_LOADED: "AMDSMI_STATUS_DRIVER_NOT_LOADED - Driver not loaded",
}


class AmdSmiException(Exception):
    """Base smi exception class."""


class AmdSmiLibraryException(AmdSmiException):
    """A status code other than success from the C library."""

    def __init__(self, err_code: int) -> None:
        err_code = abs(err_code)
        super().__init__(err_code)
        self.err_code = err_code
        self.err_info = _INFO.get(
            err_code, "AMDSMI_STATUS_UNKNOWN_ERROR - An unknown error occurred"
        )

    def __str__(self) -> str:
        return f"Error code:\n\t{self.err_code} | {self.err_info}"

    def get_error_code(self) -> int:
        return self.err_code


class AmdSmiRetryException(AmdSmiLibraryException):
    def __init__(self) -> None:
        super().__init__(AMDSMI_STATUS_RETRY)


class AmdSmiTimeoutException(AmdSmiLibraryException):
    def __init__(self) -> None:
        super().__init__(AMDSMI_STATUS_TIMEOUT)


class AmdSmiParameterException(AmdSmiException):
    def __init__(self, receivedValue: Any, expectedType: Any) -> None:  # noqa: N803
        super().__init__(f"Invalid parameter: {type(receivedValue)}, expected {expectedType}")
        self.err_code = None


# --- enums (values from amdsmi_wrapper) -----------------------------------------
class AmdSmiInitFlags(IntEnum):
    INIT_ALL_PROCESSORS = 0xFFFFFFFF
    INIT_AMD_CPUS = 1
    INIT_AMD_GPUS = 2
    INIT_AMD_APUS = 3
    INIT_NON_AMD_CPUS = 4
    INIT_NON_AMD_GPUS = 8


class AmdSmiClkType(IntEnum):
    SYS = 0
    GFX = 0
    DF = 1
    DCEF = 2
    SOC = 3
    MEM = 4
    PCIE = 5
    VCLK0 = 6
    VCLK1 = 7
    DCLK0 = 8
    DCLK1 = 9


class AmdSmiTemperatureType(IntEnum):
    EDGE = 0
    HOTSPOT = 1
    JUNCTION = 1
    VRAM = 2
    HBM_0 = 3
    HBM_1 = 4
    HBM_2 = 5
    HBM_3 = 6
    PLX = 7


class AmdSmiGpuBlock(IntEnum):
    INVALID = 0
    UMC = 1
    SDMA = 2
    GFX = 4
    MMHUB = 8
    ATHUB = 16
    PCIE_BIF = 32
    HDP = 64
    XGMI_WAFL = 128
    DF = 256
    SMN = 512
    SEM = 1024
    MP0 = 2048
    MP1 = 4096
    FUSE = 8192
    MCA = 16384
    VCN = 32768
    JPEG = 65536
    IH = 131072
    MPIO = 262144


class AmdSmiMemoryType(IntEnum):
    VRAM = 0
    VIS_VRAM = 1
    GTT = 2


class AmdSmiVirtualizationMode(IntEnum):
    UNKNOWN = 0
    BAREMETAL = 1
    HOST = 2
    GUEST = 3
    PASSTHROUGH = 4


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = 0
    MAX = 1
    MIN = 2
    CRITICAL = 5
    EMERGENCY = 7


# --- configuration --------------------------------------------------------------
@dataclass
class FakeAmdGpu:
    """One fake AMD GPU with the values amdsmi returns (in amdsmi's units)."""

    uuid: str = "5fff74a1-0000-1000-80bd-4f2b5fcd1c5a"
    market_name: str = "AMD Instinct MI300X"
    asic_serial: str = "0x9F2A11B0C0DE0001"
    product_serial: str = "692251001124"
    bdf: str = "0000:0c:00.0"
    drm_card: int | str = 1
    driver_version: str = "6.8.5"
    activity: dict[str, int | str] = field(
        default_factory=lambda: {"gfx_activity": 76, "umc_activity": 33, "mm_activity": "N/A"}
    )
    vram_total_mb: int = 196592
    vram_used_mb: int = 70000
    current_socket_power: int | str = 612  # W
    average_socket_power: int | str = "N/A"  # W; MI200 reports this one instead
    energy_accumulator: int = 1_000_000
    counter_resolution: float = 15.259  # uJ per tick
    temps: dict[int, int] = field(default_factory=lambda: {0: 41, 1: 63, 2: 55})  # by sensor
    clocks: dict[int, int | str] = field(  # MHz, by AmdSmiClkType
        default_factory=lambda: {0: 2100, 4: 1300, 3: 1143, 6: 914, 8: 711}
    )
    pcie_speed: int = 32000  # MT/s
    pcie_bandwidth: int = 9000  # Mb/s
    pcie_replay_count: int = 5
    model_number: str = "102-G30211-00"  # board part number: the exporter's card_model
    vbios_version: str = "022.040.003.043.000001"
    compute_partition: str = "SPX"
    memory_partition: str = "NPS1"
    partition_id: int = 0
    virtualization_mode: int = 1  # BAREMETAL
    # amdsmi_get_gpu_metrics_info, as an MI300X (gpu_metrics v1.6) reports it.
    hbm_temps: list[int | str] = field(default_factory=lambda: ["N/A"] * 8)
    gfx_busy_inst: list[int | str] = field(default_factory=lambda: [71, 74, 80, 77, 69, 75, 79, 73])
    vcn_busy: list[int | str] = field(default_factory=lambda: [0, 0, 0, 0])
    jpeg_busy: list[int | str] = field(default_factory=lambda: [0] * 32)
    gfxclks: list[int | str] = field(default_factory=lambda: [2100] * 8)
    socclks: list[int | str] = field(default_factory=lambda: [1143, 1143, 1143, 1143])
    vclk0s: list[int | str] = field(default_factory=lambda: [914, 914, 914, 914])
    dclk0s: list[int | str] = field(default_factory=lambda: [711, 711, 711, 711])
    uclk: int | str = 1300
    vram_max_bandwidth: int | str = 5300  # GB/s
    pcie_bandwidth_acc: int | str = 123456
    xgmi_read_kb: list[int | str] = field(default_factory=lambda: [0] + [2_776_148_269] * 7)
    xgmi_write_kb: list[int | str] = field(default_factory=lambda: [0] + [3_539_423_344] * 7)
    voltages: tuple[int | str, int | str, int | str] = ("N/A", "N/A", "N/A")  # soc, gfx, mem
    # Per-block ECC (correctable, uncorrectable, deferred) by AmdSmiGpuBlock value.
    ecc_blocks: dict[int, tuple[int, int, int]] = field(
        default_factory=lambda: {1: (12, 0, 0), 4: (0, 0, 0), 2: (0, 0, 0)}
    )
    memory: dict[int, tuple[int, int]] = field(  # by AmdSmiMemoryType: (total, used) bytes
        default_factory=lambda: {
            0: (196592 * 2**20, 70000 * 2**20),
            1: (196592 * 2**20, 70000 * 2**20),
            2: (128 * 2**30, 6 * 2**20),
        }
    )
    pcie_max_speed: int = 32000  # MT/s
    pcie_recovery_count: int = 2
    pcie_replay_rollover_count: int = 0
    pcie_nak_sent_count: int = 1
    pcie_nak_received_count: int = 3
    lost: bool = False
    unsupported: set[str] = field(default_factory=set)  # function names
    failing: dict[str, int] = field(default_factory=dict)  # function name -> status code


@dataclass(frozen=True)
class _Handle:
    index: int


calls: Counter[str] = Counter()
_gpus: list[FakeAmdGpu] = []
_settings: dict[str, Any] = {"init_error": None, "initialized": False, "init_flag": None}


def configure(gpus: list[FakeAmdGpu], *, init_error: int | None = None) -> None:
    """Set the fake machine: its GPUs and a status code amdsmi_init fails with."""
    _gpus[:] = gpus
    calls.clear()
    _settings.update(init_error=init_error, initialized=False, init_flag=None)


def init_flag() -> Any:
    """The flag amdsmi_init was called with."""
    return _settings["init_flag"]


def _gpu(fn: str, handle: _Handle) -> FakeAmdGpu:
    calls[fn] += 1
    if not _settings["initialized"]:
        raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_INIT)
    if not isinstance(handle, _Handle):
        raise AmdSmiParameterException(handle, _Handle)
    gpu = _gpus[handle.index]
    if gpu.lost:
        raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_FOUND)
    if fn in gpu.failing:
        code = gpu.failing[fn]
        if code == AMDSMI_STATUS_TIMEOUT:
            raise AmdSmiTimeoutException
        raise AmdSmiLibraryException(code)
    if fn in gpu.unsupported:
        raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
    return gpu


# --- library ---------------------------------------------------------------------
def amdsmi_init(flag: AmdSmiInitFlags = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
    calls["amdsmi_init"] += 1
    if not isinstance(flag, AmdSmiInitFlags):
        raise AmdSmiParameterException(flag, AmdSmiInitFlags)
    if _settings["init_error"] is not None:
        raise AmdSmiLibraryException(_settings["init_error"])
    _settings.update(initialized=True, init_flag=flag)


def amdsmi_shut_down() -> None:
    calls["amdsmi_shut_down"] += 1
    _settings["initialized"] = False


def amdsmi_get_processor_handles() -> list[_Handle]:
    calls["amdsmi_get_processor_handles"] += 1
    if not _settings["initialized"]:
        raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_INIT)
    return [_Handle(i) for i in range(len(_gpus))]


# --- identity --------------------------------------------------------------------
def amdsmi_get_gpu_device_uuid(processor_handle: _Handle) -> str:
    return _gpu("amdsmi_get_gpu_device_uuid", processor_handle).uuid


def amdsmi_get_gpu_device_bdf(processor_handle: _Handle) -> str:
    return _gpu("amdsmi_get_gpu_device_bdf", processor_handle).bdf


def amdsmi_get_gpu_asic_info(processor_handle: _Handle) -> dict[str, Any]:
    gpu = _gpu("amdsmi_get_gpu_asic_info", processor_handle)
    return {
        "market_name": gpu.market_name,
        "vendor_id": "0x1002",
        "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
        "subvendor_id": "0x1002",
        "device_id": "0x74a1",
        "rev_id": "0x00",
        "asic_serial": gpu.asic_serial,
        "oam_id": 0,
        "num_compute_units": 304,
        "target_graphics_version": "gfx942",
        "subsystem_id": "0x74a1",
    }


def amdsmi_get_gpu_board_info(processor_handle: _Handle) -> dict[str, Any]:
    gpu = _gpu("amdsmi_get_gpu_board_info", processor_handle)
    return {
        "model_number": gpu.model_number,
        "product_serial": gpu.product_serial,
        "fru_id": "N/A",
        "product_name": gpu.market_name,
        "manufacturer_name": "AMD",
    }


def amdsmi_get_gpu_driver_info(processor_handle: _Handle) -> dict[str, Any]:
    gpu = _gpu("amdsmi_get_gpu_driver_info", processor_handle)
    return {"driver_name": "amdgpu", "driver_version": gpu.driver_version, "driver_date": "N/A"}


def amdsmi_get_gpu_enumeration_info(processor_handle: _Handle) -> dict[str, Any]:
    gpu = _gpu("amdsmi_get_gpu_enumeration_info", processor_handle)
    index = processor_handle.index
    return {
        "drm_render": 128 + index,
        "drm_card": gpu.drm_card,
        "hsa_id": index + 2,
        "hip_id": index,
        "hip_uuid": f"GPU-{gpu.uuid[:16]}",
    }


# --- telemetry ---------------------------------------------------------------------
def amdsmi_get_gpu_activity(processor_handle: _Handle) -> dict[str, Any]:
    return dict(_gpu("amdsmi_get_gpu_activity", processor_handle).activity)


def amdsmi_get_gpu_vram_usage(processor_handle: _Handle) -> dict[str, Any]:
    gpu = _gpu("amdsmi_get_gpu_vram_usage", processor_handle)
    return {"vram_total": gpu.vram_total_mb, "vram_used": gpu.vram_used_mb}


def amdsmi_get_power_info(processor_handle: _Handle) -> dict[str, Any]:
    gpu = _gpu("amdsmi_get_power_info", processor_handle)
    return {
        "socket_power": gpu.current_socket_power,
        "current_socket_power": gpu.current_socket_power,
        "average_socket_power": gpu.average_socket_power,
        "gfx_voltage": "N/A",
        "soc_voltage": "N/A",
        "mem_voltage": "N/A",
        "power_limit": 750000000,
    }


def amdsmi_get_energy_count(processor_handle: _Handle) -> dict[str, Any]:
    gpu = _gpu("amdsmi_get_energy_count", processor_handle)
    return {
        "energy_accumulator": gpu.energy_accumulator,
        "counter_resolution": gpu.counter_resolution,
        "timestamp": 1_700_000_000_000_000,
    }


def amdsmi_get_temp_metric(
    processor_handle: _Handle,
    sensor_type: AmdSmiTemperatureType,
    metric: AmdSmiTemperatureMetric,
) -> int:
    gpu = _gpu("amdsmi_get_temp_metric", processor_handle)
    if not isinstance(sensor_type, AmdSmiTemperatureType):
        raise AmdSmiParameterException(sensor_type, AmdSmiTemperatureType)
    if not isinstance(metric, AmdSmiTemperatureMetric):
        raise AmdSmiParameterException(metric, AmdSmiTemperatureMetric)
    if int(sensor_type) not in gpu.temps:
        raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
    return gpu.temps[int(sensor_type)]


def amdsmi_get_clock_info(processor_handle: _Handle, clock_type: AmdSmiClkType) -> dict[str, Any]:
    gpu = _gpu("amdsmi_get_clock_info", processor_handle)
    if not isinstance(clock_type, AmdSmiClkType):
        raise AmdSmiParameterException(clock_type, AmdSmiClkType)
    if int(clock_type) not in gpu.clocks:
        raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
    return {
        "clk": gpu.clocks[int(clock_type)],
        "min_clk": 500,
        "max_clk": 2100,
        "clk_locked": False,
        "clk_deep_sleep": 0,
    }


def amdsmi_get_gpu_total_ecc_count(processor_handle: _Handle) -> dict[str, Any]:
    gpu = _gpu("amdsmi_get_gpu_total_ecc_count", processor_handle)
    counts = list(gpu.ecc_blocks.values())  # the library sums the blocks
    return {
        "correctable_count": sum(c for c, _, _ in counts),
        "uncorrectable_count": sum(u for _, u, _ in counts),
        "deferred_count": sum(d for _, _, d in counts),
    }


def amdsmi_get_pcie_info(processor_handle: _Handle) -> dict[str, Any]:
    gpu = _gpu("amdsmi_get_pcie_info", processor_handle)
    return {
        "pcie_static": {
            "max_pcie_width": 16,
            "max_pcie_speed": gpu.pcie_max_speed,
            "pcie_interface_version": 5,
            "slot_type": "OAM",
        },
        "pcie_metric": {
            "pcie_width": 16,
            "pcie_speed": gpu.pcie_speed,
            "pcie_bandwidth": gpu.pcie_bandwidth,
            "pcie_replay_count": gpu.pcie_replay_count,
            "pcie_l0_to_recovery_count": gpu.pcie_recovery_count,
            "pcie_replay_roll_over_count": gpu.pcie_replay_rollover_count,
            "pcie_nak_sent_count": gpu.pcie_nak_sent_count,
            "pcie_nak_received_count": gpu.pcie_nak_received_count,
            "pcie_lc_perf_other_end_recovery_count": 0,
        },
    }


def amdsmi_get_gpu_ecc_count(processor_handle: _Handle, block: AmdSmiGpuBlock) -> dict[str, int]:
    gpu = _gpu("amdsmi_get_gpu_ecc_count", processor_handle)
    if not isinstance(block, AmdSmiGpuBlock):
        raise AmdSmiParameterException(block, AmdSmiGpuBlock)
    if int(block) not in gpu.ecc_blocks:
        raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
    correctable, uncorrectable, deferred = gpu.ecc_blocks[int(block)]
    return {
        "correctable_count": correctable,
        "uncorrectable_count": uncorrectable,
        "deferred_count": deferred,
    }


def amdsmi_get_gpu_memory_total(processor_handle: _Handle, mem_type: AmdSmiMemoryType) -> int:
    gpu = _gpu("amdsmi_get_gpu_memory_total", processor_handle)
    if not isinstance(mem_type, AmdSmiMemoryType):
        raise AmdSmiParameterException(mem_type, AmdSmiMemoryType)
    return gpu.memory[int(mem_type)][0]


def amdsmi_get_gpu_memory_usage(processor_handle: _Handle, mem_type: AmdSmiMemoryType) -> int:
    gpu = _gpu("amdsmi_get_gpu_memory_usage", processor_handle)
    if not isinstance(mem_type, AmdSmiMemoryType):
        raise AmdSmiParameterException(mem_type, AmdSmiMemoryType)
    return gpu.memory[int(mem_type)][1]


# --- partitions and identity details -------------------------------------------------
def amdsmi_get_gpu_compute_partition(processor_handle: _Handle) -> str:
    return _gpu("amdsmi_get_gpu_compute_partition", processor_handle).compute_partition


def amdsmi_get_gpu_memory_partition(processor_handle: _Handle) -> str:
    return _gpu("amdsmi_get_gpu_memory_partition", processor_handle).memory_partition


def amdsmi_get_gpu_kfd_info(processor_handle: _Handle) -> dict[str, Any]:
    gpu = _gpu("amdsmi_get_gpu_kfd_info", processor_handle)
    index = processor_handle.index
    return {"kfd_id": 17000 + index, "node_id": index + 2, "current_partition_id": gpu.partition_id}


def amdsmi_get_gpu_virtualization_mode(processor_handle: _Handle) -> dict[str, Any]:
    gpu = _gpu("amdsmi_get_gpu_virtualization_mode", processor_handle)
    return {"mode": AmdSmiVirtualizationMode(gpu.virtualization_mode)}


def amdsmi_get_gpu_vbios_info(processor_handle: _Handle) -> dict[str, Any]:
    gpu = _gpu("amdsmi_get_gpu_vbios_info", processor_handle)
    return {
        "name": "AMD MI300X_HW_SRIOV_CVS_1VF",
        "build_date": "2024/03/28 09:41",
        "part_number": "113-M3000100-103",
        "version": gpu.vbios_version,
    }


def amdsmi_get_violation_status(processor_handle: _Handle) -> dict[str, Any]:
    _gpu("amdsmi_get_violation_status", processor_handle)
    per_xcc = [[0] * 8] + [["N/A"] * 8] * 7  # one XCP (SPX), eight XCCs
    return {
        "reference_timestamp": 1_700_000_000_000_000,
        "violation_timestamp": 1000,
        "acc_counter": 1234,
        "acc_prochot_thrm": 0,
        "acc_ppt_pwr": 57,
        "acc_socket_thrm": 0,
        "acc_vr_thrm": 0,
        "acc_hbm_thrm": 0,
        "acc_gfx_clk_below_host_limit": 57,
        "acc_gfx_clk_below_host_limit_pwr": per_xcc,
        "acc_gfx_clk_below_host_limit_thm": per_xcc,
        "acc_gfx_clk_below_host_limit_total": per_xcc,
        "acc_low_utilization": per_xcc,
        "per_prochot_thrm": 0,
        "per_ppt_pwr": 4,
        "per_socket_thrm": 0,
        "per_vr_thrm": 0,
        "per_hbm_thrm": 0,
        "per_gfx_clk_below_host_limit": 4,
        "per_gfx_clk_below_host_limit_pwr": per_xcc,
        "per_gfx_clk_below_host_limit_thm": per_xcc,
        "per_gfx_clk_below_host_limit_total": per_xcc,
        "per_low_utilization": per_xcc,
    }


def _per_xcp(values: list[int | str], width: int) -> list[list[int | str]]:
    """The driver's xcp_stats layout: eight XCP rows; only XCP 0 is used in SPX mode."""
    return [values + ["N/A"] * (width - len(values))] + [["N/A"] * width] * 7


def amdsmi_get_gpu_metrics_info(processor_handle: _Handle) -> dict[str, Any]:
    gpu = _gpu("amdsmi_get_gpu_metrics_info", processor_handle)
    soc, gfx, mem = gpu.voltages
    return {
        "temperature_edge": gpu.temps.get(0, "N/A"),
        "temperature_hotspot": gpu.temps.get(1, "N/A"),
        "temperature_mem": gpu.temps.get(2, "N/A"),
        "average_gfx_activity": gpu.activity["gfx_activity"],
        "average_umc_activity": gpu.activity["umc_activity"],
        "average_mm_activity": gpu.activity["mm_activity"],
        "average_socket_power": gpu.average_socket_power,
        "current_socket_power": gpu.current_socket_power,
        "energy_accumulator": gpu.energy_accumulator,
        "current_gfxclk": gpu.gfxclks[0],
        "current_socclk": gpu.socclks[0],
        "current_uclk": gpu.uclk,
        "current_vclk0": gpu.vclk0s[0],
        "current_dclk0": gpu.dclk0s[0],
        "temperature_hbm": list(gpu.hbm_temps),
        "voltage_soc": soc,
        "voltage_gfx": gfx,
        "voltage_mem": mem,
        "vcn_activity": ["N/A"] * 4,
        "jpeg_activity": ["N/A"] * 32,
        "pcie_link_width": 16,
        "pcie_link_speed": gpu.pcie_speed // 1000 * 10,
        "pcie_bandwidth_acc": gpu.pcie_bandwidth_acc,
        "pcie_bandwidth_inst": gpu.pcie_bandwidth,
        "pcie_l0_to_recov_count_acc": gpu.pcie_recovery_count,
        "pcie_replay_count_acc": gpu.pcie_replay_count,
        "pcie_replay_rover_count_acc": gpu.pcie_replay_rollover_count,
        "pcie_nak_sent_count_acc": gpu.pcie_nak_sent_count,
        "pcie_nak_rcvd_count_acc": gpu.pcie_nak_received_count,
        "xgmi_read_data_acc": list(gpu.xgmi_read_kb),
        "xgmi_write_data_acc": list(gpu.xgmi_write_kb),
        "current_gfxclks": list(gpu.gfxclks),
        "current_socclks": list(gpu.socclks),
        "current_vclk0s": list(gpu.vclk0s),
        "current_dclk0s": list(gpu.dclk0s),
        "num_partition": 1,
        "xcp_stats.gfx_busy_inst": _per_xcp(list(gpu.gfx_busy_inst), 8),
        "xcp_stats.vcn_busy": _per_xcp(list(gpu.vcn_busy), 4),
        "xcp_stats.jpeg_busy": _per_xcp(list(gpu.jpeg_busy), 32),
        "vram_max_bandwidth": gpu.vram_max_bandwidth,
    }


# --- fleets, for an exporter process started with the fake on PYTHONPATH ------------
def mi300x(index: int) -> FakeAmdGpu:
    """An MI300X OAM board in SPX/NPS1, as the exporter's MI3xx rows describe it."""
    return FakeAmdGpu(
        uuid=f"5fff74a1-0000-1000-80bd-{index:012x}",
        product_serial=f"6922510011{index:02d}",
        bdf=f"0000:{0x0C + 0x10 * index:02x}:00.0",
        drm_card=index + 1,
    )


def mi210(index: int) -> FakeAmdGpu:
    """An MI210 PCIe card: average power, an edge sensor, four HBM stacks, no XCP stats."""
    return FakeAmdGpu(
        uuid=f"740f74a1-0000-1000-80bd-{index:012x}",
        market_name="AMD Instinct MI210",
        model_number="102-D67305-00",
        product_serial=f"7402110011{index:02d}",
        bdf=f"0000:{0x0C + 0x10 * index:02x}:00.0",
        drm_card=index + 1,
        current_socket_power="N/A",
        average_socket_power=280,
        hbm_temps=[51, 52, 50, 53],
        gfx_busy_inst=["N/A"] * 8,
        vcn_busy=["N/A"] * 4,
        jpeg_busy=["N/A"] * 32,
        pcie_speed=16000,
        pcie_max_speed=16000,
    )


_KINDS = {"mi300x": mi300x, "mi210": mi210}


def fleet(spec: str) -> list[FakeAmdGpu]:
    """GPUs from ``kind:count[,kind:count...]``; kinds: mi300x, mi210, and ``+ecc``
    after a kind for a GPU with an uncorrectable UMC error (the exporter: unhealthy)."""
    gpus: list[FakeAmdGpu] = []
    for part in spec.split(","):
        kind, _, count = part.strip().partition(":")
        base, _, flag = kind.partition("+")
        for _ in range(int(count or 1)):
            gpu = _KINDS[base](len(gpus))
            if flag == "ecc":
                gpu.ecc_blocks = {**gpu.ecc_blocks, 1: (12, 1, 0)}
            gpus.append(gpu)
    return gpus
