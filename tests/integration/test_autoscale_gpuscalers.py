"""End to end with GPUScaler objects: simulated GPUs -> gpuscale exporter -> real Prometheus
-> ``gpuscale autoscale --watch-gpuscalers`` (a process) -> the API double with the CRD.

A GPUScaler is created, changed and deleted while the load changes; its status and
conditions follow; the deleted one's target keeps its replicas. An HPA on the same
Deployment keeps the controller off its /scale.
"""

import shutil
import time
from pathlib import Path

import pytest

from gpuscale.control.crd import manifest
from tests.support.autoscale import QUICK_LEASE, Autoscaler, SimChain, wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed"),
    pytest.mark.timeout(240),
]

SYNC_S = 2.0
GV, PLURAL = "gpuscale.io/v1alpha1", "gpuscalers"


def gpuscaler(max_replicas: int) -> dict:
    target = {
        "scaleTargetRef": {"name": "llm"},
        "minReplicas": 2,
        "maxReplicas": max_replicas,
        "policy": {"name": "hpa", "targetAverageValue": 50, "downscaleStabilizationSeconds": 0},
        "metrics": {"staleAfterSeconds": 10, "stepSeconds": 1},
    }
    return {
        "apiVersion": GV,
        "kind": "GPUScaler",
        "metadata": {"name": "llm"},
        "spec": {"targets": [target]},
    }


class Rig(SimChain):
    """The chain with the GPUScaler CRD installed, and the controller watching GPUScalers."""

    def __init__(self, tmp: Path) -> None:
        self.ctl: Autoscaler | None = None
        super().__init__(tmp, lambda api: api.install_crd(manifest()))

    def autoscaler(self) -> Autoscaler:
        assert self.prom is not None
        self.ctl = Autoscaler(
            self.tmp,
            None,
            self.kubeconfig,
            self.prom.url,
            "--watch-gpuscalers",
            "--sync-period",
            str(SYNC_S),
            *QUICK_LEASE,
        )
        return self.ctl

    def status(self) -> dict:
        obj = self.api.get(GV, PLURAL, "llm", "default")
        return dict((obj or {}).get("status") or {})

    def condition(self, kind: str) -> dict:
        found = [c for c in self.status().get("conditions", []) if c["type"] == kind]
        return found[0] if found else {}

    def stop(self, *first: Autoscaler) -> None:
        super().stop(*first, *([self.ctl] if self.ctl else []))


@pytest.fixture
def rig(tmp_path):
    made = Rig(tmp_path)
    yield made
    made.stop()


def test_create_update_delete_a_gpuscaler_while_load_changes(rig):
    wait_until(lambda: (rig.avg_util() or 0) > 0, 30)  # the pods' GPUs are scraped
    ctl = rig.autoscaler()
    # Created after the controller started: the watch brings it in.
    rig.api.create_object(GV, PLURAL, gpuscaler(8), "default")
    wait_until(lambda: rig.condition("Ready").get("status") == "True", 30)
    status = rig.status()
    assert (status["observedGeneration"], status["currentReplicas"]) == (1, 2)
    assert status["desiredReplicas"] == 2  # 20 % against 50 %: minReplicas
    assert rig.condition("ScalingLimited")["reason"] == "TooFewReplicas"

    # The load rises: replicas and the status follow.
    rig.set_load(0.9)
    wait_until(lambda: rig.replicas() >= 4, 40)
    wait_until(lambda: (rig.status().get("desiredReplicas") or 0) >= 4, 10)
    assert rig.status()["lastScaleTime"]
    assert rig.condition("AbleToScale")["status"] == "True"
    assert rig.condition("MetricsHealthy")["status"] == "True"

    # A spec change (maxReplicas 3) takes effect on the next syncs: capped, and said so.
    rig.api.patch_object(GV, PLURAL, "llm", "default", {"spec": gpuscaler(3)["spec"]})
    wait_until(lambda: rig.status().get("observedGeneration") == 2, 20)
    wait_until(lambda: rig.replicas() == 3, 20)
    wait_until(lambda: rig.condition("ScalingLimited").get("reason") == "TooManyReplicas", 10)

    # Deleted: its loop stops and the replicas stay where they are, though the load drops.
    rig.api.delete_object(GV, PLURAL, "llm", "default")
    wait_until(lambda: any("its GPUScaler is gone" in r.get("msg", "") for r in ctl.records()), 20)
    writes = rig.api.count("PUT", "/apis/apps/v1/namespaces/default/deployments/llm/scale")
    rig.set_load(0.1)
    wait_until(lambda: (rig.avg_util() or 100) < 50, 30)
    time.sleep(3 * SYNC_S)
    assert rig.replicas() == 3
    assert rig.api.count("PUT", "/apis/apps/v1/namespaces/default/deployments/llm/scale") == writes


def test_an_hpa_on_the_same_deployment_keeps_gpuscale_off_its_scale(rig):
    hpa = {
        "metadata": {"name": "llm-hpa"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm"},
            "minReplicas": 1,
            "maxReplicas": 4,
        },
    }
    rig.api.create_object("autoscaling/v2", "horizontalpodautoscalers", hpa, "default")
    rig.set_load(0.9)
    wait_until(lambda: (rig.avg_util() or 0) > 50, 30)
    rig.autoscaler()
    rig.api.create_object(GV, PLURAL, gpuscaler(8), "default")
    wait_until(lambda: rig.condition("AbleToScale").get("reason") == "OwnedByOtherAutoscaler", 30)
    time.sleep(3 * SYNC_S)
    assert rig.replicas() == 2
    assert rig.api.count("PUT", "/apis/apps/v1/namespaces/default/deployments/llm/scale") == 0
    assert "HorizontalPodAutoscaler default/llm-hpa" in rig.condition("AbleToScale")["message"]
    warnings = [
        e
        for e in rig.api.store.list(rig.api.store.resource("v1", "events"), "default")
        if e["reason"] == "OwnedByOtherAutoscaler"
    ]
    assert len(warnings) == 1
    assert warnings[0]["type"] == "Warning"
