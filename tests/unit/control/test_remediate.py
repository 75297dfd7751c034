"""Remediation: a pod on a sick GPU is deleted, one per sync, never below minReplicas."""

from gpuscale.metrics.store import MetricStore
from gpuscale.scaling import remediate
from gpuscale.scaling.policy import PodStatus, TargetStatus
from tests.support.control import events, feed, pod_names

STATIC = """\
- scaleTargetRef: {name: web}
  minReplicas: 2
  maxReplicas: 4
  policy: {name: static, replicas: 3}
  remediate: true
"""


def gpus_up(store, t, pods, down=()):
    feed(store, t, "gpuscale_gpu_up", {p: 0.0 if p in down else 1.0 for p in pods})


def test_find_reads_gpu_up_fatal_xids_and_dbe_with_their_gpu():
    store = MetricStore()
    feed(store, 10.0, "gpuscale_gpu_up", {"a": 0.0, "b": 1.0, "c": 1.0})
    feed(store, 10.0, "DCGM_EXP_XID_ERRORS_COUNT", {"b": 2.0}, xid="79", window_size_in_ms="300000")
    feed(store, 10.0, "DCGM_EXP_XID_ERRORS_COUNT", {"c": 1.0}, xid="13")  # an app error: not ours
    found = remediate.find(store, "default", 10.0)
    assert [(f.pod, f.gpu, f.kind, f.evidence) for f in found] == [
        ("a", "GPU-0000", "gpu_down", "gpuscale_gpu_up == 0"),
        ("b", "GPU-0000", "xid", "XID 79 x2 within 300 s"),
    ]
    assert remediate.find(store, "other-namespace", 10.0) == []


def test_a_last_xid_counts_when_it_turned_fatal_within_the_window_on_that_gpu():
    store = MetricStore()
    # at 0 s GPU-0000 (pod a) last saw XID 13; GPU-0001 (pod b) already had XID 79
    feed(store, 0.0, "DCGM_FI_DEV_XID_ERRORS", {"a": 13.0, "b": 79.0})
    feed(store, 350.0, "DCGM_FI_DEV_XID_ERRORS", {"a": 79.0, "b": 79.0})
    found = remediate.find(store, "default", 350.0)
    assert [(f.pod, f.gpu, f.evidence) for f in found] == [("a", "GPU-0000", "last XID 79")]
    # older than the window on both GPUs: nothing is recent any more
    feed(store, 700.0, "DCGM_FI_DEV_XID_ERRORS", {"a": 79.0, "b": 79.0})
    assert remediate.find(store, "default", 700.0) == []


def test_a_firing_health_alert_names_the_pod_and_other_alerts_do_not():
    store = MetricStore()
    firing = {"alertstate": "firing"}
    feed(store, 10.0, "ALERTS", {"a": 1.0}, alertname="GpuFellOffBus", **firing)
    feed(store, 10.0, "ALERTS", {"b": 1.0}, alertname="GpuXidError", xid="94", **firing)
    feed(store, 10.0, "ALERTS", {"c": 1.0}, alertname="GpuXidError", xid="13", **firing)
    feed(store, 10.0, "ALERTS", {"d": 1.0}, alertname="GpuTemperatureHigh", **firing)
    pending = {"alertstate": "pending"}
    feed(store, 10.0, "ALERTS", {"e": 1.0}, alertname="GpuEccDoubleBitError", **pending)
    found = remediate.find(store, "default", 10.0)
    assert [(f.pod, f.kind, f.evidence) for f in found] == [
        ("a", "alert", "alert GpuFellOffBus"),
        ("b", "alert", "alert GpuXidError (XID 94)"),
    ]


def test_xid_92_is_not_grounds_for_deletion():
    assert 92 not in remediate.REMEDIATE_XIDS
    assert {48, 63, 64, 74, 79, 94, 95} == set(remediate.REMEDIATE_XIDS)


def test_choose_keeps_min_ready():
    sick = [remediate.Finding("p0", "GPU-1", "n", "xid", "XID 79")]
    three = TargetStatus(3, tuple(PodStatus(f"p{i}", True, 0.0) for i in range(3)))
    assert remediate.choose(sick, three, 2)[0].pod == "p0"
    pick, why = remediate.choose(sick, three, 3)
    assert pick is None
    assert "would leave 2 Ready < minReplicas 3" in why
    # A pod that is not Ready costs no Ready replica.
    starting = TargetStatus(3, (PodStatus("p0", False, 0.0), *three.pods[1:]))
    assert remediate.choose(sick, starting, 2)[0].pod == "p0"


def test_controller_deletes_one_pod_per_sync_and_the_event_names_the_gpu(
    kapi, kclock, store, make_controller
):
    kapi.create_deployment("web", replicas=3)
    ctl = make_controller(STATIC)
    pods = pod_names(kapi)
    gpus_up(store, kclock() - 1, pods, down=pods[:2])  # two sick GPUs
    [out] = ctl.sync()
    assert out.remediation.startswith(f"deleted pod {pods[0]} on GPU GPU-0000")
    after = pod_names(kapi)
    assert pods[0] not in after
    assert pods[1] in after  # one per sync
    [event] = events(kapi, "UnhealthyGPUPodDeleted")
    assert "GPU-0000" in event["message"]
    assert "gpuscale_gpu_up == 0" in event["message"]
    assert event["type"] == "Warning"
    node = kapi.get("v1", "nodes", "node-a")
    assert not node["spec"].get("unschedulable")  # cordon is off by default


def test_cordon_only_when_asked(kapi, kclock, store, make_controller):
    kapi.create_deployment("web", replicas=3)
    ctl = make_controller(STATIC + "  cordon: true\n")
    pods = pod_names(kapi)
    gpus_up(store, kclock() - 1, pods, down=pods[:1])
    [out] = ctl.sync()
    node = out.remediation.split("cordoned node ")[-1]
    assert kapi.get("v1", "nodes", node)["spec"]["unschedulable"] is True


def test_nothing_is_deleted_with_only_min_replicas_ready(kapi, kclock, store, make_controller):
    kapi.create_deployment("web", replicas=2)
    ctl = make_controller(STATIC.replace("replicas: 3", "replicas: 2"))
    pods = pod_names(kapi)
    gpus_up(store, kclock() - 1, pods, down=pods[:1])
    [out] = ctl.sync()
    assert out.remediation.startswith("blocked:")
    assert pod_names(kapi) == pods
    assert events(kapi, "UnhealthyGPUPodDeleted") == []


def test_dry_run_only_says_what_it_would_delete(kapi, kclock, store, make_controller):
    kapi.create_deployment("web", replicas=3)
    ctl = make_controller(STATIC, dry_run=True)
    pods = pod_names(kapi)
    gpus_up(store, kclock() - 1, pods, down=pods[:1])
    [out] = ctl.sync()
    assert out.remediation.startswith(f"dry run: would delete pod {pods[0]}")
    assert pod_names(kapi) == pods
