"""Settings files: defaults, overrides, and one-line errors naming file, line and key."""

import subprocess
import sys
from pathlib import Path

import pytest

from gpuscale.alerts.config import AlertConfig, duration_seconds, load_config, parse_config
from gpuscale.errors import ConfigError


def _error(text: str, tmp_path: Path) -> str:
    path = tmp_path / "alerts.yml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return str(info.value)


@pytest.mark.parametrize(
    ("text", "seconds"), [("0s", 0), ("30s", 30), ("5m", 300), ("1h30m", 5400), ("2d", 172800)]
)
def test_durations_read_as_prometheus_writes_them(text, seconds):
    assert duration_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "5", "5 minutes", "1m1h", "-5m"])
def test_malformed_durations_are_refused(text):
    with pytest.raises(ValueError, match="is not a duration"):
        duration_seconds(text)


def test_no_file_gives_the_defaults_and_a_partial_section_keeps_the_other_defaults(tmp_path):
    assert load_config(None) == AlertConfig()
    config = parse_config("alerts:\n  GpuTemperatureHigh:\n    for: 30s\n", tmp_path / "a.yml")
    high = config.alerts.GpuTemperatureHigh
    assert (high.for_, high.threshold, high.severity) == ("30s", 85.0, "warning")
    assert config.alerts.GpuFellOffBus == AlertConfig().alerts.GpuFellOffBus


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "alerts:\n  GpuTemperatureHigh:\n    threshold: hot\n",
            ":3 alerts.GpuTemperatureHigh.threshold: input should be a valid number",
        ),
        (
            "alerts:\n  GpuTemperatureHigh:\n    treshold: 3\n",
            ":3 alerts.GpuTemperatureHigh.treshold: unknown key; remove it or fix its "
            "spelling (valid: enabled, for, severity, threshold)",
        ),
        (
            "alerts:\n  GpuStraggler:\n    for: 5 minutes\n",
            ":3 alerts.GpuStraggler.for: the value is not a duration such as 30s",
        ),
        ("alerts:\n  GpuOnFire: {}\n", ":2 alerts.GpuOnFire: unknown key"),
        (
            "slos:\n  - name: ttft\n    objective: 1.5\n    good: a\n    total: b\n",
            ":3 slos.0.objective: input should be less than 1",
        ),
        ("alerts:\n  GpuIdleWhileAllocated:\n    severity: loud\n", ":3 alerts.GpuIdle"),
        ("alerts: [1\n", ":2:1: YAML syntax error"),
        ("- a\n- b\n", ": is not a mapping"),
    ],
)
def test_a_bad_file_is_one_line_naming_file_line_and_key(tmp_path, text, expected):
    message = _error(text, tmp_path)
    assert "\n" not in message
    assert message.startswith(str(tmp_path / "alerts.yml"))
    assert expected in message


def test_bad_settings_file_on_the_command_line_exits_2_with_one_line(tmp_path):
    bad = tmp_path / "alerts.yml"
    bad.write_text("alerts:\n  GpuMemoryNearFull:\n    threshold: 1.5\n")
    result = subprocess.run(
        [sys.executable, "-m", "gpuscale", "rules", "render", "--config", str(bad), "--out", "-"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip() == (
        f"gpuscale: error: {bad}:3 alerts.GpuMemoryNearFull.threshold: input should be less "
        "than or equal to 1; see docs/alerts.md for the keys and their defaults"
    )
