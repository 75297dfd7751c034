"""PodMapper against a real gRPC pod-resources server on a unix socket."""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuscale.errors import ConfigError
from gpuscale.exporter import pods
from gpuscale.exporter.podresources import api_pb2, api_pb2_grpc
from gpuscale.exporter.pods import (
    PodMapper,
    PodRef,
    device_keys,
    index_key,
    normalize_pci_bus_id,
    uuid_key,
)
from gpuscale.ids import GpuUuid
from gpuscale.telemetry.base import GpuInfo

GPU_A = "GPU-0a1b2c3d-0000-4000-8000-00000000000a"
GPU_MIG_PARENT = "GPU-0a1b2c3d-0000-4000-8000-0000000000bb"
GPU_LEGACY_PARENT = "GPU-0a1b2c3d-0000-4000-8000-0000000000cc"
GPU_SHARED = "GPU-0a1b2c3d-0000-4000-8000-0000000000dd"
GPU_EXTRA = "GPU-0a1b2c3d-0000-4000-8000-0000000000ee"
MIG_UUID = "MIG-5b6c7d8e-0000-4000-8000-000000000001"
AMD_UUID = "a3ff74a1-0000-4000-8000-0000000000ad"
AMD_BUS_KUBELET = "0000:c1:00.0"
AMD_BUS_SOURCE = "00000000:C1:00.0"


def devices(resource: str, *ids: str) -> api_pb2.ContainerDevices:
    return api_pb2.ContainerDevices(resource_name=resource, device_ids=list(ids))


def pod(
    name: str, namespace: str, container: str, *devs: api_pb2.ContainerDevices
) -> api_pb2.PodResources:
    return api_pb2.PodResources(
        name=name,
        namespace=namespace,
        containers=[api_pb2.ContainerResources(name=container, devices=list(devs), cpu_ids=[0])],
    )


class FakeKubelet(api_pb2_grpc.PodResourcesListerServicer):
    """Answers List with whatever pods the test sets, or fails with ``error``; counts calls."""

    def __init__(self) -> None:
        self.pods: list[api_pb2.PodResources] = []
        self.error: grpc.StatusCode | None = None
        self.calls = 0
        self._lock = threading.Lock()

    def List(self, request, context):  # noqa: N802 - the gRPC method name
        with self._lock:
            self.calls += 1
            if self.error is not None:
                context.abort(self.error, "scripted failure")
            return api_pb2.ListPodResourcesResponse(pod_resources=list(self.pods))


class Server:
    """A real grpc.server bound to a unix socket; start and stop it at will."""

    def __init__(self, socket_path: str, kubelet: FakeKubelet) -> None:
        self.socket_path = socket_path
        self.kubelet = kubelet
        self._server: grpc.Server | None = None

    def start(self) -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(self.kubelet, server)
        server.add_insecure_port("unix:" + self.socket_path)
        server.start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            # Wait until it has stopped: a loaded machine can take longer than a few
            # seconds, and a server still serving makes the next call succeed.
            stopped = self._server.stop(grace=None).wait(60)
            assert stopped, "the pod-resources server did not stop within 60 s"
            self._server = None


@pytest.fixture
def socket_path() -> Iterator[str]:
    # Short directory: unix socket paths are limited to 107 bytes.
    directory = tempfile.mkdtemp(prefix="gs-pr-", dir="/tmp")
    yield str(Path(directory) / "kubelet.sock")
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def kubelet() -> FakeKubelet:
    return FakeKubelet()


@pytest.fixture
def server(socket_path: str, kubelet: FakeKubelet) -> Iterator[Server]:
    srv = Server(socket_path, kubelet)
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def make_mapper(socket_path: str) -> Iterator:
    made: list[PodMapper] = []

    def make(**kwargs) -> PodMapper:
        kwargs.setdefault("timeout_s", 2.0)
        mapper = PodMapper(socket_path, **kwargs)
        made.append(mapper)
        return mapper

    yield make
    for mapper in made:
        mapper.stop()


def amd_device() -> GpuInfo:
    return GpuInfo(
        index=0,
        uuid=GpuUuid(AMD_UUID),
        model="AMD Instinct MI300X",
        pci_bus_id=AMD_BUS_SOURCE,
        device="card0",
        vendor="amd",
        driver_version="6.8.5",
    )


def resolve_mig(mig_uuid: str) -> tuple[str, int] | None:
    return (GPU_MIG_PARENT, 2) if mig_uuid == MIG_UUID else None


