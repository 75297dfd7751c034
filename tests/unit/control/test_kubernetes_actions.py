"""KubeActuator's other writes against the API double: policy state in the controller's
ConfigMap, Events on the target, pod deletion and node cordon."""

import json
import logging
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from gpuscale.control.kubecall import KubeUnavailableError
from gpuscale.control.kubernetes import LEGACY_STATE_ANNOTATION, KubeActuator, TargetRef
from gpuscale.control.statestore import (
    REREAD_AFTER_S,
    VALUE_MAX_BYTES,
    StateConfigMap,
    StateStore,
    state_key,
)
from gpuscale.errors import ConfigError
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
    act = KubeActuator.connect(
        str(kubeconfig), sleep=sleeps.append, clock=clock, state=StateConfigMap("gpuscale")
    )
    yield act
    act.close()


STATE = StateConfigMap("gpuscale")
CM_PATH = "/api/v1/namespaces/gpuscale/configmaps/gpuscale-autoscaler-state"
KEY = "deployment.apps_default_web"


def stored(api) -> dict:
    return api.get("v1", "configmaps", STATE.name, STATE.namespace)


def test_state_round_trips_through_the_controller_s_configmap(api, actuator):
    assert actuator.load_state(DEPLOY) == {}
    assert stored(api) is None  # nothing is created by a read
    state = {"recommendations": [[1767225600.0, 3], [1767225615.0, 4]], "model_time": 12.5}
    actuator.save_state(DEPLOY, state)
    cm = stored(api)
    assert cm["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpuscale"}
    assert json.loads(cm["data"][KEY]) == state
    assert actuator.load_state(DEPLOY) == state
    # the workload itself is never written, and its annotations are untouched
    assert "annotations" not in api.get("apps/v1", "deployments", "web", "default")["metadata"]
    assert [w for w in api.writes if "/deployments/" in w[2]] == []


def test_each_target_has_its_own_key_and_other_keys_survive(api, actuator):
    api.create_statefulset("web", "default", replicas=1)
    sts = TargetRef("apps/v1", "StatefulSet", "web", "default")
    actuator.save_state(DEPLOY, {"x": 1})
    api.patch_object("v1", "configmaps", STATE.name, STATE.namespace, {"data": {"note": "ops"}})
    actuator.save_state(sts, {"y": 2})
    actuator.save_state(DEPLOY, {"x": 3})
    assert actuator.load_state(DEPLOY) == {"x": 3}
    assert actuator.load_state(sts) == {"y": 2}
    assert sorted(stored(api)["data"]) == [KEY, "note", "statefulset.apps_default_web"]
    assert stored(api)["data"]["note"] == "ops"


def test_a_write_is_a_merge_patch_of_its_key_alone(api, actuator):
    actuator.save_state(DEPLOY, {"x": 1})  # creates the ConfigMap
    sent = []
    api.before_next(lambda: sent.append(1), method="PATCH", path=CM_PATH)
    actuator.save_state(DEPLOY, {"x": 2})
    assert sent == [1]
    assert api.count("PATCH", CM_PATH) == 2  # the first one found no ConfigMap
    assert api.count("PUT", CM_PATH) == 0
    assert api.count("POST", "/api/v1/namespaces/gpuscale/configmaps") == 1


def test_a_configmap_created_by_another_writer_meanwhile_is_patched(api, actuator, clock):
    body = {"metadata": {"name": STATE.name}, "data": {"other": "kept"}}

    def race() -> None:  # another replica creates it between our 404 and our create
        api.create_object("v1", "configmaps", body, STATE.namespace)

    api.before_next(race, method="POST", path="/api/v1/namespaces/gpuscale/configmaps")
    actuator.save_state(DEPLOY, {"x": 1})
    assert stored(api)["data"] == {"other": "kept", KEY: '{"x":1}'}


def test_corrupt_state_reads_as_empty_with_a_warning(api, actuator, caplog):
    actuator.save_state(DEPLOY, {"x": 1})
    api.patch_object("v1", "configmaps", STATE.name, STATE.namespace, {"data": {KEY: "{no"}})
    with caplog.at_level(logging.WARNING, logger="gpuscale.control.statestore"):
        assert actuator.load_state(DEPLOY) == {}
    assert f"key {KEY} is not a JSON object" in caplog.text
    assert "{no" not in caplog.text  # the value itself is never logged


def test_the_old_annotation_is_read_only_while_the_configmap_lacks_the_key(api, actuator):
    old = {"recommendations": [[1.0, 5]]}
    api.patch_object(
        "apps/v1",
        "deployments",
        "web",
        "default",
        {"metadata": {"annotations": {LEGACY_STATE_ANNOTATION: json.dumps(old)}}},
    )
    assert actuator.load_state(DEPLOY) == old
    assert api.count("GET", DEPLOY_PATH) == 1
    actuator.save_state(DEPLOY, {"x": 1})
    assert actuator.load_state(DEPLOY) == {"x": 1}
    assert api.count("GET", DEPLOY_PATH) == 1  # not read again
    meta = api.get("apps/v1", "deployments", "web", "default")["metadata"]
    assert json.loads(meta["annotations"][LEGACY_STATE_ANNOTATION]) == old  # never written


