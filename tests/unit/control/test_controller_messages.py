"""The loop speaks once per change: one log line per decision change, one Event per episode.

Counted over many steady syncs on the fake clock: a steady hold, a steady
decision after recovery, and a scale, each says so once at INFO or WARNING (and
again only at DEBUG), and records one Event.
"""

import logging

import pytest

from tests.support.control import events, feed, pod_names
from tests.unit.control.test_controller import HPA, UTIL

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
