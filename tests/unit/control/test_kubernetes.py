"""KubeActuator over the real kubernetes client against the API double: /scale, pods,
retries on 409 and 5xx, the one-line 403."""

import pytest

from gpuscale.control.kubecall import (
    KubeCall,
    KubeForbiddenError,
    KubeUnavailableError,
    RetryPolicy,
)
from gpuscale.control.kubernetes import KubeActuator, TargetRef
from tests.support.kubeapi import KubeApiDouble, ManualClock

DEPLOY = TargetRef("apps/v1", "Deployment", "web", "default")
SCALE_PATH = "/apis/apps/v1/namespaces/default/deployments/web/scale"
POLICY = RetryPolicy(attempts=4, base_s=0.2, max_s=1.0, total_s=30.0, timeout_s=5.0)


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def api(clock):
    with KubeApiDouble(clock=clock, ready_after_s=30.0) as double:
        yield double


@pytest.fixture
def sleeps():
    return []


@pytest.fixture
def actuator(api, clock, sleeps, tmp_path):
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    act = KubeActuator.connect(str(kubeconfig), retry=POLICY, sleep=sleeps.append, clock=clock)
    yield act
    act.close()


def test_status_reads_scale_and_pods_with_readiness_times(api, actuator, clock):
    api.create_deployment("web", replicas=2)
    created = clock()
    status = actuator.status(DEPLOY)
    assert status.desired == 2
    assert len(status.pods) == 2
    assert status.ready == 0
    assert {p.node for p in status.pods} == {"node-a", "node-b"}  # spread over the nodes
    assert all(p.created_at == created and p.ready_at is None for p in status.pods)

    clock.advance(30.0)  # the double's readiness delay
    status = actuator.status(DEPLOY)
    assert status.ready == 2
    assert all(p.ready_at == created + 30.0 for p in status.pods)


def test_status_excludes_terminating_pods(clock, tmp_path, sleeps):
    with KubeApiDouble(clock=clock, terminate_after_s=30.0) as api:
        api.create_deployment("web", replicas=2)
        act = KubeActuator.connect(str(api.write_kubeconfig(tmp_path / "kc")), sleep=sleeps.append)
        victim = api.pods()[0]["metadata"]["name"]
        act.delete_pod("default", victim)
        names = {p.name for p in act.status(DEPLOY).pods}
        assert victim not in names
        assert len(names) == 2  # the controller's replacement is counted instead
        assert len(api.pods()) == 3  # the victim is still there, terminating
        act.close()


def test_scale_goes_through_the_scale_subresource_only(api, actuator):
    api.create_deployment("web", replicas=1)
    actuator.scale(DEPLOY, 3)
    assert api.get("apps/v1", "deployments", "web", "default")["spec"]["replicas"] == 3
    assert len(api.pods()) == 3
    assert api.count("PUT", SCALE_PATH) == 1
    writes = [k for k in api.requests if k.split()[0] in ("PUT", "PATCH", "POST")]
    assert writes == [f"PUT {SCALE_PATH}"]


def test_scale_to_current_replicas_writes_nothing(api, actuator):
    api.create_deployment("web", replicas=2)
    actuator.scale(DEPLOY, 2)
    assert api.count("PUT", SCALE_PATH) == 0


def test_scale_statefulset(api, actuator, clock):
    api.create_statefulset("db", replicas=1, ready_after_s=5.0)
    ref = TargetRef("apps/v1", "StatefulSet", "db", "default")
    actuator.scale(ref, 3)
    assert actuator.status(ref).desired == 3
    # OrderedReady: db-1 is created only once db-0 is Ready, db-2 once db-1 is
    assert [p.name for p in actuator.status(ref).pods] == ["db-0"]
    for _ in range(3):
        clock.advance(5.0)
        actuator.status(ref)
    assert sorted(p.name for p in actuator.status(ref).pods) == ["db-0", "db-1", "db-2"]


