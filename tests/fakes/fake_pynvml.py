# ruff: noqa: N802, N803, N815, N816 - names and arguments mirror pynvml
"""A fake of ``pynvml`` (nvidia-ml-py) that behaves like the real module on a GPU host.

Tests install it with ``monkeypatch.setitem(sys.modules, "pynvml", module)``.
It follows nvidia-ml-py 12/13: the same function names and argument order,
``NVMLError`` whose constructor picks the ``NVMLError_<Name>`` subclass from the
code, the same error codes and constants, str (not bytes) for strings, and
return shapes as pynvml gives them (structs with ``.total/.free/.used``,
``[util, samplingPeriodUs]`` lists, ``(corr, unc, pending, failure)`` tuples,
events with ``.device/.eventType/.eventData``).

Configure it with ``configure([FakeGpu(...), ...])``. Per device you can make
the GPU lost, make a function unsupported or fail with any NVML code, enable
MIG with ``FakeMig`` instances, and queue XID events with ``queue_xid``.
``calls`` counts every API call by name.
"""

import string
import threading
from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

# --- error codes (nvml.h) ---------------------------------------------------
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_UNKNOWN = 999

_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    """Base NVML error; ``NVMLError(code)`` returns the matching subclass, as pynvml does."""

    value: int

    _valClassMapping: dict[int, type["NVMLError"]] = {}  # noqa: RUF012

    def __new__(cls, value: int) -> "NVMLError":
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"NVML Error with code {self.value}")


def _make_error_classes() -> None:
    for name, value in list(globals().items()):
        if not name.startswith("NVML_ERROR_"):
            continue
        words = string.capwords(name.removeprefix("NVML_ERROR_"), "_").replace("_", "")
        cls = type(f"NVMLError_{words}", (NVMLError,), {"__new__": _fixed_new(value)})
        globals()[cls.__name__] = cls
        NVMLError._valClassMapping[value] = cls


def _fixed_new(value: int) -> Any:
    def new(cls: type, *_args: Any) -> NVMLError:
        return NVMLError.__new__(cls, value)

    return new


_make_error_classes()

# --- constants ----------------------------------------------------------------
NVML_FEATURE_DISABLED, NVML_FEATURE_ENABLED = 0, 1
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_CLOCK_VIDEO = 0, 1, 2, 3
NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC = 0, 1
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
NVML_PERF_POLICY_POWER = 0
NVML_PERF_POLICY_THERMAL = 1
NVML_PERF_POLICY_SYNC_BOOST = 2
NVML_PERF_POLICY_BOARD_LIMIT = 3
NVML_PERF_POLICY_LOW_UTILIZATION = 4
NVML_PERF_POLICY_RELIABILITY = 5
NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES = 0, 1
NVML_NVLINK_MAX_LINKS = 36
NVML_NVLINK_ERROR_DL_REPLAY = 0
NVML_NVLINK_ERROR_DL_RECOVERY = 1
NVML_NVLINK_ERROR_DL_CRC_FLIT = 2
NVML_NVLINK_ERROR_DL_CRC_DATA = 3
NVML_FI_DEV_MEMORY_TEMP = 82
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138  # KiB, scope: link
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
NVML_INFOROM_OEM, NVML_INFOROM_ECC, NVML_INFOROM_POWER = 0, 1, 2
NVML_P2P_CAPS_INDEX_NVLINK = 2
NVML_P2P_STATUS_OK, NVML_P2P_STATUS_NOT_SUPPORTED = 0, 5
NVML_BRAND_TESLA, NVML_BRAND_NVIDIA = 2, 14
NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_DEVICE_MIG_DISABLE, NVML_DEVICE_MIG_ENABLE = 0, 1
NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0
NVML_GPU_INSTANCE_PROFILE_2_SLICE = 1
NVML_GPU_INSTANCE_PROFILE_3_SLICE = 2
NVML_GPU_INSTANCE_PROFILE_4_SLICE = 3
NVML_GPU_INSTANCE_PROFILE_7_SLICE = 4
NVML_GPU_INSTANCE_PROFILE_COUNT = 0x12
nvmlMemory_v2 = 0x02000028
nvmlEventTypeSingleBitEccError = 0x1
nvmlEventTypeDoubleBitEccError = 0x2
nvmlEventTypeXidCriticalError = 0x8
nvmlEventTypeNone = 0x0

