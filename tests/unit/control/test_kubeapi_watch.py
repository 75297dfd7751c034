"""The API double's watch, status subresource and Table answers, and the informer over them.

These are the API server behaviours the GPUScaler reconcile relies on (Kubernetes API
concepts: "Efficient detection of changes", "Subresources" of CustomResourceDefinitions,
"Receiving resources as Tables"), so they are checked against the double directly.
"""

import json
import threading
import time

import httpx
import pytest

from gpuscale.control.crd import manifest
from gpuscale.control.informer import Informer
from gpuscale.control.scalers import collection_path
from tests.support.kubeapi import KubeApiDouble
from tests.support.kubeapi_store import WATCH_WINDOW
from tests.support.kubeapi_table import human_duration, jsonpath

GV, PLURAL = "gpuscale.io/v1alpha1", "gpuscalers"
COLLECTION = "/apis/gpuscale.io/v1alpha1/namespaces/default/gpuscalers"


def obj(name: str, replicas: int = 2) -> dict:
    target = {
        "scaleTargetRef": {"name": name},
        "maxReplicas": replicas,
        "policy": {"name": "static"},
    }
    return {"metadata": {"name": name}, "spec": {"targets": [target]}, "status": {"x": 1}}


@pytest.fixture
def api(clock):
    with KubeApiDouble(clock=clock) as double:
        double.install_crd(manifest())
        yield double


@pytest.fixture
def clock():
    from tests.support.kubeapi import ManualClock

    return ManualClock()


def watch_lines(api: KubeApiDouble, params: dict) -> list[dict]:
    with (
        httpx.Client(base_url=api.url, timeout=10.0) as http,
        http.stream("GET", COLLECTION, params=params) as r,
    ):
        assert r.headers["transfer-encoding"] == "chunked"
        return [json.loads(line) for line in r.iter_lines() if line]


def test_a_watch_streams_added_modified_deleted_from_a_version_and_ends_at_its_timeout(api):
    api.create_object(GV, PLURAL, obj("old"), "default")
    listed = httpx.get(api.url + COLLECTION).json()
    since = listed["metadata"]["resourceVersion"]
    api.create_object(GV, PLURAL, obj("web"), "default")
    api.patch_object(GV, PLURAL, "web", "default", {"spec": obj("web", 3)["spec"]})
    api.delete_object(GV, PLURAL, "web", "default")
    started = time.monotonic()
    events = watch_lines(api, {"watch": "1", "resourceVersion": since, "timeoutSeconds": "1"})
    assert time.monotonic() - started < 10  # ended by the server, not by the client
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "web"),
        ("MODIFIED", "web"),
        ("DELETED", "web"),
    ]
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions)
    assert versions[0] > int(since)


def test_a_watch_without_a_version_starts_with_the_current_objects(api):
    api.create_object(GV, PLURAL, obj("web"), "default")
    events = watch_lines(api, {"watch": "true", "timeoutSeconds": "1"})
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "web")]


def test_a_watch_from_a_compacted_version_answers_410_gone(api):
    api.create_object(GV, PLURAL, obj("web"), "default")
    for i in range(WATCH_WINDOW + 1):
        api.patch_object(GV, PLURAL, "web", "default", {"metadata": {"labels": {"n": str(i)}}})
    [event] = watch_lines(api, {"watch": "1", "resourceVersion": "1001", "timeoutSeconds": "1"})
    assert event["type"] == "ERROR"
    assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")


