"""The API double answers with the Kubernetes API's JSON shapes and status codes
(checked against the API reference: meta/v1 Status, autoscaling/v1 Scale, discovery
lists, MicroTime), and its workload controller behaves like the real ones."""

import httpx
import pytest

from tests.support.kubeapi import KubeApiDouble, ManualClock

DEPLOY = "/apis/apps/v1/namespaces/default/deployments/web"
PODS = "/api/v1/namespaces/default/pods"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
MERGE = {"Content-Type": "application/merge-patch+json"}


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def api(clock):
    with KubeApiDouble(clock=clock, ready_after_s=10.0) as double:
        yield double


@pytest.fixture
def http(api):
    with httpx.Client(base_url=api.url, timeout=5.0) as c:
        yield c


def test_discovery_documents(api, http):
    api.register_scalable_kind("serving.example.io", "v1", "InferenceService", "inferenceservices")
    assert http.get("/api").json()["kind"] == "APIVersions"
    assert http.get("/api").json()["versions"] == ["v1"]
    groups = http.get("/apis").json()
    assert groups["kind"] == "APIGroupList"
    names = {g["name"]: g for g in groups["groups"]}
    assert set(names) == {"apps", "autoscaling", "coordination.k8s.io", "serving.example.io"}
    assert names["apps"]["preferredVersion"] == {"groupVersion": "apps/v1", "version": "v1"}
    apps = http.get("/apis/apps/v1").json()
    assert (apps["kind"], apps["groupVersion"]) == ("APIResourceList", "apps/v1")
    by_name = {r["name"]: r for r in apps["resources"]}
    assert by_name["deployments"]["kind"] == "Deployment"
    assert by_name["deployments"]["namespaced"] is True
    assert by_name["deployments/scale"] | {} == {
        "name": "deployments/scale",
        "singularName": "",
        "namespaced": True,
        "group": "autoscaling",
        "version": "v1",
        "kind": "Scale",
        "verbs": ["get", "patch", "update"],
    }
    custom = http.get("/apis/serving.example.io/v1").json()
    assert {r["name"] for r in custom["resources"]} == {
        "inferenceservices",
        "inferenceservices/scale",
    }
    version = http.get("/version").json()
    assert version["major"] == "1"
    assert version["gitVersion"].startswith("v1.")


def test_scale_subresource_shape(api, http):
    api.create_deployment("web", replicas=2, labels={"app": "web", "tier": "gpu"})
    scale = http.get(DEPLOY + "/scale").json()
    deploy = http.get(DEPLOY).json()
    assert scale["kind"] == "Scale"
    assert scale["apiVersion"] == "autoscaling/v1"
    assert scale["spec"] == {"replicas": 2}
    assert scale["status"] == {"replicas": 2, "selector": "app=web,tier=gpu"}
    assert scale["metadata"]["resourceVersion"] == deploy["metadata"]["resourceVersion"]
    assert scale["metadata"]["uid"] == deploy["metadata"]["uid"]


def test_scale_patch_and_validation(api, http):
    api.create_deployment("web", replicas=1)
    r = http.patch(DEPLOY + "/scale", json={"spec": {"replicas": 3}}, headers=MERGE)
    assert r.status_code == 200
    assert r.json()["spec"]["replicas"] == 3
    assert http.get(DEPLOY).json()["spec"]["replicas"] == 3
    r = http.patch(DEPLOY + "/scale", json={"spec": {"replicas": -1}}, headers=MERGE)
    assert r.status_code == 422
    assert r.json()["reason"] == "Invalid"
    assert "spec.replicas: Invalid value: -1" in r.json()["message"]


