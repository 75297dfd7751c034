"""GPUScaler objects in the cluster: reconciled, validated like a file, status written, one owner.

The real controller, informer and actuator run over the API double (the CRD installed
from ``control.crd``) on a manual clock, with the in-process MetricStore as the source.
``informer.relist()`` stands in for the watch between syncs (the watch itself is tested
in test_kubeapi_watch.py), so each sync sees exactly the objects the test made.
"""

import copy
import logging
import shutil
import subprocess

import numpy as np
import pytest

from gpuscale.control.controller import Controller
from gpuscale.control.crd import manifest
from gpuscale.control.informer import Informer
from gpuscale.control.kubecall import NotLeaderError
from gpuscale.control.owners import OtherAutoscalers
from gpuscale.control.scalers import ClusterScalers, collection_path
from gpuscale.control.seams import Settings
from tests.support.control import events, feed, pod_names, replicas, saved_state

UTIL = "DCGM_FI_DEV_GPU_UTIL"
GV, PLURAL = "gpuscale.io/v1alpha1", "gpuscalers"


def scaler(name: str = "web", target: str = "web", **over) -> dict:
    spec = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
        "minReplicas": 1,
        "maxReplicas": 6,
        "policy": {"name": "hpa", "targetAverageValue": 50},
        **over,
    }
    return {
        "apiVersion": GV,
        "kind": "GPUScaler",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"targets": [spec]},
    }


class Cluster:
    """The controller in cluster mode over the double; ``sync`` relists, then syncs."""

    def __init__(self, kapi, kact, kclock, store) -> None:
        kapi.install_crd(manifest())
        self.api, self.clock, self.store = kapi, kclock, store
        self.informer = Informer(kact.call, collection_path(None))
        self.catalog = ClusterScalers(self.informer, kact)
        self.controller = Controller(
            [],
            store,
            kact,
            settings=Settings(sync_period_s=15.0, workers=1),
            clock=kclock,
            catalog=self.catalog,
            owners=OtherAutoscalers(kact.call),
        )

    def sync(self, load: float | None = None, name: str = "web"):
        if load is not None:
            feed(self.store, self.clock() - 1, UTIL, dict.fromkeys(pod_names(self.api, name), load))
        self.informer.relist()
        outcomes = self.controller.sync()
        self.clock.advance(15)
        return outcomes

    def status(self, name: str = "web") -> dict:
        return self.api.get(GV, PLURAL, name, "default").get("status") or {}

    def condition(self, kind: str, name: str = "web") -> dict:
        return next(c for c in self.status(name)["conditions"] if c["type"] == kind)

    def writes(self, path: str) -> int:
        return self.api.count("PATCH", path) + self.api.count("PUT", path)


@pytest.fixture
def cluster(kapi, kact, kclock, store) -> Cluster:
    return Cluster(kapi, kact, kclock, store)


STATUS = "/apis/gpuscale.io/v1alpha1/namespaces/default/gpuscalers/web/status"
SCALE = "/apis/apps/v1/namespaces/default/deployments/web/scale"


def test_create_update_delete_a_gpuscaler_while_load_changes(cluster, kapi, kclock):
    kapi.create_deployment("web", replicas=2)
    kapi.create_object(GV, PLURAL, scaler(), "default")
    [out] = cluster.sync(load=100.0)
    # hpa: ceil(2 * 100 / 50) = 4
    assert (out.current, out.replicas) == (2, 4)
    assert replicas(kapi) == 4
    status = cluster.status()
    assert (status["observedGeneration"], status["currentReplicas"]) == (1, 2)
    assert status["desiredReplicas"] == 4
    assert status["lastScaleTime"] == "2026-01-01T00:00:00Z"
    assert status["targets"][0]["lastDecision"]["replicas"] == 4
    assert cluster.condition("AbleToScale")["reason"] == "SucceededRescale"
    assert cluster.condition("MetricsHealthy")["status"] == "True"
    ready = cluster.condition("Ready")
    assert ready["status"] == "True"

    # A spec change (maxReplicas 5) takes effect on the next sync: generation 2, capped.
    obj = copy.deepcopy(kapi.get(GV, PLURAL, "web", "default"))
    obj["spec"]["targets"][0]["maxReplicas"] = 5
    kapi.patch_object(GV, PLURAL, "web", "default", {"spec": obj["spec"]})
    [out] = cluster.sync(load=100.0)  # 4 pods at 100 % want 8
    assert (out.current, out.replicas) == (4, 5)
    status = cluster.status()
    assert status["observedGeneration"] == 2
    limited = cluster.condition("ScalingLimited")
    assert (limited["status"], limited["reason"]) == ("True", "TooManyReplicas")
    # Ready stayed True: its transition time is the first sync's, not this one's.
    assert cluster.condition("Ready")["lastTransitionTime"] == ready["lastTransitionTime"]
    assert limited["lastTransitionTime"] == "2026-01-01T00:00:15Z"

    # Load gone and metrics missing: the hold shows in the conditions.
    [out] = cluster.sync()
    kclock.advance(120)  # past staleAfterSeconds: the last samples are stale
    [out] = cluster.sync()
    assert out.held is not None
    healthy = cluster.condition("MetricsHealthy")
    assert healthy["status"] == "False"
    assert cluster.condition("Ready")["status"] == "False"

    # Deleted: the loop stops for the target and leaves its replicas where they are.
    scale_writes = kapi.count("PUT", SCALE)
    kapi.delete_object(GV, PLURAL, "web", "default")
    assert cluster.sync(load=5.0) == []
    cluster.sync(load=5.0)
    assert replicas(kapi) == 5
    assert kapi.count("PUT", SCALE) == scale_writes


