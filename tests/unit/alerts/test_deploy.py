"""The example files in deploy/prometheus are what the CLI renders today, and the settings
file there reads back to the defaults."""

import subprocess
import sys
from pathlib import Path

import pytest

from gpuscale.alerts.catalogue import build_catalogue
from gpuscale.alerts.config import AlertConfig, load_config
from gpuscale.alerts.render import render

DEPLOY = Path(__file__).parents[3] / "deploy" / "prometheus"


@pytest.mark.parametrize(
    ("name", "fmt"),
    [("gpuscale-rules.yml", "prometheus"), ("gpuscale-prometheusrule.yaml", "prometheus-operator")],
)
def test_checked_in_render_is_current(name, fmt):
    fix = f"regenerate: gpuscale rules render --format {fmt} --out deploy/prometheus/{name}"
    assert (DEPLOY / name).read_text() == render(build_catalogue(), fmt), fix


def test_settings_example_reads_back_to_the_defaults():
    assert load_config(DEPLOY / "alerts-settings.yml") == AlertConfig()


def test_defaults_command_prints_the_example():
    result = subprocess.run(
        [sys.executable, "-m", "gpuscale", "rules", "defaults"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0
    assert result.stdout == (DEPLOY / "alerts-settings.yml").read_text()
