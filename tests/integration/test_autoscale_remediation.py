"""Remediation end to end: a simulated GPU holding a pod falls off the bus (XID 79); within
two sync periods of Prometheus seeing it the pod is deleted in the API double and the Event
names the GPU; a workload with only minReplicas Ready pods loses nothing."""

import shutil
from contextlib import ExitStack

import pytest

from tests.support.autoscale import DoubleKubelet, KubeletServer, faulted_chain, wait_until
from tests.support.kubeapi import KubeApiDouble

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed"),
    pytest.mark.timeout(180),
]

SYNC_S = 2.0
REACT_S = 2 * SYNC_S + 1.0  # as in test_autoscale_e2e: two syncs, plus polling and requests
FAULT_AT_S = 15  # after the exporter starts: Prometheus and the controller are up by then

CONFIG = """\
apiVersion: gpuscale.io/v1alpha1
kind: GPUScaler
metadata: {name: heal, namespace: default}
spec:
  targets:
    - scaleTargetRef: {name: llm}
      minReplicas: 2
      maxReplicas: 3
      policy: {name: static, replicas: 3}
      remediate: true
    - scaleTargetRef: {name: small}
      minReplicas: 2
      maxReplicas: 2
      policy: {name: static, replicas: 2}
      remediate: true
"""


def test_pod_on_a_gpu_off_the_bus_is_replaced_but_never_below_min(tmp_path):
    with ExitStack() as stack:
        run(tmp_path, stack)


def run(tmp_path, stack: ExitStack) -> None:
    api = KubeApiDouble().start()
    stack.callback(api.stop)
    api.create_deployment("llm", replicas=3)
    kubelet_service = DoubleKubelet(api)
    kubelet_service.assign()  # the three llm pods hold GPUs 0-2 ...
    api.create_deployment("small", replicas=2)
    gpus = kubelet_service.assign()  # ... and the two small pods GPUs 3-4
    on_gpu = {index: pod for pod, index in gpus.items()}
    victim, spared = on_gpu[0], on_gpu[3]
    assert victim.startswith("llm-")
    assert spared.startswith("small-")
    kubelet = KubeletServer(kubelet_service)
    stack.callback(kubelet.stop)
    faults = (f"xid@{FAULT_AT_S}:code=79:gpu=0", f"xid@{FAULT_AT_S}:code=79:gpu=3")
    prom, ctl = faulted_chain(
        stack, tmp_path, api, kubelet, CONFIG, gpus=8, faults=faults, sync_s=SYNC_S
    )
    # XID 79 takes the GPU off the bus: its fields vanish and gpuscale_gpu_up says 0
    query = f'gpuscale_gpu_up{{pod="{victim}"}} == 0'
    seen = wait_until(lambda: prom.query(query), FAULT_AT_S + 30)
    names = lambda: {p["metadata"]["name"] for p in api.pods()}  # noqa: E731
    gone = wait_until(lambda: victim not in names(), 30)
    assert gone - seen <= REACT_S
    uuid = prom.query(query)[0]["metric"]["UUID"]
    events = api.store.list(api.store.resource("v1", "events"), "default")
    [deleted] = [e for e in events if e["reason"] == "UnhealthyGPUPodDeleted"]
    assert deleted["involvedObject"]["name"] == "llm"
    assert uuid in deleted["message"]
    assert "gpuscale_gpu_up == 0" in deleted["message"]
    assert victim in deleted["message"]
    # The double's controller replaces it: llm is back to 3 pods, on healthy GPUs.
    wait_until(lambda: len([n for n in names() if n.startswith("llm-")]) == 3, 10)

    # small's sick GPU holds one of its 2 pods with minReplicas 2: it is kept, and
    # the controller says why, for as long as we watch (three more syncs).
    wait_until(lambda: prom.query(f'gpuscale_gpu_up{{pod="{spared}"}} == 0'), 10)
    blocked = lambda: [  # noqa: E731
        d
        for d in ctl.decisions("default/Deployment/small")
        if d["remediation"].startswith("blocked:")
    ]
    wait_until(lambda: len(blocked()) >= 3, 6 * SYNC_S)
    assert spared in names()
    assert "leave 1 Ready < minReplicas 2" in blocked()[-1]["remediation"]
    assert (
        len(
            [
                e
                for e in api.store.list(api.store.resource("v1", "events"), "default")
                if e["reason"] == "UnhealthyGPUPodDeleted"
            ]
        )
        == 1
    )
    counts = [
        ctl.metric(
            "gpuscale_autoscaler_remediations_total",
            evidence=kind,
            target="default/Deployment/llm",
        )
        for kind in ("gpu_down", "xid", "dbe")
    ]
    assert sum(c or 0 for c in counts) == 1
