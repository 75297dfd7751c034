"""The reconcile loop against the API double (real kubernetes client) and the real MetricStore."""

import threading

from gpuscale.metrics.prometheus import PrometheusSource
from tests.support.control import events, feed, pod_names, replicas, saved_state
from tests.support.servers import free_port

UTIL = "DCGM_FI_DEV_GPU_UTIL"

HPA = """\
- scaleTargetRef: {name: web}
  minReplicas: 1
  maxReplicas: 10
  maxScaleUpStep: 3
  policy: {name: hpa, targetAverageValue: 50, downscaleStabilizationSeconds: 60}
"""


def test_high_utilisation_scales_out_within_step_and_records_event_state_and_log(
    kapi, kclock, store, make_controller, decisions
):
    kapi.create_deployment("web", replicas=2)
    ctl = make_controller(HPA)
    pods = pod_names(kapi)
    feed(store, kclock() - 1, UTIL, dict.fromkeys(pods, 100.0))
    [out] = ctl.sync()
    # HPA wants ceil(2 * 100/50) = 4; the step bound allows +3 from 2: 4 is within it.
    assert (out.current, out.replicas, out.held) == (2, 4, None)
    assert replicas(kapi) == 4
    assert [e["reason"] for e in events(kapi)] == ["SuccessfulRescale"]
    saved = saved_state(kapi)
    assert saved["policy"] == "hpa"
    assert saved["state"]["recommendations"]  # the stabilisation window's memory
    [record] = decisions()
    assert record["inputs"][f"{UTIL} by pod"] == dict.fromkeys(pods, 100.0)
    assert (record["current"], record["replicas"]) == (2, 4)


def test_step_bound_limits_one_sync(kapi, kclock, store, make_controller):
    kapi.create_deployment("web", replicas=4)
    ctl = make_controller(HPA)
    feed(store, kclock() - 1, UTIL, dict.fromkeys(pod_names(kapi), 100.0))
    [out] = ctl.sync()
    assert out.replicas == 7  # HPA wants 8; maxScaleUpStep 3 allows 4 + 3
    assert "step limited to +3" in out.reason


def test_missing_metrics_hold_and_never_scale_in(kapi, kclock, store, make_controller):
    kapi.create_deployment("web", replicas=5)
    ctl = make_controller(HPA)
    for _ in range(3):
        [out] = ctl.sync()
        kclock.advance(15)
        assert (out.replicas, out.held) == (5, "missing")
    assert replicas(kapi) == 5
    # One Event when the hold starts, not one per sync.
    assert [e["reason"] for e in events(kapi)] == ["MetricsUnhealthy"]
    assert ctl.metrics.holds.labels("default/Deployment/web", "missing")._value.get() == 3


def test_infinite_value_holds(kapi, kclock, store, make_controller):
    # The store keeps NaN for "absent" (Prometheus' NaN is covered in test_failsafe).
    kapi.create_deployment("web", replicas=3)
    ctl = make_controller(HPA)
    pods = pod_names(kapi)
    feed(store, kclock() - 1, UTIL, {pods[0]: float("inf"), pods[1]: 5.0, pods[2]: 5.0})
    [out] = ctl.sync()
    assert (out.replicas, out.held) == (3, "nan")


def test_stale_samples_hold(kapi, kclock, store, make_controller):
    kapi.create_deployment("web", replicas=3)
    ctl = make_controller(HPA.replace("  policy:", "  metrics: {staleAfterSeconds: 30}\n  policy:"))
    feed(store, kclock() - 100, UTIL, dict.fromkeys(pod_names(kapi), 1.0))  # within lookback
    [out] = ctl.sync()
    assert (out.replicas, out.held) == (3, "stale")


def test_source_down_holds_and_counts_the_error(kapi, make_controller):
    kapi.create_deployment("web", replicas=3)
    down = PrometheusSource(f"http://127.0.0.1:{free_port()}", timeout_s=1.0)
    ctl = make_controller(HPA, source=down)
    [out] = ctl.sync()
    assert (out.replicas, out.held) == (3, "unavailable")
    assert replicas(kapi) == 3
    errors = ctl.metrics.errors.labels("default/Deployment/web", "metrics_unavailable")
    assert errors._value.get() == 1
    down.close()


def test_recovery_after_a_hold_lets_the_policy_act(kapi, kclock, store, make_controller):
    kapi.create_deployment("web", replicas=2)
    ctl = make_controller(HPA)
    [out] = ctl.sync()
    assert out.held == "missing"
    kclock.advance(15)
    feed(store, kclock() - 1, UTIL, dict.fromkeys(pod_names(kapi), 100.0))
    [out] = ctl.sync()
    assert (out.held, out.replicas) == (None, 4)
    assert [e["reason"] for e in events(kapi)][-2:] == ["MetricsHealthy", "SuccessfulRescale"]


def test_one_failing_target_does_not_stop_the_others(kapi, kclock, store, make_controller, caplog):
    kapi.create_deployment("web", replicas=2)
    ctl = make_controller(HPA + HPA.replace("name: web", "name: absent"))
    feed(store, kclock() - 1, UTIL, dict.fromkeys(pod_names(kapi), 100.0))
    web, absent = ctl.sync()
    assert web.replicas == 4
    assert absent.error == "kube_unavailable"
    assert absent.replicas is None


def test_forbidden_is_reported_once_with_the_rule(kapi, kclock, store, make_controller, caplog):
    kapi.create_deployment("web", replicas=2)
    ctl = make_controller(HPA)
    scale = "/apis/apps/v1/namespaces/default/deployments/web/scale"
    kapi.fail_next(403, 2, method="GET", path=scale)
    first, second = ctl.sync()[0], ctl.sync()[0]
    assert first.error == second.error == "forbidden"
    logged = [r for r in caplog.records if r.levelname == "ERROR" and "forbids" in r.getMessage()]
    assert len(logged) == 1
    assert "deployments/scale" in logged[0].getMessage()
    assert ctl.metrics.errors.labels("default/Deployment/web", "forbidden")._value.get() == 2