# GI profile index -> (profile id, slices, memory MiB, name), as an H100 80GB lists them.
H100_PROFILES: dict[int, tuple[int, int, int, str]] = {
    0: (19, 1, 9856, "MIG 1g.10gb"),
    1: (14, 2, 20096, "MIG 2g.20gb"),
    2: (9, 3, 40192, "MIG 3g.40gb"),
    3: (5, 4, 40192, "MIG 4g.40gb"),
    4: (0, 7, 80384, "MIG 7g.80gb"),
}


# --- configuration --------------------------------------------------------------
@dataclass
class FakeMig:
    """One MIG device (GPU instance + compute instance) on a fake GPU."""

    gi_id: int
    profile_index: int = 0
    uuid: str = "MIG-00000000-0000-0000-0000-000000000000"
    memory_total: int = 10 * 1024**3
    memory_used: int = 1024**3
    memory_reserved: int = 0
    utilization: tuple[int, int] | None = None  # (gpu %, memory %); None: NotSupported
    processes: list[tuple[int, int | None]] = field(default_factory=list)


@dataclass
class FakeGpu:
    """One fake GPU with the values each getter returns (in NVML's units)."""

    uuid: str = "GPU-11111111-2222-3333-4444-555555555555"
    name: str = "NVIDIA H100 80GB HBM3"
    serial: str = "1650123456789"
    pci_bus_id: str = "00000000:3B:00.0"
    minor: int = 0
    sm_clock: int = 1980  # MHz
    mem_clock: int = 2619  # MHz
    gpu_temp: int = 45  # C
    memory_temp: int | None = 52  # C; None: field NotSupported
    power_mw: int = 250000
    energy_mj: int = 123456789
    pcie_replay: int = 3
    util: tuple[int, int] = (87, 41)  # gpu %, memory %
    encoder: tuple[int, int] = (5, 167000)
    decoder: tuple[int, int] = (7, 167000)
    memory_total: int = 80 * 1024**3
    memory_used: int = 20 * 1024**3
    memory_reserved: int = 512 * 1024**2
    ecc: dict[tuple[int, int], int] = field(
        default_factory=lambda: {(0, 0): 11, (1, 0): 2, (0, 1): 101, (1, 1): 12}
    )  # (error type, counter type) -> count
    retired_sbe: list[int] = field(default_factory=lambda: [0x1000, 0x2000])
    retired_dbe: list[int] = field(default_factory=lambda: [0x3000])
    retired_pending: int = 1
    remapped_rows: tuple[int, int, int, int] = (4, 1, 0, 0)
    violations_ns: dict[int, int] = field(
        default_factory=lambda: {0: 5_000_000, 1: 2_000, 2: 0, 3: 7_000, 4: 9_000_000, 5: 0}
    )
    pcie_kbps: tuple[int, int] = (1000, 2000)  # tx, rx in KB/s
    # NVML measures PCIe throughput over 20 ms and blocks meanwhile; a barrier shared by
    # several GPUs stands in for that wait and breaks (after 5 s) unless they read at once.
    pcie_barrier: threading.Barrier | None = None
    power_limit_mw: int = 700000
    clock_reasons: int = 0x4  # DCGM/NVML clocks event reason bits: SW power cap
    brand: int = NVML_BRAND_NVIDIA
    vbios: str = "96.00.74.00.01"
    inforom: dict[int, str] = field(default_factory=lambda: {0: "2.1", 1: "7.0"})  # no POWER
    inforom_image: str = "G520.0200.00.05"
    nvlink_kib: dict[int, tuple[int, int]] = field(default_factory=dict)  # link -> tx, rx KiB
    p2p: dict[int, int] = field(default_factory=dict)  # peer index -> status; default OK
    nvlink: dict[int, dict[int, int]] = field(default_factory=dict)  # link -> counter -> n
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, bytes)
    process_util: list[tuple[int, int, int]] = field(default_factory=list)  # (pid, us, sm%)
    mig: list[FakeMig] = field(default_factory=list)
    profiles: dict[int, tuple[int, int, int, str]] = field(default_factory=lambda: H100_PROFILES)
    events_supported: bool = True
    lost: bool = False
    unsupported: set[str] = field(default_factory=set)  # function names
    failing: dict[str, int] = field(default_factory=dict)  # function name -> NVML error code