def test_scale_custom_kind_resolved_by_discovery(api, actuator):
    api.register_scalable_kind("serving.example.io", "v1", "InferenceService", "inferenceservices")
    body = {
        "metadata": {"name": "llm"},
        "spec": {"replicas": 1},
        "status": {"replicas": 1, "selector": "app=llm"},
    }
    api.create_object("serving.example.io/v1", "inferenceservices", body, "default")
    ref = TargetRef("serving.example.io/v1", "InferenceService", "llm", "default")
    actuator.scale(ref, 4)
    stored = api.get("serving.example.io/v1", "inferenceservices", "llm", "default")
    assert stored["spec"]["replicas"] == 4
    assert actuator.status(ref).desired == 4
    assert api.count("GET", "/apis/serving.example.io/v1") == 1  # discovery, once
    actuator.status(ref)
    assert api.count("GET", "/apis/serving.example.io/v1") == 1  # cached


def test_kind_without_scale_is_a_config_error(api, actuator):
    from gpuscale.errors import ConfigError

    ref = TargetRef("coordination.k8s.io/v1", "Lease", "x", "default")
    with pytest.raises(ConfigError, match="no /scale subresource"):
        actuator.scale(ref, 1)


def test_scale_conflict_is_retried_on_a_fresh_read(api, actuator, sleeps):
    api.create_deployment("web", replicas=1)
    # another client writes the Deployment between our GET and PUT of /scale
    api.before_next(
        lambda: api.patch_object(
            "apps/v1", "deployments", "web", "default", {"metadata": {"labels": {"x": "y"}}}
        ),
        method="PUT",
        path=SCALE_PATH,
    )
    actuator.scale(DEPLOY, 5)
    assert api.get("apps/v1", "deployments", "web", "default")["spec"]["replicas"] == 5
    assert api.count("PUT", SCALE_PATH) == 2  # the stale one answered 409, the retry won
    assert len(sleeps) == 1
    assert 0.0 <= sleeps[0] <= POLICY.base_s  # full jitter below the first cap


def test_server_errors_are_retried_with_growing_caps(api, actuator, sleeps):
    api.create_deployment("web", replicas=1)
    api.fail_next(503, 2, method="PUT", path=SCALE_PATH)
    actuator.scale(DEPLOY, 2)
    assert api.get("apps/v1", "deployments", "web", "default")["spec"]["replicas"] == 2
    assert api.count("PUT", SCALE_PATH) == 3
    caps = [POLICY.base_s, 2 * POLICY.base_s]
    assert len(sleeps) == 2
    assert all(0.0 <= s <= cap for s, cap in zip(sleeps, caps, strict=True))


def test_server_errors_give_up_after_the_attempts(api, actuator, sleeps):
    api.create_deployment("web", replicas=1)
    api.fail_next(500, 100, method="PUT", path=SCALE_PATH)
    with pytest.raises(KubeUnavailableError) as err:
        actuator.scale(DEPLOY, 2)
    assert err.value.status == 500
    assert "\n" not in str(err.value)
    assert f"gave up after {POLICY.attempts} attempt(s)" in str(err.value)
    assert api.count("PUT", SCALE_PATH) == POLICY.attempts
    assert len(sleeps) == POLICY.attempts - 1


def test_forbidden_names_the_missing_rbac_rule_in_one_line(api, actuator, sleeps):
    api.create_deployment("web", replicas=1)
    api.fail_next(403, method="PUT", path=SCALE_PATH)
    with pytest.raises(KubeForbiddenError) as err:
        actuator.scale(DEPLOY, 2)
    msg = str(err.value)
    assert "\n" not in msg
    assert 'in namespace "default"' in msg
    assert api.user in msg
    assert (
        err.value.rule
        == '{apiGroups: ["apps"], resources: ["deployments/scale"], verbs: ["update"]}'
    )
    assert err.value.rule in msg
    assert api.count("PUT", SCALE_PATH) == 1  # a 403 is not retried
    assert sleeps == []


