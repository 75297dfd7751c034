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

Values use the exporter's units (``gpuscale.fields.amd``); the reads, and which
amdsmi call feeds each series, live in ``telemetry/amd_reads.py``. A series no
call answers for a GPU is absent and logged once for that GPU, with the call
that would feed it; the ``gpu_prof_*`` counters only rocprofiler gives are
logged once at start-up. ``GpuInfo.device`` is the DRM card (``card1``), the
name ``/dev/dri`` uses; ``GpuInfo.vendor_labels`` carries the exporter's
identity labels (``card_model`` is the board part number, as its dashboards'
``card_model=~"102-..."`` filters expect).
"""

import contextlib
import io
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import replace
from types import ModuleType
from typing import Any

from gpuscale.errors import SourceUnavailableError
from gpuscale.fields.amd import AMD_FIELDS, AMD_PROFILER_ONLY, NODE_GPUS, split_labelled_key
from gpuscale.ids import GpuUuid
from gpuscale.telemetry.amd_reads import FEEDS, AmdBatch, num, read_device
from gpuscale.telemetry.base import DeviceSample, GpuInfo, Snapshot, Vendor
from gpuscale.telemetry.batch import DeviceLostError, FieldError
from gpuscale.telemetry.slurm import SlurmJob, SlurmJobs

logger = logging.getLogger(__name__)

# amdsmi_wrapper.AMDSMI_STATUS_*: the package does not export them at top level.
_ABSENT = frozenset({2, 3, 40})  # NOT_SUPPORTED, NOT_YET_IMPLEMENTED, NO_DATA
_LOST = frozenset({8, 31, 34, 54})  # TIMEOUT, NOT_FOUND, DRIVER_NOT_LOADED, AMDGPU_RESTART_ERR
_MIB = 1024 * 1024
CLUSTER_ENV = "GPUSCALE_CLUSTER_NAME"


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


# amdsmi's virtualization modes -> the exporter's deployment_mode (its default: baremetal).
_DEPLOYMENT = {
    "BAREMETAL": "baremetal",
    "HOST": "hypervisor",
    "GUEST": "vm_vf",
    "PASSTHROUGH": "vm_pf",
}


def _text(value: object) -> str | None:
    """A usable string from amdsmi, or None for empty and ``"N/A"``."""
    if value is None or value == "N/A" or str(value).strip() == "":
        return None
    return str(value).strip()


class AmdSource:
    """Reads AMD GPUs through amdsmi.

    Args:
        clock: Wall clock in seconds, stamped on each snapshot.
        hostname: Host name for the snapshot; defaults to this machine's.
        library: The amdsmi module to use; tests pass a fake. Imported when None.
        cluster_name: The exporter's ``cluster_name`` custom label, which its
            dashboards' first variable lists; defaults to ``GPUSCALE_CLUSTER_NAME``
            from the environment, and no label when that is unset or empty.
        slurm: Where Slurm jobs per GPU come from (``job_id``, ``job_user``,
            ``job_partition``); AMD's prolog files under ``/var/run/exporter`` when None.

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
        cluster_name: str | None = None,
        slurm: SlurmJobs | None = None,
    ) -> None:
        self._clock = clock
        if cluster_name is None:
            cluster_name = os.environ.get(CLUSTER_ENV, "")
        self._cluster = cluster_name.strip()
        self._slurm = slurm if slurm is not None else SlurmJobs()
        self._hostname = hostname or socket.gethostname()
        self._closed = False
        self._told_absent: set[tuple[int, str]] = set()
        self._partitions: dict[int, int] = {}
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
        logger.info(
            "amdsmi: %s are rocprofiler counters no amdsmi call gives; those series are absent",
            ", ".join(AMD_PROFILER_ONLY),
        )
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
        serial = _text(board.get("product_serial")) or _text(asic.get("asic_serial"))
        total_mb = num(vram.get("vram_total"))
        partition = self._partition(index, handle)
        series = _text(asic.get("market_name")) or "AMD GPU"
        vbios = self._optional("amdsmi_get_gpu_vbios_info", handle) or {}
        mode = (self._optional("amdsmi_get_gpu_virtualization_mode", handle) or {}).get("mode")
        compute = _text(self._optional("amdsmi_get_gpu_compute_partition", handle))
        memory = _text(self._optional("amdsmi_get_gpu_memory_partition", handle))
        labels = (
            ("card_model", _text(board.get("model_number")) or series),
            ("gpu_partition_id", "NA" if partition is None else str(partition)),
            ("gpu_compute_partition_type", (compute or "").lower()),
            ("gpu_memory_partition_type", (memory or "").lower()),
            ("deployment_mode", _DEPLOYMENT.get(getattr(mode, "name", ""), "baremetal")),
            ("card_series", series),
            ("card_vendor", _text(asic.get("vendor_name")) or ""),
            ("vbios_version", _text(vbios.get("version")) or ""),
        ) + ((("cluster_name", self._cluster),) if self._cluster else ())
        return GpuInfo(
            index=index,
            uuid=GpuUuid(str(uuid)),
            model=series,
            pci_bus_id=str(self._optional("amdsmi_get_gpu_device_bdf", handle) or ""),
            device=f"card{card if isinstance(card, int) else index}",
            vendor="amd",
            driver_version=str(driver.get("driver_version", "")),
            serial=serial,
            memory_total_bytes=int(total_mb * _MIB) if total_mb is not None else None,
            vendor_labels=labels,
        )

    def _partition(self, index: int, handle: object) -> int | None:
        """The GPU's partition (XCP) id from KFD; it picks its row of per-XCP tables."""
        kfd = self._optional("amdsmi_get_gpu_kfd_info", handle) or {}
        partition = num(kfd.get("current_partition_id"))
        if partition is None:
            return None
        self._partitions[index] = int(partition)
        return int(partition)

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
        jobs = self._slurm.by_gpu()
        devices = tuple(
            self._sample(self._with_job(info, jobs.get(info.index)), handle)
            for info, handle in self._gpus
        )
        return Snapshot(timestamp=timestamp, hostname=self._hostname, devices=devices)

    def close(self) -> None:
        """Shut amdsmi down, once."""
        if not self._closed:
            self._closed = True
            self._amd.amdsmi_shut_down()

    def _with_job(self, info: GpuInfo, job: SlurmJob | None) -> GpuInfo:
        """The GPU's identity plus the Slurm job holding it now, as the exporter labels it."""
        if job is None:
            return info
        labels = [("job_id", job.job_id), ("job_user", job.user), ("job_partition", job.partition)]
        if job.cluster and not self._cluster:  # the custom label wins, as upstream
            labels.append(("cluster_name", job.cluster))
        return replace(info, vendor_labels=info.vendor_labels + tuple(labels))

    # --- sampling -----------------------------------------------------------------
    def _sample(self, info: GpuInfo, handle: object) -> DeviceSample:
        b = AmdBatch(self._call, handle)
        try:
            read_device(b, self._amd, self._partitions.get(info.index, 0))
        except DeviceLostError as err:
            logger.warning("amdsmi: GPU %s is lost: %s", info.key, err)
            return DeviceSample(info, {}, up=False, error=f"GPU is lost: {err}")
        self._tell_absent(info.index, b)
        return DeviceSample(
            info=info,
            values=b.values,
            error="fields failed: " + "; ".join(b.reasons) if b.reasons else None,
            failed_fields=tuple(b.failed),
        )

    def _tell_absent(self, index: int, b: AmdBatch) -> None:
        """Log, once per GPU and series, a series amdsmi did not answer (not a failure)."""
        present = {split_labelled_key(key)[0] for key in b.values}
        failed = {split_labelled_key(key)[0] for key in b.failed}
        for name in AMD_FIELDS:
            if name in present or name in failed or name == NODE_GPUS:
                continue
            if (index, name) not in self._told_absent:
                self._told_absent.add((index, name))
                logger.info(
                    "amdsmi: GPU %d gives no %s (fed by %s); the series is absent",
                    index,
                    name,
                    FEEDS.get(name, "no amdsmi call"),
                )
