"""The rendered catalogue in the real promtool: ``check rules`` on both formats, and
``promtool test rules`` on tests/data/alerts (a firing and a must-not-fire case per alert)."""

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gpuscale.alerts.catalogue import build_catalogue
from gpuscale.alerts.config import parse_config
from gpuscale.alerts.model import alert_names
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


def test_tuned_settings_render_to_a_file_promtool_accepts(promtool, tmp_path):
    settings = (
        "interval: 15s\nlabels: {team: gpu}\n"
        "alerts:\n  GpuTemperatureHigh: {threshold: 80, for: 30s}\n"
        "  GpuStraggler: {enabled: false}\n"
        "slos:\n  - {name: avail, objective: 0.999, good: 'ok_total', total: 'all_total'}\n"
    )
    groups = build_catalogue(parse_config(settings, tmp_path / "s.yml"))
    path = tmp_path / "rules.yml"
    path.write_text(render(groups))
    result = _check(promtool, path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "GpuStraggler" not in alert_names(groups)
    doc = yaml.safe_load(path.read_text())
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
