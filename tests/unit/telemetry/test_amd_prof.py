"""The rocpctl profiler reader, run against a stand-in rocpctl (tests/fakes/rocpctl_bin).

The stand-in is an executable with rocpctl's command line and JSON output, so these
tests run the reader's real subprocess, timeout and parsing paths.
"""

import importlib.util
import json
import logging
import os
import sys
import time
from pathlib import Path

import pytest

from gpuscale.fields.amd import AMD_PROFILER_ONLY, PROFILER_COUNTERS
from gpuscale.telemetry.amd import AmdSource
from gpuscale.telemetry.amd_prof import (
    CACHE_S,
    FAIL_THRESHOLD,
    ProfilerSettings,
    RocprofReader,
    parse_rocpctl,
)

FAKES = Path(__file__).resolve().parents[2] / "fakes"
BIN = FAKES / "rocpctl_bin"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def reader(tmp_path: Path, mode: str = "ok", gpus: int = 2, **kw) -> tuple[RocprofReader, Path]:
    log = tmp_path / "runs.jsonl"
    env = {
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "FAKE_ROCPCTL_MODE": mode,
        "FAKE_ROCPCTL_GPUS": str(gpus),
        "FAKE_ROCPCTL_LOG": str(log),
    }
    kw.setdefault("background", False)
    return RocprofReader(kw.pop("settings", None), env=env, **kw), log


def runs(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_runs_rocpctl_as_the_exporter_does_and_maps_counters_to_series(tmp_path):
    settings = ProfilerSettings(sampling_interval_us=2000, ptl_delay_ms=20)
    prof, log = reader(tmp_path, settings=settings)
    values = prof.read()
    [run] = runs(log)
    assert (run["d"], run["p"], run["lock"]) == (2000, 20, "1")
    assert run["counters"] == [counter for counter, _ in PROFILER_COUNTERS.values()]
    # The stand-in answers GPU i (render minor 128 + i) with VALUBusy 40 + i, MfmaUtil 30 + i ...
    assert set(values) == {128, 129}
    assert values[129]["gpu_prof_sm_active"] == 41.0
    assert values[129]["gpu_prof_tensor_active_percent"] == 31.0
    assert values[129]["gpu_prof_gui_util_percent"] == 61.0
    assert values[128]["gpu_prof_occupancy_per_cu"] == 8.0
    assert values[128]["gpu_prof_occupancy_per_active_cu"] == 12.0
    assert values[128]["gpu_prof_simd_utilization"] == 0.5


def test_values_past_their_range_are_clamped_and_non_numbers_are_absent():
    text = json.dumps(
        {
            "GpuMetrics": [
                {
                    "DrmRenderId": "130",
                    "Metrics": [
                        {"Field": "VALUBusy", "Value": "100.3"},
                        {"Field": "SIMD_UTILIZATION", "Value": "1.02"},
                        {"Field": "MeanOccupancyPerActiveCU", "Value": "nan"},
                        {"Field": "GRBM_COUNT", "Value": "7"},  # not a series we serve
                    ],
                }
            ]
        }
    )
    # Upstream clamps percentages to 100 and fractions to 1 (NormalizePercent/Fraction).
    assert parse_rocpctl(text) == {
        130: {"gpu_prof_sm_active": 100.0, "gpu_prof_simd_utilization": 1.0}
    }


def test_a_result_is_reused_for_ten_seconds(tmp_path):
    clock = Clock()
    prof, log = reader(tmp_path, clock=clock)
    first = prof.read()
    clock.now += CACHE_S - 0.5
    assert prof.read() == first
    assert len(runs(log)) == 1
    clock.now += 1.0
    prof.read()
    assert len(runs(log)) == 2


def test_three_failures_in_a_row_switch_the_profiler_off_logged_once(tmp_path, caplog):
    clock = Clock()
    prof, log = reader(tmp_path, mode="fail", clock=clock)
    with caplog.at_level(logging.WARNING, logger="gpuscale.telemetry.amd_prof"):
        for _ in range(FAIL_THRESHOLD + 2):
            assert prof.read() == {}
            clock.now += CACHE_S
    assert len(runs(log)) == FAIL_THRESHOLD  # no run once switched off
    assert prof.disabled_reason is not None
    assert "3 times in a row" in prof.disabled_reason
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1


@pytest.mark.parametrize(("mode", "runs_before_off"), [("abort", 1), ("garbage", FAIL_THRESHOLD)])
def test_a_crash_switches_it_off_at_once_and_bad_output_counts_as_a_failure(
    tmp_path, mode, runs_before_off
):
    clock = Clock()
    prof, log = reader(tmp_path, mode=mode, clock=clock)
    for _ in range(FAIL_THRESHOLD + 1):
        assert prof.read() == {}
        clock.now += CACHE_S
    assert len(runs(log)) == runs_before_off
    assert prof.disabled_reason is not None


def test_a_failure_clears_the_previous_result(tmp_path):
    clock = Clock()
    prof, _ = reader(tmp_path, clock=clock)
    assert prof.read()
    prof._env["FAKE_ROCPCTL_MODE"] = "fail"
    clock.now += CACHE_S
    assert prof.read() == {}  # never the last good values served as fresh


def test_without_rocpctl_the_profiler_is_off_and_says_why(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="gpuscale.telemetry.amd_prof"):
        prof = RocprofReader(ProfilerSettings(command="rocpctl"), env={"PATH": str(tmp_path)})
    assert prof.read() == {}
    assert prof.disabled_reason == "rocpctl not found on PATH"
    assert "rocpctl not found" in caplog.records[0].getMessage()


def test_in_the_background_the_first_read_does_not_wait(tmp_path):
    prof, _ = reader(tmp_path, background=True)
    assert prof.read() == {}  # the run has just started on its thread
    deadline = time.monotonic() + 20
    while not prof.read() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert set(prof.read()) == {128, 129}


@pytest.fixture
def smi(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUSCALE_SLURM_JOB_DIR", str(tmp_path / "slurm"))
    spec = importlib.util.spec_from_file_location("_gpuscale_fake_amdsmi", FAKES / "fake_amdsmi.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "amdsmi", module)
    return module


def test_amd_source_serves_each_gpu_its_own_profiler_values(smi, tmp_path):
    smi.configure(smi.fleet("mi300x:2,mi210:1"))
    prof, _ = reader(tmp_path, gpus=3)
    source = AmdSource(hostname="n", profiler=prof)
    devices = source.sample().devices
    # amdsmi's render minors (128 + index) pick each GPU's rocpctl entry.
    assert [d.values["gpu_prof_sm_active"] for d in devices] == [40.0, 41.0, 42.0]
    # The profiler's GPU_UTIL replaces amdsmi's gfx_activity in gpu_prof_gui_util_percent.
    assert [d.values["gpu_prof_gui_util_percent"] for d in devices] == [60.0, 61.0, 62.0]
    assert devices[0].values["gpu_gfx_activity"] != 60.0


def test_amd_source_without_profiler_has_no_profiler_only_series(smi):
    smi.configure(smi.fleet("mi300x:2"))
    values = AmdSource(hostname="n").sample().devices[0].values
    assert not set(AMD_PROFILER_ONLY) & set(values)
    assert "gpu_prof_gui_util_percent" in values  # amdsmi's graphics-engine busy share