def test_forbidden_list_of_pods_names_the_core_group(api, actuator):
    api.create_deployment("web", replicas=1)
    api.fail_next(403, method="GET", path="/api/v1/namespaces/default/pods")
    with pytest.raises(KubeForbiddenError) as err:
        actuator.status(DEPLOY)
    assert err.value.rule == '{apiGroups: [""], resources: ["pods"], verbs: ["list"]}'


def test_missing_target_is_one_line_not_retried(api, actuator, sleeps):
    with pytest.raises(KubeUnavailableError) as err:
        actuator.status(DEPLOY)
    assert err.value.status == 404
    assert 'deployments.apps "web" not found' in str(err.value)
    assert sleeps == []


def test_connection_refused_is_retried_then_unavailable(tmp_path, sleeps):
    with KubeApiDouble() as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kc")
    act = KubeActuator.connect(str(kubeconfig), retry=POLICY, sleep=sleeps.append)
    with pytest.raises(KubeUnavailableError) as err:
        act.status(DEPLOY)
    assert err.value.status is None
    assert "cannot reach the API server" in str(err.value)
    assert len(sleeps) == POLICY.attempts - 1
    act.close()


def test_bearer_token_from_the_kubeconfig(tmp_path):
    with KubeApiDouble(token="s3cret") as api:
        api.create_deployment("web", replicas=2)
        good = KubeActuator.connect(str(api.write_kubeconfig(tmp_path / "kc")))
        assert good.status(DEPLOY).desired == 2
        api.token = "rotated"
        with pytest.raises(KubeUnavailableError) as err:
            good.status(DEPLOY)
        assert err.value.status == 401
        good.close()


def test_missing_kubeconfig_is_a_one_line_config_error(tmp_path):
    from gpuscale.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^--kubeconfig .*nope: no such file"):
        KubeActuator.connect(str(tmp_path / "nope"))


def test_unknown_context_is_a_one_line_config_error(api, tmp_path):
    from gpuscale.errors import ConfigError

    kubeconfig = api.write_kubeconfig(tmp_path / "kc")
    with pytest.raises(ConfigError, match="--context elsewhere: cannot load") as err:
        KubeActuator.connect(str(kubeconfig), context="elsewhere")
    assert "\n" not in str(err.value)


def test_too_many_requests_waits_the_retry_after(api, actuator, sleeps):
    api.create_deployment("web", replicas=1)
    api.fail_next(429, method="PUT", path=SCALE_PATH)
    actuator.scale(DEPLOY, 2)
    assert sleeps == [1.0]  # the Retry-After header the API server sends with 429
    assert api.count("PUT", SCALE_PATH) == 2


def test_slow_answer_times_out_and_is_retried(api, tmp_path, sleeps):
    import time

    api.create_deployment("web", replicas=1)
    policy = RetryPolicy(attempts=3, base_s=0.1, max_s=0.1, total_s=30.0, timeout_s=0.3)
    act = KubeActuator.connect(
        str(api.write_kubeconfig(tmp_path / "kc")), retry=policy, sleep=sleeps.append
    )
    api.stall_next(2.0, method="GET", path=SCALE_PATH)
    start = time.monotonic()
    assert act.status(DEPLOY).desired == 1
    # the first read gave up at the 0.3 s timeout; the retry was answered at once
    assert len(sleeps) == 1
    assert api.count("GET", SCALE_PATH) == 2
    assert time.monotonic() - start < 2.0  # did not wait for the stalled answer
    act.close()


