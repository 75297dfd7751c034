"""The in-process rule manager: group order, records read back, ``for:``, ALERTS, annotations."""

import numpy as np
import pytest

from gpuscale.alerts.evaluate import RuleEvaluator
from gpuscale.alerts.evaluate_template import expand, go_float
from gpuscale.alerts.model import AlertRule, RecordingRule, RuleGroup
from gpuscale.errors import ConfigError
from gpuscale.metrics.signal import Signal
from gpuscale.metrics.store import MetricStore


def _alert(expr: str, for_: str = "1m", summary: str = "GPU {{ $labels.gpu }}") -> AlertRule:
    return AlertRule("Hot", expr, for_, "warning", summary, "{{ $value }} C", "http://x#hot")


def _groups(for_: str = "1m") -> list[RuleGroup]:
    return [
        RuleGroup(
            "g",
            (
                RecordingRule("job:temp:celsius", "temp + 0", (("src", "rec"),)),
                _alert("job:temp:celsius > 80", for_),
            ),
        )
    ]


def _run(temps: list[float], for_: str = "1m", step: float = 30.0):
    store = MetricStore(retention_s=7200)
    ev = RuleEvaluator(_groups(for_), store)
    states = []
    for i, temp in enumerate(temps):
        t = i * step
        store.ingest(t, "temp", [{"gpu": "0"}], np.array([temp]))
        result = ev.evaluate(t)
        states.append([s for _, s, _ in result.alerts[(0, 1)]])
    return store, ev, states


def test_a_record_is_read_back_by_a_later_rule_of_the_same_evaluation():
    store, _, states = _run([90.0])
    # The alert reads the record written at this very evaluation, so it is pending at once.
    assert states == [["pending"]]
    (row,) = store.instant(Signal("job:temp:celsius"), 0.0)
    assert row.labels == {"gpu": "0", "src": "rec"}
    assert row.points[0][1] == 90.0


def test_pending_fires_once_it_held_for_its_duration_and_pending_drops_silently():
    _, _, states = _run([90, 90, 90, 70, 90, 90, 90])
    # Evaluations every 30 s, for: 1m: pending at 0 and 30 s, firing at 60 s (held 60 s).
    assert states == [
        ["pending"],
        ["pending"],
        ["firing"],
        [],
        ["pending"],
        ["pending"],
        ["firing"],
    ]


def test_for_zero_fires_at_the_first_evaluation():
    _, _, states = _run([90.0], for_="0s")
    assert states == [["firing"]]


def test_alerts_series_carry_state_and_activation_time_and_go_stale_when_resolved():
    store, ev, _ = _run([70, 90, 90, 90, 70])
    at = 90.0  # firing since 90 s (active since 30 s), resolved at 120 s
    (firing,) = store.instant(Signal("ALERTS"), at)
    assert firing.labels == {
        "alertname": "Hot",
        "alertstate": "firing",
        "gpu": "0",
        "severity": "warning",
        "src": "rec",
    }
    (for_state,) = store.instant(Signal("ALERTS_FOR_STATE"), at)
    assert for_state.points[0][1] == 30.0
    assert store.instant(Signal("ALERTS"), 120.0) == []
    (resolved,) = ev.active_alerts()
    assert resolved.state == "inactive"
    assert resolved.resolved_at == 120.0
    assert resolved.annotations == {
        "summary": "GPU 0",
        "description": "90 C",
        "runbook_url": "http://x#hot",
    }


def test_an_unsupported_construct_fails_at_construction_naming_the_rule():
    groups = [RuleGroup("g", (_alert("topk(1, temp) > 80"),))]
    with pytest.raises(ConfigError, match=r"rule Hot in group g: .*aggregation topk"):
        RuleEvaluator(groups, MetricStore())


def test_a_failing_rule_reports_err_and_the_others_still_run():
    groups = [
        RuleGroup(
            "g",
            (
                RecordingRule("bad", "temp / on () temp"),
                RecordingRule("good", "temp * 2"),
            ),
        )
    ]
    store = MetricStore()
    ev = RuleEvaluator(groups, store)
    store.ingest(0.0, "temp", [{"gpu": "0"}, {"gpu": "1"}], np.array([1.0, 2.0]))
    result = ev.evaluate(0.0)
    assert ev.status[0][0].health == "err"
    assert "duplicate series" in ev.status[0][0].last_error
    assert sorted(v for _, v in result.records[(0, 1)]) == [2.0, 4.0]


@pytest.mark.parametrize(
    ("template", "labels", "value", "out"),
    [
        ("{{ $labels.gpu }} at {{ $value }}", {"gpu": "3"}, 85.0, "3 at 85"),
        ("{{ $value | humanizePercentage }}", {}, 0.1234, "12.34%"),
        ('{{ $value | printf "%.1f" }}', {}, 2.345, "2.3"),
        ("{{ if $labels.pod }}P{{ else }}none{{ end }}", {}, 0.0, "none"),
        ('{{ if eq $labels.x "1" }}a{{ else if eq $labels.x "2" }}b{{ end }}', {"x": "2"}, 0, "b"),
        ("{{ $value }}", {}, 1.5e-7, "1.5e-07"),
        ("{{ template }}", {}, 0.0, "<error expanding template: unsupported term 'template'>"),
    ],
)
def test_templates_expand_as_prometheus_writes_them(template, labels, value, out):
    assert expand(template, labels, float(value)) == out


def test_go_float_prints_integers_without_a_point():
    assert go_float(85.0) == "85"
    assert go_float(0.25) == "0.25"
