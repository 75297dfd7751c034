"""NVIDIA GPUs through NVML, under dcgm-exporter's field names.

This is the only module that imports ``pynvml`` (nvidia-ml-py); import-linter
and ruff's banned-api check that. The import happens inside ``_load()``, so
importing gpuscale never needs the NVIDIA driver and tests can put a fake
module in ``sys.modules`` first.

Every NVML call goes through one chokepoint, ``NvmlSource._call``, which sorts
NVML errors three ways:

- not supported (``NOT_SUPPORTED``, ``FUNCTION_NOT_FOUND``, ``NOT_FOUND``): the
  call answers None and the field is absent, never 0;
- device lost (``GPU_IS_LOST``, ``UNKNOWN``, ``TIMEOUT``): the whole device reports
  ``up=False`` for this sample, and the other devices carry on;
- any other ``NVMLError``: that field is absent and named in ``failed_fields``.

Reads are batched per device, as nvitop's ``oneshot()`` does: one pass over
each entity per sample, values converted to the DCGM catalogue's units. The
getter-to-field mapping lives in ``gpuscale.telemetry.nvml_reads``. Entities are
read on a small thread pool (NVML is thread-safe): some getters wait rather than
compute (the PCIe throughput counters measure over 20 ms each; on one H200 a
sample spent 84 of its 97 ms there), and that wait must not add up per GPU.

MIG: when a GPU runs in MIG mode, the GPU stays an entity (temperature, power,
clocks) and each MIG device becomes one more, labelled with the parent's UUID
and index; it reports memory and, where NVML allows it, utilisation. Its
profile name is NVIDIA's own (``1g.10gb``): the name of the GPU-instance
profile whose id matches the instance's ``profileId``. When those calls are
refused (they may need root), it is built from the MIG device's attributes as
``{slices}g.{ceil(memory MiB / 1024)}gb``.
"""

import ctypes
import logging
import math
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any

from gpuscale.errors import SourceUnavailableError
from gpuscale.fields.catalogue import DCGM_FIELDS
from gpuscale.ids import GpuUuid
from gpuscale.telemetry.base import DeviceSample, GpuInfo, Snapshot, Vendor, XidEvent
from gpuscale.telemetry.batch import DeviceLostError, FieldError
from gpuscale.telemetry.nvml_reads import (
    Batch,
    read_gpu,
    read_memory,
    read_nvlink_bandwidth,
    read_processes,
    read_static,
    read_utilization,
)

logger = logging.getLogger(__name__)

_MAX_EVENTS_PER_SAMPLE = 1000
_MAX_READERS = 16  # threads reading entities at once; a node has at most 8-16 GPUs


def _load() -> ModuleType:
    """Import pynvml lazily. Raises ImportError or OSError when it is missing."""
    import pynvml  # noqa: TID251 - the one sanctioned importer

    module: ModuleType = pynvml
    return module


