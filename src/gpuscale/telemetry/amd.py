"""AMD GPUs through amdsmi, under AMD device-metrics-exporter's field names.

This is the only module that imports ``amdsmi``; import-linter and ruff's
banned-api check that. The import happens inside ``_load()``: without ROCm the
package fails while importing (``KeyError: 'libamd_smi.so'`` from its ctypes
wrapper, or ``ImportError``/``OSError``), and tests put a fake in
``sys.modules`` first.

Every amdsmi call goes through one chokepoint, ``AmdSource._call``, which sorts
``AmdSmiLibraryException`` status codes three ways, as the NVML source does:

- not supported (``NOT_SUPPORTED``, ``NOT_YET_IMPLEMENTED``, ``NO_DATA``): the call
  answers None and the field is absent; so is a value amdsmi reports as ``"N/A"``;
- device lost (``NOT_FOUND``, ``DRIVER_NOT_LOADED``, ``AMDGPU_RESTART_ERR``,
  ``TIMEOUT``): the device reports ``up=False`` and the others carry on;
- anything else: the fields that call feeds are absent and named in ``failed_fields``.

Values use the exporter's units (``gpuscale.fields.amd``); ``gpu_clock`` values
are keyed ``gpu_clock|system`` and ``gpu_clock|memory`` by ``clock_type``.
``GpuInfo.device`` is the DRM card (``card1``), the name ``/dev/dri`` uses.
"""

import contextlib
import io
import logging
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from gpuscale.errors import SourceUnavailableError
from gpuscale.fields.amd import labelled_key
from gpuscale.ids import GpuUuid
from gpuscale.telemetry.base import DeviceSample, GpuInfo, Snapshot, Vendor
from gpuscale.telemetry.batch import DeviceLostError, FieldBatch, FieldError

logger = logging.getLogger(__name__)

# amdsmi_wrapper.AMDSMI_STATUS_*: the package does not export them at top level.
_ABSENT = frozenset({2, 3, 40})  # NOT_SUPPORTED, NOT_YET_IMPLEMENTED, NO_DATA
_LOST = frozenset({8, 31, 34, 54})  # TIMEOUT, NOT_FOUND, DRIVER_NOT_LOADED, AMDGPU_RESTART_ERR
_MIB = 1024 * 1024


def _load() -> ModuleType:
    """Import amdsmi lazily. Raises ImportError, KeyError or OSError without ROCm."""
    # amdsmi prints its own loader complaints to stdout on import; the one-line
    # error raised from here says the same thing once, on stderr.
    with contextlib.redirect_stdout(io.StringIO()):
        import amdsmi  # noqa: TID251 - the one sanctioned importer

    module: ModuleType = amdsmi
    return module


def _unavailable(err: BaseException) -> str:
    """The one-line message for a machine where amdsmi cannot start."""
    if isinstance(err, KeyError) and err.args:
        reason = f"{err.args[0]} not found"
    else:
        reason = " ".join(str(err).split()) or type(err).__name__
    return (
        f"amdsmi not available ({reason}): install ROCm and the amdsmi package or use --source sim"
    )