def test_stale_resource_version_is_a_conflict_status(api, http):
    api.create_deployment("web", replicas=1)
    deploy = http.get(DEPLOY).json()
    http.patch(DEPLOY, json={"metadata": {"labels": {"x": "1"}}}, headers=MERGE)
    r = http.put(DEPLOY, json=deploy)
    assert r.status_code == 409
    assert r.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'Operation cannot be fulfilled on deployments.apps "web": the object has '
        "been modified; please apply your changes to the latest version and try again",
        "reason": "Conflict",
        "details": {"name": "web", "group": "apps", "kind": "deployments"},
        "code": 409,
    }
    scale = http.get(DEPLOY + "/scale").json()
    http.patch(DEPLOY, json={"metadata": {"labels": {"x": "2"}}}, headers=MERGE)
    assert http.put(DEPLOY + "/scale", json=scale).status_code == 409


def test_not_found_and_already_exists(api, http):
    r = http.get(DEPLOY)
    assert r.status_code == 404
    assert (r.json()["reason"], r.json()["message"]) == (
        "NotFound",
        'deployments.apps "web" not found',
    )
    body = {"metadata": {"name": "l"}, "spec": {}}
    assert http.post(LEASES, json=body).status_code == 201
    r = http.post(LEASES, json=body)
    assert r.status_code == 409
    assert r.json()["reason"] == "AlreadyExists"
    assert r.json()["message"] == 'leases.coordination.k8s.io "l" already exists'


def test_patch_media_types(api, http):
    api.create_deployment("web", replicas=1, annotations={"a": "1", "b": "2"})
    r = http.patch(DEPLOY, json={"metadata": {"annotations": {"a": None}}}, headers=MERGE)
    assert r.json()["metadata"]["annotations"] == {"b": "2"}  # null deletes (RFC 7386)
    ops = [{"op": "replace", "path": "/spec/replicas", "value": 2}]
    r = http.patch(DEPLOY, json=ops, headers={"Content-Type": "application/json-patch+json"})
    assert r.json()["spec"]["replicas"] == 2
    r = http.patch(
        DEPLOY, json={"spec": {}}, headers={"Content-Type": "application/json-patch+json"}
    )
    assert r.status_code == 422
    api.register_scalable_kind("serving.example.io", "v1", "InferenceService", "inferenceservices")
    api.create_object(
        "serving.example.io/v1", "inferenceservices", {"metadata": {"name": "i"}}, "default"
    )
    path = "/apis/serving.example.io/v1/namespaces/default/inferenceservices/i"
    smp = {"Content-Type": "application/strategic-merge-patch+json"}
    r = http.patch(path, json={"spec": {"replicas": 2}}, headers=smp)
    assert r.status_code == 415  # custom resources take no strategic merge patch
    assert r.json()["reason"] == "UnsupportedMediaType"


def test_generation_moves_with_the_spec_only(api, http):
    api.create_deployment("web", replicas=1)
    assert http.get(DEPLOY).json()["metadata"]["generation"] == 1
    http.patch(DEPLOY, json={"metadata": {"labels": {"x": "1"}}}, headers=MERGE)
    assert http.get(DEPLOY).json()["metadata"]["generation"] == 1
    http.patch(DEPLOY + "/scale", json={"spec": {"replicas": 2}}, headers=MERGE)
    deploy = http.get(DEPLOY).json()
    assert deploy["metadata"]["generation"] == 2
    assert deploy["status"]["observedGeneration"] == 2


def test_pod_list_shape_and_selectors(api, http, clock):
    api.create_deployment("web", replicas=3)
    api.create_deployment("db", replicas=1, labels={"app": "db"})
    r = http.get(PODS, params={"labelSelector": "app=web"}).json()
    assert r["kind"] == "PodList"
    assert r["apiVersion"] == "v1"
    assert int(r["metadata"]["resourceVersion"]) > 0
    assert len(r["items"]) == 3
    assert "kind" not in r["items"][0]  # items of a list carry no kind/apiVersion
    pod = r["items"][0]
    assert pod["metadata"]["name"].startswith("web-")
    assert len(pod["metadata"]["name"].split("-")[-1]) == 5
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
    assert pod["status"]["phase"] == "Running"
    sel = http.get(PODS, params={"labelSelector": "app in (web,db),app!=db"}).json()
    assert len(sel["items"]) == 3
    on_a = http.get(PODS, params={"fieldSelector": "spec.nodeName=node-a"}).json()["items"]
    assert on_a
    assert all(p["spec"]["nodeName"] == "node-a" for p in on_a)
    r = http.get(PODS, params={"fieldSelector": "spec.priorityClassName=x"})
    assert r.status_code == 400
    assert "field label not supported" in r.json()["message"]