def test_a_bad_target_name_is_rejected_before_any_request(api, actuator):
    bad = TargetRef("apps/v1", "Deployment", "../web", "default")
    with pytest.raises(ConfigError, match="not a valid Kubernetes name"):
        actuator.save_state(bad, {})
    assert api.writes == []


def test_save_state_retries_a_server_error(api, actuator, sleeps):
    actuator.save_state(DEPLOY, {"x": 0})
    api.fail_next(500, method="PATCH", path=CM_PATH)
    actuator.save_state(DEPLOY, {"x": 1})
    assert actuator.load_state(DEPLOY) == {"x": 1}
    assert len(sleeps) == 1


def test_a_state_over_256_kib_is_refused_before_any_request(api, actuator):
    with pytest.raises(ValueError, match=r"at most 262144 per target"):
        actuator.save_state(DEPLOY, {"x": "a" * VALUE_MAX_BYTES})
    assert api.writes == []


def test_a_configmap_past_1_mib_is_one_line_naming_it(api, actuator):
    # Five targets of 250 KiB each: the fifth passes the API server's 1 MiB in all.
    for i in range(5):
        api.create_deployment(f"big-{i}", replicas=0)
    refs = [TargetRef("apps/v1", "Deployment", f"big-{i}", "default") for i in range(5)]
    for ref in refs[:4]:
        actuator.save_state(ref, {"x": "a" * 250_000})
    with pytest.raises(KubeUnavailableError) as err:
        actuator.save_state(refs[4], {"x": "a" * 250_000})
    message = str(err.value)
    assert err.value.status == 422
    assert message.startswith("ConfigMap gpuscale/gpuscale-autoscaler-state: the state of ")
    assert "1048576 bytes in all" in message
    assert "\n" not in message
    assert actuator.load_state(refs[3]) == {"x": "a" * 250_000}  # the others are intact


def test_one_read_serves_the_loads_of_a_second_and_sees_its_own_writes(api, actuator):
    now = [0.0]
    states = StateStore(actuator.call, STATE, monotonic=lambda: now[0])
    states.save("a", {"x": 1})
    states.save("b", {"y": 2})
    assert (states.load("a"), states.load("b"), states.load("c")) == ({"x": 1}, {"y": 2}, None)
    assert api.count("GET", CM_PATH) == 1
    states.save("a", {"x": 3})  # this replica's own write is in the copy
    assert states.load("a") == {"x": 3}
    api.patch_object("v1", "configmaps", STATE.name, STATE.namespace, {"data": {"b": "{}"}})
    now[0] = REREAD_AFTER_S  # a second on: read again, another writer's change seen
    assert states.load("b") == {}
    assert api.count("GET", CM_PATH) == 2


def test_concurrent_loads_share_one_read(api, actuator):
    actuator.save_state(DEPLOY, {"x": 1})
    states = StateStore(actuator.call, STATE, monotonic=lambda: 0.0)
    api.stall_next(0.3, method="GET", path=CM_PATH)  # the first read is slow
    with ThreadPoolExecutor(8) as pool:
        found = list(pool.map(states.load, [KEY] * 8))
    assert found == [{"x": 1}] * 8
    assert api.count("GET", CM_PATH) == 1


@pytest.mark.parametrize(
    ("ref", "key"),
    [
        (TargetRef("apps/v1", "Deployment", "llm", "serving"), "deployment.apps_serving_llm"),
        (TargetRef("apps/v1", "StatefulSet", "llm", "serving"), "statefulset.apps_serving_llm"),
        (TargetRef("v1", "ReplicationController", "a.b", "x"), "replicationcontroller.core_x_a.b"),
        (
            TargetRef("serving.example.io/v1", "InferenceService", "chat", "serving"),
            "inferenceservice.serving.example.io_serving_chat",
        ),
    ],
)
def test_state_keys_name_kind_group_namespace_and_name(ref, key):
    assert state_key(ref.api_version, ref.kind, ref.namespace, ref.name) == key


def test_a_long_state_key_is_bounded_and_still_distinct():
    name = "n" * 253
    one = state_key("apps/v1", "Deployment", "team-a", name)
    two = state_key("apps/v1", "Deployment", "team-b", name)
    assert len(one) == len(two) == 253
    assert one != two
    assert re.fullmatch(r"[-._a-zA-Z0-9]+", one)


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
        actuator.save_state(DEPLOY, {"x": float("nan")})
    assert api.writes == []
