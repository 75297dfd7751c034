"""scripts/build-images parses and answers its command line; building is not a test's job.

The build itself (debootstrap, pip, umoci) takes minutes and needs root and the
network, so it runs by hand (docs/images.md); these only check what it says.
"""

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "build-images"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=30, check=False
    )


def test_script_is_valid_bash():
    done = subprocess.run(
        ["bash", "-n", str(SCRIPT)], capture_output=True, text=True, timeout=30, check=False
    )
    assert (done.returncode, done.stderr) == (0, "")


def test_help_names_the_options_and_the_images():
    done = _run("--help")
    assert done.returncode == 0
    for word in ("--mirror URL", "--suite NAME", "--no-check", "gpuscale-exporter", "umoci"):
        assert word in done.stdout


def test_unknown_argument_is_one_line_and_status_2():
    done = _run("--registry", "x")
    assert done.returncode == 2
    assert done.stderr == (
        "build-images: unknown argument '--registry'; see scripts/build-images --help\n"
    )
    assert done.stdout == ""


def test_an_option_without_its_value_is_refused():
    done = _run("--mirror")
    assert done.returncode == 2
    assert done.stderr == "build-images: --mirror needs a URL\n"