def test_readiness_after_a_per_workload_delay(api, clock):
    api.create_deployment("fast", replicas=1, ready_after_s=2.0, labels={"app": "fast"})
    api.create_deployment("slow", replicas=1, labels={"app": "slow"})  # the double's 10 s
    clock.advance(2.0)
    assert len(api.ready_pods(selector="app=fast")) == 1
    assert api.ready_pods(selector="app=slow") == []
    clock.advance(8.0)
    pod = api.ready_pods(selector="app=slow")[0]
    ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
    assert ready["lastTransitionTime"] == "2026-01-01T00:00:10Z"


def test_graceful_pod_deletion_and_replacement(clock):
    with (
        KubeApiDouble(clock=clock, terminate_after_s=30.0) as api,
        httpx.Client(base_url=api.url) as http,
    ):
        api.create_deployment("web", replicas=2)
        victim = api.pods()[0]["metadata"]["name"]
        r = http.delete(f"{PODS}/{victim}")
        assert r.status_code == 200
        assert r.json()["metadata"]["deletionTimestamp"] == "2026-01-01T00:00:30Z"
        names = {p["metadata"]["name"] for p in api.pods()}
        assert victim in names
        assert len(names) == 3  # replacement created at once, victim still terminating
        clock.advance(30.0)
        assert victim not in {p["metadata"]["name"] for p in api.pods()}
        assert len(api.pods()) == 2


def test_statefulset_ordered_ready(clock):
    with KubeApiDouble(clock=clock, terminate_after_s=3.0) as api:
        api.create_statefulset("db", replicas=3, ready_after_s=5.0)
        assert [p["metadata"]["name"] for p in api.pods()] == ["db-0"]
        clock.advance(5.0)
        assert [p["metadata"]["name"] for p in api.pods()] == ["db-0", "db-1"]
        clock.advance(5.0)
        assert len(api.pods()) == 3
        api.patch_object("apps/v1", "statefulsets", "db", "default", {"spec": {"replicas": 1}})

        def live():
            return [
                p["metadata"]["name"]
                for p in api.pods()
                if "deletionTimestamp" not in p["metadata"]
            ]

        assert live() == ["db-0", "db-1"]  # highest ordinal first, one at a time
        clock.advance(3.0)  # db-2's grace period ends; then db-1 starts terminating
        assert live() == ["db-0"]
        clock.advance(3.0)
        assert [p["metadata"]["name"] for p in api.pods()] == ["db-0"]


def test_statefulset_parallel(api):
    api.create_statefulset("db", replicas=3, parallel=True)
    assert [p["metadata"]["name"] for p in api.pods()] == ["db-0", "db-1", "db-2"]


def test_unschedulable_pods_wait_for_a_node(clock):
    with KubeApiDouble(clock=clock, nodes=()) as api:
        api.create_deployment("web", replicas=1)
        pod = api.pods()[0]
        assert pod["status"]["phase"] == "Pending"
        assert "nodeName" not in pod["spec"]
        api.add_node("late")
        assert api.pods()[0]["spec"]["nodeName"] == "late"


def test_microtime_must_have_six_fractional_digits(api, http):
    def lease(name, renew):
        return {"metadata": {"name": name}, "spec": {"holderIdentity": "a", "renewTime": renew}}

    r = http.post(LEASES, json=lease("a", "2026-01-01T00:00:00+00:00"))
    assert r.status_code == 400
    assert "2006-01-02T15:04:05.000000Z07:00" in r.json()["message"]
    assert http.post(LEASES, json=lease("b", "2026-01-01T00:00:00.000000Z")).status_code == 201


