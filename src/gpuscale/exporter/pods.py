"""Which pod holds which GPU, learned from the kubelet pod-resources API.

dcgm-exporter run with ``--kubernetes`` adds ``pod``, ``namespace`` and
``container`` labels to every GPU series. It learns them from the kubelet's
pod-resources v1 gRPC service on a unix socket, and this module does the same.

The exporter calls :meth:`PodMapper.lookup` on every scrape, so a lookup only
reads a dict. A background thread calls ``List`` every ``refresh_interval_s``,
builds a new table and swaps it in with one assignment. When the kubelet is
away (not started yet, restarting, socket not mounted), the last good table
stays in use. The failure is counted and logged once per streak. A kubelet
that is unavailable or too slow (gRPC ``UNAVAILABLE``, ``DEADLINE_EXCEEDED``)
is a ``TransientError``: the thread retries after its delay, 1 s doubling up
to ``refresh_interval_s``, instead of waiting a whole interval. Other gRPC
errors wait the interval.

Device ids the kubelet reports, and what each one matches (case-insensitive):

- ``GPU-<uuid>``, or any other id not listed below, such as an AMD UUID: the
  device with that ``uuid``. A time-slicing replica suffix ``::N`` (NVIDIA
  device plugin sharing) is stripped first.
- ``nvidia<N>`` or a bare ``<N>`` (``--device-id-strategy=index``): the
  device with ``index`` N.
- ``MIG-<uuid>``: the MIG instance whose parent UUID and GPU-instance id the
  ``mig_resolver`` returns (the exporter backs it with NVML). A lookup by the
  MIG UUID string itself also matches.
- ``MIG-GPU-<uuid>/<gi>/<ci>`` (drivers before R470): parent ``GPU-<uuid>``,
  GPU instance ``gi``.
- A PCI bus id such as ``0000:c1:00.0`` (what the AMD device plugin reports):
  the device in ``devices`` with the same bus id. 4- and 8-digit domains are
  equal.

A MIG instance that no pod holds falls back to a pod holding its whole parent
GPU. DRA claims (``dynamic_resources``) are not mapped: their device names
need the ResourceSlice to reach a UUID. When one device is shared, for example
time-sliced, the pod that sorts first by (namespace, pod, container) wins, so
the label stays stable from one refresh to the next.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import grpc

from gpuscale.errors import TransientError, require
from gpuscale.exporter.podresources import api_pb2, api_pb2_grpc
from gpuscale.fields.resources import GPU_RESOURCES
from gpuscale.telemetry.base import GpuInfo

logger = logging.getLogger(__name__)

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_RESOURCES = GPU_RESOURCES
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
_MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # a node with hundreds of pods exceeds gRPC's 4 MiB default
_SOCKET_FLAG = "--pod-resources-kubelet-socket"
_RETRY_S = 1.0  # first retry after a transient failure; doubles up to refresh_interval_s
_TRANSIENT_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)

MigResolver = Callable[[str], tuple[str, int] | None]
"""Maps a MIG device UUID to (parent GPU UUID, GPU-instance id), or None if unknown."""

_INDEX_RE = re.compile(r"(?:nvidia)?(\d+)", re.IGNORECASE)
_LEGACY_MIG_RE = re.compile(r"MIG-(GPU-[0-9a-f-]+)/(\d+)/\d+", re.IGNORECASE)
_PCI_RE = re.compile(
    r"(?:([0-9a-f]{1,8}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])", re.IGNORECASE
)


@dataclass(frozen=True, slots=True)
class PodRef:
    """The container that holds a device.

    Attributes:
        pod: Pod name.
        namespace: Pod namespace.
        container: Container name within the pod.
        vgpu: The replica of a shared GPU the kubelet gave it (the ``::N`` of the device id),
            for ``--kubernetes-virtual-gpus``; None for a whole device.
    """

    pod: str
    namespace: str
    container: str
    vgpu: str | None = None


def normalize_pci_bus_id(bus_id: str) -> str | None:
    """Canonical form of a PCI bus id, so NVML's and AMD's spellings compare equal.

    Args:
        bus_id: ``domain:bus:device.function`` with a 4- or 8-digit domain, or
            ``bus:device.function`` (domain 0).

    Returns:
        ``dddd:bb:dd.f`` in lower case, or None when ``bus_id`` is not a PCI id.
    """
    match = _PCI_RE.fullmatch(bus_id.strip())
    if match is None:
        return None
    domain, bus, dev, fn = match.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{fn}"


def uuid_key(uuid: str) -> str:
    """Table key of a device UUID (``GPU-...``, ``MIG-...`` or a vendor UUID)."""
    return "uuid:" + uuid.strip().lower()


def index_key(index: int) -> str:
    """Table key of a device index (``nvidiaN``)."""
    return f"index:{index}"


def mig_key(parent_uuid: str, instance_id: int) -> str:
    """Table key of a MIG GPU instance on its parent GPU."""
    return f"mig:{parent_uuid.strip().lower()}/{instance_id}"


def device_keys(
    device_id: str,
    *,
    pci_to_uuid: dict[str, str] | None = None,
    mig_resolver: MigResolver | None = None,
) -> list[str]:
    """Every table key one kubelet device id stands for.

    Args:
        device_id: An id from ``ContainerDevices.device_ids``.
        pci_to_uuid: Normalized PCI bus id to device UUID, for plugins that
            report bus ids.
        mig_resolver: Resolves ``MIG-<uuid>`` ids to their parent and GPU instance.

    Returns:
        Keys for :func:`uuid_key`, :func:`index_key` or :func:`mig_key`; empty
        when the id matches nothing this host knows.
    """
    raw = device_id.strip().split("::", 1)[0]
    if not raw:
        return []
    if (index := _INDEX_RE.fullmatch(raw)) is not None:
        return [index_key(int(index.group(1)))]
    if (legacy := _LEGACY_MIG_RE.fullmatch(raw)) is not None:
        return [uuid_key(raw), mig_key(legacy.group(1), int(legacy.group(2)))]
    if raw[:4].upper() == "MIG-":
        keys = [uuid_key(raw)]
        resolved = mig_resolver(raw) if mig_resolver is not None else None
        if resolved is not None:
            keys.append(mig_key(*resolved))
        return keys
    if (pci := normalize_pci_bus_id(raw)) is not None:
        uuid = (pci_to_uuid or {}).get(pci)
        return [] if uuid is None else [uuid_key(uuid)]
    return [uuid_key(raw)]


def _sort_key(ref: PodRef) -> tuple[str, str, str]:
    return (ref.namespace, ref.pod, ref.container)


class PodMapper:
    """Device-to-pod table kept fresh from the kubelet pod-resources socket.

    Args:
        socket_path: The kubelet's pod-resources unix socket.
        resource_names: Extended resource names whose devices are GPUs; any
            name starting with ``nvidia.com/mig-`` counts too.
        refresh_interval_s: Seconds between ``List`` calls in the background thread.
        timeout_s: Deadline of one ``List`` call, in seconds.
        clock: Time source for ``last_success``; monotonic seconds by default.
        devices: This host's GPUs, used to turn PCI bus ids into UUIDs.
        mig_resolver: Resolves MIG device UUIDs to (parent UUID, GPU instance).
        on_refresh: Called with every (namespace, pod) holding a GPU after each good refresh,
            on the refresh thread (pod metadata fetches hang off it).

    Raises:
        ConfigError: An interval, a timeout or the socket path is unusable.

    Attributes:
        errors_total: Failed refreshes since construction.
        last_success: ``clock()`` at the last successful refresh, None before the first.
    """

    def __init__(
        self,
        socket_path: str = DEFAULT_SOCKET,
        *,
        resource_names: Sequence[str] = DEFAULT_RESOURCES,
        refresh_interval_s: float = 10.0,
        timeout_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        devices: Iterable[GpuInfo] = (),
        mig_resolver: MigResolver | None = None,
        on_refresh: Callable[[set[tuple[str, str]]], None] | None = None,
    ) -> None:
        fix = f"give the kubelet's pod-resources socket, usually {DEFAULT_SOCKET}"
        require(bool(socket_path.strip()), _SOCKET_FLAG, "the socket path is empty", fix)
        for name, value in (("refresh_interval_s", refresh_interval_s), ("timeout_s", timeout_s)):
            where = f"PodMapper.{name}={value!r}"
            require(value > 0, where, "not a positive number of seconds", "pass one above 0")
        self.socket_path = socket_path
        self.resource_names = frozenset(name.strip() for name in resource_names if name.strip())
        self.refresh_interval_s = refresh_interval_s
        self.timeout_s = timeout_s
        self.errors_total = 0
        self.last_success: float | None = None
        self._clock = clock
        self._pci_to_uuid = {
            pci: str(info.uuid)
            for info in devices
            if info.mig_instance_id is None
            and (pci := normalize_pci_bus_id(info.pci_bus_id)) is not None
        }
        self._mig_resolver = mig_resolver
        self._on_refresh = on_refresh
        self._table: dict[str, PodRef] = {}
        self._shared: dict[str, tuple[PodRef, ...]] = {}
        self._streak = 0  # refreshes failed in a row
        self._refresh_lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def wants(self, resource_name: str) -> bool:
        """Whether devices of this extended resource are GPUs to label."""
        return resource_name in self.resource_names or resource_name.startswith(MIG_RESOURCE_PREFIX)

    def lookup(self, uuid: str, index: int, mig_instance_id: int | None = None) -> PodRef | None:
        """The container holding a device, from the last good table; never blocks.

        Args:
            uuid: GPU UUID; for a MIG instance, its parent's (or the MIG UUID).
            index: Device index on the host.
            mig_instance_id: GPU-instance id for a MIG instance, else None.

        Returns:
            The holder, or None when no pod holds the device or no table exists yet.
        """
        table = self._table
        if mig_instance_id is not None:
            ref = table.get(mig_key(uuid, mig_instance_id))
            if ref is not None:
                return ref
        return table.get(uuid_key(uuid)) or table.get(index_key(index))

    def lookup_all(
        self, uuid: str, index: int, mig_instance_id: int | None = None
    ) -> tuple[PodRef, ...]:
        """Every container holding a device, one per shared replica (``vgpu``), sorted.

        The same fallbacks as :meth:`lookup`; empty when no pod holds the device.
        """
        shared = self._shared
        if mig_instance_id is not None:
            refs = shared.get(mig_key(uuid, mig_instance_id))
            if refs:
                return refs
        return shared.get(uuid_key(uuid)) or shared.get(index_key(index)) or ()

    def refresh(self) -> float:
        """Call ``List`` once and swap in the new table; keep the old one on failure.

        Returns:
            Seconds until the next refresh: ``refresh_interval_s``, or less after a
            ``TransientError`` (its delay).
        """
        with self._refresh_lock:
            try:
                response = self._list()
            except TransientError as exc:
                delay = min(exc.delay, self.refresh_interval_s)
                self._fail(str(exc), delay)
                return delay
            except grpc.RpcError as exc:
                code = exc.code() if isinstance(exc, grpc.Call) else None
                self._fail(f"List failed ({code.name if code is not None else exc})")
                return self.refresh_interval_s
            table, shared = self._build(response)
            self._table, self._shared = table, shared
            if self._on_refresh is not None:
                holders = {(r.namespace, r.pod) for refs in shared.values() for r in refs}
                try:
                    self._on_refresh(holders)
                except Exception:
                    logger.exception("pod metadata update failed; the pod mapping carries on")
            self.last_success = self._clock()
            if self._streak:
                logger.info(
                    "kubelet pod-resources %s answers again; %d devices mapped",
                    self.socket_path,
                    len(table),
                )
            self._streak = 0
            return self.refresh_interval_s

    def start(self) -> None:
        """Refresh now and then every ``refresh_interval_s`` (sooner after a TransientError)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, name="gpuscale-pod-resources", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop the background thread and close the gRPC channel."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=self.timeout_s + 1.0)
        with self._refresh_lock:
            self._close_channel()

    def _run(self) -> None:
        while not self._stop.is_set():
            delay = self.refresh_interval_s
            try:
                delay = self.refresh()
            except Exception:
                # The thread must outlive any bug in a resolver or a strange answer.
                with self._refresh_lock:
                    self.errors_total += 1
                logger.exception("pod-resources refresh failed unexpectedly")
            self._stop.wait(delay)

    def _list(self) -> api_pb2.ListPodResourcesResponse:
        if self._channel is None:
            target = "unix:" + os.path.abspath(self.socket_path)
            self._channel = grpc.insecure_channel(
                target,
                options=[
                    ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
                    # Channels share connections through a process-wide pool by default,
                    # so a fresh channel could inherit the closed one's connection still
                    # backing off (or not yet seen dead) and fail or answer from it.
                    ("grpc.use_local_subchannel_pool", 1),
                ],
            )
        stub = api_pb2_grpc.PodResourcesListerStub(self._channel)  # type: ignore[no-untyped-call]
        try:
            response: api_pb2.ListPodResourcesResponse = stub.List(
                api_pb2.ListPodResourcesRequest(), timeout=self.timeout_s
            )
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else None
            if code is None or code not in _TRANSIENT_CODES:
                raise
            delay = _RETRY_S * 2 ** min(self._streak, 16)
            raise TransientError(f"List failed ({code.name})", delay) from exc
        return response

    def _fail(self, reason: str, delay: float | None = None) -> None:
        """Count a failed refresh; warn on the first of a streak, with what to do."""
        self.errors_total += 1
        self._streak += 1
        # A fresh channel next time: a failed one backs off for up to two minutes
        # before reconnecting, which would delay noticing a kubelet that came back.
        self._close_channel()
        if self._streak > 1:
            logger.debug("pod-resources %s again", reason)
            return
        retry = f"every {self.refresh_interval_s:.1f} s"
        if delay is not None:
            retry = f"in {delay:.1f} s, then up to {retry}"
        if not os.path.exists(self.socket_path):
            logger.warning(
                "kubelet pod-resources socket %s does not exist: is the kubelet "
                "pod-resources socket mounted? set %s. Retrying %s; "
                "GPUs carry no pod labels until then",
                self.socket_path,
                _SOCKET_FLAG,
                retry,
            )
            return
        logger.warning(
            "kubelet pod-resources %s on %s; keeping the last good mapping of %d devices "
            "and retrying %s",
            reason,
            self.socket_path,
            len(self._table),
            retry,
        )

    def _close_channel(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def _build(
        self, response: api_pb2.ListPodResourcesResponse
    ) -> tuple[dict[str, PodRef], dict[str, tuple[PodRef, ...]]]:
        table: dict[str, PodRef] = {}
        shared: dict[str, list[PodRef]] = {}
        for pod in response.pod_resources:
            for container in pod.containers:
                ref = PodRef(pod=pod.name, namespace=pod.namespace, container=container.name)
                for devices in container.devices:
                    if not self.wants(devices.resource_name):
                        continue
                    for device_id in devices.device_ids:
                        keys = device_keys(
                            device_id,
                            pci_to_uuid=self._pci_to_uuid,
                            mig_resolver=self._mig_resolver,
                        )
                        if not keys:
                            logger.debug(
                                "%s device %r of %s/%s matches no GPU on this host",
                                devices.resource_name,
                                device_id,
                                pod.namespace,
                                pod.name,
                            )
                        replica = device_id.strip().partition("::")[2] or None
                        for key in keys:
                            held = table.get(key)
                            if held is None or _sort_key(ref) < _sort_key(held):
                                table[key] = ref
                            shared.setdefault(key, []).append(replace(ref, vgpu=replica))
        ordered = {
            k: tuple(sorted(v, key=lambda r: (*_sort_key(r), r.vgpu or "")))
            for k, v in shared.items()
        }
        return table, ordered
