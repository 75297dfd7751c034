"""End-to-end helpers for ``gpuscale autoscale``: a kubelet pod-resources server that
attributes the simulated GPUs to the API double's pods, the controller as a process, and
a Prometheus that can be stopped and started again on the same port and data.

The chain under test is the production one: simulated GPUs -> ``gpuscale exporter
--kubernetes`` (pod labels from this kubelet, over the real gRPC API on a unix socket)
-> real Prometheus -> ``gpuscale autoscale`` (a real process) -> the API double.
"""

import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from contextlib import ExitStack
from pathlib import Path

import grpc
import httpx

from gpuscale.exporter.podresources import api_pb2, api_pb2_grpc
from tests.support.kubeapi import KubeApiDouble
from tests.support.servers import Process, Prometheus, free_port, gpuscale_cmd, wait_http


class DoubleKubelet(api_pb2_grpc.PodResourcesListerServicer):
    """Answers pod-resources ``List`` with the API double's live pods, one GPU each.

    A pod keeps its GPU index while it lives; a new pod gets the lowest index never
    handed out before, so a replacement never lands on the GPU its predecessor broke
    (the device plugin would have marked that GPU unhealthy).
    """

    def __init__(self, api: KubeApiDouble, namespace: str = "default", gpus: int = 8) -> None:
        self.api = api
        self.namespace = namespace
        self.gpus = gpus
        self.assigned: dict[str, int] = {}
        self._next = 0
        self._lock = threading.Lock()

    def assign(self) -> dict[str, int]:
        """Map the live pods to GPUs (oldest first) and return the mapping."""
        with self._lock:
            live = [
                p
                for p in self.api.pods(self.namespace)
                if not p["metadata"].get("deletionTimestamp")
            ]
            live.sort(key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))
            names = {p["metadata"]["name"] for p in live}
            self.assigned = {k: v for k, v in self.assigned.items() if k in names}
            for pod in live:
                name = pod["metadata"]["name"]
                if name not in self.assigned and self._next < self.gpus:
                    self.assigned[name] = self._next
                    self._next += 1
            return dict(self.assigned)

    def List(self, request, context):  # noqa: N802 - the gRPC method name
        pods = [
            api_pb2.PodResources(
                name=name,
                namespace=self.namespace,
                containers=[
                    api_pb2.ContainerResources(
                        name="server",
                        devices=[
                            api_pb2.ContainerDevices(
                                resource_name="nvidia.com/gpu", device_ids=[str(index)]
                            )
                        ],
                    )
                ],
            )
            for name, index in sorted(self.assign().items())
        ]
        return api_pb2.ListPodResourcesResponse(pod_resources=pods)


class KubeletServer:
    """A real gRPC server on a unix socket in a short temporary directory."""

    def __init__(self, servicer: api_pb2_grpc.PodResourcesListerServicer) -> None:
        # Short directory: unix socket paths are limited to 107 bytes.
        self.directory = tempfile.mkdtemp(prefix="gs-kl-", dir="/tmp")
        self.socket = str(Path(self.directory) / "kubelet.sock")
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(servicer, self.server)
        self.server.add_insecure_port("unix:" + self.socket)
        self.server.start()

    def stop(self) -> None:
        self.server.stop(grace=None).wait(5)
        shutil.rmtree(self.directory, ignore_errors=True)


def restart_prometheus(prom, log_name: str = "prometheus-again.log") -> None:
    """Start ``prom`` (a stopped ``support.servers.Prometheus``) again: same port, same data."""
    args = list(prom.process.proc.args)
    prom.process = Process(args, prom.process.log.with_name(log_name))
    wait_http(f"{prom.url}/-/ready", 30)