def _text(value: object) -> str:
    """Decode NVML strings: current nvidia-ml-py returns str, old releases bytes."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _handle_key(handle: object) -> int:
    """Identify a device handle across calls: its pointer value, or id() for plain objects."""
    try:
        value = ctypes.cast(handle, ctypes.c_void_p).value  # type: ignore[arg-type]
    except (TypeError, ctypes.ArgumentError):
        return id(handle)
    return int(value) if value is not None else id(handle)


def _unavailable(reason: str) -> SourceUnavailableError:
    """The one-line error for a machine where NVML cannot start."""
    reason = " ".join(reason.split()) or "unknown reason"
    return SourceUnavailableError(
        f"NVML not found ({reason}): install the NVIDIA driver or use --source sim", reason
    )


@dataclass(slots=True)
class _Entity:
    """Mutable per-entity state: identity, handle and what earlier samples left behind."""

    info: GpuInfo
    handle: object
    is_mig: bool = False
    nvlinks: tuple[int, ...] = ()
    last_xid: int | None = None
    last_process_ts: int = 0
    nvlink_kib: dict[int, tuple[float, float]] = field(default_factory=dict)
    samples: int = 0


class NvmlSource:
    """Reads NVIDIA GPUs (and their MIG devices) through NVML.

    Args:
        clock: Wall clock in seconds, stamped on each snapshot and XID event.
        hostname: Host name for the snapshot; defaults to this machine's.
        library: The pynvml module to use; tests pass a fake. Imported when None.

    Raises:
        SourceUnavailableError: NVML cannot be loaded or initialised here.
    """

    vendor: Vendor = "nvidia"

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
        self._event_set: object = None
        try:
            self._nv = library if library is not None else _load()
        except (ImportError, OSError) as err:
            raise _unavailable(str(err)) from err
        try:
            self._nv.nvmlInit()
        except (self._nv.NVMLError, OSError) as err:
            raise _unavailable(str(err)) from err
        try:
            self._entities = self._discover()
        except (DeviceLostError, FieldError) as err:
            self._nv.nvmlShutdown()
            raise _unavailable(str(err)) from err
        self._entities = self._with_p2p(self._entities)
        self._register_xids()
        readers = min(len(self._entities), _MAX_READERS)
        self._readers = (
            ThreadPoolExecutor(readers, thread_name_prefix="nvml-read") if readers > 1 else None
        )

    # --- the chokepoint -------------------------------------------------------
    def _call(self, fn: str, *args: object) -> Any:  # noqa: ANN401 - untyped ctypes answers
        """Call one NVML function and sort its errors (see the module docstring)."""
        func = getattr(self._nv, fn, None)
        if func is None:  # this pynvml predates the function
            return None
        try:
            return func(*args)
        except self._nv.NVMLError as err:
            self._classify(int(getattr(err, "value", -1)), f"{fn}: {err}")
            return None

    def _classify(self, code: int, where: str) -> None:
        """Return quietly for not-supported codes; raise for lost devices and failures."""
        nv = self._nv
        absent = (
            nv.NVML_ERROR_NOT_SUPPORTED,
            nv.NVML_ERROR_FUNCTION_NOT_FOUND,
            nv.NVML_ERROR_NOT_FOUND,
        )
        if code in absent:
            return
        if code in (nv.NVML_ERROR_GPU_IS_LOST, nv.NVML_ERROR_UNKNOWN, nv.NVML_ERROR_TIMEOUT):
            raise DeviceLostError(where, code)
        raise FieldError(where)

    def _optional(self, fn: str, *args: object) -> Any:  # noqa: ANN401 - untyped ctypes answers
        """A start-up call whose failure only leaves a detail unknown."""
        try:
            return self._call(fn, *args)
        except FieldError as err:
            logger.debug("NVML: %s", err)
            return None

    # --- start-up ---------------------------------------------------------------
    def _discover(self) -> list[_Entity]:
        driver = _text(self._call("nvmlSystemGetDriverVersion") or "")
        nvml_version = self._optional("nvmlSystemGetNVMLVersion")
        self._nvml_version = _text(nvml_version) if nvml_version else None
        entities: list[_Entity] = []
        for index in range(int(self._call("nvmlDeviceGetCount") or 0)):
            try:
                entities.extend(self._discover_gpu(index, driver))
            except (DeviceLostError, FieldError) as err:
                logger.warning("NVML: GPU %d skipped at start-up: %s", index, err)
        logger.info("NVML: %d entities, driver %s", len(entities), driver)
        return entities

    def _discover_gpu(self, index: int, driver: str) -> list[_Entity]:
        handle = self._call("nvmlDeviceGetHandleByIndex", index)
        uuid = self._call("nvmlDeviceGetUUID", handle)
        if not uuid:
            raise FieldError(f"nvmlDeviceGetUUID answered {uuid!r}")
        pci = self._optional("nvmlDeviceGetPciInfo", handle)
        minor = self._optional("nvmlDeviceGetMinorNumber", handle)
        serial = self._optional("nvmlDeviceGetSerial", handle)
        memory = self._optional("nvmlDeviceGetMemoryInfo", handle)
        attributes = read_static(self._optional, self._nv, handle)
        if self._nvml_version:
            attributes["DCGM_FI_NVML_VERSION"] = self._nvml_version
        info = GpuInfo(
            index=index,
            uuid=GpuUuid(_text(uuid)),
            model=_text(self._optional("nvmlDeviceGetName", handle) or "NVIDIA GPU"),
            pci_bus_id=_text(pci.busId) if pci is not None else "",
            device=f"nvidia{minor if minor is not None else index}",
            vendor="nvidia",
            driver_version=driver,
            serial=_text(serial) if serial else None,
            memory_total_bytes=int(memory.total) if memory is not None else None,
            attributes=tuple(attributes.items()),
        )
        links = []
        for link in range(int(getattr(self._nv, "NVML_NVLINK_MAX_LINKS", 0))):
            state = self._optional("nvmlDeviceGetNvLinkState", handle, link)
            if state is None:  # no NVLink, or past the device's last link
                break
            if state == self._nv.NVML_FEATURE_ENABLED:
                links.append(link)
        gpu = _Entity(info, handle, nvlinks=tuple(links))
        return [gpu, *self._discover_migs(gpu)]

    def _discover_migs(self, gpu: _Entity) -> list[_Entity]:
        mode = self._optional("nvmlDeviceGetMigMode", gpu.handle)
        if not mode or mode[0] != self._nv.NVML_DEVICE_MIG_ENABLE:
            return []
        migs = []
        for slot in range(int(self._optional("nvmlDeviceGetMaxMigDeviceCount", gpu.handle) or 0)):
            handle = self._optional("nvmlDeviceGetMigDeviceHandleByIndex", gpu.handle, slot)
            if handle is None:  # empty slot
                continue
            gi_id = self._optional("nvmlDeviceGetGpuInstanceId", handle)
            memory = self._optional("nvmlDeviceGetMemoryInfo", handle)
            info = replace(
                gpu.info,
                mig_profile=self._mig_profile(gpu.handle, handle, gi_id),
                mig_instance_id=int(gi_id) if gi_id is not None else slot,
                memory_total_bytes=int(memory.total) if memory is not None else None,
            )
            migs.append(_Entity(info, handle, is_mig=True))
        return migs

    def _mig_profile(self, parent: object, mig: object, gi_id: int | None) -> str | None:
        """NVIDIA's profile name (``1g.10gb``) for a MIG device; see the module docstring."""
        instance = None
        if gi_id is not None:
            instance = self._optional("nvmlDeviceGetGpuInstanceById", parent, gi_id)
        gi_info = None if instance is None else self._optional("nvmlGpuInstanceGetInfo", instance)
        if gi_info is not None:
            for profile in range(int(getattr(self._nv, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0))):
                p = self._optional("nvmlDeviceGetGpuInstanceProfileInfo", parent, profile)
                if p is not None and p.id == gi_info.profileId and getattr(p, "name", None):
                    return _text(p.name).removeprefix("MIG ")
        attrs = self._optional("nvmlDeviceGetAttributes", mig)
        if attrs is None:
            return None
        return f"{attrs.gpuInstanceSliceCount}g.{math.ceil(attrs.memorySizeMB / 1024)}gb"

    def _with_p2p(self, entities: list[_Entity]) -> list[_Entity]:
        """Add NVLink P2P status to each other GPU (nvmlDeviceGetP2PStatus), as attributes."""
        index = getattr(self._nv, "NVML_P2P_CAPS_INDEX_NVLINK", None)
        gpus = [e for e in entities if not e.is_mig]
        if index is None or len(gpus) < 2:
            return entities
        for e in gpus:
            found = []
            for peer in gpus:
                if peer is not e:
                    status = self._optional("nvmlDeviceGetP2PStatus", e.handle, peer.handle, index)
                    if status is not None:
                        found.append((f"DCGM_EXP_P2P_STATUS:{peer.info.index}", str(int(status))))
            e.info = replace(e.info, attributes=(*e.info.attributes, *found))
        return entities

    def _register_xids(self) -> None:
        xid = self._nv.nvmlEventTypeXidCriticalError
        wanted = []
        for e in self._entities:
            try:
                if (
                    not e.is_mig
                    and (self._optional("nvmlDeviceGetSupportedEventTypes", e.handle) or 0) & xid
                ):
                    wanted.append(e)
            except DeviceLostError as err:
                logger.debug("NVML: %s", err)
        if wanted:
            self._event_set = self._optional("nvmlEventSetCreate")
        if self._event_set is None:
            logger.debug("NVML: XID events not supported here; skipping them")
            return
        for entity in wanted:
            self._optional("nvmlDeviceRegisterEvents", entity.handle, xid, self._event_set)

    # --- GpuSource --------------------------------------------------------------
    def devices(self) -> list[GpuInfo]:
        """Entities found at start-up: each GPU, then its MIG devices."""
        return [e.info for e in self._entities]

    def sample(self) -> Snapshot:
        """Read every field of every entity in one pass per entity.

        Returns:
            A snapshot; values in the DCGM catalogue's units (MHz, C, W, mJ, %, MiB, us, B/s).

        Raises:
            SourceUnavailableError: The source was closed.
        """
        if self._closed:
            raise SourceUnavailableError("NVML source is closed")
        timestamp = self._clock()
        xids = self._drain_xids(timestamp)

        def read(entity: _Entity) -> DeviceSample:
            return self._sample(entity, xids.get(_handle_key(entity.handle), ()))

        if self._readers is None:
            samples = tuple(map(read, self._entities))
        else:
            samples = tuple(self._readers.map(read, self._entities))
        return Snapshot(timestamp=timestamp, hostname=self._hostname, devices=samples)

    def close(self) -> None:
        """Free the XID event set and shut NVML down, once."""
        if self._closed:
            return
        self._closed = True
        if self._readers is not None:
            self._readers.shutdown(wait=True)
        if self._event_set is not None:
            try:
                self._call("nvmlEventSetFree", self._event_set)
            except (DeviceLostError, FieldError) as err:
                logger.debug("NVML: %s", err)
        self._nv.nvmlShutdown()

    # --- sampling -----------------------------------------------------------------
    def _log_absent(self, entity: _Entity, values: dict[str, float]) -> None:
        """Say once which catalogue fields this entity cannot give: absent, never 0."""
        missing = sorted(
            name
            for name, f in DCGM_FIELDS.items()
            if f.field_id
            and f.type != "label"
            and name not in values
            and not (name.startswith("DCGM_FI_DEV_NVLINK_BANDWIDTH_L") and not entity.nvlinks)
        )
        if missing:
            logger.info(
                "NVML: %s does not report %d fields; they are absent, not 0: %s",
                entity.info.key,
                len(missing),
                ", ".join(missing),
            )

    def _drain_xids(self, now: float) -> dict[int, tuple[XidEvent, ...]]:
        """Take every queued XID event without blocking (timeout 0), keyed by device handle."""
        found: dict[int, list[XidEvent]] = {}
        for _ in range(_MAX_EVENTS_PER_SAMPLE if self._event_set is not None else 0):
            try:
                event = self._call("nvmlEventSetWait", self._event_set, 0)
            except (DeviceLostError, FieldError) as err:
                if getattr(err, "code", None) != self._nv.NVML_ERROR_TIMEOUT:  # timeout: empty
                    logger.debug("NVML: event wait: %s", err)
                break
            if event is None:
                break
            if event.eventType & self._nv.nvmlEventTypeXidCriticalError:
                key = _handle_key(event.device)
                found.setdefault(key, []).append(XidEvent(now, int(event.eventData)))
        return {key: tuple(events) for key, events in found.items()}

    def _sample(self, entity: _Entity, xids: tuple[XidEvent, ...]) -> DeviceSample:
        if xids:
            entity.last_xid = xids[-1].xid
        b = Batch(self._call, entity.handle, classify=self._classify)
        try:
            if not entity.is_mig:
                read_gpu(b, self._nv, entity.nvlinks)
                now = self._clock()
                read_nvlink_bandwidth(b, self._nv, entity.nvlinks, now, entity.nvlink_kib)
            read_memory(b, self._nv)
            read_utilization(b)
            processes, entity.last_process_ts = read_processes(
                b, entity.last_process_ts, sm=not entity.is_mig
            )
        except DeviceLostError as err:
            logger.warning("NVML: GPU %s is lost: %s", entity.info.key, err)
            return DeviceSample(
                entity.info, {}, up=False, error=f"GPU is lost: {err}", xid_events=xids
            )
        if entity.last_xid is not None:
            b.put("DCGM_FI_DEV_XID_ERRORS", entity.last_xid)  # code of the latest XID
        entity.samples += 1
        if entity.samples == (2 if entity.nvlinks else 1):  # NVLink rates need two collects
            self._log_absent(entity, b.values)
        return DeviceSample(
            info=entity.info,
            values=b.values,
            error="fields failed: " + "; ".join(b.reasons) if b.reasons else None,
            failed_fields=tuple(b.failed),
            xid_events=xids,
            processes=processes,
        )
