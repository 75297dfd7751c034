"""The controller's saved policy state: kept in the controller's ConfigMap (never on the
workload), loaded through the policy, or replaced with a warning; a state an earlier
version left in an annotation on the workload is read once, never written."""

import json
import logging

import pytest

from gpuscale.control.kubernetes import KubeActuator
from gpuscale.scaling.recommendations import HpaState
from tests.support.control import STATE, feed, pod_names, saved_state, state_path

UTIL = "DCGM_FI_DEV_GPU_UTIL"
LEGACY = "gpuscale.io/state"
TARGET = "default/Deployment/web"

HPA = """\
- scaleTargetRef: {name: web}
  minReplicas: 1
  maxReplicas: 10
  policy: {name: hpa, targetAverageValue: 50, downscaleStabilizationSeconds: 60}
"""


def saved(kapi) -> dict:
    found = saved_state(kapi)
    assert found is not None, "no state in the ConfigMap"
    return found


def workload_writes(kapi) -> list[str]:
    """Writes to the workload object itself (its /scale subresource excluded)."""
    path = "/apis/apps/v1/namespaces/default/deployments/web"
    return [what for _t, _a, what, _h in kapi.writes if what.split(" ")[1] == path]


def test_a_state_left_in_the_old_annotation_loads_as_the_policy_s_own_type_and_moves(
    kapi, kclock, store, make_controller
):
    # A recommendation of 8 at t0 - 30 is still in the 60 s window, so the HPA's legacy
    # path stabilises to 8 and scales 2 up to its limit max(2 x 2, 4) although the load
    # asks for 1. A fresh state (the window seeded with the current 2) would hold 2.
    state = HpaState(recommendations=((kclock() - 30.0, 8),))
    envelope = {"policy": "hpa", "state": state.to_json()}
    kapi.create_deployment("web", replicas=2, annotations={LEGACY: json.dumps(envelope)})
    ctl = make_controller(HPA)
    feed(store, kclock() - 1, UTIL, dict.fromkeys(pod_names(kapi), 10.0))
    [out] = ctl.sync()
    assert out.replicas == 4, out.reason
    assert "stabilised 8" in out.reason
    assert ctl._states[ctl.targets[0].ref].recommendations[0] == (kclock() - 30.0, 8)
    assert saved(kapi)["state"]["recommendations"][0] == [kclock() - 30.0, 8]
    # the annotation was read, never written: it is as the older version left it
    meta = kapi.get("apps/v1", "deployments", "web", "default")["metadata"]
    assert json.loads(meta["annotations"][LEGACY]) == envelope
    assert workload_writes(kapi) == []


def test_the_configmap_wins_over_the_old_annotation_which_is_then_not_read(
    kapi, kclock, store, make_controller, tmp_path
):
    stale = {"policy": "hpa", "state": HpaState(recommendations=((kclock() - 30.0, 9),)).to_json()}
    kapi.create_deployment("web", replicas=2, annotations={LEGACY: json.dumps(stale)})
    ctl = make_controller(HPA)
    feed(store, kclock() - 1, UTIL, dict.fromkeys(pod_names(kapi), 10.0))
    ctl.sync()  # moves the state into the ConfigMap
    mine = HpaState(recommendations=((kclock() - 10.0, 3),))
    envelope = {"policy": "hpa", "state": mine.to_json()}
    key = next(iter(kapi.get("v1", "configmaps", STATE.name, STATE.namespace)["data"]))
    kapi.patch_object(
        "v1", "configmaps", STATE.name, STATE.namespace, {"data": {key: json.dumps(envelope)}}
    )
    path = "/apis/apps/v1/namespaces/default/deployments/web"
    reads = kapi.count("GET", path)
    fresh = KubeActuator.connect(  # a restarted process: nothing read before
        str(kapi.write_kubeconfig(tmp_path / "kc-restarted")), clock=kclock, state=STATE
    )
    restarted = make_controller(HPA, actuator=fresh)
    feed(store, kclock() - 1, UTIL, dict.fromkeys(pod_names(kapi), 10.0))
    restarted.sync()
    fresh.close()
    assert restarted._states[restarted.targets[0].ref].recommendations[0] == (kclock() - 10.0, 3)
    assert kapi.count("GET", path) == reads  # the annotation is not read again
    assert workload_writes(kapi) == []


def test_every_target_keeps_its_own_key_when_workers_write_at_once(
    kapi, kclock, store, make_controller
):
    names = [f"web-{i}" for i in range(6)]
    for name in names:
        kapi.create_deployment(name, replicas=2)
    ctl = make_controller(
        "".join(HPA.replace("{name: web}", f"{{name: {name}}}") for name in names), workers=6
    )
    for name in names:
        feed(store, kclock() - 1, UTIL, dict.fromkeys(pod_names(kapi, name), 100.0))
    reads = kapi.count("GET", state_path())
    outcomes = ctl.sync()
    assert [o.error for o in outcomes] == [None] * 6
    # one read of the ConfigMap served the six concurrent loads (regression check: the
    # loads start together, well within the read's one-second reuse)
    assert kapi.count("GET", state_path()) - reads == 1
    for name in names:
        state = saved_state(kapi, name)
        assert state is not None, name
        assert state["policy"] == "hpa"
        assert state["state"]["recommendations"][-1][1] == 4, name


@pytest.mark.parametrize(
    ("envelope", "says"),
    [
        ({"policy": "kpa", "state": {"created_at": 0.0}}, "belongs to policy 'kpa', not 'hpa'"),
        (
            {"policy": "hpa", "state": {"recommendations": [[0.0, "eight"]]}},
            "HpaState key recommendations.0.1: Input should be a valid integer",
        ),
        ({"policy": "hpa", "state": [1, 2]}, "key state: not an object but list"),
    ],
    ids=["other policy", "bad value", "not an object"],
)
def test_an_unusable_saved_state_starts_afresh_with_one_warning_naming_the_target(
    kapi, kclock, store, make_controller, caplog, envelope, says
):
    # The fresh HPA seeds its window with the current count (8): a state that was read
    # would hold 8 as well, so the proof of a fresh start is the warning and the fresh
    # state stored in the ConfigMap.
    kapi.create_deployment("web", replicas=8, annotations={LEGACY: json.dumps(envelope)})
    ctl = make_controller(HPA)
    caplog.set_level(logging.WARNING, logger="gpuscale.control.controller")
    for _ in range(3):
        feed(store, kclock() - 1, UTIL, dict.fromkeys(pod_names(kapi), 10.0))
        [out] = ctl.sync()
        kclock.advance(15)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"{TARGET}: saved policy state ignored, starting afresh: ")
    assert says in warnings[0]
    assert "\n" not in warnings[0]
    assert saved(kapi)["policy"] == "hpa"
    assert HpaState.from_json(saved(kapi)["state"]).recommendations is not None
    assert out.replicas == 8  # the fresh window holds the count it started from
