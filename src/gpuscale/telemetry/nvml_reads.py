"""How NVML's getters map onto DCGM fields: one pass over one entity.

``gpuscale.telemetry.nvml`` owns the NVML lifecycle (loading, start-up, XID
events, the error-sorting chokepoint); this module owns the mapping from each
getter to its DCGM field and the unit conversion, so each stays small. It never
imports pynvml: it is handed the module for its constants and reaches NVML only
through ``Batch.call``, the source's chokepoint.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from gpuscale.telemetry.base import ProcessUsage
from gpuscale.telemetry.batch import FieldBatch, FieldError

logger = logging.getLogger(__name__)

_MIB = 1024 * 1024
_FV_ATTRS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")  # by valueType


def _ident(v: Any) -> float:  # noqa: ANN401 - NVML answers are untyped ctypes values
    return float(v)


def _ns(v: Any) -> float:  # noqa: ANN401
    return float(v.violationTime)


def _kib(v: Any) -> float:  # noqa: ANN401
    return float(v) * 1024


# One scalar field per row: (DCGM field, getter, pynvml constants passed after the
# handle, conversion to the catalogue's unit). Units and nvidia-smi equivalents:
SCALARS: tuple[tuple[str, str, tuple[str, ...], Callable[[Any], float]], ...] = (
    # MHz; nvidia-smi --query-gpu=clocks.sm / clocks.mem
    ("DCGM_FI_DEV_SM_CLOCK", "nvmlDeviceGetClockInfo", ("NVML_CLOCK_SM",), _ident),
    ("DCGM_FI_DEV_MEM_CLOCK", "nvmlDeviceGetClockInfo", ("NVML_CLOCK_MEM",), _ident),
    # C; temperature.gpu
    ("DCGM_FI_DEV_GPU_TEMP", "nvmlDeviceGetTemperature", ("NVML_TEMPERATURE_GPU",), _ident),
    # mW -> W; power.draw, power.limit
    ("DCGM_FI_DEV_POWER_USAGE", "nvmlDeviceGetPowerUsage", (), lambda v: v / 1000),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "nvmlDeviceGetPowerManagementLimit", (), lambda v: v / 1000),
    # mJ since driver load; nvidia-smi -q -d POWER (in J there)
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "nvmlDeviceGetTotalEnergyConsumption", (), _ident),
    # count; nvidia-smi -q "Replays Since Reset"
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "nvmlDeviceGetPcieReplayCounter", (), _ident),
    # % from [util, samplingPeriodUs]; utilization.encoder / utilization.decoder
    ("DCGM_FI_DEV_ENC_UTIL", "nvmlDeviceGetEncoderUtilization", (), lambda v: v[0]),
    ("DCGM_FI_DEV_DEC_UTIL", "nvmlDeviceGetDecoderUtilization", (), lambda v: v[0]),
    # count; ecc.errors.corrected|uncorrected.volatile|aggregate.total
    *(
        (f"DCGM_FI_DEV_ECC_{bits}_{span}_TOTAL", "nvmlDeviceGetTotalEccErrors", args, _ident)
        for span, counter in (("VOL", "NVML_VOLATILE_ECC"), ("AGG", "NVML_AGGREGATE_ECC"))
        for bits, args in (
            ("SBE", ("NVML_MEMORY_ERROR_TYPE_CORRECTED", counter)),
            ("DBE", ("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", counter)),
        )
    ),
    # pages (list length); retired_pages.sbe / retired_pages.dbe / retired_pages.pending
    *(
        (f"DCGM_FI_DEV_RETIRED_{bits}", "nvmlDeviceGetRetiredPages", (cause,), len)
        for bits, cause in (
            ("SBE", "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS"),
            ("DBE", "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR"),
        )
    ),
    ("DCGM_FI_DEV_RETIRED_PENDING", "nvmlDeviceGetRetiredPagesPendingStatus", (), _ident),
    # throttled time, ns as DCGM reports it; nvidia-smi -q -d PERFORMANCE ("Clocks Event Reasons")
    *(
        (f"DCGM_FI_DEV_{name}_VIOLATION", "nvmlDeviceGetViolationStatus", (policy,), _ns)
        for name, policy in (
            ("POWER", "NVML_PERF_POLICY_POWER"),
            ("THERMAL", "NVML_PERF_POLICY_THERMAL"),
            ("SYNC_BOOST", "NVML_PERF_POLICY_SYNC_BOOST"),
            ("BOARD_LIMIT", "NVML_PERF_POLICY_BOARD_LIMIT"),
            ("LOW_UTIL", "NVML_PERF_POLICY_LOW_UTILIZATION"),
            ("RELIABILITY", "NVML_PERF_POLICY_RELIABILITY"),
        )
    ),
)

# PCIe throughput per counter: (counter, field in KB/s, field in B/s); nvidia-smi dmon
# -s t (txpci / rxpci). NVML
# measures each counter over a 20 ms interval and blocks for it (on one H200, 21 ms a
# call), so each is read once and feeds both fields.
PCIE = tuple(
    (counter, f"DCGM_FI_DEV_PCIE_{way}_THROUGHPUT", f"DCGM_FI_PROF_PCIE_{way}_BYTES")
    for way, counter in (("TX", "NVML_PCIE_UTIL_TX_BYTES"), ("RX", "NVML_PCIE_UTIL_RX_BYTES"))
)

# NVLink DL error counters summed over active links, count; nvidia-smi nvlink -e
NVLINK = (
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "NVML_NVLINK_ERROR_DL_CRC_FLIT"),
    ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "NVML_NVLINK_ERROR_DL_CRC_DATA"),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "NVML_NVLINK_ERROR_DL_REPLAY"),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "NVML_NVLINK_ERROR_DL_RECOVERY"),
)
UTIL = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL")
FB = (
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_FB_TOTAL",
)
ROWS = (
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
)
MEMORY_TEMP = "DCGM_FI_DEV_MEMORY_TEMP"
REASONS = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"
FB_USED_PERCENT = "DCGM_FI_DEV_FB_USED_PERCENT"
NVLINK_TOTAL = "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"
_KIB = 1024
# nvmlBrandType_t to its name, as nvidia-smi -q prints "Product Brand".
BRANDS = (
    "Unknown", "Quadro", "Tesla", "NVS", "GRID", "GeForce", "Titan", "NVIDIA Virtual Applications",
    "NVIDIA Virtual PC", "NVIDIA Virtual Compute Server", "NVIDIA RTX Virtual Workstation",
    "NVIDIA Cloud Gaming", "Quadro RTX", "NVIDIA RTX", "NVIDIA", "GeForce RTX", "Titan RTX",
)  # fmt: skip


@dataclass(slots=True)
class Batch(FieldBatch):
    """One pass over one NVML entity.

    Attributes:
        classify: Sorts a raw NVML return code the way the chokepoint sorts exceptions.
    """

    classify: Callable[[int, str], None] = field(kw_only=True)


def read_gpu(b: Batch, nv: ModuleType, nvlinks: tuple[int, ...]) -> None:
    """Read the whole-GPU fields: clocks, temperatures, power, ECC, violations, PCIe, NVLink.

    Args:
        b: The entity's batch.
        nv: The pynvml module, for its constants.
        nvlinks: Active NVLink link indices; empty when the GPU has none.
    """
    for name, fn, consts, convert in SCALARS:
        value = b.get((name,), fn, *(getattr(nv, c) for c in consts))
        b.put(name, None if value is None else convert(value))
    for counter, kbps, bytes_s in PCIE:
        value = b.get((kbps, bytes_s), "nvmlDeviceGetPcieThroughput", getattr(nv, counter))
        b.put(kbps, None if value is None else float(value))
        b.put(bytes_s, None if value is None else _kib(value))
    # HBM temperature, C; temperature.memory, through the field-values API.
    fvs = b.get((MEMORY_TEMP,), "nvmlDeviceGetFieldValues", [nv.NVML_FI_DEV_MEMORY_TEMP])
    if fvs:
        fv = fvs[0]
        if fv.nvmlReturn == nv.NVML_SUCCESS:
            b.put(MEMORY_TEMP, getattr(fv.value, _FV_ATTRS[int(fv.valueType)]))
        else:  # the per-field status is sorted like an exception from a getter
            try:
                b.classify(int(fv.nvmlReturn), f"NVML_FI_DEV_MEMORY_TEMP: code {fv.nvmlReturn}")
            except FieldError as err:
                b.fail((MEMORY_TEMP,), str(err))
    # Rows and a 0/1 flag; remapped_rows.correctable / .uncorrectable / .failure
    rows = b.get(ROWS, "nvmlDeviceGetRemappedRows")
    if rows is not None:
        for name, value in zip(ROWS, (rows[0], rows[1], rows[3]), strict=True):
            b.put(name, value)
    # bitmask of DCGM_CLOCKS_EVENT_REASON_*; clocks_event_reasons.active. Drivers before
    # R535 name the call ...ThrottleReasons; the chokepoint answers None for a missing one.
    reasons = b.get((REASONS,), "nvmlDeviceGetCurrentClocksEventReasons")
    if reasons is None and REASONS not in b.failed:
        reasons = b.get((REASONS,), "nvmlDeviceGetCurrentClocksThrottleReasons")
    b.put(REASONS, reasons)
    for name, counter in NVLINK if nvlinks else ():
        kind = getattr(nv, counter)
        counts = [b.get((name,), "nvmlDeviceGetNvLinkErrorCounter", n, kind) for n in nvlinks]
        if all(c is not None for c in counts):
            b.put(name, sum(counts))


def read_memory(b: Batch, nv: ModuleType) -> None:
    """Read the framebuffer: bytes -> MiB, floored as DCGM does (memory.free/.used/.total).

    Args:
        b: The entity's batch.
        nv: The pynvml module; ``nvmlMemory_v2`` there adds the driver's reservation.
    """
    memory = None
    version = getattr(nv, "nvmlMemory_v2", None)
    if version is not None:  # v2 splits the driver's reservation out of "used"
        try:
            memory = b.call("nvmlDeviceGetMemoryInfo", b.handle, version)
        except FieldError as err:
            logger.debug("NVML: memory v2: %s; trying v1", err)
    if memory is None:
        memory = b.get(FB, "nvmlDeviceGetMemoryInfo")
    if memory is not None:
        values = (memory.free, memory.used, getattr(memory, "reserved", None), memory.total)
        for name, value in zip(FB, values, strict=True):
            b.put(name, None if value is None else value // _MIB)
        if values[2] is not None and memory.total > values[2]:  # DCGM: used / (total - reserved)
            b.put(FB_USED_PERCENT, memory.used / (memory.total - values[2]))


def read_utilization(b: Batch) -> None:
    """Read busy shares, % (utilization.gpu, utilization.memory); absent on most MIG devices."""
    util = b.get(UTIL, "nvmlDeviceGetUtilizationRates")
    if util is not None:
        b.put(UTIL[0], util.gpu)
        b.put(UTIL[1], util.memory)


def read_processes(b: Batch, since: int, *, sm: bool) -> tuple[tuple[ProcessUsage, ...], int]:
    """Read per-process framebuffer (bytes) and SM share (% -> 0..1), as nvidia-smi pmon.

    Args:
        b: The entity's batch.
        since: NVML timestamp (us) of the newest utilisation sample already seen.
        sm: Whether to ask for SM shares (not for MIG devices).

    Returns:
        Processes by pid, and the new ``since``.
    """
    running = b.get(("processes",), "nvmlDeviceGetComputeRunningProcesses") or []
    memory = {int(p.pid): p.usedGpuMemory for p in running}
    shares: dict[int, tuple[int, float]] = {}
    for s in (b.get((), "nvmlDeviceGetProcessUtilization", since) or []) if sm else []:
        if s.timeStamp >= shares.get(int(s.pid), (-1, 0.0))[0]:
            shares[int(s.pid)] = (int(s.timeStamp), s.smUtil / 100)
        since = max(since, int(s.timeStamp))
    processes = tuple(
        ProcessUsage(
            pid=pid,
            used_memory_bytes=int(memory[pid]) if memory.get(pid) is not None else None,
            sm_utilization=shares[pid][1] if pid in shares else None,
        )
        for pid in sorted(memory.keys() | shares.keys())
    )
    return processes, since


def read_nvlink_bandwidth(
    b: Batch,
    nv: ModuleType,
    nvlinks: tuple[int, ...],
    now: float,
    last: dict[int, tuple[float, float]],
) -> None:
    """NVLink data rate per link and in total, MB/s, tx + rx (DCGM_FI_DEV_NVLINK_BANDWIDTH_L*).

    NVML counts data per link in KiB (``NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX`` with the
    link as scope, what ``nvidia-smi nvlink -gt d`` shows); the rate is the change over the
    time since the previous collect, so the first collect has none.

    Args:
        b: The entity's batch.
        nv: The pynvml module, for its constants.
        nvlinks: Active links; empty: nothing to read.
        now: This collect's time, seconds.
        last: Link to (time, KiB) of the previous collect; updated here.
    """
    tx = getattr(nv, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", None)
    rx = getattr(nv, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", None)
    if not nvlinks or tx is None or rx is None:
        return
    names = (*(f"DCGM_FI_DEV_NVLINK_BANDWIDTH_L{n}" for n in nvlinks), NVLINK_TOTAL)
    fvs = b.get(names, "nvmlDeviceGetFieldValues", [(f, n) for n in nvlinks for f in (tx, rx)])
    if not fvs:
        return
    total, complete = 0.0, True
    for i, link in enumerate(nvlinks):
        pair = fvs[2 * i : 2 * i + 2]
        if any(fv.nvmlReturn != nv.NVML_SUCCESS for fv in pair):
            complete = False
            continue
        kib = sum(float(getattr(fv.value, _FV_ATTRS[int(fv.valueType)])) for fv in pair)
        previous, last[link] = last.get(link), (now, kib)
        if previous is None or now <= previous[0] or kib < previous[1]:
            complete = False  # first collect, or the counter was reset
            continue
        rate = (kib - previous[1]) * _KIB / 1e6 / (now - previous[0])
        b.put(f"DCGM_FI_DEV_NVLINK_BANDWIDTH_L{link}", rate)
        total += rate
    if complete:
        b.put(NVLINK_TOTAL, total)


def read_static(call: Callable[..., Any], nv: ModuleType, handle: object) -> dict[str, str]:
    """The label fields of a counters file, read once at start-up; absent ones are left out.

    Args:
        call: The source's start-up chokepoint (answers None when a detail is unknown).
        nv: The pynvml module, for its constants.
        handle: The GPU's handle.

    Returns:
        DCGM field name to its string (nvidia-smi -q: "Product Brand", "Serial Number",
        "VBIOS Version", "Inforom Version").
    """

    def text(value: object) -> str | None:
        if value is None:
            return None
        out = value.decode() if isinstance(value, bytes) else str(value)
        return out.strip() or None

    brand = call("nvmlDeviceGetBrand", handle)
    reads = {
        "DCGM_FI_DEV_BRAND": BRANDS[brand]
        if isinstance(brand, int) and 0 <= brand < len(BRANDS)
        else None,
        "DCGM_FI_DEV_SERIAL": text(call("nvmlDeviceGetSerial", handle)),
        "DCGM_FI_DEV_VBIOS_VERSION": text(call("nvmlDeviceGetVbiosVersion", handle)),
        "DCGM_FI_DEV_INFOROM_IMAGE_VER": text(call("nvmlDeviceGetInforomImageVersion", handle)),
    }
    for name, obj in (
        ("OEM", "NVML_INFOROM_OEM"),
        ("ECC", "NVML_INFOROM_ECC"),
        ("POWER", "NVML_INFOROM_POWER"),
    ):
        which = getattr(nv, obj, None)
        if which is not None:
            reads[f"DCGM_FI_DEV_{name}_INFOROM_VER"] = text(
                call("nvmlDeviceGetInforomVersion", handle, which)
            )
    return {k: v for k, v in reads.items() if v}