class Autoscaler:
    """``gpuscale autoscale`` as a child process, JSON logs, its /metrics on a free port."""

    def __init__(
        self,
        tmp: Path,
        config: Path,
        kubeconfig: Path,
        prometheus: str,
        *args: str,
        name: str = "autoscaler",
    ) -> None:
        self.port = free_port()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = Process(
            [
                *gpuscale_cmd(),
                "--log-format",
                "json",
                # Every sync's decision record: a steady decision is logged at DEBUG.
                "--log-level",
                "debug",
                "autoscale",
                "--config",
                str(config),
                "--kubeconfig",
                str(kubeconfig),
                "--prometheus",
                prometheus,
                "--metrics-address",
                f"127.0.0.1:{self.port}",
                *args,
            ],
            tmp / f"{name}.log",
            env,
        )
        wait_http(f"http://127.0.0.1:{self.port}/healthz", 60)

    def metric(self, name: str, **labels: str) -> float | None:
        """A sample of the controller's own /metrics, or None when absent."""
        text = httpx.get(f"http://127.0.0.1:{self.port}/metrics", timeout=5).text
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        head = f"{name}{{{want}}}" if labels else name
        for line in text.splitlines():
            if line.startswith(head + " "):
                return float(line.rsplit(" ", 1)[1])
        return None

    def records(self) -> list[dict]:
        """The JSON log lines written so far."""
        out = []
        for line in self.process.output().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def decisions(self, target: str | None = None) -> list[dict]:
        """Decision records (``decision`` field of the log lines), optionally of one target."""
        found = []
        for line in self.process.output().splitlines():
            if '"decision"' not in line:  # the debug log is mostly request lines
                continue
            try:
                record = json.loads(line)
            except ValueError:  # a line still being written
                continue
            if "decision" in record:
                found.append(record["decision"] | {"ts": record["ts"]})
        return [d for d in found if target is None or d["target"] == target]

    def stop(self) -> None:
        self.process.stop()


def wait_until(predicate: Callable[[], object], timeout: float, step: float = 0.2) -> float:
    """Poll until ``predicate()`` is truthy; the time (``time.time()``) it first was.

    Raises:
        TimeoutError: Not within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return time.time()
        time.sleep(step)
    raise TimeoutError(f"condition not met within {timeout} s")


def exporter_at(tmp: Path, port: int, *args: str, name: str = "exporter") -> Process:
    """``gpuscale exporter`` on a given port (so Prometheus keeps scraping it across restarts)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = Process(
        [*gpuscale_cmd(), "exporter", "--address", f"127.0.0.1:{port}", *args],
        tmp / f"{name}-{time.monotonic_ns()}.log",
        env,
    )
    wait_http(f"http://127.0.0.1:{port}/metrics", 60)
    return proc


def faulted_chain(
    stack: ExitStack,
    tmp: Path,
    api: KubeApiDouble,
    kubelet: "KubeletServer",
    config_text: str,
    *,
    gpus: int,
    faults: Sequence[str],
    sync_s: float,
) -> tuple[Prometheus, Autoscaler]:
    """The rest of the chain after the API double and the kubelet, each stopped by ``stack``.

    The simulated exporter (``gpus`` GPUs at half load, pod labels from ``kubelet``,
    ``faults`` injected), a real Prometheus scraping it, and ``gpuscale autoscale`` on
    ``config_text`` against ``api`` every ``sync_s``, without leader election.

    Returns:
        (the Prometheus, the autoscaler).
    """
    port = free_port()
    injected = [arg for fault in faults for arg in ("--fault", fault)]
    exporter = exporter_at(
        tmp,
        port,
        *("--source", "sim", "--gpus", str(gpus), "--load", "constant:0.5", "--kubernetes"),
        *("--pod-resources-kubelet-socket", kubelet.socket, *injected),
    )
    stack.callback(exporter.stop)
    (tmp / "prom").mkdir()
    prom = Prometheus("prometheus", tmp / "prom", [f"127.0.0.1:{port}"])
    stack.callback(prom.process.stop)
    config = tmp / "scaler.yaml"
    config.write_text(config_text)
    kubeconfig = api.write_kubeconfig(tmp / "kubeconfig")
    args = ("--sync-period", str(sync_s), "--no-leader-elect")
    ctl = Autoscaler(tmp, config, kubeconfig, prom.url, *args)
    stack.callback(ctl.stop)
    return prom, ctl
