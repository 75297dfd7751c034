"""The loop speaks once per change: one log line per decision change, one Event per episode.

Counted over many steady syncs on the fake clock: a steady hold, a steady
decision after recovery, and a scale, each says so once at INFO or WARNING (and
again only at DEBUG), and records one Event. The lease's release is logged as it
went, failed or not.
"""

import logging
import threading

import pytest

from tests.support.control import events, feed, pod_names
from tests.unit.control.test_controller import HPA, UTIL
from tests.unit.control.test_leader import controller as leader_controller

STEADY_SYNCS = 6


@pytest.fixture
def lines(caplog):
    """The controller's decision records of the syncs since the last call, as levels."""
    caplog.set_level(logging.DEBUG, logger="gpuscale.control.controller")

    def take() -> list[str]:
        found = [r.levelname for r in caplog.records if hasattr(r, "decision")]
        caplog.clear()
        return found

    return take


def syncs(ctl, kapi, kclock, store, n: int, util: float | None) -> None:
    for _ in range(n):
        if util is not None:  # a fresh scrape before each sync
            feed(store, kclock() - 1, UTIL, dict.fromkeys(pod_names(kapi), util))
        ctl.sync()
        kclock.advance(15)


def test_each_decision_change_is_one_line_and_steady_syncs_only_debug(
    kapi, kclock, store, make_controller, lines
):
    kapi.create_deployment("web", replicas=2)
    ctl = make_controller(HPA)
    [rt] = ctl.targets

    # No series: a steady hold. One WARNING line and one Event, however long it lasts.
    syncs(ctl, kapi, kclock, store, STEADY_SYNCS, util=None)
    assert lines() == ["WARNING"] + ["DEBUG"] * (STEADY_SYNCS - 1)
    assert [e["reason"] for e in events(kapi)] == ["MetricsUnhealthy"]
    held = ctl.unhealthy(rt.ref)  # what a MetricsHealthy condition would say
    assert held is not None
    assert held.startswith("holding replicas at 2, never scaling in: missing: ")
    assert f'query avg by (pod) ({UTIL}{{namespace="default"}})' in held

    # Data at the target (50 vs 50): the policy keeps 2. The end of the hold is news once.
    syncs(ctl, kapi, kclock, store, STEADY_SYNCS, util=50.0)
    assert lines() == ["INFO"] + ["DEBUG"] * (STEADY_SYNCS - 1)
    assert [e["reason"] for e in events(kapi)] == ["MetricsUnhealthy", "MetricsHealthy"]
    assert ctl.unhealthy(rt.ref) is None

    # Load doubles: 2 -> 4 once (INFO, SuccessfulRescale), then 4 pods at the target: the
    # new count read is news once, then steady.
    syncs(ctl, kapi, kclock, store, 1, util=100.0)
    syncs(ctl, kapi, kclock, store, STEADY_SYNCS, util=50.0)
    assert lines() == ["INFO", "INFO"] + ["DEBUG"] * (STEADY_SYNCS - 1)
    assert [e["reason"] for e in events(kapi)][2:] == ["SuccessfulRescale"]


def test_a_hold_that_changes_cause_is_one_more_line_but_not_another_event(
    kapi, kclock, store, make_controller, lines
):
    kapi.create_deployment("web", replicas=3)
    ctl = make_controller(HPA.replace("  policy:", "  metrics: {staleAfterSeconds: 30}\n  policy:"))
    syncs(ctl, kapi, kclock, store, 2, util=None)  # missing
    feed(store, kclock() - 100, UTIL, dict.fromkeys(pod_names(kapi), 1.0))  # old: stale
    syncs(ctl, kapi, kclock, store, 2, util=None)
    assert lines() == ["WARNING", "DEBUG", "WARNING", "DEBUG"]
    assert [e["reason"] for e in events(kapi)] == ["MetricsUnhealthy"]
    assert "stale: " in (ctl.unhealthy(ctl.targets[0].ref) or "")


@pytest.mark.parametrize("release_fails", [False, True])
def test_the_lease_release_is_logged_as_it_went(
    kapi, kclock, store, make_controller, tmp_path, caplog, release_fails
):
    kapi.create_deployment("web", replicas=1)
    ctl, act = leader_controller(make_controller, kapi, kclock, tmp_path, "a", 2)
    caplog.set_level(logging.INFO, logger="gpuscale.control")
    path = "/apis/coordination.k8s.io/v1/namespaces/default/leases/gpuscale"
    stop, end = threading.Event(), kclock() + 5.0

    def wait(pause: float) -> bool:
        kclock.advance(pause)
        if kclock() < end:
            return False
        if release_fails:  # the API server fails every try of the release's write
            kapi.fail_next(500, count=50, method="PUT", path=path)
        return True

    ctl.run(stop, wait)
    said = [r.getMessage() for r in caplog.records if "leader lease" in r.getMessage()]
    holder = kapi.get("coordination.k8s.io/v1", "leases", "gpuscale", "default")["spec"]
    if release_fails:
        assert said == ["could not release the leader lease; it expires on its own"]
        assert holder["holderIdentity"] == "a"
    else:
        assert said == ["released the leader lease"]
        assert holder["holderIdentity"] == ""
    act.close()
