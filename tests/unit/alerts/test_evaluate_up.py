"""The pieces of ``gpuscale up``: Alertmanager sends as Prometheus times them, the API's
JSON shapes, and the in-process scrape's staleness."""

import numpy as np

from gpuscale.alerts.evaluate import Alert, RuleEvaluator
from gpuscale.alerts.evaluate_api import alerts_json, go_exponent, rules_json
from gpuscale.alerts.evaluate_loop import ingest_exposition
from gpuscale.alerts.evaluate_notify import rfc3339, to_send
from gpuscale.alerts.model import AlertRule, RecordingRule, RuleGroup
from gpuscale.metrics.signal import Signal
from gpuscale.metrics.store import MetricStore

RULE = AlertRule("Hot", "temp > 80", "0s", "warning", "hot", "", "http://x#hot")


def _alert(state: str, **kw) -> Alert:
    return Alert(RULE, (("alertname", "Hot"),), {"summary": "hot"}, state, 0.0, 90.0, **kw)


def test_pending_is_never_sent_and_firing_is_resent_after_the_resend_delay():
    assert to_send([_alert("pending")], 10.0, 15.0) == []
    firing = _alert("firing", fired_at=15.0)
    (sent,) = to_send([firing], 15.0, 15.0, resend_delay_s=60.0)
    # endsAt: four times max(resend delay, interval) ahead, so two misses do not resolve it.
    assert (sent["startsAt"], sent["endsAt"]) == (rfc3339(15.0), rfc3339(15.0 + 240.0))
    assert to_send([firing], 60.0, 15.0, resend_delay_s=60.0) == []
    assert len(to_send([firing], 75.5, 15.0, resend_delay_s=60.0)) == 1


def test_a_resolved_alert_is_sent_once_with_its_resolution_as_end():
    alert = _alert("firing", fired_at=15.0)
    to_send([alert], 15.0, 15.0)
    alert.state, alert.resolved_at = "inactive", 30.0
    (sent,) = to_send([alert], 30.0, 15.0)
    assert sent["endsAt"] == rfc3339(30.0)
    assert to_send([alert], 45.0, 15.0) == []


def test_api_json_has_prometheus_shapes():
    store = MetricStore()
    groups = [RuleGroup("g", (RecordingRule("r", "temp * 1"), RULE))]
    ev = RuleEvaluator(groups, store)
    store.ingest(0.0, "temp", [{"gpu": "0"}], np.array([85.0]))
    ev.evaluate(0.0)
    (alert,) = alerts_json(ev)["data"]["alerts"]
    assert alert == {
        "labels": {"alertname": "Hot", "gpu": "0", "severity": "warning"},
        "annotations": {"summary": "hot", "description": "", "runbook_url": "http://x#hot"},
        "state": "firing",
        "activeAt": "1970-01-01T00:00:00.000Z",
        "value": "8.5e+01",
    }
    (group,) = rules_json(ev)["data"]["groups"]
    record, rule = group["rules"]
    assert (record["type"], record["health"], record["name"]) == ("recording", "ok", "r")
    assert (rule["type"], rule["state"], rule["duration"]) == ("alerting", "firing", 0)
    assert rules_json(ev, "record")["data"]["groups"][0]["rules"] == [record]


def test_go_exponent_matches_strconv_e_minus_one():
    assert [go_exponent(v) for v in (1.0, 0.5, 1234.5, 1e-7)] == [
        "1e+00",
        "5e-01",
        "1.2345e+03",
        "1e-07",
    ]


def test_a_series_or_family_missing_from_a_scrape_goes_stale():
    store = MetricStore()
    known: set[str] = set()
    target = {"job": "gpuscale-exporter", "instance": "h:9400"}
    text = 'a{gpu="0"} 1\na{gpu="1"} 2\nb 3\n'
    assert ingest_exposition(store, text, 0.0, target, known) == 3
    ingest_exposition(store, 'a{gpu="0"} 1\n', 15.0, target, known)
    (only,) = store.instant(Signal("a"), 15.0)
    assert only.labels == {"gpu": "0", **target}
    assert store.instant(Signal("b"), 15.0) == []
