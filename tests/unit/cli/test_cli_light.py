"""What each command loads: the exporter and the controller stay off the scientific stack.

Each case runs in a fresh interpreter (a test process has imported everything
already) and prints the modules it ended with. The exporter with simulated GPUs
may load numpy (their device physics is vectorised); nothing else may.
"""

import json
import textwrap
from pathlib import Path

import pytest
from typer.core import TyperCommand

from gpuscale.cli.commands import SUBCOMMANDS, load_subcommand
from tests.support.fresh import run_fresh
from tests.support.servers import free_port

SCIENTIFIC = {"numpy", "scipy", "numba", "llvmlite", "pandas", "statsmodels", "matplotlib"}
EXAMPLE = Path(__file__).resolve().parents[3] / "deploy" / "examples" / "gpuscaler.yaml"
SUBCOMMAND_MODULES = {sub.module for sub in SUBCOMMANDS.values()}


def modules_after(code: str) -> set[str]:
    """Run ``code`` in a fresh interpreter and return the modules it had imported."""
    script = textwrap.dedent(code) + textwrap.dedent(
        """
        import json as _json, os as _os, sys as _sys
        print("MODULES=" + _json.dumps(sorted(_sys.modules)), flush=True)
        _os._exit(0)
        """
    )
    done = run_fresh(script)
    line = next((x for x in done.stdout.splitlines() if x.startswith("MODULES=")), None)
    assert line is not None, done.stderr[-2000:]
    return set(json.loads(line.removeprefix("MODULES=")))


def top_level(modules: set[str]) -> set[str]:
    return {m.partition(".")[0] for m in modules}


def run_main(*args: str) -> str:
    return f"""
        from gpuscale.cli.app import main
        try:
            main({list(args)!r})
        except SystemExit:
            pass
    """


@pytest.mark.parametrize(
    ("case", "code"),
    [
        ("import gpuscale.cli.app", "import gpuscale.cli.app"),
        ("gpuscale --help", run_main("--help")),
        ("gpuscale exporter --help", run_main("exporter", "--help")),
        ("gpuscale autoscale --help", run_main("autoscale", "--help")),
    ],
)
def test_help_and_the_app_load_no_scientific_stack(case, code):
    loaded = modules_after(code)
    assert top_level(loaded) & SCIENTIFIC == set(), case


def test_the_app_imports_no_subcommand_until_one_runs():
    loaded = modules_after(run_main("--help"))
    assert loaded & SUBCOMMAND_MODULES == set()


def test_autoscale_help_loads_only_its_own_subcommand():
    loaded = modules_after(run_main("autoscale", "--help"))
    assert loaded & SUBCOMMAND_MODULES == {"gpuscale.cli.autoscale"}


def test_an_exporter_serving_simulated_gpus_loads_numpy_and_nothing_heavier():
    port = free_port()
    loaded = modules_after(
        f"""
        import threading, time, urllib.request
        from gpuscale.cli.app import main
        args = ["exporter", "--source", "sim", "--gpus", "8", "--address", "127.0.0.1:{port}"]
        threading.Thread(target=main, args=(args,), daemon=True).start()
        for _ in range(600):
            try:
                body = urllib.request.urlopen("http://127.0.0.1:{port}/metrics").read()
                break
            except OSError:
                time.sleep(0.05)
        assert b"DCGM_FI_DEV_GPU_UTIL" in body
        """
    )
    assert top_level(loaded) & SCIENTIFIC == {"numpy"}
    assert not any(
        m.startswith(("gpuscale.sim", "gpuscale.evaluate", "gpuscale.scaling")) for m in loaded
    )


def test_the_controller_with_every_policy_kind_loads_no_scientific_stack():
    # What `gpuscale autoscale` imports before its loop starts: a forecasting
    # policy loads statsmodels only when it first fits its seasonal model.
    loaded = modules_after(
        f"""
        import gpuscale.cli.autoscale
        from gpuscale.control import config, controller, kubernetes, lease, seams, server, targets
        from gpuscale.metrics.prometheus import PrometheusSource
        from gpuscale.scaling.hybrid import HybridPolicy
        from gpuscale.scaling.kpa import KpaPolicy
        from gpuscale.scaling.predictive import PredictivePolicy
        targets.runtimes(config.load({str(EXAMPLE)!r}))  # hpa and keda
        policies = [HybridPolicy(), PredictivePolicy(), KpaPolicy()]
        """
    )
    assert top_level(loaded) & SCIENTIFIC == set()


@pytest.mark.parametrize("name", list(SUBCOMMANDS))
def test_each_listed_summary_is_its_commands_own(name):
    command = load_subcommand(name)
    listed = TyperCommand(name, help=SUBCOMMANDS[name].summary)
    for limit in (45, 200):
        assert listed.get_short_help_str(limit) == command.get_short_help_str(limit)


def test_a_command_without_its_extra_names_the_extra_in_one_line():
    code = """
        import sys
        for library in ("numba", "llvmlite", "pandas", "scipy", "matplotlib", "statsmodels"):
            sys.modules[library] = None  # as if not installed: import raises ModuleNotFoundError
        from gpuscale.cli.app import main
        main(["evaluate", "--help"])
    """
    done = run_fresh(code)
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("gpuscale: error: gpuscale evaluate needs ")
    assert lines[0].endswith("pip install 'gpuscale[sim]'")
