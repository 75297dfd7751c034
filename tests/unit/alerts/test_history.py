"""The backtest's simulated history: scrape health, pod labels and each fault's onset."""

import math

from gpuscale.alerts.config import AlertConfig
from gpuscale.alerts.history import HostRun, unusually_hot, write_history
from gpuscale.telemetry.faults import parse_fault

START = 1_800_000_000.0
STEP = 15.0


def test_a_down_exporter_writes_up_0_and_no_gpu_series_for_as_long_as_it_lasts(tmp_path):
    fault = parse_fault("exporter-down@30:duration=30", "exporter")
    path = tmp_path / "h.om"
    write_history([HostRun("h0", 1, 0, (fault,))], START, 90, STEP, path)
    lines = path.read_text().splitlines()
    up = [line.rsplit(" ", 2)[1:] for line in lines if line.startswith("up{")]
    # Samples at 0, 15, ..., 90 s: down from the sample at 30 s until the one at 60 s.
    assert [float(v) for v, _ in up] == [1, 1, 0, 0, 1, 1, 1]
    temps = {
        float(ts)
        for line in lines
        if line.startswith("DCGM_FI_DEV_GPU_TEMP{")
        for ts in [line.rsplit(" ", 1)[1]]
    }
    assert temps == {START + t for t in (0, 15, 60, 75, 90)}
    assert 'instance="h0:9400"' in next(line for line in lines if line.startswith("up{"))


def test_every_gpu_is_held_by_a_pod_as_the_kubernetes_mapping_labels_it(tmp_path):
    path = tmp_path / "h.om"
    write_history([HostRun("h0", 2, 0)], START, 0, STEP, path)
    util = [
        line for line in path.read_text().splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL")
    ]
    assert len(util) == 2
    assert all('namespace="serving"' in u and 'pod="h0-gpu' in u for u in util)


def test_onsets_are_the_first_sample_where_the_watched_signal_shows(tmp_path):
    faults = (
        parse_fault("memory-full@20:gpu=0", "exporter"),
        parse_fault("power-cap@20:gpu=1", "exporter"),
    )
    run = HostRun("h0", 2, 0, faults, load="constant:0.9")
    _, onsets = write_history([run], START, 120, STEP, tmp_path / "h.om")
    # Both take effect at the first sample at or after 20 s: the one at 30 s.
    assert onsets[("h0", 0)]["GpuMemoryNearFull"] == START + 30
    assert onsets[("h0", 1)]["GpuPowerCapped"] == START + 30
    # A healthy signal is never noted: GPU 0 is not capped, GPU 1 not full.
    assert "GpuPowerCapped" not in onsets[("h0", 0)]
    assert "GpuMemoryNearFull" not in onsets[("h0", 1)]


def test_a_load_swing_is_never_unusually_hot_and_a_step_past_its_spread_is():
    config = AlertConfig()
    # A sine around 50 C with a 17.5 C amplitude, sampled over whole periods: its
    # highest sample is sqrt(2) standard deviations above the mean, under the 2 sigma
    # threshold, and 17.5 C above it, over the 10 C guard: only the sigma test holds it.
    past = [50 + 17.5 * math.sin(2 * math.pi * i / 20) for i in range(240)]
    assert not unusually_hot(max(past), past, config)
    # 35 C above the mean (a failed fan's rise) is 2.8 sigma and past the guard.
    assert unusually_hot(50 + 35, past, config)
    # A flat history: any spread is tiny, but a 5 C rise stays under the 10 C guard.
    assert not unusually_hot(65, [60.0, 60.5] * 100, config)
    assert not unusually_hot(99, [60.0], config)  # one sample has no spread to judge by


def test_a_thermal_faults_anomaly_onset_is_after_its_injection_at_the_first_hot_sample(
    tmp_path,
):
    fault = parse_fault("thermal@4500:gpu=0", "exporter")
    path = tmp_path / "h.om"
    _, onsets = write_history([HostRun("h0", 1, 3, (fault,))], START, 5400, STEP, path)
    onset = onsets["h0", 0]["GpuTemperatureAnomaly"]
    assert START + 4500 <= onset <= START + 5400
    temps = [
        (float(ts), float(v))
        for line in path.read_text().splitlines()
        if line.startswith("DCGM_FI_DEV_GPU_TEMP{")
        for v, ts in [line.rsplit(" ", 2)[1:]]
    ]
    at = dict(temps)[onset]
    before = [v for t, v in temps if onset - 4200 <= t <= onset - 600]
    assert unusually_hot(at, before, AlertConfig())
