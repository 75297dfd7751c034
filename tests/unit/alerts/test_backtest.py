"""Backtest scoring without a server: for: applied per episode, TP/FP against faults,
record levels, sweep parsing."""

import pytest

from gpuscale.alerts.backtest import LabelledFault, episodes, score
from gpuscale.alerts.catalogue import build_catalogue
from gpuscale.alerts.history import HostRun
from gpuscale.alerts.simtest import labelled_faults, parse_sweep
from gpuscale.alerts.tsdb import record_levels
from gpuscale.errors import ConfigError
from gpuscale.telemetry.faults import parse_fault

GPU1 = (("Hostname", "h0"), ("gpu", "1"))


def _points(*times: float) -> list[tuple[float, float]]:
    return [(t, 1.0) for t in times]


def test_for_fires_at_the_first_step_for_after_the_run_began_and_a_gap_resets_it():
    series = [(GPU1, _points(0, 15, 30, 45, 60, 120, 135))]
    found = episodes("A", series, for_s=30, step_s=15)
    # 0..60 holds 60 s: fires at 30; 120..135 holds 15 s < 30: never fires.
    assert [(e.start_s, e.end_s) for e in found] == [(30, 60)]
    assert [(e.start_s, e.end_s) for e in episodes("A", series, 0, 15)] == [(0, 60), (120, 135)]


def test_an_episode_during_a_fault_on_the_same_gpu_is_true_and_elsewhere_false():
    fault = LabelledFault("h0", "1", "thermal", start_s=100, end_s=200)
    series = [
        (GPU1, _points(130, 145)),  # during the fault: true, caught after 30 s
        ((("Hostname", "h0"), ("gpu", "2")), _points(130)),  # another GPU: false
        (GPU1, _points(10)),  # before the fault: false
    ]
    s = score("GpuTemperatureHigh", episodes("GpuTemperatureHigh", series, 0, 15), [fault], 999, 0)
    assert (s.fired, s.true_positives, s.false_positives) == (3, 1, 2)
    assert (s.faults, s.detected, s.delays_s, s.recall) == (1, 1, [30], 1.0)
    other = score("GpuXidError", [], [fault], 999, 0)
    assert (other.faults, other.recall, other.median_delay_s) == (0, None, None)


def test_faults_are_labelled_at_the_sample_the_simulator_injects_them():
    runs = [HostRun("h0", 2, 0, (parse_fault("thermal@20:gpu=1:duration=60"),))]
    (fault,) = labelled_faults(runs, start_s=1000, step_s=15)
    assert (fault.host, fault.gpu, fault.kind) == ("h0", "1", "thermal")
    assert (fault.start_s, fault.end_s) == (1030, 1090)


def test_records_that_read_records_come_a_level_later():
    levels = [{r.record for r in level} for level in record_levels(build_catalogue())]
    assert "gpuscale:gpu_temperature:celsius" in levels[0]
    assert "gpuscale:gpu_temperature:zscore" in levels[1]
    assert "gpuscale:gpu_sm_clock:peer_ratio" in levels[1]


def test_sweeps_read_durations_for_for_and_numbers_otherwise():
    assert parse_sweep("GpuTemperatureHigh.for=0s,2m,90").values == (0.0, 120.0, 90.0)
    assert parse_sweep("GpuTemperatureHigh.threshold=80,85").values == (80.0, 85.0)
    with pytest.raises(ConfigError, match=r"is not ALERT\.KEY=VALUES"):
        parse_sweep("GpuTemperatureHigh=80")
    with pytest.raises(ConfigError, match="'hot' is not a number"):
        parse_sweep("GpuTemperatureHigh.threshold=hot")


def test_delays_count_from_the_start_and_from_the_observable_onset():
    fault = LabelledFault("h0", "1", "thermal", 100, None, (("GpuThermalThrottling", 160.0),))
    found = episodes("GpuThermalThrottling", [(GPU1, _points(250, 265))], 0, 15)
    s = score("GpuThermalThrottling", found, [fault], 999, 0)
    assert (s.delays_s, s.onset_delays_s, s.median_onset_delay_s) == ([150], [90], 90)
    # An alert with no onset noted sees the fault from its start.
    assert fault.onset("GpuTemperatureHigh") == 100


def test_a_host_fault_is_labelled_without_a_gpu_and_matched_by_the_scrape_instance():
    runs = [HostRun("h0", 2, 0, (parse_fault("exporter-down@20:duration=60", "exporter"),))]
    onsets = {("h0", 0): {"GpuExporterDown": 1035.0}}
    (fault,) = labelled_faults(runs, start_s=1000, step_s=15, onsets=onsets)
    assert (fault.gpu, fault.start_s, fault.end_s) == ("", 1030, 1090)
    assert fault.onsets == (("GpuExporterDown", 1035.0),)
    up = ((("instance", "h0:9400"), ("job", "gpuscale-exporter")), _points(1150))
    s = score("GpuExporterDown", episodes("GpuExporterDown", [up], 0, 15), [fault], 2000, 0)
    assert (s.true_positives, s.false_positives, s.onset_delays_s) == (1, 0, [115])