def test_injected_forbidden_has_the_authorizer_message(api, http):
    api.create_deployment("web", replicas=1)
    api.fail_next(403, method="PATCH", path=DEPLOY + "/scale")
    r = http.patch(DEPLOY + "/scale", json={"spec": {"replicas": 2}}, headers=MERGE)
    assert r.status_code == 403
    assert r.json()["reason"] == "Forbidden"
    assert r.json()["message"] == (
        f'deployments.apps "web" is forbidden: User "{api.user}" cannot patch resource '
        '"deployments/scale" in API group "apps" in the namespace "default"'
    )
    assert http.patch(DEPLOY + "/scale", json={"spec": {"replicas": 2}}, headers=MERGE).is_success
    api.fail_next(403, method="GET", path="/api/v1/nodes")
    r = http.get("/api/v1/nodes")
    assert r.json()["message"] == (
        f'nodes is forbidden: User "{api.user}" cannot list resource "nodes" '
        'in API group "" at the cluster scope'
    )


def test_injected_server_errors_and_request_counts(api, http):
    api.create_deployment("web", replicas=1)
    api.fail_next(503, 2, method="GET", path=DEPLOY)
    codes = [http.get(DEPLOY).status_code for _ in range(3)]
    assert codes == [503, 503, 200]
    assert api.count("GET", DEPLOY) == 3
    # a watch of one object (not a collection) is not modelled
    assert http.get(DEPLOY, params={"watch": "true"}).status_code == 400


def test_bearer_token_required(clock):
    with KubeApiDouble(clock=clock, token="t") as api:
        r = httpx.get(api.url + "/api/v1/nodes")
        assert r.status_code == 401
        assert r.json()["reason"] == "Unauthorized"
        ok = httpx.get(api.url + "/api/v1/nodes", headers={"Authorization": "Bearer t"})
        assert ok.json()["kind"] == "NodeList"


def test_event_validation(api, http):
    event = {
        "metadata": {"name": "e1"},
        "involvedObject": {"kind": "Deployment", "name": "web", "namespace": "other"},
        "reason": "X",
        "type": "Normal",
    }
    r = http.post("/api/v1/namespaces/default/events", json=event)
    assert r.status_code == 422
    assert "involvedObject.namespace" in r.json()["message"]
    event["involvedObject"]["namespace"] = "default"
    assert http.post("/api/v1/namespaces/default/events", json=event).status_code == 201


def test_nan_in_a_body_is_a_bad_request(api, http):
    api.create_deployment("web", replicas=1)
    r = http.patch(DEPLOY, content=b'{"metadata": {"labels": {"x": NaN}}}', headers=MERGE)
    assert r.status_code == 400
    assert r.json()["reason"] == "BadRequest"


def test_a_patched_pod_still_turns_ready_and_its_deletion_cost_ranks_it_first(api, http, clock):
    # A merge patch replaces the stored pod: the double's controller follows the new
    # object (readiness timer, scale-in order), as the real ones watch the API.
    api.create_deployment("web", replicas=3)
    names = sorted(p["metadata"]["name"] for p in api.pods())
    # created together, one per node: unmarked, the tie goes to the smallest name
    marked = names[-1]
    cost = {"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "-1"}}}
    assert http.patch(f"{PODS}/{marked}", json=cost, headers=MERGE).status_code == 200
    clock.advance(10.0)
    assert len(api.ready_pods()) == 3
    scale = http.get(f"{DEPLOY}/scale").json()
    scale["spec"]["replicas"] = 2
    assert http.put(f"{DEPLOY}/scale", json=scale).status_code == 200
    left = sorted(p["metadata"]["name"] for p in api.pods())
    assert left == sorted(set(names) - {marked})
