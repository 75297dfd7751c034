"""The rendered catalogue in the real promtool: ``check rules`` on both formats, and
``promtool test rules`` on tests/data/alerts (a firing and a must-not-fire case per alert)."""

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gpuscale.alerts.catalogue import build_catalogue, health_rules
from gpuscale.alerts.config import AlertConfig, parse_config
from gpuscale.alerts.model import Builder, RuleGroup, alert_names, alerts_of
from gpuscale.alerts.render import render

DATA = Path(__file__).parents[2] / "data" / "alerts"


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not installed: run ./scripts/test, which installs it")
    return path


def _check(promtool: str, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )


def test_prometheus_format_passes_promtool_check_with_every_rule(promtool, tmp_path):
    groups = build_catalogue()
    path = tmp_path / "rules.yml"
    path.write_text(render(groups, "prometheus"))
    result = _check(promtool, path)
    assert result.returncode == 0, result.stdout + result.stderr
    rules = sum(len(g.rules) for g in groups)
    assert f"SUCCESS: {rules} rules found" in result.stdout


def test_operator_format_embeds_a_spec_that_passes_promtool_check(promtool, tmp_path):
    resource = yaml.safe_load(render(build_catalogue(), "prometheus-operator"))
    assert resource["apiVersion"] == "monitoring.coreos.com/v1"
    assert resource["kind"] == "PrometheusRule"
    path = tmp_path / "spec.yml"
    path.write_text(yaml.safe_dump({"groups": resource["spec"]["groups"]}))
    result = _check(promtool, path)
    assert result.returncode == 0, result.stdout + result.stderr


def _settings_checked(promtool: str, tmp_path: Path, settings: str) -> list[RuleGroup]:
    """Render ``settings`` and assert that promtool accepts the file, lint included."""
    groups = list(build_catalogue(parse_config(settings, tmp_path / "s.yml")))
    path = tmp_path / "rules.yml"
    path.write_text(render(groups))
    result = _check(promtool, path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout, result.stderr  # a lint failure (duplicates) exits 0
    return groups


def test_tuned_settings_render_to_a_file_promtool_accepts(promtool, tmp_path):
    settings = (
        "interval: 15s\nlabels: {team: gpu}\n"
        "alerts:\n  GpuTemperatureHigh: {threshold: 80, for: 30s}\n"
        "  GpuStraggler: {enabled: false}\n"
        "slos:\n  - {name: avail, objective: 0.999, good: 'ok_total', total: 'all_total'}\n"
    )
    groups = _settings_checked(promtool, tmp_path, settings)
    assert "GpuStraggler" not in alert_names(groups)
    doc = yaml.safe_load((tmp_path / "rules.yml").read_text())
    assert {g["interval"] for g in doc["groups"]} == {"15s"}
    high = next(
        r for g in doc["groups"] for r in g["rules"] if r.get("alert") == "GpuTemperatureHigh"
    )
    assert high["for"] == "30s"
    assert "> 80.0" in high["expr"]
    assert high["labels"] == {"severity": "warning", "team": "gpu"}


def test_promtool_unit_tests_pass_and_cover_every_alert(promtool, tmp_path):
    (tmp_path / "rules.yml").write_text(render(build_catalogue()))
    tests = sorted(DATA.glob("*.test.yml"))
    covered: set[str] = set()
    silent: set[str] = set()
    for test in tests:
        shutil.copy(test, tmp_path / test.name)
        for group in yaml.safe_load(test.read_text())["tests"]:
            for case in group.get("alert_rule_test", []):
                (covered if case["exp_alerts"] else silent).add(case["alertname"])
    # Every alert has a case where it fires and one where it must not.
    assert covered == set(alert_names(build_catalogue()))
    assert silent == covered
    result = subprocess.run(
        [promtool, "test", "rules", *(t.name for t in tests)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(tests)


def _default_counters() -> set[str]:
    """The series dcgm-exporter serves with its default counters file (uncommented rows)."""
    csv = DATA.parent / "dcgm-exporter" / "default-counters.csv"
    rows = (line.strip() for line in csv.read_text().splitlines())
    return {row.split(",")[0].strip() for row in rows if row and not row.startswith("#")}


def test_stock_cases_read_only_default_counters_and_cover_every_health_alert():
    doc = yaml.safe_load((DATA / "stock.test.yml").read_text())
    names = {s["series"].split("{")[0] for group in doc["tests"] for s in group["input_series"]}
    assert "DCGM_FI_DEV_XID_ERRORS" in names
    assert names <= _default_counters() | {"up"}
    fired, silent = set(), set()
    for group in doc["tests"]:
        for case in group["alert_rule_test"]:
            (fired if case["exp_alerts"] else silent).add(case["alertname"])
    # GpuPowerCapped's only source, DCGM_FI_DEV_POWER_VIOLATION, is off by default.
    health = {a.alert for a in health_rules(Builder(AlertConfig()))} - {"GpuPowerCapped"}
    assert fired == health
    assert silent == health


def test_several_slos_render_to_a_file_promtool_accepts(promtool, tmp_path):
    # Each SLO's burn-rate alerts carry its name, so two SLOs are not duplicate rules.
    settings = (
        "slos:\n  - {name: ttft, objective: 0.99, good: a, total: b}\n"
        "  - {name: avail, objective: 0.999, good: c, total: d}\n"
    )
    groups = _settings_checked(promtool, tmp_path, settings)
    burns = [a for a in alerts_of(groups) if a.alert == "SloErrorBudgetBurn"]
    assert sorted(dict(a.labels)["slo"] for a in burns) == ["avail", "avail", "ttft", "ttft"]


def test_every_xid_critical_is_one_rule_promtool_accepts(promtool, tmp_path):
    # Two rules both critical would be duplicates, which promtool's lint refuses.
    groups = _settings_checked(promtool, tmp_path, "alerts:\n  GpuXidError: {severity: critical}\n")
    xid_rules = [a for a in alerts_of(groups) if a.alert == "GpuXidError"]
    assert [a.severity for a in xid_rules] == ["critical"]
