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
that would feed it. The ``gpu_prof_*`` profiler counters come from rocpctl
(``telemetry/amd_prof.py``) when ``config.json``'s ``ProfilerMetrics`` turns the
profiler on, matched to each GPU by its DRM render minor; otherwise they are
absent, and that is logged once at start-up. ``config.json``'s custom labels and
field list (``telemetry/amd_config.py``) apply here too. ``GpuInfo.device`` is
the DRM card (``card1``), the name ``/dev/dri`` uses; ``GpuInfo.vendor_labels``
carries the exporter's identity labels (``card_model`` is the board part number, as its dashboards'
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
from gpuscale.fields.amd import (
    AMD_FIELDS,
    AMD_PROFILER_ONLY,
    CLUSTER_LABEL,
    NODE_GPUS,
    PROFILER_COUNTERS,
    split_labelled_key,
)
from gpuscale.ids import GpuUuid
from gpuscale.telemetry.amd_config import AmdConfig
from gpuscale.telemetry.amd_prof import PerGpu, RocprofReader
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


def _unavailable(err: BaseException) -> SourceUnavailableError:
    """The one-line error for a machine where amdsmi cannot start."""
    if isinstance(err, KeyError) and err.args:
        reason = f"{err.args[0]} not found"
    else:
        reason = " ".join(str(err).split()) or type(err).__name__
    return SourceUnavailableError(
        f"amdsmi not available ({reason}): install ROCm and the amdsmi package or use --source sim",
        reason,
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
        config: device-metrics-exporter's ``config.json`` settings (custom labels,
            fields, profiler); its defaults when None.
        profiler: Where ``gpu_prof_*`` come from; rocpctl when ``config`` turns the
            profiler on and this is None. Tests pass a reader over a fake rocpctl.

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
        config: AmdConfig | None = None,
        profiler: RocprofReader | None = None,
    ) -> None:
        self._clock = clock
        self._config = config or AmdConfig()
        self._custom = custom_labels(self._config, cluster_name)
        self._cluster = dict(self._custom).get(CLUSTER_LABEL, "")
        if profiler is None and self._config.profiler is not None:
            profiler = RocprofReader(self._config.profiler)
        self._profiler = profiler
        self._render: dict[int, int] = {}
        self._slurm = slurm if slurm is not None else SlurmJobs()
        self._hostname = hostname or socket.gethostname()
        self._closed = False
        self._told_absent: set[tuple[int, str]] = set()
        self._partitions: dict[int, int] = {}
        try:
            self._amd = library if library is not None else _load()
        except (ImportError, KeyError, OSError) as err:
            raise _unavailable(err) from err
        try:
            self._amd.amdsmi_init(self._amd.AmdSmiInitFlags.INIT_AMD_GPUS)
        except (self._amd.AmdSmiException, OSError) as err:
            raise _unavailable(err) from err
        try:
            self._gpus = self._discover()
        except (DeviceLostError, FieldError) as err:
            self._amd.amdsmi_shut_down()
            raise _unavailable(err) from err

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
        if self._profiler is None:
            logger.info(
                "amdsmi: %s are profiler counters no amdsmi call gives, and the profiler is"
                " off (config.json GPUConfig.ProfilerMetrics); those series are absent",
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
        render = num(enum.get("drm_render"))
        if render is not None:  # rocpctl names GPUs by it
            self._render[index] = int(render)
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
            *self._custom,
        )
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
        profiled = self._profiler.read() if self._profiler is not None else {}
        devices = tuple(
            self._sample(with_job(info, jobs.get(info.index), self._cluster), handle, profiled)
            for info, handle in self._gpus
        )
        return Snapshot(timestamp=timestamp, hostname=self._hostname, devices=devices)

    def close(self) -> None:
        """Shut amdsmi down, once."""
        if not self._closed:
            self._closed = True
            self._amd.amdsmi_shut_down()

    # --- sampling -----------------------------------------------------------------
    def _sample(self, info: GpuInfo, handle: object, profiled: PerGpu) -> DeviceSample:
        b = AmdBatch(self._call, handle)
        try:
            read_device(b, self._amd, self._partitions.get(info.index, 0))
        except DeviceLostError as err:
            logger.warning("amdsmi: GPU %s is lost: %s", info.key, err)
            return DeviceSample(info, {}, up=False, error=f"GPU is lost: {err}")
        render = self._render.get(info.index)
        # The profiler's GPU_UTIL replaces amdsmi's gfx_activity, as upstream serves it.
        b.values.update(profiled.get(render, {}) if render is not None else {})
        self._tell_absent(info.index, b)
        values = b.values
        if self._config.fields is not None:
            keep = self._config.fields
            values = {k: v for k, v in values.items() if split_labelled_key(k)[0] in keep}
        return DeviceSample(
            info=info,
            values=values,
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
            profiler_only = name in AMD_PROFILER_ONLY
            if profiler_only and self._profiler is None:
                continue  # said once at start-up
            if (index, name) not in self._told_absent:
                self._told_absent.add((index, name))
                feed = (
                    f"rocpctl {PROFILER_COUNTERS[name][0]}"
                    if profiler_only
                    else FEEDS.get(name, "no amdsmi call")
                )
                logger.info(
                    "amdsmi: GPU %d gives no %s (fed by %s); the series is absent",
                    index,
                    name,
                    feed,
                )


def custom_labels(config: AmdConfig, cluster_name: str | None) -> tuple[tuple[str, str], ...]:
    """The custom labels every series gets: ``config.json``'s, then ``cluster_name``.

    ``cluster_name`` (else ``GPUSCALE_CLUSTER_NAME``) sets ``cluster_name`` only when
    the config's ``CustomLabels`` does not; an empty value sets no label.
    """
    labels = dict(config.custom_labels)
    if CLUSTER_LABEL not in labels:
        cluster = os.environ.get(CLUSTER_ENV, "") if cluster_name is None else cluster_name
        if cluster.strip():
            labels[CLUSTER_LABEL] = cluster.strip()
    return tuple(labels.items())


def with_job(info: GpuInfo, job: SlurmJob | None, cluster: str) -> GpuInfo:
    """The GPU's identity plus the Slurm job holding it now, as the exporter labels it.

    Args:
        info: The GPU as discovered.
        job: Its Slurm job, if any.
        cluster: The configured ``cluster_name``; the job's ``SLURM_CLUSTER_NAME``
            names the cluster only when none is configured, as upstream.

    Returns:
        ``info``, with ``job_id``, ``job_user``, ``job_partition`` when a job holds it.
    """
    if job is None:
        return info
    labels = [("job_id", job.job_id), ("job_user", job.user), ("job_partition", job.partition)]
    if job.cluster and not cluster:
        labels.append((CLUSTER_LABEL, job.cluster))
    return replace(info, vendor_labels=info.vendor_labels + tuple(labels))
