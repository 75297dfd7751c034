"""``hybrid`` live: a pod on a GPU that fell off the bus is replaced by the policy's own
decision, through the same step the simulator runs.

Simulated GPUs (``--fault gpu-lost``) -> gpuscale exporter -> a real Prometheus ->
``gpuscale autoscale`` with ``hybrid`` (no remediation configured) -> the API double:
the sick pod, and only it, is deleted within the ``GpuFellOffBus`` alert's ``for:`` (0 s)
plus two syncs of Prometheus seeing the GPU gone; the replica count is kept; a Warning
Event says why; and in steady load the policy's state annotation is written at most
once a minute.
"""

import shutil
from contextlib import ExitStack

import pytest

from gpuscale.alerts.alert_settings import FellOffBus
from gpuscale.alerts.config import duration_seconds
from tests.support.autoscale import DoubleKubelet, KubeletServer, faulted_chain, wait_until
from tests.support.kubeapi import KubeApiDouble

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed"),
    pytest.mark.timeout(240),
]

SYNC_S = 2.0
ALERT_FOR_S = duration_seconds(FellOffBus().for_)
REACT_S = ALERT_FOR_S + 2 * SYNC_S + 1.0  # two syncs, plus the test's polling and requests
FAULT_AT_S = 20  # after the exporter starts: Prometheus and the controller are up by then
TARGET = "default/Deployment/llm"

# hybrid reads demand from the GPUs' utilisation here (the simulated exporter serves no
# serving metrics), judges health on what the exporter serves (a Ready pod whose GPU
# series vanished while its peers' are there is lost; ``missingGraceSeconds: 0`` says so
# at once), and holds three replicas (the bounds), so what moves is the sick pod alone.
CONFIG = """\
apiVersion: gpuscale.io/v1alpha1
kind: GPUScaler
metadata: {name: hybrid, namespace: default}
spec:
  targets:
    - scaleTargetRef: {name: llm}
      minReplicas: 3
      maxReplicas: 3
      metrics: {staleAfterSeconds: 30, stepSeconds: 1}
      policy:
        name: hybrid
        metrics: [DCGM_FI_DEV_GPU_UTIL]
        backlogMetric: null
        perReplica: 60
        smMetric: DCGM_FI_DEV_GPU_UTIL
        smTarget: 1.0
        intervalSeconds: 2
        health: {missingGraceSeconds: 0}
"""


def test_hybrid_replaces_the_pod_on_a_lost_gpu_and_keeps_the_count(tmp_path):
    with ExitStack() as stack:
        api = KubeApiDouble().start()
        stack.callback(api.stop)
        api.create_deployment("llm", replicas=3)
        kubelet_service = DoubleKubelet(api)
        gpus = kubelet_service.assign()
        victim = next(pod for pod, index in gpus.items() if index == 0)
        kubelet = KubeletServer(kubelet_service)
        stack.callback(kubelet.stop)
        faults = (f"gpu-lost@{FAULT_AT_S}:gpu=0",)
        prom, ctl = faulted_chain(
            stack, tmp_path, api, kubelet, CONFIG, gpus=4, faults=faults, sync_s=SYNC_S
        )
        before = {p["metadata"]["name"] for p in api.pods()}
        seen = wait_until(
            lambda: prom.query(f'gpuscale_gpu_up{{pod="{victim}"}} == 0'), FAULT_AT_S + 30
        )
        names = lambda: {p["metadata"]["name"] for p in api.pods()}  # noqa: E731
        gone = wait_until(lambda: victim not in names(), 30)
        assert gone - seen <= REACT_S
        # Only the sick pod went; its ReplicaSet made one more; the count was kept.
        assert before - names() == {victim}
        wait_until(lambda: len([n for n in names() if n.startswith("llm-")]) == 3, 10)
        assert api.get("apps/v1", "deployments", "llm", "default")["spec"]["replicas"] == 3
        [event] = [
            e
            for e in api.store.list(api.store.resource("v1", "events"), "default")
            if e["reason"] == "SickPodReplaced"
        ]
        assert victim in event["message"]
        assert event["type"] == "Warning"
        assert ctl.metric("gpuscale_autoscaler_replacements_total", target=TARGET) == 1
        assert not any(d["remediation"].startswith("dry run") for d in ctl.decisions(TARGET))