def test_retries_stop_at_the_total_time_bound(api, actuator):
    api.create_deployment("web", replicas=1)
    api.fail_next(503, 1000, method="GET", path=SCALE_PATH)
    now = [0.0]

    def fake_sleep(s: float) -> None:
        now[0] += s

    policy = RetryPolicy(attempts=1000, base_s=1.0, max_s=1.0, total_s=10.0)
    call = KubeCall(actuator.api_client, policy, sleep=fake_sleep, monotonic=lambda: now[0])
    with pytest.raises(KubeUnavailableError, match="HTTP 503"):
        call("GET", SCALE_PATH)
    assert now[0] <= policy.total_s  # never sleeps past the bound
    # with waits of up to 1 s each, using most of 10 s takes more than 10 tries
    assert api.count("GET", SCALE_PATH) > 10


def test_in_cluster_without_a_service_account_is_one_line(monkeypatch):
    from gpuscale.errors import ConfigError

    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(ConfigError, match=r"^in-cluster config: cannot load") as err:
        KubeActuator.connect()
    assert "\n" not in str(err.value)


def test_endless_conflicts_give_up_with_status_409(api, actuator, sleeps):
    api.create_deployment("web", replicas=1)
    bump = iter(range(1000))
    api.before_next(
        lambda: api.patch_object(
            "apps/v1",
            "deployments",
            "web",
            "default",
            {"metadata": {"labels": {"n": str(next(bump))}}},
        ),
        100,
        method="PUT",
        path=SCALE_PATH,
    )
    with pytest.raises(KubeUnavailableError) as err:
        actuator.scale(DEPLOY, 3)
    assert err.value.status == 409
    assert api.count("PUT", SCALE_PATH) == POLICY.attempts
    assert api.get("apps/v1", "deployments", "web", "default")["spec"]["replicas"] == 1


def test_custom_kind_without_a_selector_has_no_pods(api, actuator):
    api.register_scalable_kind("serving.example.io", "v1", "Pool", "pools")
    body = {"metadata": {"name": "p"}, "spec": {"replicas": 2}, "status": {"replicas": 2}}
    api.create_object("serving.example.io/v1", "pools", body, "default")
    status = actuator.status(TargetRef("serving.example.io/v1", "Pool", "p", "default"))
    assert (status.desired, status.pods) == (2, ())


def test_node_slots_are_each_ready_nodes_allocatable_gpus_over_a_pods(clock, tmp_path, sleeps):
    # As the device plugin reports them: node-b's GPU fell off the bus (7 of 8 left
    # allocatable); node-c was cordoned with one pod on it, so it takes no new one.
    nodes = ("node-a", "node-b", "node-c", "node-d")
    with KubeApiDouble(clock=clock, nodes=()) as api:
        for name, gpus in zip(nodes, (8, 7, 8, 8), strict=True):
            api.add_node(name, gpus=gpus)
        api.create_deployment("web", replicas=3, gpus=2)
        api.patch_object("v1", "nodes", "node-c", "", {"spec": {"unschedulable": True}})
        down = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
        api.patch_object("v1", "nodes", "node-a", "", down)
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        act = KubeActuator.connect(str(kubeconfig), retry=POLICY, sleep=sleeps.append, clock=clock)
        try:
            status = act.status(DEPLOY, node_slots=True)
            assert sorted(p.node for p in status.pods) == ["node-a", "node-b", "node-c"]
            # node-a is not Ready: left out; node-b 7 // 2; node-c holds its one pod.
            assert status.node_slots == (3, 1)
            assert act.status(DEPLOY).node_slots == ()  # not asked: no node is read
            assert api.count("GET", "/api/v1/nodes/node-b") == 1
        finally:
            act.close()


def test_a_pod_asking_more_gpus_than_any_node_has_left_stays_pending(clock):
    with KubeApiDouble(clock=clock, nodes=()) as api:
        api.add_node("node-a", gpus=8)
        api.create_deployment("web", replicas=5, gpus=2)
        placed = [p["spec"].get("nodeName") for p in api.pods()]
        assert (placed.count("node-a"), placed.count(None)) == (4, 1)  # 8 GPUs hold 4 pods of 2
