import io
import json
import logging
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from gpuscale.cli import evaluate as evaluate_cli
from gpuscale.errors import ConfigError
from gpuscale.evaluate import policies
from gpuscale.evaluate.runner import EvaluationRequest
from gpuscale.scaling.catalogue import KINDS
from gpuscale.scaling.static import StaticConfig


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
        ("--timeout", "GPUSCALE_EVALUATE_TIMEOUT"),
        ("--duration", "GPUSCALE_EVALUATE_DURATION"),
        ("--seed", "GPUSCALE_EVALUATE_SEED"),
        ("--fault", "GPUSCALE_EVALUATE_FAULTS"),
        ("--out", "GPUSCALE_OUT"),
        ("--jobs", "GPUSCALE_JOBS"),
        ("--traces-dir", "GPUSCALE_TRACES_DIR"),
        ("--service-time", "GPUSCALE_SERVICE_TIME"),
        ("--seeds", "GPUSCALE_SEEDS"),
        ("--warmup", "GPUSCALE_WARMUP"),
        ("--target-attainment", "GPUSCALE_TARGET_ATTAINMENT"),
        ("--knob-values", "GPUSCALE_KNOB_VALUES"),
        ("--dask-scheduler", "GPUSCALE_DASK_SCHEDULER"),
    ]:
        assert option in text
        assert env in text
    assert text.count("[default:") >= 17
    for default in ("[default: 10]", "[default: 0.99]", "[default: 8]", "[default: 600, or"):
        assert default in text


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
            "GPUSCALE_EVALUATE_DURATION": "5m",
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
        (["--trace", "nope"], "--trace nope: neither a trace name nor a file; use one of"),
        (["--trace", "nope.csv"], "--trace nope.csv: no such file: nope.csv; check the path"),
        (["--trace", "shape:nope"], "--trace shape:nope: no such shape; name one of the 44"),
        (
            ["--trace", "/nonexistent.csv"],
            "--trace /nonexistent.csv: no such file: /nonexistent.csv; check the path",
        ),
        (["--trace", "data/rates"], "--trace data/rates: no such file: data/rates"),
        (["--queue-model", "des"], "--queue-model des: is not a queue model; use one of auto"),
        (["--model", "gpt-9"], "--model gpt-9: unknown; use one of llama-2-7b"),
        (["--model", "llama-3-8b", "--storage", "tape"], "--storage tape: unknown; use one of"),
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
    from gpuscale.evaluate import policies

    assert lines == [
        f"gpuscale: error: --policy vpa: unknown policy; use one of {', '.join(policies.names())}"
    ]


def gpuscale_command():
    script = Path(sys.executable).parent / "gpuscale"
    return [str(script)] if script.exists() else [sys.executable, "-m", "gpuscale"]