@dataclass
class _Handle:
    gpu: FakeGpu
    mig: FakeMig | None = None


@dataclass
class _EventSet:
    handles: list[_Handle] = field(default_factory=list)
    queue: list[Any] = field(default_factory=list)
    freed: bool = False


calls: Counter[str] = Counter()
_calls_lock = threading.Lock()  # the source reads GPUs on several threads
wait_timeouts: list[int] = []  # timeoutms of every nvmlEventSetWait
_gpus: list[FakeGpu] = []
_handles: list[_Handle] = []
_event_sets: list[_EventSet] = []
_settings: dict[str, Any] = {"driver": "550.54.15", "init_error": None, "memory_v2": True}
_initialized = [False]


def configure(
    gpus: list[FakeGpu],
    *,
    driver_version: str = "550.54.15",
    init_error: int | None = None,
    memory_v2: bool = True,
) -> None:
    """Set the fake machine: its GPUs, driver version, and an error nvmlInit raises."""
    _gpus[:] = gpus
    _handles[:] = [_Handle(g) for g in gpus]
    _event_sets.clear()
    calls.clear()
    wait_timeouts.clear()
    _settings.update(driver=driver_version, init_error=init_error, memory_v2=memory_v2)


def queue_xid(gpu_index: int, xid: int) -> None:
    """Queue an XID critical error on a GPU, for every event set that registered it."""
    handle = _handles[gpu_index]
    for es in _event_sets:
        if handle in es.handles:
            es.queue.append(
                SimpleNamespace(
                    device=handle,
                    eventType=nvmlEventTypeXidCriticalError,
                    eventData=xid,
                    gpuInstanceId=0xFFFFFFFF,
                    computeInstanceId=0xFFFFFFFF,
                )
            )


def _enter(fn: str, handle: _Handle | None = None) -> None:
    with _calls_lock:
        calls[fn] += 1
    if not _initialized[0]:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    if handle is None:
        return
    gpu = handle.gpu
    if gpu.lost:
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)
    if fn in gpu.failing:
        raise NVMLError(gpu.failing[fn])
    if fn in gpu.unsupported:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)


def _whole_gpu(fn: str, handle: _Handle) -> FakeGpu:
    _enter(fn, handle)
    if handle.mig is not None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return handle.gpu


# --- library and system ---------------------------------------------------------
def nvmlInit() -> None:
    calls["nvmlInit"] += 1
    if _settings["init_error"] is not None:
        raise NVMLError(_settings["init_error"])
    _initialized[0] = True


def nvmlShutdown() -> None:
    _enter("nvmlShutdown")
    _initialized[0] = False


def nvmlSystemGetDriverVersion() -> str:
    _enter("nvmlSystemGetDriverVersion")
    return str(_settings["driver"])


def nvmlDeviceGetCount() -> int:
    _enter("nvmlDeviceGetCount")
    return len(_gpus)


def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:
    _enter("nvmlDeviceGetHandleByIndex")
    if not 0 <= index < len(_handles):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return _handles[index]


# --- identity -------------------------------------------------------------------
def nvmlDeviceGetName(handle: _Handle) -> str:
    return _whole_gpu("nvmlDeviceGetName", handle).name


def nvmlDeviceGetUUID(handle: _Handle) -> str:
    _enter("nvmlDeviceGetUUID", handle)
    return handle.mig.uuid if handle.mig else handle.gpu.uuid


def nvmlDeviceGetSerial(handle: _Handle) -> str:
    return _whole_gpu("nvmlDeviceGetSerial", handle).serial


def nvmlDeviceGetPciInfo(handle: _Handle) -> SimpleNamespace:
    gpu = _whole_gpu("nvmlDeviceGetPciInfo", handle)
    return SimpleNamespace(busId=gpu.pci_bus_id, busIdLegacy=gpu.pci_bus_id[4:])


def nvmlDeviceGetMinorNumber(handle: _Handle) -> int:
    return _whole_gpu("nvmlDeviceGetMinorNumber", handle).minor


