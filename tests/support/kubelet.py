"""A real gRPC kubelet pod-resources v1 server on a unix socket, answering with set pods."""

import shutil
import tempfile
from concurrent import futures
from pathlib import Path

import grpc

from gpuscale.exporter.podresources import api_pb2, api_pb2_grpc


class _Lister(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self) -> None:
        self.pods: list[api_pb2.PodResources] = []

    def List(self, request, context):  # noqa: N802 - the gRPC method name
        return api_pb2.ListPodResourcesResponse(pod_resources=list(self.pods))


class FakeKubelet:
    """Serves ``List`` on ``socket`` (a short temp path: unix paths stop at 107 bytes)."""

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="gs-kl-", dir="/tmp")
        self.socket = str(Path(self._dir) / "kubelet.sock")
        self._lister = _Lister()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(self._lister, self._server)
        self._server.add_insecure_port("unix:" + self.socket)
        self._server.start()

    def hold(self, pod: str, namespace: str, container: str, resource: str, *ids: str) -> None:
        """Add a pod whose container holds the devices ``ids`` of ``resource``."""
        devices = api_pb2.ContainerDevices(resource_name=resource, device_ids=list(ids))
        self._lister.pods.append(
            api_pb2.PodResources(
                name=pod,
                namespace=namespace,
                containers=[api_pb2.ContainerResources(name=container, devices=[devices])],
            )
        )

    def stop(self) -> None:
        self._server.stop(grace=None).wait(5)
        shutil.rmtree(self._dir, ignore_errors=True)
