"""KubeActuator's other writes against the API double: policy state in an annotation,
Events on the target, pod deletion and node cordon."""

import json
import logging

import pytest

from gpuscale.control.kubecall import KubeUnavailableError
from gpuscale.control.kubernetes import KubeActuator, TargetRef
from tests.support.kubeapi import KubeApiDouble, ManualClock

DEPLOY = TargetRef("apps/v1", "Deployment", "web", "default")
DEPLOY_PATH = "/apis/apps/v1/namespaces/default/deployments/web"


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def api(clock):
    with KubeApiDouble(clock=clock, ready_after_s=10.0) as double:
        double.create_deployment("web", replicas=2)
        yield double


@pytest.fixture
def sleeps():
    return []


@pytest.fixture
def actuator(api, clock, sleeps, tmp_path):
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    act = KubeActuator.connect(str(kubeconfig), sleep=sleeps.append, clock=clock)
    yield act
    act.close()


def annotations(api):
    return api.get("apps/v1", "deployments", "web", "default")["metadata"].get("annotations", {})


def test_state_round_trips_through_an_annotation(api, actuator):
    assert actuator.load_state(DEPLOY, "hpa") == {}
    state = {"recommendations": [[1767225600.0, 3], [1767225615.0, 4]], "model_time": 12.5}
    actuator.save_state(DEPLOY, "hpa", state)
    assert json.loads(annotations(api)["gpuscale.io/hpa"]) == state
    # a fresh actuator (a restarted controller) reads the same state back
    assert actuator.load_state(DEPLOY, "hpa") == state


def test_state_keys_are_separate_and_other_annotations_survive(api, actuator):
    api.patch_object(
        "apps/v1", "deployments", "web", "default", {"metadata": {"annotations": {"team": "ml"}}}
    )
    actuator.save_state(DEPLOY, "a", {"x": 1})
    actuator.save_state(DEPLOY, "b", {"y": 2})
    actuator.save_state(DEPLOY, "a", {"x": 3})
    assert actuator.load_state(DEPLOY, "a") == {"x": 3}
    assert actuator.load_state(DEPLOY, "b") == {"y": 2}
    assert annotations(api)["team"] == "ml"


def test_save_state_is_a_merge_patch_that_leaves_replicas_alone(api, actuator):
    actuator.save_state(DEPLOY, "hpa", {"x": 1})
    assert api.count("PATCH", DEPLOY_PATH) == 1
    assert api.get("apps/v1", "deployments", "web", "default")["spec"]["replicas"] == 2
    assert len(api.pods()) == 2


def test_corrupt_state_annotation_reads_as_empty_with_a_warning(api, actuator, caplog):
    api.patch_object(
        "apps/v1",
        "deployments",
        "web",
        "default",
        {"metadata": {"annotations": {"gpuscale.io/hpa": "{not json"}}},
    )
    with caplog.at_level(logging.WARNING, logger="gpuscale.control.kubernetes"):
        assert actuator.load_state(DEPLOY, "hpa") == {}
    assert "gpuscale.io/hpa is not JSON" in caplog.text


def test_bad_state_key_is_rejected_before_any_request(api, actuator):
    with pytest.raises(ValueError, match="not a valid annotation name"):
        actuator.save_state(DEPLOY, "has space", {})
    assert api.count("PATCH", DEPLOY_PATH) == 0


def test_save_state_retries_a_server_error(api, actuator, sleeps):
    api.fail_next(500, method="PATCH", path=DEPLOY_PATH)
    actuator.save_state(DEPLOY, "hpa", {"x": 1})
    assert actuator.load_state(DEPLOY, "hpa") == {"x": 1}
    assert len(sleeps) == 1


def test_record_event_on_the_target(api, actuator, clock):
    actuator.record_event(DEPLOY, "ScaledUp", "replicas 2 -> 4: utilisation 0.91 > 0.7")
    actuator.record_event(DEPLOY, "MetricsStale", "holding at 4", warning=True)
    events = api.store.list(api.store.resource("v1", "events"), "default")
    got = sorted((e["reason"], e["type"]) for e in events)
    assert got == [("MetricsStale", "Warning"), ("ScaledUp", "Normal")]
    uid = api.get("apps/v1", "deployments", "web", "default")["metadata"]["uid"]
    for e in events:
        ref = e["involvedObject"]
        assert (ref["kind"], ref["name"], ref["namespace"], ref["uid"]) == (
            "Deployment",
            "web",
            "default",
            uid,
        )
        assert e["source"]["component"] == "gpuscale-autoscaler"
        assert e["firstTimestamp"] == e["lastTimestamp"] == "2026-01-01T00:00:00Z"
        assert e["count"] == 1
    assert len({e["metadata"]["name"] for e in events}) == 2  # same clock, distinct names


def test_events_are_listable_by_field_selector_as_kubectl_describe_does(api, actuator):
    actuator.record_event(DEPLOY, "ScaledUp", "up")
    core = api.store.resource("v1", "events")
    selected = api.store.list(
        core, "default", fields="involvedObject.name=web,involvedObject.kind=Deployment"
    )
    assert [e["reason"] for e in selected] == ["ScaledUp"]
    assert api.store.list(core, "default", fields="involvedObject.name=other") == []


def test_delete_pod_is_replaced_by_the_workload_controller(api, actuator):
    before = {p["metadata"]["name"] for p in api.pods()}
    victim = sorted(before)[0]
    actuator.delete_pod("default", victim)
    after = {p["metadata"]["name"] for p in api.pods()}
    assert victim not in after
    assert len(after) == 2
    assert len(after - before) == 1


def test_delete_of_a_missing_pod_counts_as_done(api, actuator, sleeps):
    actuator.delete_pod("default", "gone-already")
    assert api.count("DELETE", "/api/v1/namespaces/default/pods/gone-already") == 1
    assert sleeps == []


def test_cordon_marks_the_node_and_new_pods_avoid_it(api, actuator):
    before = {p["metadata"]["name"] for p in api.pods()}
    assert "node-a" in {p["spec"]["nodeName"] for p in api.pods()}
    actuator.cordon("node-a")
    assert api.get("v1", "nodes", "node-a")["spec"]["unschedulable"] is True
    actuator.scale(DEPLOY, 6)
    new = [p["spec"]["nodeName"] for p in api.pods() if p["metadata"]["name"] not in before]
    assert len(new) == 4
    assert sorted(set(new)) == ["node-b", "node-c"]  # cordoned node-a takes no new pod


def test_cordon_of_a_missing_node_is_one_line(api, actuator):
    with pytest.raises(KubeUnavailableError) as err:
        actuator.cordon("node-x")
    assert err.value.status == 404
    assert str(err.value) == ('PATCH /api/v1/nodes/node-x: HTTP 404: nodes "node-x" not found')


def test_state_with_nan_is_refused_before_any_request(api, actuator):
    with pytest.raises(ValueError, match="not JSON"):
        actuator.save_state(DEPLOY, "hpa", {"x": float("nan")})
    assert api.count("PATCH", DEPLOY_PATH) == 0