# --- telemetry ------------------------------------------------------------------
def nvmlDeviceGetClockInfo(handle: _Handle, type: int) -> int:
    gpu = _whole_gpu("nvmlDeviceGetClockInfo", handle)
    return {NVML_CLOCK_SM: gpu.sm_clock, NVML_CLOCK_MEM: gpu.mem_clock}[type]


def nvmlDeviceGetTemperature(handle: _Handle, sensor: int) -> int:
    return _whole_gpu("nvmlDeviceGetTemperature", handle).gpu_temp


def nvmlDeviceGetFieldValues(
    handle: _Handle, fieldIds: list[int | tuple[int, int]]
) -> list[SimpleNamespace]:
    """Each id is a field id or, as pynvml takes it, a (field id, scope id) pair."""
    gpu = _whole_gpu("nvmlDeviceGetFieldValues", handle)
    out = []
    for item in fieldIds:
        fid, scope = item if isinstance(item, tuple) else (item, 0)
        value = SimpleNamespace(dVal=0.0, uiVal=0, ulVal=0, ullVal=0, sllVal=0, siVal=0, usVal=0)
        ret, vtype = NVML_ERROR_NOT_SUPPORTED, NVML_VALUE_TYPE_UNSIGNED_INT
        if fid == NVML_FI_DEV_MEMORY_TEMP and gpu.memory_temp is not None:
            value.uiVal, ret = gpu.memory_temp, NVML_SUCCESS
        tx_rx = (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)
        if fid in tx_rx and scope in gpu.nvlink_kib:
            value.ullVal = gpu.nvlink_kib[scope][tx_rx.index(fid)]
            ret, vtype = NVML_SUCCESS, NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
        out.append(
            SimpleNamespace(
                fieldId=fid,
                scopeId=scope,
                timestamp=0,
                latencyUsec=0,
                valueType=vtype,
                nvmlReturn=ret,
                value=value,
            )
        )
    return out


def nvmlDeviceGetPowerManagementLimit(handle: _Handle) -> int:
    return _whole_gpu("nvmlDeviceGetPowerManagementLimit", handle).power_limit_mw


def nvmlDeviceGetCurrentClocksEventReasons(handle: _Handle) -> int:
    return _whole_gpu("nvmlDeviceGetCurrentClocksEventReasons", handle).clock_reasons


def nvmlSystemGetNVMLVersion() -> str:
    _enter("nvmlSystemGetNVMLVersion")
    return "12." + _settings["driver"]


def nvmlDeviceGetBrand(handle: _Handle) -> int:
    return _whole_gpu("nvmlDeviceGetBrand", handle).brand


def nvmlDeviceGetVbiosVersion(handle: _Handle) -> str:
    return _whole_gpu("nvmlDeviceGetVbiosVersion", handle).vbios


def nvmlDeviceGetInforomVersion(handle: _Handle, infoRomObject: int) -> str:
    gpu = _whole_gpu("nvmlDeviceGetInforomVersion", handle)
    if infoRomObject not in gpu.inforom:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return gpu.inforom[infoRomObject]


def nvmlDeviceGetInforomImageVersion(handle: _Handle) -> str:
    return _whole_gpu("nvmlDeviceGetInforomImageVersion", handle).inforom_image


def nvmlDeviceGetP2PStatus(device1: _Handle, device2: _Handle, p2pIndex: int) -> int:
    gpu = _whole_gpu("nvmlDeviceGetP2PStatus", device1)
    _whole_gpu("nvmlDeviceGetP2PStatus", device2)
    if p2pIndex != NVML_P2P_CAPS_INDEX_NVLINK:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return gpu.p2p.get(device2.gpu.minor, NVML_P2P_STATUS_OK)


def nvmlDeviceGetPowerUsage(handle: _Handle) -> int:
    return _whole_gpu("nvmlDeviceGetPowerUsage", handle).power_mw


def nvmlDeviceGetTotalEnergyConsumption(handle: _Handle) -> int:
    return _whole_gpu("nvmlDeviceGetTotalEnergyConsumption", handle).energy_mj


def nvmlDeviceGetPcieReplayCounter(handle: _Handle) -> int:
    return _whole_gpu("nvmlDeviceGetPcieReplayCounter", handle).pcie_replay