def test_a_run_says_wrote_once_and_worker_logs_arrive_as_whole_lines(tmp_path):
    proc = subprocess.run(
        [
            *gpuscale_command(),
            "evaluate",
            "--trace",
            "bursty",
            "--duration",
            "300",
            "--policy",
            "static",
            "--policy",
            "hpa",
            "--jobs",
            "2",
            "--seeds",
            "1",
            "--knob-values",
            "0",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert (proc.stdout + proc.stderr).count("wrote ") == 1
    assert proc.stdout.strip().endswith(f"wrote {tmp_path}/results.json and {tmp_path}/report.html")
    for name in ("static", "hpa"):  # logged in a worker, printed by the parent
        line = rf"^\S+ \S+ INFO gpuscale.evaluate.runner: running {name} on bursty$"
        assert len(re.findall(line, proc.stderr, re.MULTILINE)) == 1, proc.stderr


def test_ctrl_c_stops_the_workers_at_once_says_so_and_exits_130(tmp_path):
    out = tmp_path / "out"
    # A shell's background job (``cmd &`` without job control) ignores SIGINT, and the
    # ignore is inherited across exec: start it with Ctrl-C's default action, as a
    # terminal's foreground job has it, whatever this test was started from.
    default_sigint = (
        "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
        "os.execvp(sys.argv[1], sys.argv[1:])"
    )
    command = [*gpuscale_command(), "evaluate", "--trace", "diurnal", "--jobs", "2"]
    proc = subprocess.Popen(
        [sys.executable, "-c", default_sigint, *command, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
        # a hang is killed with SIGABRT below, and then every thread's stack is printed
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
    )
    err = ""
    try:
        selector = selectors.DefaultSelector()
        selector.register(proc.stderr, selectors.EVENT_READ)
        deadline = time.monotonic() + 60
        seen = ""
        while "running " not in seen and time.monotonic() < deadline:
            if selector.select(timeout=1.0):
                seen += proc.stderr.readline()
        assert "running " in seen, seen
        time.sleep(0.5)
        start = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends: to every process of the job
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGABRT)  # the stacks of a hang, for the failure
            _, err = proc.communicate(timeout=30)
            pytest.fail(f"no exit 30 s after Ctrl-C; its stacks:\n{err[-20000:]}")
        elapsed = time.monotonic() - start
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()  # reap it and close its pipes
    assert proc.returncode == 130
    assert f"gpuscale: interrupted; no results written to {out}" in err
    assert elapsed < 2.0
    assert "running " not in err.split("\n", 1)[-1]  # no run started after the interrupt
    assert not (out / "results.json").exists()


def test_log_lines_go_through_the_progress_console_while_it_is_live():
    console = Console(file=io.StringIO(), force_terminal=True, width=200)
    root = logging.getLogger()
    plain = logging.StreamHandler(io.StringIO())
    plain.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    saved = list(root.handlers)
    root.handlers[:] = [plain]
    try:
        with evaluate_cli._logs_through(console):
            logging.getLogger("gpuscale.x").warning("seen %d", 3)
        logging.getLogger("gpuscale.x").warning("after")
    finally:
        root.handlers[:] = saved
    assert "WARNING gpuscale.x: seen 3" in console.file.getvalue()
    assert "seen 3" not in plain.stream.getvalue()
    assert "WARNING gpuscale.x: after" in plain.stream.getvalue()


@pytest.fixture
def extra_policy():
    """A policy registered once, the way a new one is added."""

    def fair(f):
        return StaticConfig(replicas=f.max_replicas)

    spec = policies.PolicySpec("ceiling", KINDS["static"], fair, ("replicas",))
    policies.register(spec)
    yield spec
    policies.unregister("ceiling")


def test_a_policy_registered_once_reaches_the_cli_the_runner_and_the_report(
    extra_policy, runner, tmp_path
):
    from gpuscale.evaluate.report import render_html
    from gpuscale.evaluate.runner import run_evaluation

    app = typer.Typer(pretty_exceptions_enable=False)
    evaluate_cli.register(app)
    bad = runner.invoke(app, ["--policy", "vpa", "--out", str(tmp_path)])
    listed = (
        "static, hpa, keda, kpa, hpa-behavior, hpa-sm, keda-util, keda-sm, oracle, "
        "predictive, hybrid, hybrid-deploy, ceiling"
    )
    assert f"use one of {listed}" in str(bad.exception)
    args = ["--trace", "ramp", "--duration", "300", "--jobs", "1", "--out", str(tmp_path)]
    ran = runner.invoke(app, [*args, "--policy", "ceiling", "--policy", "static"])
    assert ran.exit_code == 0, ran.output
    data = json.loads((tmp_path / "results.json").read_text())
    assert list(data["policies"]) == ["ceiling", "static"]
    assert data["policies"]["ceiling"]["units"] == {"replicas": "replicas"}
    assert evaluate_cli._policies(None)[-1] == "ceiling"  # part of the default: all of them

    prepared = EvaluationRequest("ramp", duration_s=300, policies=("ceiling", "hpa")).prepare()
    want = prepared.configs["hpa"].max_replicas  # the fair rule registered above
    assert prepared.configs["ceiling"] == StaticConfig(replicas=want)
    evaluation, results = run_evaluation(prepared)
    assert [r.policy for r in results] == ["ceiling", "hpa"]
    assert evaluation.policies["ceiling"].parameters == {"replicas": want}
    page = render_html(evaluation, results)
    assert f"<td>ceiling</td><td>replicas</td><td>{want}</td><td>replicas</td>" in page
    assert page.count("<h3>ceiling</h3>") == 1


def test_registering_a_policy_checks_its_parameters_have_units():
    def fair(f):
        return StaticConfig(replicas=1)

    with pytest.raises(ValueError, match="fair field 'nope' is unknown or has no unit"):
        policies.register(policies.PolicySpec("broken", KINDS["static"], fair, ("nope",)))
    with pytest.raises(ValueError, match="registered twice"):
        policies.register(policies.PolicySpec("static", KINDS["static"], fair, ()))
    for name in policies.names():
        spec = policies.get(name)
        assert all(spec.fair_units().values()), name


def test_a_sweep_writes_the_matched_slo_keys_and_one_bar_per_policy(app, runner, tmp_path):
    args = ["evaluate", "--trace", "ramp", "--duration", "600", "--jobs", "1"]
    args += ["--policy", "static", "--policy", "hpa", "--out", str(tmp_path)]
    result = runner.invoke(
        app,
        [*args, "--seeds", "3", "--knob-values", "2", "--warmup", "60"],
        env={"GPUSCALE_TARGET_ATTAINMENT": "0.9"},
    )
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "results.json").read_text())
    assert (data["seeds"], data["warmup_s"], data["target_attainment"]) == (3, 60.0, 0.9)
    assert 0.0 < data["ceiling"] <= 1.0
    for p in data["policies"].values():
        total = p["completed_requests"] + p["dropped_requests"] + p["in_flight_requests"]
        assert total == pytest.approx(p["requests"])
        assert len(p["gpu_hours_ci95"]) == len(p["slo_attainment_ci95"]) == 2
        assert "gpu_hours_at_target" in p
    # 3 seeds x (ceiling + each policy's points, those a bracketing sweep added among
    # them): one bar each, not one per run.
    curves = [len(data["policies"][p]["curve"]) for p in ("static", "hpa")]
    assert curves[1] >= 3  # hpa's fair value and its 2 knob values
    runs = 3 * (1 + sum(curves))
    bars = [line for line in result.output.splitlines() if "━" in line and " runs" in line]
    assert [b.split()[0] for b in bars] == ["all", "ceiling", "static", "hpa"], result.output
    assert f"{runs}/{runs} runs" in bars[0]
    assert "warm-up 60 s not scored" in result.output
    assert "seeds 0-2" in result.output
    assert "ceiling " in result.output


@pytest.mark.parametrize("model", ["fluid", "requests"])
def test_queue_model_reaches_the_scenario(model):
    prepared = EvaluationRequest("ramp", duration_s=120, queue_model=model).prepare()
    assert prepared.scenario.queue_model == model