def node_pods() -> list[api_pb2.PodResources]:
    return [
        pod("train-0", "ml", "trainer", devices("nvidia.com/gpu", GPU_A)),
        pod("infer-1", "serving", "server", devices("nvidia.com/gpu", "nvidia3")),
        pod("mig-job", "ml", "worker", devices("nvidia.com/mig-1g.10gb", MIG_UUID)),
        pod(
            "old-mig",
            "ml",
            "worker",
            devices("nvidia.com/mig-2g.20gb", f"MIG-{GPU_LEGACY_PARENT}/3/0"),
        ),
        pod("rocm-0", "amd", "hip", devices("amd.com/gpu", AMD_BUS_KUBELET)),
        # "cpu" is not a GPU resource: its id 7 must not claim GPU index 7.
        pod("cpu-only", "default", "app", devices("cpu", "7")),
        pod("vgpu", "lab", "main", devices("example.com/vgpu", GPU_EXTRA)),
        # Two time-sliced replicas of one GPU: the first by (namespace, pod) wins.
        pod("zeta", "shared", "c", devices("nvidia.com/gpu", f"{GPU_SHARED}::1")),
        pod("alpha", "shared", "c", devices("nvidia.com/gpu", f"{GPU_SHARED}::0")),
    ]


def test_list_maps_every_id_form_to_its_container(server, kubelet, make_mapper):
    kubelet.pods = node_pods()
    mapper = make_mapper(
        resource_names=("nvidia.com/gpu", "amd.com/gpu", "example.com/vgpu"),
        devices=[amd_device()],
        mig_resolver=resolve_mig,
    )

    mapper.refresh()

    assert mapper.errors_total == 0
    assert mapper.lookup(GPU_A, 0) == PodRef("train-0", "ml", "trainer")
    assert mapper.lookup(GPU_A.upper(), 9) == PodRef("train-0", "ml", "trainer")
    assert mapper.lookup("GPU-not-held", 3) == PodRef("infer-1", "serving", "server")
    assert mapper.lookup(GPU_MIG_PARENT, 5, 2) == PodRef("mig-job", "ml", "worker")
    assert mapper.lookup(GPU_MIG_PARENT, 5, 1) is None
    assert mapper.lookup(MIG_UUID, 5) == PodRef("mig-job", "ml", "worker")
    assert mapper.lookup(GPU_LEGACY_PARENT, 6, 3) == PodRef("old-mig", "ml", "worker")
    assert mapper.lookup(AMD_UUID, 0) == PodRef("rocm-0", "amd", "hip")
    assert mapper.lookup("GPU-nobody", 7) is None
    assert mapper.lookup(GPU_EXTRA, 8) == PodRef("vgpu", "lab", "main")
    assert mapper.lookup(GPU_SHARED, 4) == PodRef("alpha", "shared", "c")
    assert mapper.last_success is not None


def test_lookup_all_gives_every_holder_of_a_shared_gpu_with_its_replica(
    server, kubelet, make_mapper
):
    kubelet.pods = node_pods()
    mapper = make_mapper()
    mapper.refresh()
    assert mapper.lookup_all(GPU_SHARED, 4) == (
        PodRef("alpha", "shared", "c", vgpu="0"),
        PodRef("zeta", "shared", "c", vgpu="1"),
    )
    assert mapper.lookup_all(GPU_A, 0) == (PodRef("train-0", "ml", "trainer"),)
    assert mapper.lookup_all("GPU-nobody", 7) == ()


def test_default_resource_names_ignore_other_resources(server, kubelet, make_mapper):
    kubelet.pods = node_pods()
    mapper = make_mapper()

    mapper.refresh()

    assert mapper.lookup(GPU_EXTRA, 8) is None
    assert mapper.lookup(GPU_A, 0) == PodRef("train-0", "ml", "trainer")
    # Without a device list the AMD bus id cannot be tied to a UUID.
    assert mapper.lookup(AMD_UUID, 0) is None
    # Without a resolver a MIG UUID still matches by itself, not by parent/instance.
    assert mapper.lookup(GPU_MIG_PARENT, 5, 2) is None
    assert mapper.lookup(MIG_UUID, 5) == PodRef("mig-job", "ml", "worker")


def test_mig_instance_falls_back_to_pod_holding_whole_parent(server, kubelet, make_mapper):
    kubelet.pods = [pod("whole", "ml", "c", devices("nvidia.com/gpu", GPU_MIG_PARENT))]
    mapper = make_mapper()

    mapper.refresh()

    assert mapper.lookup(GPU_MIG_PARENT, 1, 4) == PodRef("whole", "ml", "c")


