"""The controller's saved policy state: loaded through the policy, or replaced with a warning."""

import json
import logging

import pytest

from gpuscale.scaling.recommendations import HpaState
from tests.support.control import feed, pod_names

UTIL = "DCGM_FI_DEV_GPU_UTIL"
KEY = "gpuscale.io/state"
TARGET = "default/Deployment/web"

HPA = """\
- scaleTargetRef: {name: web}
  minReplicas: 1
  maxReplicas: 10
  policy: {name: hpa, targetAverageValue: 50, downscaleStabilizationSeconds: 60}
"""


def saved(kapi) -> dict:
    annotations = kapi.get("apps/v1", "deployments", "web", "default")["metadata"]["annotations"]
    return json.loads(annotations[KEY])


def test_a_saved_state_loads_as_the_policy_s_own_type(kapi, kclock, store, make_controller):
    # A recommendation of 8 at t0 - 30 is still in the 60 s window, so the HPA's legacy
    # path stabilises to 8 and scales 2 up to its limit max(2 x 2, 4) although the load
    # asks for 1. A fresh state (the window seeded with the current 2) would hold 2.
    state = HpaState(recommendations=((kclock() - 30.0, 8),))
    envelope = {"policy": "hpa", "state": state.to_json()}
    kapi.create_deployment("web", replicas=2, annotations={KEY: json.dumps(envelope)})
    ctl = make_controller(HPA)
    feed(store, kclock() - 1, UTIL, dict.fromkeys(pod_names(kapi), 10.0))
    [out] = ctl.sync()
    assert out.replicas == 4, out.reason
    assert "stabilised 8" in out.reason
    assert ctl._states[ctl.targets[0].ref].recommendations[0] == (kclock() - 30.0, 8)
    assert saved(kapi)["state"]["recommendations"][0] == [kclock() - 30.0, 8]


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
    # would hold 8 as well, so the proof of a fresh start is the warning and the new
    # annotation, which the fresh state replaces.
    kapi.create_deployment("web", replicas=8, annotations={KEY: json.dumps(envelope)})
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