def test_status_is_written_only_through_its_subresource_and_generation_follows_spec(api):
    created = api.create_object(GV, PLURAL, obj("web"), "default")
    assert "status" not in created  # dropped on create
    assert created["metadata"]["generation"] == 1
    path = f"{COLLECTION}/web/status"
    r = httpx.patch(
        api.url + path,
        json=[{"op": "add", "path": "/status", "value": {"observedGeneration": 1}}],
        headers={"Content-Type": "application/json-patch+json"},
    )
    assert r.status_code == 200
    assert r.json()["metadata"]["generation"] == 1  # a status write bumps no generation
    # a write of the main resource changes spec (generation 2) and ignores status
    body = api.get(GV, PLURAL, "web", "default") | {"status": {"observedGeneration": 9}}
    body = json.loads(json.dumps(body))
    body["spec"]["targets"][0]["maxReplicas"] = 4
    r = httpx.put(api.url + f"{COLLECTION}/web", json=body)
    stored = r.json()
    assert (stored["metadata"]["generation"], stored["status"]) == (2, {"observedGeneration": 1})
    # a status write ignores spec
    stored["spec"]["targets"][0]["maxReplicas"] = 9
    stored["status"] = {"observedGeneration": 2}
    r = httpx.put(api.url + path, json=stored)
    after = api.get(GV, PLURAL, "web", "default")
    assert after["spec"]["targets"][0]["maxReplicas"] == 4
    assert after["status"] == {"observedGeneration": 2}


def test_discovery_lists_the_status_subresource(api):
    listed = httpx.get(api.url + "/apis/gpuscale.io/v1alpha1").json()
    names = {r["name"] for r in listed["resources"]}
    assert names == {"gpuscalers", "gpuscalers/status"}


def test_the_informer_follows_creates_and_deletes_by_watch(api, tmp_path):
    from gpuscale.control.kubernetes import KubeActuator

    actuator = KubeActuator.connect(str(api.write_kubeconfig(tmp_path / "kubeconfig")))
    informer = Informer(actuator.call, collection_path("default"), watch_s=5)
    relists = []
    relist = informer.relist
    informer.relist = lambda: (relists.append(1), relist())[1]
    stop = threading.Event()
    runner = threading.Thread(target=informer.run, args=(stop,), daemon=True)
    runner.start()
    try:
        assert informer.synced.wait(10)
        api.create_object(GV, PLURAL, obj("web"), "default")
        assert wait_for(lambda: [o["metadata"]["name"] for o in informer.objects()] == ["web"])
        api.delete_object(GV, PLURAL, "web", "default")
        assert wait_for(lambda: informer.objects() == [])
        # the changes came by the watch, not by relisting
        assert len(relists) == 1
    finally:
        stop.set()
        runner.join(15)
        actuator.close()


def wait_for(check, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


def test_table_jsonpaths_and_ages_as_the_api_server_prints_them():
    status = {"conditions": [{"type": "Other", "status": "x"}, {"type": "Ready", "status": "True"}]}
    item = {"spec": {"targets": [{"name": "a"}, {"name": "b"}]}, "status": status}
    assert jsonpath(item, ".spec.targets[0].name") == ["a"]
    assert jsonpath(item, '.status.conditions[?(@.type=="Ready")].status') == ["True"]
    assert jsonpath(item, ".spec.missing") == []
    # k8s.io/apimachinery/pkg/util/duration.HumanDuration's steps
    ages = [59, 119, 120, 150, 600, 3 * 3600 - 1, 3 * 3600 + 60, 47 * 3600, 49 * 3600, 9 * 86400]
    assert [human_duration(s) for s in ages] == [
        "59s",
        "119s",
        "2m",
        "2m30s",
        "10m",
        "179m",
        "3h1m",
        "47h",
        "2d1h",
        "9d",
    ]


def test_the_informer_relists_after_410_gone(api, tmp_path):
    from gpuscale.control.kubernetes import KubeActuator

    actuator = KubeActuator.connect(str(api.write_kubeconfig(tmp_path / "kubeconfig")))
    try:
        informer = Informer(actuator.call, collection_path(None), watch_s=1)
        informer.relist()
        api.create_object(GV, PLURAL, obj("web"), "default")
        for i in range(WATCH_WINDOW + 1):
            api.patch_object(GV, PLURAL, "web", "default", {"metadata": {"labels": {"n": str(i)}}})
        assert informer.watch() is False  # its version was compacted away: relist
        assert informer.objects() == []
        informer.relist()
        assert [o["metadata"]["labels"]["n"] for o in informer.objects()] == [str(WATCH_WINDOW)]
    finally:
        actuator.close()
