"""Backtest in the real Prometheus: a lost GPU is caught within two scrape intervals and its
rule's for:, the fault-free host raises nothing, and a threshold sweep trades delay for alarms."""

import json
import subprocess
import sys

import pytest

from gpuscale.alerts.history import HostRun
from gpuscale.alerts.simtest import Sweep, run_backtest
from gpuscale.telemetry.faults import parse_fault

pytestmark = pytest.mark.integration

STEP_S = 15.0


@pytest.fixture(scope="module")
def result():
    runs = [
        HostRun("lost", 4, 1, (parse_fault("gpu-lost@600:gpu=2"),)),
        HostRun("hot", 4, 2, (parse_fault("thermal@600:gpu=1"),)),
        HostRun("fine", 4, 3),
    ]
    sweep = Sweep("GpuTemperatureHigh", "threshold", (80.0, 200.0))
    return run_backtest(runs, 1800, STEP_S, sweeps=[sweep])


def test_lost_gpu_is_caught_within_two_scrapes_and_its_for(result):
    scores, _ = result
    s = next(s for s in scores if s.alert == "GpuFellOffBus")
    assert (s.faults, s.detected, s.false_positives) == (1, 1, 0)
    # The goal: detection within two scrape intervals plus the rule's for:.
    assert s.delays_s[0] <= 2 * STEP_S + s.for_s


def test_no_rule_fires_on_the_fault_free_host(result):
    scores, _ = result
    assert [s.alert for s in scores if "fine" in s.false_hosts] == []


def test_threshold_sweep_finds_the_hot_gpu_at_80_and_never_at_200(result):
    _, points = result
    by_value = {p.value: p.score for p in points}
    assert by_value[80.0].detected == 1
    assert by_value[200.0].fired == 0


def test_backtest_cli_refuses_a_sweep_of_an_unknown_setting():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuscale",
            "rules",
            "backtest",
            "--sweep",
            "GpuTemperatureHigh.colour=1,2",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "gpuscale: error: --sweep GpuTemperatureHigh.colour: no such alert setting; "
        "name an alert and one of its keys"
    )


def test_backtest_on_a_live_prometheus_range_with_a_faults_file(tmp_path):
    from gpuscale.alerts.catalogue import build_catalogue
    from gpuscale.alerts.history import write_openmetrics
    from gpuscale.alerts.simtest import labelled_faults
    from gpuscale.alerts.tsdb import HistoryPrometheus

    runs = [HostRun("lost", 2, 1, (parse_fault("gpu-lost@300:gpu=1"),)), HostRun("fine", 2, 2)]
    start = 1_790_000_000.0
    end = start + 900
    (fault,) = labelled_faults(runs, start, STEP_S)
    faults = tmp_path / "faults.csv"
    faults.write_text(
        f"host,gpu,kind,start,end\n{fault.host},{fault.gpu},{fault.kind},{fault.start_s},\n"
    )
    history = tmp_path / "history.om"
    write_openmetrics(runs, start, 900, STEP_S, history)
    with HistoryPrometheus(tmp_path, STEP_S) as prom:
        prom.load(history, build_catalogue(), start, end)
        report = tmp_path / "report.json"
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "gpuscale",
                "rules",
                "backtest",
                "--prometheus",
                prom.url,
                "--start",
                str(start),
                "--end",
                str(end),
                "--scrape-interval",
                "15s",
                "--faults-file",
                str(faults),
                "--report",
                str(report),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 0, result.stderr
    scores = {s["alert"]: s for s in json.loads(report.read_text())["scores"]}
    lost = scores["GpuFellOffBus"]
    assert (lost["detected"], lost["faults"], lost["false_positives"]) == (1, 1, 0)
    assert lost["delays_s"][0] <= 2 * STEP_S + lost["for_s"]
    assert sum(s["false_positives"] for s in scores.values()) == 0


def test_simulated_history_flags_with_prometheus_exit_2():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuscale",
            "rules",
            "backtest",
            "--prometheus",
            "http://127.0.0.1:9",
            "--gpus",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "gpuscale: error: --gpus: is for a simulated history only; drop it or --prometheus"
    )
