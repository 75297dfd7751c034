"""The ``gpuscale`` front door: whole names in help at any width, one-line usage errors."""

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.main import get_command

from gpuscale.cli.app import app, main
from gpuscale.telemetry.faults import forms

SUBCOMMANDS = ("exporter", "fields", "evaluate", "autoscale")


@pytest.fixture(autouse=True)
def clean_process(monkeypatch):
    """Keep the root logger and the GPUSCALE_* environment as they were."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    for name in list(os.environ):
        if name.startswith("GPUSCALE_"):
            monkeypatch.delenv(name)
    monkeypatch.delenv("GPUSCALE_EVALUATE_FAULTS", raising=False)  # restored even if main() sets it
    monkeypatch.delenv("GPUSCALE_FAULTS", raising=False)
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def run_main(capsys, *args):
    """Run the console script's ``main`` in-process: (exit status, stdout, stderr)."""
    code = 0
    try:
        main(list(args))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def command_tree():
    return get_command(app)


def gpuscale_cmd():
    script = Path(sys.executable).with_name("gpuscale")
    return [str(script)] if script.exists() else [sys.executable, "-m", "gpuscale"]


@pytest.mark.parametrize("subcommand", [None, *SUBCOMMANDS])
def test_help_at_80_columns_shows_every_option_name_whole(capsys, monkeypatch, subcommand):
    monkeypatch.setenv("COLUMNS", "80")
    tree = command_tree()
    command = tree if subcommand is None else tree.get_command(None, subcommand)
    args = ["--help"] if subcommand is None else [subcommand, "--help"]
    code, out, err = run_main(capsys, *args)
    assert (code, err) == (0, "")
    shown = [p for p in command.params if not getattr(p, "hidden", False)]
    names = ["--help", *(n for p in shown for n in (*p.opts, *p.secondary_opts))]
    for name in names:
        assert f" {name}" in out or f"{name}," in out, name
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    if subcommand is None:
        for name in SUBCOMMANDS:
            assert f"  {name}  " in out


