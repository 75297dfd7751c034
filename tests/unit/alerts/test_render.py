"""Rendering: both formats carry the same groups; every alert is complete; the CLI writes them."""

import subprocess
import sys
from pathlib import Path

import yaml

from gpuscale.alerts.catalogue import build_catalogue
from gpuscale.alerts.config import AlertConfig, parse_config
from gpuscale.alerts.model import alerts_of
from gpuscale.alerts.render import render

ISSUE_ALERTS = {
    "GpuFellOffBus",
    "GpuXidError",
    "GpuEccDoubleBitError",
    "GpuRowRemapFailure",
    "GpuThermalThrottling",
    "GpuPowerCapped",
    "GpuTemperatureHigh",
    "GpuMemoryNearFull",
    "GpuIdleWhileAllocated",
    "GpuStraggler",
    "GpuExporterDown",
    "GpuMetricsStale",
    "SloErrorBudgetBurn",
}
NEUTRAL = {
    "gpuscale:gpu_utilization:ratio",
    "gpuscale:gpu_memory_used:ratio",
    "gpuscale:gpu_power:watts",
    "gpuscale:gpu_temperature:celsius",
}


def _rules(doc: dict) -> list[dict]:
    return [r for g in doc["groups"] for r in g["rules"]]


def test_every_alert_the_issue_names_is_there_with_severity_text_and_no_invented_runbook():
    doc = yaml.safe_load(render(build_catalogue()))
    alerts = [r for r in _rules(doc) if "alert" in r]
    assert {a["alert"] for a in alerts} >= ISSUE_ALERTS
    for a in alerts:
        assert a["labels"]["severity"] in ("critical", "warning", "info")
        # No public address serves the runbooks by default, so no link is made up.
        assert set(a["annotations"]) == {"summary", "description"}


def test_runbook_base_links_each_alert_to_its_anchor(tmp_path):
    base = "https://wiki.example.com/gpu/alerts.md"
    config = parse_config(f"runbook_url: {base}\n", tmp_path / "s.yml")
    doc = yaml.safe_load(render(build_catalogue(config)))
    for a in (r for r in _rules(doc) if "alert" in r):
        assert a["annotations"]["runbook_url"] == f"{base}#{a['alert'].lower()}"
    anchors = {
        line[4:].strip().lower()
        for line in (Path(__file__).parents[3] / "docs" / "alerts.md").read_text().splitlines()
        if line.startswith("### ")
    }
    assert {a.alert.lower() for a in alerts_of(build_catalogue(config))} <= anchors


def test_neutral_records_map_both_vendors():
    doc = yaml.safe_load(render(build_catalogue()))
    records = [r for r in _rules(doc) if "record" in r and r["record"] in NEUTRAL]
    vendors = {(r["record"], r["labels"]["vendor"]) for r in records}
    assert vendors == {(n, v) for n in NEUTRAL for v in ("nvidia", "amd")}
    amd = {r["record"]: r["expr"] for r in records if r["labels"]["vendor"] == "amd"}
    assert "gpu_gfx_activity / 100" in amd["gpuscale:gpu_utilization:ratio"]
    assert '"gpu", "$1", "gpu_id"' in amd["gpuscale:gpu_utilization:ratio"]


def test_operator_resource_spec_is_the_rules_file():
    groups = build_catalogue()
    plain = yaml.safe_load(render(groups, "prometheus"))
    resource = yaml.safe_load(render(groups, "prometheus-operator"))
    assert resource["spec"] == plain
    assert resource["metadata"]["name"] == "gpuscale"


def test_burn_rate_alerts_follow_the_workbook_pairs_and_the_objective():
    config = parse_config(
        "slos:\n  - {name: avail, objective: 0.999, good: ok_total, total: all_total}\n",
        Path("s.yml"),
    )
    alerts = {
        a.labels[-1][1]: a for a in alerts_of(build_catalogue(config)) if a.alert.startswith("Slo")
    }
    assert set(alerts) == {"1h", "6h"}
    # 14.4 x (1 - 0.999) and 6 x (1 - 0.999).
    assert alerts["1h"].expr == (
        'gpuscale:slo_errors:ratio_rate1h{slo="avail"} > 0.0144 and '
        'gpuscale:slo_errors:ratio_rate5m{slo="avail"} > 0.0144'
    )
    assert "> 0.006 and" in alerts["6h"].expr
    assert "ratio_rate30m" in alerts["6h"].expr


def test_disabled_alerts_and_no_slos_leave_them_out():
    config = parse_config("slos: []\nalerts:\n  GpuPowerCapped: {enabled: false}\n", Path("s.yml"))
    names = {a.alert for a in alerts_of(build_catalogue(config))}
    assert "GpuPowerCapped" not in names
    assert "SloErrorBudgetBurn" not in names
    assert [g.name for g in build_catalogue(config)] == ["gpuscale.gpu"]
    assert AlertConfig().alerts.GpuPowerCapped.enabled


def test_cli_writes_the_operator_resource_to_the_out_file(tmp_path):
    out = tmp_path / "rule.yaml"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuscale",
            "rules",
            "render",
            "--format",
            "prometheus-operator",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(out.read_text())["kind"] == "PrometheusRule"
    assert f"wrote {out}" in result.stderr


def test_violation_counters_default_to_nanoseconds_and_microseconds_divide_by_1e6(tmp_path):
    # The rule that reads the violation counter (the other reads the temperature).
    default = {a.alert: a.expr for a in reversed(alerts_of(build_catalogue()))}
    us = parse_config("violation_unit: us\n", tmp_path / "s.yml")
    changed = {a.alert: a.expr for a in reversed(alerts_of(build_catalogue(us)))}
    assert "[5m]) / 1e9 > 0.05" in default["GpuThermalThrottling"]
    assert "[5m]) / 1e6 > 0.05" in changed["GpuThermalThrottling"]
    # GpuPowerCapped reads the capped share through its recording rule.
    records = {
        r.record: r.expr for g in build_catalogue(us) for r in g.rules if hasattr(r, "record")
    }
    assert records["gpuscale:gpu_power_capped:ratio"].endswith("[1m]) / 1e6")
    assert "gpuscale:gpu_power_capped:ratio[5m]) > 0.5" in changed["GpuPowerCapped"]