def _num(value: object) -> float | None:
    """A number from amdsmi, or None for its ``"N/A"`` and other non-numbers."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@dataclass(slots=True)
class _Batch(FieldBatch):
    """One pass over one AMD GPU; amdsmi answers dicts and ``"N/A"`` for unknowns."""

    def put(self, name: str, value: object) -> None:
        """Store a numeric value; ``"N/A"`` and None leave the field absent."""
        number = _num(value)
        if number is not None:
            self.values[name] = number

    def dict_fields(self, fn: str, keys: Mapping[str, str], *args: object) -> dict[str, Any]:
        """Call a dict-returning getter and store ``keys`` (amdsmi key -> field name)."""
        answer = self.get(tuple(keys.values()), fn, *args) or {}
        for key, name in keys.items():
            self.put(name, answer.get(key))
        return dict(answer)


class AmdSource:
    """Reads AMD GPUs through amdsmi.

    Args:
        clock: Wall clock in seconds, stamped on each snapshot.
        hostname: Host name for the snapshot; defaults to this machine's.
        library: The amdsmi module to use; tests pass a fake. Imported when None.

    Raises:
        SourceUnavailableError: amdsmi cannot be imported or initialised here.
    """

    vendor: Vendor = "amd"

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        hostname: str | None = None,
        library: ModuleType | None = None,
    ) -> None:
        self._clock = clock
        self._hostname = hostname or socket.gethostname()
        self._closed = False
        try:
            self._amd = library if library is not None else _load()
        except (ImportError, KeyError, OSError) as err:
            raise SourceUnavailableError(_unavailable(err)) from err
        try:
            self._amd.amdsmi_init(self._amd.AmdSmiInitFlags.INIT_AMD_GPUS)
        except (self._amd.AmdSmiException, OSError) as err:
            raise SourceUnavailableError(_unavailable(err)) from err
        try:
            self._gpus = self._discover()
        except (DeviceLostError, FieldError) as err:
            self._amd.amdsmi_shut_down()
            raise SourceUnavailableError(_unavailable(err)) from err

    # --- the chokepoint -------------------------------------------------------
    def _call(self, fn: str, *args: object) -> Any:  # noqa: ANN401 - amdsmi answers are untyped
        """Call one amdsmi function and sort its errors (see the module docstring)."""
        func = getattr(self._amd, fn, None)
        if func is None:  # this amdsmi predates the function
            return None
        try:
            return func(*args)
        except self._amd.AmdSmiException as err:
            code = getattr(err, "err_code", None)
            where = f"{fn}: {' '.join(str(err).split())}"
            if code in _ABSENT:
                return None
            if code in _LOST:
                raise DeviceLostError(where) from err
            raise FieldError(where) from err

    def _optional(self, fn: str, *args: object) -> Any:  # noqa: ANN401 - amdsmi answers are untyped
        """A start-up call whose failure only leaves a detail unknown."""
        try:
            return self._call(fn, *args)
        except FieldError as err:
            logger.debug("amdsmi: %s", err)
            return None

    # --- start-up ---------------------------------------------------------------
    def _discover(self) -> list[tuple[GpuInfo, object]]:
        gpus: list[tuple[GpuInfo, object]] = []
        for index, handle in enumerate(self._call("amdsmi_get_processor_handles") or []):
            try:
                gpus.append((self._describe(index, handle), handle))
            except (DeviceLostError, FieldError) as err:
                logger.warning("amdsmi: GPU %d skipped at start-up: %s", index, err)
        logger.info("amdsmi: %d GPUs", len(gpus))
        return gpus

    def _describe(self, index: int, handle: object) -> GpuInfo:
        uuid = self._call("amdsmi_get_gpu_device_uuid", handle)
        if not uuid:
            raise FieldError(f"amdsmi_get_gpu_device_uuid answered {uuid!r}")
        asic = self._optional("amdsmi_get_gpu_asic_info", handle) or {}
        board = self._optional("amdsmi_get_gpu_board_info", handle) or {}
        driver = self._optional("amdsmi_get_gpu_driver_info", handle) or {}
        enum = self._optional("amdsmi_get_gpu_enumeration_info", handle) or {}
        vram = self._optional("amdsmi_get_gpu_vram_usage", handle) or {}
        card = enum.get("drm_card")
        serial = next(
            (s for s in (board.get("product_serial"), asic.get("asic_serial")) if s and s != "N/A"),
            None,
        )
        total_mb = _num(vram.get("vram_total"))
        return GpuInfo(
            index=index,
            uuid=GpuUuid(str(uuid)),
            model=str(asic.get("market_name") or "AMD GPU"),
            pci_bus_id=str(self._optional("amdsmi_get_gpu_device_bdf", handle) or ""),
            device=f"card{card if isinstance(card, int) else index}",
            vendor="amd",
            driver_version=str(driver.get("driver_version", "")),
            serial=serial,
            memory_total_bytes=int(total_mb * _MIB) if total_mb is not None else None,
        )

    # --- GpuSource --------------------------------------------------------------
    def devices(self) -> list[GpuInfo]:
        """GPUs found at start-up, in amdsmi's order (the exporter's ``gpu_id``)."""
        return [info for info, _ in self._gpus]

    def sample(self) -> Snapshot:
        """Read every field of every GPU in one pass per GPU.

        Returns:
            A snapshot; values in the exporter's units (%, MB, W, uJ, C, MHz, GT/s, Mb/s).

        Raises:
            SourceUnavailableError: The source was closed.
        """
        if self._closed:
            raise SourceUnavailableError("amdsmi source is closed")
        timestamp = self._clock()
        devices = tuple(self._sample(info, handle) for info, handle in self._gpus)
        return Snapshot(timestamp=timestamp, hostname=self._hostname, devices=devices)

    def close(self) -> None:
        """Shut amdsmi down, once."""
        if not self._closed:
            self._closed = True
            self._amd.amdsmi_shut_down()

    # --- sampling -----------------------------------------------------------------
    def _sample(self, info: GpuInfo, handle: object) -> DeviceSample:
        b = _Batch(self._call, handle)
        try:
            self._read(b)
        except DeviceLostError as err:
            logger.warning("amdsmi: GPU %s is lost: %s", info.key, err)
            return DeviceSample(info, {}, up=False, error=f"GPU is lost: {err}")
        return DeviceSample(
            info=info,
            values=b.values,
            error="fields failed: " + "; ".join(b.reasons) if b.reasons else None,
            failed_fields=tuple(b.failed),
        )

    def _read(self, b: _Batch) -> None:
        amd = self._amd
        # Engine busy shares, % (amd-smi metric -u).
        b.dict_fields(
            "amdsmi_get_gpu_activity",
            {
                "gfx_activity": "gpu_gfx_activity",
                "umc_activity": "gpu_umc_activity",
                "mm_activity": "gpu_mma_activity",
            },
        )
        # VRAM, MB (amd-smi metric -m); free is total minus used, as the exporter computes it.
        vram = b.dict_fields(
            "amdsmi_get_gpu_vram_usage",
            {"vram_total": "gpu_total_vram", "vram_used": "gpu_used_vram"},
        )
        total, used = _num(vram.get("vram_total")), _num(vram.get("vram_used"))
        b.put("gpu_free_vram", None if total is None or used is None else total - used)
        # Socket power, W (amd-smi metric -p): current on MI300, average on MI200.
        power = b.dict_fields(
            "amdsmi_get_power_info",
            {
                "current_socket_power": "gpu_package_power",
                "average_socket_power": "gpu_average_package_power",
            },
        )
        current, average = (
            _num(power.get(k)) for k in ("current_socket_power", "average_socket_power")
        )
        b.put("gpu_power_usage", current if current is not None else average)
        # Energy, ticks x uJ per tick -> uJ (amd-smi metric -E).
        energy = b.get(("gpu_energy_consumed",), "amdsmi_get_energy_count") or {}
        ticks, resolution = (
            _num(energy.get("energy_accumulator")),
            _num(energy.get("counter_resolution")),
        )
        b.put(
            "gpu_energy_consumed",
            None if ticks is None or resolution is None else ticks * resolution,
        )
        # Temperatures, C (amd-smi metric -t).
        sensors = amd.AmdSmiTemperatureType
        for name, sensor in (
            ("gpu_junction_temperature", sensors.HOTSPOT),
            ("gpu_edge_temperature", sensors.EDGE),
            ("gpu_memory_temperature", sensors.VRAM),
        ):
            current_metric = amd.AmdSmiTemperatureMetric.CURRENT
            b.put(name, b.get((name,), "amdsmi_get_temp_metric", sensor, current_metric))
        # Clocks, MHz (amd-smi metric -c), one key per exporter clock_type.
        for label, kind in (("system", amd.AmdSmiClkType.GFX), ("memory", amd.AmdSmiClkType.MEM)):
            name = labelled_key("gpu_clock", label)
            b.dict_fields("amdsmi_get_clock_info", {"clk": name}, kind)
        # ECC totals, count (amd-smi metric -e).
        b.dict_fields(
            "amdsmi_get_gpu_total_ecc_count",
            {
                "correctable_count": "gpu_ecc_correct_total",
                "uncorrectable_count": "gpu_ecc_uncorrect_total",
            },
        )
        # PCIe link (amd-smi metric -P): speed MT/s -> GT/s, bandwidth Mb/s, replays.
        pcie_fields = ("pcie_speed", "pcie_bandwidth", "pcie_replay_count")
        metric = (b.get(pcie_fields, "amdsmi_get_pcie_info") or {}).get("pcie_metric", {})
        speed = _num(metric.get("pcie_speed"))
        b.put("pcie_speed", None if speed is None else speed / 1000)
        b.put("pcie_bandwidth", metric.get("pcie_bandwidth"))
        b.put("pcie_replay_count", metric.get("pcie_replay_count"))
