"""device-metrics-exporter's label-shaping options on ``gpuscale exporter``."""

import json
import logging
import os

import pytest

from gpuscale.cli.amd_options import open_amd_sim
from gpuscale.cli.app import main
from gpuscale.telemetry.sim import SimSource
from tests.unit.cli.test_cli_dcgm_flags import params


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    for name in list(os.environ):
        if name.startswith(("GPUSCALE_", "DCGM_")):
            monkeypatch.delenv(name)
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def run(capsys, *args):
    code = 0
    try:
        main(["exporter", "-a", "127.0.0.1:0", *args])
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


def test_upstream_spellings_parse(tmp_path, monkeypatch):
    assert params([])["enable_slurm_scl"] is True
    assert params(["--enable-slurm-scl=false"])["enable_slurm_scl"] is False
    monkeypatch.setenv("GPUSCALE_ENABLE_SLURM_SCL", "false")
    assert params([])["enable_slurm_scl"] is False
    config = tmp_path / "config.json"
    assert params(["--amd-metrics-config", str(config)])["amd_metrics_config"] == config


@pytest.mark.parametrize(
    ("args", "config", "fragment"),
    [
        (["--gpu-models", "MI300X,H100"], None, "mixes NVIDIA and AMD models"),
        (["--gpu-models", "H100"], {}, "--amd-metrics-config"),
        (["--gpu-models", "H100", "--enable-slurm-scl=false"], None, "--enable-slurm-scl"),
        (
            ["--gpu-models", "MI300X"],
            {"GPUConfig": {"Labels": ["KFD_PROCESS_ID"]}},
            "GPUConfig.Labels KFD_PROCESS_ID",
        ),
        (
            ["--gpu-models", "MI210"],
            {"CommonConfig": {"MetricsFieldPrefix": "amd_"}},
            "MetricsFieldPrefix",
        ),
    ],
)
def test_what_cannot_apply_is_one_line_and_exit_2(capsys, tmp_path, args, config, fragment):
    if config is not None:
        path = tmp_path / "config.json"
        path.write_text(json.dumps(config))
        args = [*args, "--amd-metrics-config", str(path)]
    code, err = run(capsys, "--source", "sim", "--gpus", "2", *args)
    assert code == 2
    assert err.count("\n") == 1
    assert fragment in err


def test_slurm_job_labels_can_be_turned_off(tmp_path, monkeypatch):
    folder = tmp_path / "slurm"
    folder.mkdir()
    job = {"SLURM_JOB_ID": "7", "SLURM_JOB_USER": "bo", "CUDA_VISIBLE_DEVICES": "0"}
    (folder / "0").write_text(json.dumps(job))
    monkeypatch.setenv("GPUSCALE_SLURM_JOB_DIR", str(folder))

    def job_id(slurm: bool) -> str | None:
        source = open_amd_sim(SimSource(1, ("MI300X",), hostname="n"), None, slurm)
        return dict(source.sample().devices[0].info.vendor_labels).get("job_id")

    assert job_id(True) == "7"  # AMD's prolog file for GPU 0
    assert job_id(False) is None
