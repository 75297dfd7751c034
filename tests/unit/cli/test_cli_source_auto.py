"""``--source auto``, the exporter's default: real GPUs through NVML, then amdsmi, or no start.

The libraries are the checked-in fakes (tests/fakes), or absent: ``sys.modules[name] = None``
makes ``import name`` fail as it does where the package is not installed.
"""

import sys

import pytest

from gpuscale.cli.exporter_options import SourceName
from gpuscale.cli.sources import SimFleet, open_source
from gpuscale.errors import ConfigError, SourceUnavailableError
from tests.support.fresh import run_fresh
from tests.support.nvml import fake_amdsmi, fake_pynvml


@pytest.fixture(autouse=True)
def no_host_slurm(monkeypatch, tmp_path):
    # No Slurm prolog files from the host: an empty job folder of our own.
    monkeypatch.setenv("GPUSCALE_SLURM_JOB_DIR", str(tmp_path / "slurm"))


def open_auto(amd_config=None):
    return open_source(SourceName.auto, SimFleet(), "node-1", amd_config)


def nvidia(monkeypatch, gpus, init_error=None):
    fake = fake_pynvml(monkeypatch)
    fake.configure([fake.FakeGpu() for _ in range(gpus)], init_error=init_error)


def amd(monkeypatch, gpus, init_error=None):
    fake = fake_amdsmi(monkeypatch)
    fake.configure([fake.FakeAmdGpu() for _ in range(gpus)], init_error=init_error)


def test_nvidia_gpus_are_chosen_first(monkeypatch):
    nvidia(monkeypatch, 2)
    amd(monkeypatch, 1)
    source, name = open_auto()
    try:
        assert (name, source.vendor, len(source.devices())) == (SourceName.nvml, "nvidia", 2)
    finally:
        source.close()


def test_a_failing_nvml_init_falls_to_amd(monkeypatch):
    nvidia(monkeypatch, 2, init_error=9)  # NVML_ERROR_DRIVER_NOT_LOADED
    amd(monkeypatch, 3)
    source, name = open_auto()
    try:
        assert (name, source.vendor, len(source.devices())) == (SourceName.amd, "amd", 3)
    finally:
        source.close()


def test_nvml_without_gpus_falls_to_amd(monkeypatch):
    nvidia(monkeypatch, 0)
    amd(monkeypatch, 1)
    source, name = open_auto()
    try:
        assert (name, source.vendor) == (SourceName.amd, "amd")
    finally:
        source.close()


def test_no_library_is_one_line_naming_each_reason_and_the_simulator(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    with pytest.raises(SourceUnavailableError) as err:
        open_auto()
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("--source auto: no GPUs found (nvml: import of pynvml halted")
    assert "; amd: import of amdsmi halted" in message
    assert message.endswith("or serve simulated GPUs with --source sim")


def test_libraries_that_start_without_gpus_are_no_gpus(monkeypatch):
    nvidia(monkeypatch, 0)
    amd(monkeypatch, 0, init_error=34)  # AMDSMI_STATUS_DRIVER_NOT_LOADED
    with pytest.raises(SourceUnavailableError, match=r"\(nvml: no GPUs; amd: .*DRIVER_NOT_LOADED"):
        open_auto()


def test_amd_options_are_refused_once_the_gpus_are_nvidias(monkeypatch, tmp_path):
    nvidia(monkeypatch, 1)
    with pytest.raises(ConfigError, match=r"--amd-metrics-config .*applies to AMD GPUs only"):
        open_auto(amd_config=tmp_path / "config.json")


def test_the_exporter_without_gpus_exits_1_with_one_line_even_under_the_helm_env_block():
    # dcgm-exporter's chart sets these; before, they served simulated GPUs named after the node.
    env = {
        "DCGM_EXPORTER_KUBERNETES": "true",
        "DCGM_EXPORTER_LISTEN": "127.0.0.1:0",
        "DCGM_EXPORTER_COLLECTORS": "",
        "NODE_NAME": "gpu-node-7",
    }
    code = """
        import os, sys
        os.environ.pop("GPUSCALE_SOURCE", None)  # the default, whatever this shell sets
        sys.modules["pynvml"] = sys.modules["amdsmi"] = None  # a node without GPU libraries
        from gpuscale.cli.app import main
        main(["exporter"])
    """
    done = run_fresh(code, env)
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("gpuscale: error: --source auto: no GPUs found (nvml: ")
    assert line.endswith("or serve simulated GPUs with --source sim")
