"""The rendered pods' commands run: the autoscaler's args, env and config file start the
real controller, which takes the Lease its RBAC names and answers its probes; the
exporter answers on the paths its probes use.

The kubelet's part is done here by hand: ``$(VAR)`` in args expanded from the
container's env, the ConfigMap's key written where the volume is mounted. The listen
address is moved to a free loopback port, and the exporter reads simulated GPUs (no GPU
on these machines; ``--source nvml`` is checked in tests/unit/deploy).
"""

import os
import re
from pathlib import Path

import httpx
import pytest

from tests.support.autoscale import wait_until
from tests.support.kubeapi import KubeApiDouble
from tests.support.manifests import DEPLOY, named, one, render
from tests.support.servers import Process, free_port, gpuscale_cmd, start_exporter, wait_http

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

POD = {"metadata.name": "gpuscale-autoscaler-7d9f-abcde", "metadata.namespace": "gpuscale"}


def env_of(container: dict) -> dict[str, str]:
    return {
        e["name"]: e["value"] if "value" in e else POD[e["valueFrom"]["fieldRef"]["fieldPath"]]
        for e in container.get("env", [])
    }


def probe_paths(container: dict) -> set[str]:
    return {container[p]["httpGet"]["path"] for p in ("readinessProbe", "livenessProbe")}


@pytest.fixture(scope="module")
def objects() -> list[dict]:
    return render(DEPLOY / "overlays" / "prometheus-operator")


def test_the_autoscaler_pod_starts_takes_its_lease_and_passes_its_probes(objects, tmp_path):
    deployment = one(objects, "Deployment", "gpuscale-autoscaler")
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    config = named(objects, "ConfigMap", "gpuscale-autoscaler-config")
    mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
    mounted = tmp_path / mount["mountPath"].lstrip("/")
    mounted.mkdir(parents=True)
    for key, text in config["data"].items():
        (mounted / key).write_text(text)
    env = env_of(container)
    port = free_port()
    env["PROMETHEUS_URL"] = f"http://127.0.0.1:{free_port()}"  # none there: it holds
    args = []
    for arg in container["args"]:
        arg = re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], arg)
        arg = arg.replace(mount["mountPath"], str(mounted))
        args.append(f"--metrics-address=127.0.0.1:{port}" if arg.startswith("--metrics-") else arg)
    with KubeApiDouble() as api:
        api.create_deployment("llm", "serving", replicas=2)
        api.create_statefulset("embedder", "serving", replicas=1)
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        process = Process(
            [*gpuscale_cmd(), *args, "--kubeconfig", str(kubeconfig)],
            tmp_path / "autoscaler.log",
            {**os.environ, **env, "PYTHONUNBUFFERED": "1"},
        )
        try:
            for path in probe_paths(container):
                response = wait_http(f"http://127.0.0.1:{port}{path}", 60)
                assert response.status_code == 200, process.output()
            lease = "/apis/coordination.k8s.io/v1/namespaces/gpuscale/leases/gpuscale-autoscaler"
            wait_until(lambda: api.count("PUT", lease) + api.count("POST", lease) > 0, 30)
            held = api.get("coordination.k8s.io/v1", "leases", "gpuscale-autoscaler", "gpuscale")
            assert held["spec"]["holderIdentity"] == POD["metadata.name"]
            metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            assert "gpuscale_autoscaler_leader 1.0" in metrics
        finally:
            process.stop()


def test_the_exporter_answers_on_its_probe_paths(objects, tmp_path: Path):
    daemonset = one(objects, "DaemonSet", "gpuscale-exporter")
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    process, port = start_exporter(tmp_path, "--source", "sim", "--gpus", "2")
    try:
        for path in probe_paths(container):
            response = wait_http(f"http://127.0.0.1:{port}{path}", 60)
            assert response.status_code == 200, (path, process.output())
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        # What the example GPUScaler scales on, in dcgm-exporter's default counters.
        assert "DCGM_FI_DEV_GPU_UTIL{" in metrics
    finally:
        process.stop()