def test_dry_run_writes_nothing(kapi, kclock, store, make_controller):
    kapi.create_deployment("web", replicas=2)
    ctl = make_controller(HPA, dry_run=True)
    feed(store, kclock() - 1, UTIL, dict.fromkeys(pod_names(kapi), 100.0))
    [out] = ctl.sync()
    assert out.replicas == 4
    assert out.dry_run
    assert replicas(kapi) == 2
    assert events(kapi) == []
    assert kapi.get("v1", "configmaps", "gpuscale-autoscaler-state", "gpuscale") is None


def test_a_restarted_controller_keeps_the_stabilisation_window(
    kapi, kclock, store, make_controller
):
    # High load at t0 recommends 4; then the load drops. The HPA's 60 s downscale window
    # holds 4 until t0 + 60. A controller restarted at t0 + 30 reads the window from the
    # annotation and scales in after t0 + 60, as the first one would have. One that lost its
    # state starts a fresh window at the restart (the HPA seeds it with the current count)
    # and still holds at t0 + 75.
    kapi.create_deployment("web", replicas=2)
    first = make_controller(HPA)
    feed(store, kclock() - 1, UTIL, dict.fromkeys(pod_names(kapi), 100.0))
    assert first.sync()[0].replicas == 4
    kclock.advance(15)
    feed(store, kclock() - 1, UTIL, dict.fromkeys(pod_names(kapi), 10.0))
    assert first.sync()[0].replicas == 4  # t0 + 15: within the window
    kclock.advance(15)
    feed(store, kclock() - 1, UTIL, dict.fromkeys(pod_names(kapi), 10.0))
    restarted = make_controller(HPA)
    forgetful = make_controller(HPA, dry_run=True)  # dry run: it writes no annotation
    forgetful._states[forgetful.targets[0].ref] = forgetful.targets[0].policy.initial_state()
    assert restarted.sync()[0].replicas == 4  # t0 + 30: still within the window
    assert forgetful.sync()[0].replicas == 4
    kclock.advance(45)  # t0 + 75
    feed(store, kclock() - 1, UTIL, dict.fromkeys(pod_names(kapi), 10.0))
    held = forgetful.sync()[0]
    assert held.replicas == 4, held.reason
    out = restarted.sync()[0]
    assert out.replicas < 4, out.reason
    assert replicas(kapi) == out.replicas


def test_a_policy_that_raises_is_isolated_and_counted(kapi, kclock, store, make_controller):
    kapi.create_deployment("web", replicas=2)
    kapi.create_deployment("other", replicas=2)
    ctl = make_controller(HPA + HPA.replace("name: web", "name: other"))
    every = pod_names(kapi) + pod_names(kapi, "other")
    feed(store, kclock() - 1, UTIL, dict.fromkeys(every, 100.0))

    def broken(observation, state):
        raise ZeroDivisionError("policy bug")

    ctl.targets[1].policy.inner.decide = broken  # type: ignore[method-assign]
    web, other = ctl.sync()
    assert web.replicas == 4
    assert other.error == "internal"
    assert "policy bug" in other.reason
    assert ctl.metrics.errors.labels("default/Deployment/other", "internal")._value.get() == 1


def test_run_syncs_once_per_period_on_the_clock(kapi, kclock, store, make_controller):
    kapi.create_deployment("web", replicas=2)
    ctl = make_controller(HPA)
    stop, start, waits = threading.Event(), kclock(), []

    def wait(pause: float) -> bool:
        waits.append(pause)
        kclock.advance(pause)
        return kclock() - start >= 60.0

    ctl.run(stop, wait)
    # Syncs at 0, 15, 30, 45 and 60 s would be five; the loop stops after the wait to 60 s.
    assert ctl.metrics.holds.labels("default/Deployment/web", "missing")._value.get() == 4
    assert waits == [15.0, 15.0, 15.0, 15.0]


def test_a_failed_event_does_not_undo_the_decision(kapi, kclock, store, make_controller):
    kapi.create_deployment("web", replicas=2)
    ctl = make_controller(HPA)
    feed(store, kclock() - 1, UTIL, dict.fromkeys(pod_names(kapi), 100.0))
    kapi.fail_next(403, 1, method="POST", path="/api/v1/namespaces/default/events")
    [out] = ctl.sync()
    assert (out.error, out.replicas) == (None, 4)
    assert replicas(kapi) == 4
    assert saved_state(kapi) is not None  # saved before the Event was tried
    assert ctl.metrics.errors.labels("default/Deployment/web", "event")._value.get() == 1


def test_a_policy_filling_whole_nodes_reads_its_pods_nodes_and_others_do_not(
    kapi, kclock, store, make_controller
):
    for name in ("gpu-a", "gpu-b"):
        kapi.add_node(name, gpus=4)
    kapi.create_deployment("web", replicas=2, gpus=1)  # one on each GPU node
    whole = """\
- scaleTargetRef: {name: web}
  minReplicas: 1
  maxReplicas: 10
  policy: {name: predictive, nodeSize: 4}
"""
    make_controller(whole).sync()  # no demand data: it holds, having read the nodes
    assert kapi.count("GET", "/api/v1/nodes/gpu-a") == 1
    make_controller(HPA).sync()
    assert kapi.count("GET", "/api/v1/nodes/gpu-a") == 1  # HPA counts no nodes
