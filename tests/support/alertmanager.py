"""Real alert routing for tests: Alertmanager, a Prometheus that evaluates rules and sends
alerts, a webhook receiver, and a kubelet pod-resources server for pod labels.

Every server binds 127.0.0.1 on a free port in a temporary directory and is stopped
by its own PID (or, for the in-process servers, by its own shutdown call).
"""

import json
import shutil
import threading
import time
from collections.abc import Iterable
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc

from gpuscale.exporter.podresources import api_pb2, api_pb2_grpc
from tests.support.servers import Process, free_port, wait_http


class Webhook:
    """An Alertmanager webhook receiver: keeps each notification with its arrival time."""

    def __init__(self) -> None:
        self.received: list[tuple[float, dict]] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with outer._lock:
                    outer.received.append((time.monotonic(), json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def alerts(self) -> list[tuple[float, dict]]:
        """Every alert received so far, with the arrival time of its notification."""
        with self._lock:
            return [(t, a) for t, payload in self.received for a in payload["alerts"]]

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class Alertmanager:
    """Alertmanager 0.25 without clustering, routing every alert to one webhook."""

    def __init__(self, workdir: Path, webhook_url: str, group_wait: str = "1s") -> None:
        binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
        if binary is None:
            raise RuntimeError("Alertmanager is not installed: run ./scripts/test")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = workdir / "alertmanager.yml"
        config.write_text(
            "route:\n  receiver: hook\n  group_by: [alertname, UUID]\n"
            f"  group_wait: {group_wait}\n  group_interval: 1s\n  repeat_interval: 1h\n"
            "receivers:\n  - name: hook\n    webhook_configs:\n"
            f"      - url: '{webhook_url}'\n        send_resolved: false\n"
        )
        self.process = Process(
            [
                binary,
                f"--config.file={config}",
                f"--storage.path={workdir / 'am-data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--cluster.listen-address=",
            ],
            workdir / "alertmanager.log",
        )
        wait_http(f"{self.url}/-/ready", 30)


class RulingPrometheus:
    """Prometheus that scrapes ``targets`` as job ``gpu``, evaluates ``rules`` and alerts."""

    def __init__(
        self,
        binary: str,
        workdir: Path,
        targets: Iterable[str],
        rules: Path,
        alertmanager: str,
        interval_s: int = 1,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = workdir / "prometheus.yml"
        target_list = ", ".join(f"'{t}'" for t in targets)
        config.write_text(
            f"global:\n  scrape_interval: {interval_s}s\n  evaluation_interval: {interval_s}s\n"
            f"rule_files: ['{rules}']\n"
            "alerting:\n  alertmanagers:\n    - static_configs:\n"
            f"        - targets: ['{alertmanager.removeprefix('http://')}']\n"
            f"scrape_configs:\n  - job_name: gpu\n    scrape_timeout: {interval_s}s\n"
            f"    static_configs:\n      - targets: [{target_list}]\n"
        )
        self.process = Process(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            workdir / "prometheus.log",
        )
        wait_http(f"{self.url}/-/ready", 30)


class _Kubelet(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, pods: list[api_pb2.PodResources]) -> None:
        self.pods = pods

    def List(self, request, context):  # noqa: N802 - the gRPC method name
        return api_pb2.ListPodResourcesResponse(pod_resources=self.pods)


class Kubelet:
    """A real gRPC pod-resources v1 server on a unix socket, answering fixed assignments.

    Args:
        socket_path: Where to listen (unix socket paths are limited to 107 bytes).
        assignments: ``(namespace, pod, container, device id)`` per container.
    """

    def __init__(self, socket_path: str, assignments: Iterable[tuple[str, str, str, str]]) -> None:
        pods = [
            api_pb2.PodResources(
                name=pod,
                namespace=ns,
                containers=[
                    api_pb2.ContainerResources(
                        name=container,
                        devices=[
                            api_pb2.ContainerDevices(
                                resource_name="nvidia.com/gpu", device_ids=[device]
                            )
                        ],
                    )
                ],
            )
            for ns, pod, container, device in assignments
        ]
        self.socket_path = socket_path
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Kubelet(pods), self._server)
        self._server.add_insecure_port("unix:" + socket_path)
        self._server.start()

    def stop(self) -> None:
        self._server.stop(grace=None).wait(5)