def test_a_policy_kind_change_starts_from_the_new_policys_first_state(cluster, kapi, caplog):
    caplog.set_level(logging.INFO, logger="gpuscale.control.controller")
    kapi.create_deployment("web", replicas=2)
    kapi.create_object(GV, PLURAL, scaler(), "default")
    cluster.sync(load=100.0)
    patch = scaler(policy={"name": "static", "replicas": 3})
    kapi.patch_object(GV, PLURAL, "web", "default", {"spec": patch["spec"]})
    [out] = cluster.sync(load=100.0)
    assert (out.policy, out.replicas) == ("static", 3)
    assert "policy changed from hpa to static" in caplog.text
    assert "saved policy state ignored" not in caplog.text
    saved = saved_state(kapi, "web")
    assert saved is not None
    assert saved["policy"] == "static"


def test_an_invalid_object_gets_a_condition_and_one_warning_and_the_others_run(cluster, kapi):
    kapi.create_deployment("web", replicas=2)
    kapi.create_deployment("api", replicas=1)
    bad = scaler("broken", "api", policy={"name": "hpa", "targetAverageValue": -1})
    kapi.create_object(GV, PLURAL, bad, "default")
    kapi.create_object(GV, PLURAL, scaler(), "default")
    for _ in range(2):
        outcomes = cluster.sync(load=100.0)
    assert [o.target for o in outcomes] == ["default/Deployment/web"]
    assert replicas(kapi) == 6  # 2 -> 4 -> 8 wanted, capped at maxReplicas 6
    active = cluster.condition("ScalingActive", "broken")
    assert (active["status"], active["reason"]) == ("False", "InvalidSpec")
    assert "GPUScaler default/broken spec.targets[0].policy.targetAverageValue" in active["message"]
    warned = [e for e in events(kapi, "InvalidSpec")]
    assert len(warned) == 1  # once per generation, not per sync
    assert warned[0]["type"] == "Warning"
    assert warned[0]["involvedObject"]["kind"] == "GPUScaler"
    assert "targetAverageValue" in warned[0]["message"]


def test_a_second_gpuscaler_on_the_same_target_is_refused_until_the_first_goes(
    cluster, kapi, kclock
):
    kapi.create_deployment("web", replicas=2)
    kapi.create_object(GV, PLURAL, scaler("zeta"), "default")
    kclock.advance(1)  # the older object keeps the target, whatever the names
    kapi.create_object(GV, PLURAL, scaler("again"), "default")
    cluster.sync(load=100.0)
    assert [rt.owner for rt in cluster.controller.targets] == ["default/zeta"]
    message = cluster.condition("ScalingActive", "again")["message"]
    assert "already scaled by GPUScaler default/zeta" in message
    assert len(events(kapi, "InvalidSpec")) == 1
    kapi.delete_object(GV, PLURAL, "zeta", "default")
    cluster.sync(load=100.0)
    assert [rt.owner for rt in cluster.controller.targets] == ["default/again"]
    assert cluster.condition("ScalingActive", "again")["status"] == "True"


def test_status_is_written_only_when_it_changes(cluster, kapi):
    kapi.create_deployment("web", replicas=4)
    kapi.create_object(GV, PLURAL, scaler(), "default")
    cluster.sync(load=50.0)  # 4 pods at the target: no change
    cluster.sync(load=50.0)
    cluster.sync(load=50.0)
    assert cluster.writes(STATUS) == 1


def test_status_writes_pass_the_leader_guard(cluster, kapi, kact):
    kapi.create_deployment("web", replicas=4)
    kapi.create_object(GV, PLURAL, scaler(), "default")

    def refuse(what: str) -> None:
        raise NotLeaderError(f"{what} not sent")

    kact.guard_writes(refuse)
    cluster.sync(load=50.0)
    assert cluster.writes(STATUS) == 0
    kact.guard_writes(None)
    cluster.sync(load=50.0)
    assert cluster.writes(STATUS) == 1


