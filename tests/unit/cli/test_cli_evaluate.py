import json
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from gpuscale.cli import evaluate as evaluate_cli
from gpuscale.errors import ConfigError


@pytest.fixture
def app():
    app = typer.Typer(pretty_exceptions_enable=False)
    evaluate_cli.register(app)

    @app.command("noop")
    def noop() -> None:
        """Keeps ``evaluate`` a subcommand."""

    return app


@pytest.fixture
def runner():
    return CliRunner()


def test_help_documents_every_option_with_env_var_and_default(app, runner):
    result = runner.invoke(app, ["evaluate", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = result.output
    for option, env in [
        ("--trace", "GPUSCALE_TRACE"),
        ("--policy", "GPUSCALE_POLICY"),
        ("--scale", "GPUSCALE_SCALE"),
        ("--slo-latency", "GPUSCALE_SLO_LATENCY"),
        ("--timeout", "GPUSCALE_TIMEOUT"),
        ("--duration", "GPUSCALE_DURATION"),
        ("--seed", "GPUSCALE_SEED"),
        ("--fault", "GPUSCALE_SIM_FAULTS"),
        ("--out", "GPUSCALE_OUT"),
        ("--jobs", "GPUSCALE_JOBS"),
        ("--traces-dir", "GPUSCALE_TRACES_DIR"),
        ("--service-time", "GPUSCALE_SERVICE_TIME"),
    ]:
        assert option in text
        assert env in text
    assert text.count("[default:") >= 12


def test_evaluate_writes_results_and_report_and_prints_the_table(app, runner, tmp_path):
    out = tmp_path / "ev"
    result = runner.invoke(
        app,
        [
            "evaluate",
            "--trace",
            "bursty",
            "--duration",
            "600",
            "--policy",
            "static",
            "--policy",
            "oracle",
            "--scale",
            "2",
            "--seed",
            "3",
            "--jobs",
            "1",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads((out / "results.json").read_text())
    assert data["trace"] == "bursty"
    assert data["seed"] == 3
    assert data["duration_s"] == 600
    assert list(data["policies"]) == ["static", "oracle"]
    assert 0.0 <= data["policies"]["oracle"]["slo_attainment"] <= 1.0
    assert "data:image/png;base64," in (out / "report.html").read_text()
    assert "within SLO" in result.output
    assert "oracle" in result.output


def test_options_come_from_gpuscale_environment_variables(app, runner, tmp_path):
    out = tmp_path / "env"
    result = runner.invoke(
        app,
        ["evaluate"],
        env={
            "GPUSCALE_TRACE": "flash-crowd",
            "GPUSCALE_POLICY": "static hpa",
            "GPUSCALE_DURATION": "300",
            "GPUSCALE_SLO_LATENCY": "6",
            "GPUSCALE_JOBS": "1",
            "GPUSCALE_OUT": str(out),
        },
    )
    assert result.exit_code == 0, result.output
    data = json.loads((out / "results.json").read_text())
    assert data["trace"] == "flash-crowd"
    assert list(data["policies"]) == ["static", "hpa"]
    assert data["duration_s"] == 300
    assert data["slo_latency_s"] == 6.0
    assert data["timeout_s"] == 24.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "vpa"], "--policy vpa: unknown policy"),
        (["--policy", "hpa", "--policy", "hpa"], "named twice"),
        (["--scale", "0"], "--scale 0.0: must be a number > 0"),
        (["--jobs", "0"], "--jobs 0: must be 1 or more"),
        (["--fault", "gpu-lost"], "--fault 'gpu-lost': expected KIND@SECONDS"),
        (["--slo-latency", "0"], "--slo-latency 0.0"),
        (["--trace", "nope.csv"], "--trace nope.csv: neither a trace name nor a file"),
    ],
)
def test_bad_options_raise_one_line_config_errors(app, runner, tmp_path, args, message):
    result = runner.invoke(app, ["evaluate", "--duration", "60", "--out", str(tmp_path), *args])
    assert isinstance(result.exception, ConfigError), result.output
    assert message in str(result.exception)
    assert "\n" not in str(result.exception)
    assert not (tmp_path / "results.json").exists()


def test_console_script_exits_2_with_one_line_on_a_bad_option(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "gpuscale", "evaluate", "--policy", "vpa", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines == [
        "gpuscale: error: --policy vpa: unknown policy; use one of static, hpa, keda, kpa, oracle"
    ]
