"""The live loop around the decision step: KEDA's cadence, the stored state's writes,
one Event per hold, and a pod the policy replaces deleted with the count kept."""

import random

import numpy as np

from tests.support.control import events, feed, pod_names, replicas, state_writes

UTIL = "DCGM_FI_DEV_GPU_UTIL"
IN_FLIGHT = "gpuscale_serving_requests_in_flight"
QUEUE = "gpuscale_serving_queue_requests"

KEDA = """\
- scaleTargetRef: {name: web}
  minReplicas: 1
  maxReplicas: 20
  policy: {name: keda, threshold: 2, pollingIntervalSeconds: 15, hpaSyncPeriodSeconds: 15}
"""

HPA = """\
- scaleTargetRef: {name: web}
  minReplicas: 1
  maxReplicas: 10
  policy: {name: hpa, targetAverageValue: 50}
"""


def serve(store, t, pods, per_pod):
    """One scrape of the serving gauges: requests in flight per pod and an empty queue."""
    feed(store, t, IN_FLIGHT, dict.fromkeys(pods, per_pod))
    store.ingest(t, QUEUE, [{"namespace": "default", "deployment": "web"}], np.array([0.0]))


def test_keda_decides_at_every_sync_when_its_polling_interval_is_the_sync_period(
    kapi, kclock, store, make_controller
):
    kapi.create_deployment("web", replicas=3)
    ctl = make_controller(KEDA)
    rng = random.Random(4)
    decided = 0
    for _ in range(20):
        # A sync reads its clock after its API calls: the times wander around the grid.
        kclock.advance(15.0 + rng.uniform(-2.0, 2.0))
        serve(store, kclock() - 1, pod_names(kapi), 2.0)
        [out] = ctl.sync()
        assert out.held is None, out.reason
        decided += "no loop due" not in out.reason
    assert decided == 20


def test_steady_load_writes_the_state_at_most_once_a_minute(kapi, kclock, store, make_controller):
    kapi.create_deployment("web", replicas=2)
    ctl = make_controller(HPA)
    writes = []
    for _ in range(40):  # ten minutes of 15 s syncs at a load that needs no change
        feed(store, kclock() - 1, UTIL, dict.fromkeys(pod_names(kapi), 50.0))
        before = state_writes(kapi)
        [out] = ctl.sync()
        assert (out.held, out.replicas) == (None, 2)
        writes.append(state_writes(kapi) - before)
        kclock.advance(15)
    # The first sync writes the state; after that, time passing alone is written at most
    # once a minute (``STATE_REWRITE_S``): at most one write in each four syncs.
    assert writes[0] == 1
    for i in range(1, 40, 4):
        assert sum(writes[i : i + 4]) <= 1, writes
    assert ctl.metrics.state_writes.labels("default/Deployment/web")._value.get() == sum(writes)


def test_one_event_per_outage_whatever_its_reasons(kapi, kclock, store, make_controller):
    kapi.create_deployment("web", replicas=3)
    ctl = make_controller(HPA.replace("  policy:", "  metrics: {staleAfterSeconds: 30}\n  policy:"))
    [out] = ctl.sync()
    assert out.held == "missing"
    feed(store, kclock() - 100, UTIL, dict.fromkeys(pod_names(kapi), 1.0))
    kclock.advance(15)
    [out] = ctl.sync()
    assert out.held == "stale"
    assert [e["reason"] for e in events(kapi)] == ["MetricsUnhealthy"]
    assert "DCGM_FI_DEV_GPU_UTIL" in events(kapi)[0]["message"]


def test_a_pod_the_policy_replaces_is_deleted_and_the_count_kept(
    kapi, kclock, store, make_controller
):
    kapi.create_deployment("web", replicas=3)
    ctl = make_controller(
        """\
- scaleTargetRef: {name: web}
  minReplicas: 3
  maxReplicas: 3
  policy: {name: hybrid, perReplica: 2}
"""
    )
    pods = pod_names(kapi)
    sick = pods[1]
    for _ in range(3):
        serve(store, kclock() - 1, pods, 1.0)
        feed(
            store,
            kclock() - 1,
            "DCGM_FI_DEV_XID_ERRORS",
            {p: 79.0 if p == sick else 0.0 for p in pods},
        )
        [_out] = ctl.sync()
        kclock.advance(15)
        if sick not in pod_names(kapi):
            break
    assert sick not in pod_names(kapi)
    assert replicas(kapi) == 3
    [replaced] = events(kapi, "SickPodReplaced")
    assert sick in replaced["message"]
    assert ctl.metrics.replacements.labels("default/Deployment/web")._value.get() == 1