def test_refresh_picks_up_a_changed_answer(server, kubelet, make_mapper):
    kubelet.pods = [pod("a", "ns", "c", devices("nvidia.com/gpu", GPU_A))]
    mapper = make_mapper()
    mapper.refresh()
    assert mapper.lookup(GPU_A, 0) == PodRef("a", "ns", "c")

    kubelet.pods = [pod("b", "ns2", "d", devices("nvidia.com/gpu", "nvidia1"))]
    mapper.refresh()

    assert mapper.lookup(GPU_A, 0) is None
    assert mapper.lookup(GPU_A, 1) == PodRef("b", "ns2", "d")
    assert kubelet.calls == 2


def test_dead_server_keeps_last_mapping_counts_errors_and_warns_once(
    server, kubelet, make_mapper, caplog
):
    kubelet.pods = [pod("a", "ns", "c", devices("nvidia.com/gpu", GPU_A))]
    ticks = iter([100.0, 200.0])
    mapper = make_mapper(clock=lambda: next(ticks))
    mapper.refresh()
    assert mapper.last_success == 100.0

    server.stop()
    with caplog.at_level(logging.DEBUG, logger="gpuscale.exporter.pods"):
        for _ in range(3):
            mapper.refresh()

    assert mapper.errors_total == 3
    assert mapper.lookup(GPU_A, 0) == PodRef("a", "ns", "c")
    assert mapper.last_success == 100.0
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert server.socket_path in warnings[0].getMessage()

    caplog.clear()
    kubelet.pods = [pod("b", "ns", "c", devices("nvidia.com/gpu", GPU_A))]
    server.start()
    with caplog.at_level(logging.INFO, logger="gpuscale.exporter.pods"):
        mapper.refresh()

    assert mapper.lookup(GPU_A, 0) == PodRef("b", "ns", "c")
    assert mapper.errors_total == 3
    assert mapper.last_success == 200.0
    assert any("answers again" in r.getMessage() for r in caplog.records)


def test_restarted_kubelet_is_read_on_the_first_refresh_every_time(socket_path, kubelet):
    # A fresh channel from the process-wide subchannel pool could inherit the dead
    # connection (about 1 restart in 100 here under load); each restart is a fresh try.
    kubelet.pods = [pod("a", "ns", "c", devices("nvidia.com/gpu", GPU_A))]
    srv = Server(socket_path, kubelet)
    mapper = PodMapper(socket_path, timeout_s=2.0)
    try:
        missed = 0
        for round_ in range(100):
            srv.start()
            kubelet.pods = [pod(f"p{round_}", "ns", "c", devices("nvidia.com/gpu", GPU_A))]
            mapper.refresh()
            missed += mapper.lookup(GPU_A, 0) != PodRef(f"p{round_}", "ns", "c")
            srv.stop()
            mapper.refresh()
        assert missed == 0
    finally:
        mapper.stop()
        srv.stop()


def wait_for(predicate, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def test_background_thread_refreshes_without_manual_calls(server, kubelet, make_mapper):
    kubelet.pods = [pod("a", "ns", "c", devices("nvidia.com/gpu", GPU_A))]
    mapper = make_mapper(refresh_interval_s=0.05)
    mapper.start()
    assert wait_for(lambda: mapper.lookup(GPU_A, 0) == PodRef("a", "ns", "c"))

    kubelet.pods = [pod("b", "ns", "c", devices("nvidia.com/gpu", GPU_A))]

    assert wait_for(lambda: mapper.lookup(GPU_A, 0) == PodRef("b", "ns", "c"))
    mapper.stop()
    calls = kubelet.calls
    time.sleep(0.2)
    assert kubelet.calls == calls


def test_missing_socket_warns_with_hint_then_maps_once_kubelet_starts(
    socket_path, kubelet, make_mapper, caplog
):
    mapper = make_mapper(refresh_interval_s=0.05, timeout_s=0.5)
    with caplog.at_level(logging.WARNING, logger="gpuscale.exporter.pods"):
        mapper.start()
        assert wait_for(lambda: mapper.errors_total >= 2)

    assert mapper.lookup(GPU_A, 0) is None
    assert mapper.last_success is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert socket_path in warnings[0]
    assert "set --pod-resources-kubelet-socket." in warnings[0]

    kubelet.pods = [pod("late", "ns", "c", devices("nvidia.com/gpu", GPU_A))]
    late = Server(socket_path, kubelet)
    late.start()
    try:
        assert wait_for(lambda: mapper.lookup(GPU_A, 0) == PodRef("late", "ns", "c"))
    finally:
        mapper.stop()
        late.stop()


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"refresh_interval_s": 0.0}, "refresh_interval_s"),
        ({"timeout_s": -1.0}, "timeout_s"),
        ({"socket_path": "  "}, "--pod-resources-kubelet-socket: the socket path is empty; "),
    ],
)
def test_bad_settings_raise_config_error_naming_the_setting(kwargs, named):
    with pytest.raises(ConfigError) as raised:
        PodMapper(**kwargs)
    message = str(raised.value)
    assert named in message
    assert "\n" not in message