def nvmlDeviceGetUtilizationRates(handle: _Handle) -> SimpleNamespace:
    _enter("nvmlDeviceGetUtilizationRates", handle)
    util = handle.mig.utilization if handle.mig else handle.gpu.util
    if util is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return SimpleNamespace(gpu=util[0], memory=util[1])


def nvmlDeviceGetEncoderUtilization(handle: _Handle) -> list[int]:
    return list(_whole_gpu("nvmlDeviceGetEncoderUtilization", handle).encoder)


def nvmlDeviceGetDecoderUtilization(handle: _Handle) -> list[int]:
    return list(_whole_gpu("nvmlDeviceGetDecoderUtilization", handle).decoder)


def nvmlDeviceGetMemoryInfo(handle: _Handle, version: int | None = None) -> SimpleNamespace:
    _enter("nvmlDeviceGetMemoryInfo", handle)
    src = handle.mig or handle.gpu
    total, used, reserved = src.memory_total, src.memory_used, src.memory_reserved
    if not version:  # v1 counts the driver's reservation as used
        return SimpleNamespace(total=total, free=total - used - reserved, used=used + reserved)
    if not _settings["memory_v2"]:
        raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
    free = total - used - reserved
    return SimpleNamespace(version=version, total=total, reserved=reserved, free=free, used=used)


def nvmlDeviceGetTotalEccErrors(handle: _Handle, errorType: int, counterType: int) -> int:
    return _whole_gpu("nvmlDeviceGetTotalEccErrors", handle).ecc[(errorType, counterType)]


def nvmlDeviceGetRetiredPages(device: _Handle, sourceFilter: int) -> list[int]:
    gpu = _whole_gpu("nvmlDeviceGetRetiredPages", device)
    return list(gpu.retired_sbe if sourceFilter == 0 else gpu.retired_dbe)


def nvmlDeviceGetRetiredPagesPendingStatus(device: _Handle) -> int:
    return _whole_gpu("nvmlDeviceGetRetiredPagesPendingStatus", device).retired_pending


def nvmlDeviceGetRemappedRows(device: _Handle) -> tuple[int, int, int, int]:
    return _whole_gpu("nvmlDeviceGetRemappedRows", device).remapped_rows


def nvmlDeviceGetViolationStatus(device: _Handle, perfPolicyType: int) -> SimpleNamespace:
    gpu = _whole_gpu("nvmlDeviceGetViolationStatus", device)
    return SimpleNamespace(referenceTime=0, violationTime=gpu.violations_ns[perfPolicyType])


def nvmlDeviceGetPcieThroughput(device: _Handle, counter: int) -> int:
    gpu = _whole_gpu("nvmlDeviceGetPcieThroughput", device)
    if gpu.pcie_barrier is not None:
        gpu.pcie_barrier.wait(timeout=5)
    return gpu.pcie_kbps[counter]


def nvmlDeviceGetNvLinkState(device: _Handle, link: int) -> int:
    gpu = _whole_gpu("nvmlDeviceGetNvLinkState", device)
    if not gpu.nvlink:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    if link > max(gpu.nvlink):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return NVML_FEATURE_ENABLED if link in gpu.nvlink else NVML_FEATURE_DISABLED


def nvmlDeviceGetNvLinkErrorCounter(device: _Handle, link: int, counter: int) -> int:
    return _whole_gpu("nvmlDeviceGetNvLinkErrorCounter", device).nvlink[link][counter]


# --- processes ------------------------------------------------------------------
def nvmlDeviceGetComputeRunningProcesses(handle: _Handle) -> list[SimpleNamespace]:
    _enter("nvmlDeviceGetComputeRunningProcesses", handle)
    procs = handle.mig.processes if handle.mig else handle.gpu.processes
    return [
        SimpleNamespace(pid=pid, usedGpuMemory=mem, gpuInstanceId=0, computeInstanceId=0)
        for pid, mem in procs
    ]


def nvmlDeviceGetProcessUtilization(handle: _Handle, timeStamp: int) -> list[SimpleNamespace]:
    gpu = _whole_gpu("nvmlDeviceGetProcessUtilization", handle)
    samples = [
        SimpleNamespace(pid=pid, timeStamp=ts, smUtil=sm, memUtil=0, encUtil=0, decUtil=0)
        for pid, ts, sm in gpu.process_util
        if ts > timeStamp
    ]
    if not samples:
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return samples