def test_exporter_help_names_the_long_options_that_used_to_be_cut(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    _, out, _ = run_main(capsys, "exporter", "--help")
    for name in (
        "--pod-resources-kubelet-socket",
        "--nvidia-resource-names",
        "--xid-count-window-size",
        "GPUSCALE_POD_RESOURCES_SOCKET",
        "NVIDIA_RESOURCE_NAMES",
        "GPUSCALE_XID_COUNT_WINDOW_SIZE",
    ):
        assert name in out


def test_help_keeps_hyphenated_examples_whole(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    _, out, _ = run_main(capsys, "evaluate", "--help")
    assert "gpu-lost@600" in out
    assert "\\[" not in out  # rich's escape is printed as a plain bracket
    assert "[default: none]" in out


def test_boolean_flags_are_shown_and_taken_as_flags(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    _, out, _ = run_main(capsys, "exporter", "--help")
    assert "-k, --kubernetes / --no-kubernetes" in out
    assert "<bool>" not in out
    exporter = command_tree().get_command(None, "exporter")
    assert exporter.make_context("exporter", ["--kubernetes"]).params["kubernetes"] is True
    assert exporter.make_context("exporter", ["-k"]).params["kubernetes"] is True
    assert exporter.make_context("exporter", []).params["kubernetes"] is False


def test_help_through_a_pipe_shows_every_option_name_whole():
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run(
        [*gpuscale_cmd(), "exporter", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "--pod-resources-kubelet-socket <str>" in proc.stdout
    assert "--nvidia-resource-names <list[str]>" in proc.stdout
    assert "--kubernetes-resource-name" not in proc.stdout  # the deprecated alias is hidden
    assert "…" not in proc.stdout


@pytest.mark.parametrize(
    ("args", "env", "where", "path"),
    [
        (["exporter", "--gpus", "-1"], {}, "--gpus -1", "gpuscale exporter"),
        (["exporter", "--gpus=-1"], {}, "--gpus -1", "gpuscale exporter"),
        (["exporter"], {"GPUSCALE_GPUS": "-1"}, "GPUSCALE_GPUS=-1", "gpuscale exporter"),
        (["exporter", "--gpus", "-2"], {"GPUSCALE_GPUS": "4"}, "--gpus -2", "gpuscale exporter"),
        (["exporter", "-c", "5"], {}, "-c 5", "gpuscale exporter"),
        (["exporter", "--source", "tpu"], {}, "--source tpu", "gpuscale exporter"),
        (["exporter"], {"GPUSCALE_KUBERNETES": "maybe"}, "GPUSCALE_KUBERNETES=maybe", None),
        (["evaluate", "--jobs", "many"], {}, "--jobs many", "gpuscale evaluate"),
        (["--log-level", "loud", "fields"], {}, "--log-level loud", "gpuscale"),
        (["exporter", "--bogus"], {}, "--bogus: no such option", "gpuscale exporter"),
        (["exporter", "--gpus"], {}, "--gpus: requires an argument", "gpuscale exporter"),
        (["nope"], {}, "gpuscale: no such command 'nope'", "gpuscale"),
    ],
)
def test_usage_errors_are_one_line_naming_the_flag_or_the_variable(
    capsys, monkeypatch, args, env, where, path
):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, out, err = run_main(capsys, *args)
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"gpuscale: error: {where}")
    assert lines[0].endswith(f" see '{path or 'gpuscale exporter'} --help'")
    assert "╭" not in err
    assert "Usage:" not in err


def test_range_error_says_what_the_range_is(capsys):
    _, _, err = run_main(capsys, "exporter", "--gpus", "-1")
    assert err == (
        "gpuscale: error: --gpus -1: input should be greater than or equal to 1; "
        "see 'gpuscale exporter --help'\n"
    )


def test_config_errors_from_a_command_stay_one_line_with_exit_2(capsys):
    code, out, err = run_main(
        capsys, "exporter", "--source", "sim", "--address", "127.0.0.1:0", "--fault", "x@1"
    )
    assert code == 2
    assert out == ""
    assert err.splitlines() == [
        f"gpuscale: error: --fault 'x@1': unknown fault kind 'x'; use {forms('exporter')}"
    ]
    assert "gpu-lost@SECONDS:gpu=N" in err


def test_no_arguments_prints_the_help_and_exits_2(capsys):
    code, out, err = run_main(capsys)
    assert code == 2
    assert "Usage: gpuscale [OPTIONS] COMMAND [ARGS]..." in out + err
    assert "evaluate" in out + err


def test_evaluate_reads_its_own_faults_variable_and_names_it(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("GPUSCALE_EVALUATE_FAULTS", "xid@5:code=13")
    code, _, err = run_main(capsys, "evaluate", "--duration", "60", "--out", str(tmp_path))
    assert code == 2
    assert err.splitlines()[-1].startswith(
        "gpuscale: error: GPUSCALE_EVALUATE_FAULTS='xid@5:code=13': the simulator "
        "(gpuscale evaluate) cannot inject xid faults; use gpu-lost@SECONDS"
    )


def test_the_exporters_fault_variable_does_not_reach_evaluate(capsys, monkeypatch, tmp_path):
    # GPUSCALE_FAULTS is the exporter's (and up's): set for them, evaluate must not read it
    monkeypatch.setenv("GPUSCALE_FAULTS", "xid@5:code=13")
    monkeypatch.setenv("GPUSCALE_DURATION", "30.5")
    code, _, err = run_main(
        capsys,
        "evaluate",
        "--duration",
        "60",
        "--policy",
        "static",
        "--seeds",
        "1",
        "--knob-values",
        "0",
        "--out",
        str(tmp_path),
    )
    assert code == 0, err


def test_old_simulator_variable_still_works_with_a_warning(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("GPUSCALE_SIM_FAULTS", "melt@5")
    monkeypatch.delenv("GPUSCALE_EVALUATE_FAULTS", raising=False)
    code, _, err = run_main(capsys, "evaluate", "--duration", "60", "--out", str(tmp_path))
    assert code == 2
    warning, error = err.splitlines()
    assert warning.endswith(
        "GPUSCALE_SIM_FAULTS is deprecated and stops working in the next release; "
        "set GPUSCALE_EVALUATE_FAULTS instead"
    )
    assert error.startswith(
        "gpuscale: error: GPUSCALE_SIM_FAULTS='melt@5': unknown fault kind 'melt'"
    )
