"""The rendered pods' commands run: the autoscaler's args and env start the real
controller, which takes the Lease its RBAC names, answers its probes and reconciles the
example GPUScaler object (its status written), and the same with docs/deploy.md's
overlay that runs it from a file; the exporter answers on the paths its probes use.

The kubelet's part is done here by hand: ``$(VAR)`` in args expanded from the
container's env, a ConfigMap's keys written where its volume is mounted. The listen
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
from tests.support.manifests import DEPLOY, documented_overlay, one, render
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


def mount_configmaps(spec: dict, container: dict, objects: list[dict], root: Path) -> dict:
    """Write each ConfigMap volume's keys under ``root`` as the kubelet mounts them.

    Returns:
        Each mount path in the pod mapped to its directory under ``root``.
    """
    maps = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
    volumes = {v["name"]: v["configMap"]["name"] for v in spec["volumes"] if "configMap" in v}
    mounted = {}
    for mount in container["volumeMounts"]:
        if mount["name"] in volumes:
            where = root / mount["mountPath"].lstrip("/")
            where.mkdir(parents=True)
            for key, text in maps[volumes[mount["name"]]]["data"].items():
                (where / key).write_text(text)
            mounted[mount["mountPath"]] = where
    return mounted


def gpuscaler_status(api: KubeApiDouble) -> dict:
    obj = api.get("gpuscale.io/v1alpha1", "gpuscalers", "inference", "serving") or {}
    return dict(obj.get("status") or {})


@pytest.mark.parametrize("mode", ["gpuscalers", "file"])
def test_the_autoscaler_pod_starts_takes_its_lease_and_passes_its_probes(objects, mode, tmp_path):
    if mode == "file":  # docs/deploy.md, "Running from a file"
        objects = render(documented_overlay(tmp_path / "docs"))
    deployment = one(objects, "Deployment", "gpuscale-autoscaler")
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    mounted = mount_configmaps(spec, container, objects, tmp_path / "pod")
    assert len(mounted) == (1 if mode == "file" else 0)
    env = env_of(container)
    port = free_port()
    env["PROMETHEUS_URL"] = f"http://127.0.0.1:{free_port()}"  # none there: it holds
    args = []
    for arg in container["args"]:
        arg = re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], arg)
        for path, where in mounted.items():
            arg = arg.replace(path, str(where))
        args.append(f"--metrics-address=127.0.0.1:{port}" if arg.startswith("--metrics-") else arg)
    with KubeApiDouble() as api:
        api.create_deployment("llm", "serving", replicas=2)
        api.create_statefulset("embedder", "serving", replicas=1)
        if mode == "gpuscalers":  # the overlay's CRD, then the example applied after it
            api.install_crd(one(objects, "CustomResourceDefinition", "gpuscalers.gpuscale.io"))
            (example,) = render(DEPLOY / "examples")
            api.create_object("gpuscale.io/v1alpha1", "gpuscalers", example, "serving")
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
            if mode == "gpuscalers":
                # Reconciled: both targets hold (no Prometheus), and the status says so.
                wait_until(lambda: "conditions" in gpuscaler_status(api), 45)
                status = gpuscaler_status(api)
                assert status["observedGeneration"] == 1
                assert status["currentReplicas"] == 3  # llm 2 + embedder 1, held
                health = {c["type"]: c for c in status["conditions"]}["MetricsHealthy"]
                assert (health["status"], health["reason"]) == ("False", "Unavailable")
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
