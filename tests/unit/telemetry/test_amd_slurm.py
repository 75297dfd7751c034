"""Slurm job labels from AMD's prolog files, on AMD GPU series."""

import importlib.util
import json
import logging
import sys
from pathlib import Path

import pytest

from gpuscale.telemetry.amd import AmdSource
from gpuscale.telemetry.slurm import SlurmJob, SlurmJobs

FAKES = Path(__file__).resolve().parents[2] / "fakes"


def prolog(folder: Path, gpus: str, job: str = "4711", cluster: str = "hpc-a") -> None:
    """What AMD's slurm-prolog.sh writes: the same JSON into one file per GPU."""
    env = {
        "SLURM_JOB_ID": job,
        "SLURM_JOB_USER": "alice",
        "SLURM_JOB_PARTITION": "mi300",
        "SLURM_CLUSTER_NAME": cluster,
        "SLURM_JOB_GPUS": gpus,
        "CUDA_VISIBLE_DEVICES": gpus,
        "SLURM_SCRIPT_CONTEXT": "prolog_slurmd",
    }
    for gpu in gpus.split(","):
        (folder / gpu).write_text(json.dumps(env))


@pytest.fixture
def smi(monkeypatch: pytest.MonkeyPatch):
    spec = importlib.util.spec_from_file_location("_gpuscale_fake_amdsmi", FAKES / "fake_amdsmi.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "amdsmi", module)
    monkeypatch.delenv("GPUSCALE_CLUSTER_NAME", raising=False)
    return module


def test_prolog_files_map_gpus_to_their_job(tmp_path):
    prolog(tmp_path, "1,3")
    jobs = SlurmJobs(str(tmp_path)).by_gpu()
    assert jobs == {1: SlurmJob("4711", "alice", "mi300", "hpc-a")} | {
        3: SlurmJob("4711", "alice", "mi300", "hpc-a")
    }


def test_epilog_removal_drops_the_job_and_a_missing_folder_means_none(tmp_path):
    prolog(tmp_path, "0")
    jobs = SlurmJobs(str(tmp_path))
    assert set(jobs.by_gpu()) == {0}
    (tmp_path / "0").unlink()
    assert jobs.by_gpu() == {}
    assert SlurmJobs(str(tmp_path / "absent")).by_gpu() == {}


def test_a_broken_file_is_skipped_and_logged_once(tmp_path, caplog):
    (tmp_path / "2").write_text("{not json")
    prolog(tmp_path, "1")
    jobs = SlurmJobs(str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="gpuscale.telemetry.slurm"):
        assert set(jobs.by_gpu()) == {1}
        assert set(jobs.by_gpu()) == {1}
    assert len([r for r in caplog.records if "not readable JSON" in r.getMessage()]) == 1


def test_amd_series_carry_the_job_of_their_gpu(smi, tmp_path):
    smi.configure(smi.fleet("mi300x:3"))
    source = AmdSource(hostname="n", slurm=SlurmJobs(str(tmp_path)))
    prolog(tmp_path, "1,2")
    labels = [dict(d.info.vendor_labels) for d in source.sample().devices]
    assert "job_id" not in labels[0]
    assert [labels[i]["job_id"] for i in (1, 2)] == ["4711", "4711"]
    assert (labels[1]["job_user"], labels[1]["job_partition"]) == ("alice", "mi300")
    assert labels[1]["cluster_name"] == "hpc-a"  # the job's cluster, no custom label set
    (tmp_path / "1").unlink()
    (tmp_path / "2").unlink()
    assert all("job_id" not in dict(d.info.vendor_labels) for d in source.sample().devices)


def test_custom_cluster_name_wins_over_the_jobs(smi, tmp_path):
    smi.configure(smi.fleet("mi300x:1"))
    prolog(tmp_path, "0")
    source = AmdSource(hostname="n", cluster_name="lab-a", slurm=SlurmJobs(str(tmp_path)))
    (device,) = source.sample().devices
    assert dict(device.info.vendor_labels)["cluster_name"] == "lab-a"