def hpa(name: str, target: str) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "minReplicas": 1,
            "maxReplicas": 3,
        },
    }


def test_an_hpa_on_the_same_deployment_keeps_gpuscale_off_its_scale(cluster, kapi):
    kapi.create_deployment("web", replicas=2)
    kapi.create_object(
        "autoscaling/v2", "horizontalpodautoscalers", hpa("web-hpa", "web"), "default"
    )
    kapi.create_object("autoscaling/v2", "horizontalpodautoscalers", hpa("other", "api"), "default")
    kapi.create_object(GV, PLURAL, scaler(), "default")
    for _ in range(3):
        [out] = cluster.sync(load=100.0)
    assert out.owned_by == "HorizontalPodAutoscaler default/web-hpa"
    assert (out.current, out.replicas) == (2, None)
    assert kapi.count("PUT", SCALE) == 0
    assert replicas(kapi) == 2
    able = cluster.condition("AbleToScale")
    assert (able["status"], able["reason"]) == ("False", "OwnedByOtherAutoscaler")
    assert "HorizontalPodAutoscaler default/web-hpa" in able["message"]
    [warning] = events(kapi, "OwnedByOtherAutoscaler")  # one per episode
    assert warning["type"] == "Warning"
    assert "HorizontalPodAutoscaler default/web-hpa" in warning["message"]
    # one listing per namespace per sync; KEDA is not served: never listed
    assert (
        kapi.count("GET", "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers") == 3
    )
    assert kapi.count("GET", "/apis/keda.sh/v1alpha1/namespaces/default/scaledobjects") == 0

    kapi.delete_object("autoscaling/v2", "horizontalpodautoscalers", "web-hpa", "default")
    [out] = cluster.sync(load=100.0)
    assert (out.owned_by, out.replicas) == ("", 4)
    assert cluster.condition("AbleToScale")["status"] == "True"


def test_a_keda_scaledobject_is_found_when_keda_is_served(cluster, kapi):
    kapi.serve_keda()
    kapi.create_deployment("web", replicas=2)
    so = {"metadata": {"name": "web-so"}, "spec": {"scaleTargetRef": {"name": "web"}}}
    kapi.create_object("keda.sh/v1alpha1", "scaledobjects", so, "default")
    kapi.create_object(GV, PLURAL, scaler(), "default")
    [out] = cluster.sync(load=100.0)
    # KEDA's scaleTargetRef defaults to an apps/v1 Deployment
    assert out.owned_by == "ScaledObject default/web-so"
    assert kapi.count("PUT", SCALE) == 0


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="Debian's kubectl is not installed")
def test_kubectl_get_prints_the_crds_columns(cluster, kapi, tmp_path):
    kapi.create_deployment("web", replicas=2)
    kapi.create_object(GV, PLURAL, scaler(), "default")
    cluster.sync(load=100.0)
    config = kapi.write_kubeconfig(tmp_path / "kubeconfig")
    result = subprocess.run(
        [shutil.which("kubectl") or "kubectl", "--kubeconfig", str(config), "get", "gpuscalers"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"HOME": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    header, row = result.stdout.splitlines()
    assert header.split() == [
        "NAME",
        "TARGET",
        "POLICY",
        "MIN",
        "MAX",
        "CURRENT",
        "DESIRED",
        "READY",
        "AGE",
    ]
    # created at the double's t0, printed 15 s later
    assert row.split() == ["web", "web", "hpa", "1", "6", "2", "4", "True", "15s"]


def test_a_forecasting_policys_forecast_is_in_the_status(cluster, kapi, kclock, store):
    kapi.create_deployment("web", replicas=2)
    kapi.create_object(
        GV, PLURAL, scaler(policy={"name": "predictive", "perReplica": 1}), "default"
    )
    for i in range(40):  # ten minutes of a steady 3 requests in flight and none queued
        at = kclock() - 600 + 15 * i
        for metric, value in (
            ("gpuscale_serving_requests_in_flight", 3.0),
            ("gpuscale_serving_queue_requests", 0.0),
        ):
            store.ingest(at, metric, [{"namespace": "default"}], np.array([value]))
    [out] = cluster.sync()
    assert out.held is None, out.reason
    forecast = cluster.status()["targets"][0]["forecast"]
    assert forecast["model"] in ("seasonal", "trend")
    assert forecast["mean"] == pytest.approx(3.0, abs=0.5)  # a flat series forecasts itself
    assert forecast["upper"] >= forecast["mean"]
    assert forecast["horizonSeconds"] > 0
    # a policy without a forecast reports none
    kapi.create_deployment("api", replicas=1)
    kapi.create_object(GV, PLURAL, scaler("api", "api"), "default")
    cluster.sync(load=10.0, name="api")
    assert "forecast" not in cluster.status("api")["targets"][0]