# --- events ---------------------------------------------------------------------
def nvmlEventSetCreate() -> _EventSet:
    _enter("nvmlEventSetCreate")
    es = _EventSet()
    _event_sets.append(es)
    return es


def nvmlDeviceGetSupportedEventTypes(handle: _Handle) -> int:
    gpu = _whole_gpu("nvmlDeviceGetSupportedEventTypes", handle)
    if not gpu.events_supported:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError


def nvmlDeviceRegisterEvents(handle: _Handle, eventTypes: int, eventSet: _EventSet) -> None:
    _whole_gpu("nvmlDeviceRegisterEvents", handle)
    if eventTypes & nvmlEventTypeXidCriticalError:
        eventSet.handles.append(handle)


def nvmlEventSetWait(eventSet: _EventSet, timeoutms: int) -> SimpleNamespace:
    _enter("nvmlEventSetWait")
    wait_timeouts.append(timeoutms)
    if not eventSet.queue:
        raise NVMLError(NVML_ERROR_TIMEOUT)
    event: SimpleNamespace = eventSet.queue.pop(0)
    return event


def nvmlEventSetFree(eventSet: _EventSet) -> None:
    _enter("nvmlEventSetFree")
    eventSet.freed = True


# --- MIG ------------------------------------------------------------------------
def nvmlDeviceGetMigMode(device: _Handle) -> list[int]:
    gpu = _whole_gpu("nvmlDeviceGetMigMode", device)
    mode = NVML_DEVICE_MIG_ENABLE if gpu.mig else NVML_DEVICE_MIG_DISABLE
    return [mode, mode]


def nvmlDeviceGetMaxMigDeviceCount(device: _Handle) -> int:
    _whole_gpu("nvmlDeviceGetMaxMigDeviceCount", device)
    return 7


def nvmlDeviceGetMigDeviceHandleByIndex(device: _Handle, index: int) -> _Handle:
    gpu = _whole_gpu("nvmlDeviceGetMigDeviceHandleByIndex", device)
    if index >= len(gpu.mig):
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return _Handle(gpu, gpu.mig[index])


def nvmlDeviceGetGpuInstanceId(device: _Handle) -> int:
    _enter("nvmlDeviceGetGpuInstanceId", device)
    if device.mig is None:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return device.mig.gi_id


def nvmlDeviceGetGpuInstanceById(device: _Handle, gpuInstanceId: int) -> SimpleNamespace:
    gpu = _whole_gpu("nvmlDeviceGetGpuInstanceById", device)
    for mig in gpu.mig:
        if mig.gi_id == gpuInstanceId:
            return SimpleNamespace(gpu=gpu, mig=mig)
    raise NVMLError(NVML_ERROR_NOT_FOUND)


def nvmlGpuInstanceGetInfo(gpuInstance: SimpleNamespace) -> SimpleNamespace:
    _enter("nvmlGpuInstanceGetInfo", _Handle(gpuInstance.gpu))
    profile_id = gpuInstance.gpu.profiles[gpuInstance.mig.profile_index][0]
    return SimpleNamespace(device=None, id=gpuInstance.mig.gi_id, profileId=profile_id)


def nvmlDeviceGetGpuInstanceProfileInfo(
    device: _Handle, profile: int, version: int = 2
) -> SimpleNamespace:
    gpu = _whole_gpu("nvmlDeviceGetGpuInstanceProfileInfo", device)
    if profile not in gpu.profiles:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    pid, slices, mem_mb, name = gpu.profiles[profile]
    return SimpleNamespace(id=pid, sliceCount=slices, memorySizeMB=mem_mb, name=name)


def nvmlDeviceGetAttributes(device: _Handle) -> SimpleNamespace:
    _enter("nvmlDeviceGetAttributes", device)
    if device.mig is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    _pid, slices, mem_mb, _name = device.gpu.profiles[device.mig.profile_index]
    return SimpleNamespace(gpuInstanceSliceCount=slices, memorySizeMB=mem_mb)