def test_socket_flag_named_in_messages_is_the_exporter_option():
    import typer

    from gpuscale.cli.exporter import register

    app = typer.Typer()
    register(app)
    command = typer.main.get_command(app)  # one command: the exporter itself
    flags = {flag for param in command.params for flag in param.opts}
    assert "--address" in flags
    assert pods._SOCKET_FLAG in flags


def test_unavailable_kubelet_is_retried_sooner_with_doubling_delay(
    socket_path, kubelet, make_mapper, caplog
):
    # No server on the socket: gRPC says UNAVAILABLE, a TransientError.
    mapper = make_mapper(refresh_interval_s=10.0)
    with caplog.at_level(logging.WARNING, logger="gpuscale.exporter.pods"):
        delays = [mapper.refresh() for _ in range(6)]

    assert delays == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert mapper.errors_total == 6
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert "Retrying in 1.0 s, then up to every 10.0 s" in warnings[0]

    late = Server(socket_path, kubelet)
    late.start()
    try:
        assert mapper.refresh() == 10.0  # success: back to the interval
        late.stop()
        assert mapper.refresh() == 1.0  # a new streak starts from the first delay
    finally:
        late.stop()


def test_other_grpc_errors_wait_the_whole_interval(server, kubelet, make_mapper, caplog):
    kubelet.error = grpc.StatusCode.UNIMPLEMENTED  # e.g. a kubelet without the v1 API
    mapper = make_mapper(refresh_interval_s=10.0)
    with caplog.at_level(logging.WARNING, logger="gpuscale.exporter.pods"):
        assert mapper.refresh() == 10.0
        assert mapper.refresh() == 10.0

    assert mapper.errors_total == 2
    assert [r.getMessage() for r in caplog.records] == [
        f"kubelet pod-resources List failed (UNIMPLEMENTED) on {server.socket_path}; keeping "
        "the last good mapping of 0 devices and retrying every 10.0 s"
    ]


def test_background_thread_uses_the_transient_delay_not_the_interval(
    socket_path, kubelet, make_mapper, monkeypatch
):
    monkeypatch.setattr(pods, "_RETRY_S", 0.02)
    kubelet.pods = [pod("late", "ns", "c", devices("nvidia.com/gpu", GPU_A))]
    mapper = make_mapper(refresh_interval_s=60.0)  # a whole interval would outlast the test
    mapper.start()
    assert wait_for(lambda: mapper.errors_total >= 1)
    late = Server(socket_path, kubelet)
    late.start()
    try:
        assert wait_for(lambda: mapper.lookup(GPU_A, 0) == PodRef("late", "ns", "c"))
    finally:
        mapper.stop()
        late.stop()


hex_digit = st.integers(min_value=0, max_value=255)


@given(
    domain=st.integers(min_value=0, max_value=0xFFFF),
    bus=hex_digit,
    dev=st.integers(min_value=0, max_value=31),
    fn=st.integers(min_value=0, max_value=7),
)
def test_nvml_and_amd_pci_spellings_normalize_equal(domain, bus, dev, fn):
    nvml = f"{domain:08X}:{bus:02X}:{dev:02X}.{fn}"
    amd = f"{domain:04x}:{bus:02x}:{dev:02x}.{fn}"
    assert normalize_pci_bus_id(nvml) == normalize_pci_bus_id(amd)
    assert normalize_pci_bus_id(amd) == amd


@given(index=st.integers(min_value=0, max_value=10_000), replica=st.integers(0, 64))
def test_index_ids_map_to_index_with_or_without_prefix_and_replica(index, replica):
    assert device_keys(f"nvidia{index}") == [index_key(index)]
    assert device_keys(str(index)) == [index_key(index)]
    assert device_keys(f"nvidia{index}::{replica}") == [index_key(index)]


@given(suffix=st.uuids(), replica=st.integers(0, 64))
def test_time_slice_replica_suffix_is_stripped_from_uuids(suffix, replica):
    uuid = f"GPU-{suffix}"
    assert device_keys(f"{uuid}::{replica}") == [uuid_key(uuid)]
    assert device_keys(uuid.upper()) == [uuid_key(uuid)]


def test_pci_id_without_known_device_matches_nothing():
    assert device_keys(AMD_BUS_KUBELET) == []
    assert device_keys(AMD_BUS_KUBELET, pci_to_uuid={AMD_BUS_KUBELET: AMD_UUID}) == [
        uuid_key(AMD_UUID)
    ]
