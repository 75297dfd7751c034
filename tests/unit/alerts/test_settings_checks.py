"""Settings that would break or bend the rendered PromQL are refused with one line, as
Prometheus would refuse them; values pasted into PromQL are quoted so they keep their meaning."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpuscale.alerts.catalogue import build_catalogue
from gpuscale.alerts.config import load_config, parse_config
from gpuscale.alerts.model import alerts_of
from gpuscale.alerts.promql_text import check_regex, duration_seconds, promql_string
from gpuscale.alerts.render import render
from gpuscale.errors import ConfigError

_SLO = "  - {name: a, objective: 0.9, good: x, total: y}\n"


def _error(content: str | bytes, tmp_path: Path) -> str:
    path = tmp_path / "alerts.yml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(str(path))
    return message.removeprefix(str(path))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A threshold no value is ever above: the alert would never fire.
        ("alerts:\n  GpuTemperatureHigh: {threshold: .nan}\n", ":2 alerts.GpuTemperatureHigh"),
        ("alerts:\n  GpuTemperatureHigh: {threshold: .inf}\n", "finite number"),
        ("alerts:\n  GpuTemperatureAnomaly:\n    threshold: -.inf\n", ":3 alerts.GpuTemp"),
        ("burn_windows:\n  - {long: 1h, short: 5m, factor: .nan}\n", ":2 burn_windows.0.factor"),
        # Label names outside Prometheus's grammar, reserved, or the catalogue's own.
        ("labels:\n  team-name: gpu\n", ":2 labels.team-name"),
        ("labels:\n  __route: pager\n", "starts with __"),
        ("labels:\n  severity: page\n", ":1 labels: the value sets severity"),
        ("labels:\n  team: '{{ $value }}'\n", "would expand as a template"),
        ("slos:\n  - {name: a, objective: 0.9, good: x, total: y, by: [bad-label]}\n", "by.0"),
        # Regular expressions RE2 rejects, or that promtool would.
        ("exporter_job: '(?!node).*'\n", "(RE2)"),
        ("exporter_job: '(a)\\1'\n", "backreference"),
        ("exporter_job: 'dcgm('\n", "not a valid regular expression"),
        ("exporter_job: 'a{1001}'\n", "repeat counts over 1000"),
        ("exporter_job: '(a{100}){11}'\n", "nested counts multiply"),
        # PromQL pasted into rate(...): only a selector is taken.
        ("slos:\n  - {name: a, objective: 0.9, good: 'x) or vector(1', total: y}\n", "good"),
        ("slos:\n  - {name: a, objective: 0.9, good: 'x offset 1h', total: y}\n", "offset"),
        # Durations in Prometheus's grammar, whole seconds, a window above zero.
        ("alerts:\n  GpuStraggler: {for: 1500ms}\n", "whole number of seconds"),
        ("alerts:\n  GpuStraggler: {dip_window: 0s}\n", "longer than 0s"),
        ("alerts:\n  GpuStraggler: {for: 2y}\n", "longer than a year"),
        ("alerts:\n  GpuStraggler: {for: 5m1h}\n", "not a duration"),
        ("runbook_url: 'javascript:alert(1)'\n", ":1 runbook_url: the value is not an http"),
        ("prometheus_rule: {namespace: Monitoring}\n", "Kubernetes namespace"),
        ("prometheus_rule:\n  labels: {release: 'kube prometheus'}\n", "label value"),
        # Characters no setting may hold: written as escapes, or raw.
        ('labels:\n  team: "gpu\\0"\n', ":2 labels.team: holds a control character"),
        ("labels:\n  team: gpu\x00\n", ":2:12: holds a NUL byte"),
        ('labels: {team: "\\ud800"}\n', "unpaired surrogate"),
        (
            "labels: &a [*a]\n",
            ":1:13: YAML syntax error: an alias refers to a node that contains it",
        ),
        ("slos:\n" + _SLO + _SLO, ":1 slos: the value names an SLO twice"),
        (
            "burn_windows: [{long: 1h, short: 5m, factor: 2}, {long: 60m, short: 1m, factor: 3}]\n",
            "same long window",
        ),
        ('labels: {"a\\nb": x}\n', ":1 labels.a\\u000ab"),
    ],
)
def test_a_setting_prometheus_would_refuse_is_one_line(tmp_path, text, expected):
    assert expected in _error(text, tmp_path)


def test_a_file_that_is_not_utf8_names_its_line_and_not_its_bytes(tmp_path):
    message = _error(b"labels:\n  team: caf\xe9\n", tmp_path)
    assert message == ":2:12: is not UTF-8; save it as UTF-8"


def test_errors_do_not_repeat_the_value(tmp_path):
    secret = "s3cr3t-value-from-the-file"
    for text in (
        f"alerts:\n  GpuStraggler: {{for: {secret}}}\n",
        f"exporter_job: '(?={secret})'\n",
        f"runbook_url: {secret}\n",
        f"alerts: [{secret}\n",
        f"alerts: !{secret} 1\n",
    ):
        assert secret not in _error(text, tmp_path)


def test_a_quote_in_the_job_pattern_stays_inside_the_string(tmp_path):
    # Pasted bare, this would close the matcher and make GpuExporterDown always fire.
    sneaky = 'a"} or vector(1) #'
    config = parse_config(f"exporter_job: '{sneaky}'\n", tmp_path / "s.yml")
    down = next(a for a in alerts_of(build_catalogue(config)) if a.alert == "GpuExporterDown")
    assert f"up{{job=~{promql_string(sneaky)}}} == 0" in down.expr
    assert 'or vector(1) #"}' in down.expr
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool is not installed: run ./scripts/test"
    rules = tmp_path / "rules.yml"
    rules.write_text(render(build_catalogue(config)))
    check = subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS" in check.stdout, check.stderr


def test_slo_selectors_are_written_anew_in_the_quoting_prometheus_2_reads(tmp_path):
    text = (
        'slos:\n  - {name: a, objective: 0.9, good: "x{a=\'b\\"c\'}", total: \'{__name__="y"}\'}\n'
    )
    slo = parse_config(text, tmp_path / "s.yml").slos[0]
    assert (slo.good, slo.total) == ('x{a="b\\"c"}', '{__name__="y"}')


@pytest.mark.parametrize(
    ("value", "literal"),
    [('a"b', '"a\\"b"'), ("a\\b", '"a\\\\b"'), ("a\nb", '"a\\nb"'), ("café", '"café"')],
)
def test_promql_strings_escape_as_go_reads_them(value, literal):
    assert promql_string(value) == literal


@pytest.mark.parametrize(
    "pattern", ["dcgm-exporter|nvidia-dcgm-exporter", ".+-dcgm-exporter", "(?i)gpu.*", "[a-z]{2,3}"]
)
def test_patterns_both_engines_read_alike_are_kept(pattern):
    assert check_regex(pattern) == pattern


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0), ("1w", 604800), ("1d2h", 93600), ("90000ms", 90), ("1y", 31536000)],
)
def test_durations_follow_prometheus_grammar(text, seconds):
    assert duration_seconds(text) == seconds


def test_prometheus_rule_metadata_comes_from_the_settings_and_the_command_line(tmp_path):
    settings = tmp_path / "s.yml"
    settings.write_text(
        "labels: {team: gpu}\n"
        "prometheus_rule:\n  name: gpu-alerts\n  namespace: monitoring\n"
        "  labels: {release: prom}\n  annotations: {owner: gpu-team}\n"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuscale",
            "rules",
            "render",
            "--config",
            str(settings),
            "--format",
            "prometheus-operator",
            "--namespace",
            "observability",
            "--out",
            "-",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    resource = yaml.safe_load(out.stdout)
    assert resource["metadata"] == {
        "name": "gpu-alerts",
        "namespace": "observability",
        "labels": {"release": "prom"},
        "annotations": {"owner": "gpu-team"},
    }
    # The settings' labels go onto the rules, not onto the object.
    rules = [r for g in resource["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert all(r["labels"]["team"] == "gpu" for r in rules)


def test_a_bad_namespace_flag_is_one_line_with_status_2():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuscale",
            "rules",
            "render",
            "--format",
            "prometheus-operator",
            "--namespace",
            "Bad_NS",
            "--out",
            "-",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.startswith("gpuscale: error: --namespace: is not a Kubernetes namespace")
    assert out.stderr.count("\n") == 1
