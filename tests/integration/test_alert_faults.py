"""Each fault the sim exporter injects beyond broken hardware is caught by its rule in the
real Prometheus, in time, and a fault-free host at the same load raises nothing.

One host runs a training job (every GPU 90 % busy) with five faults on five GPUs,
a second host's exporter goes down, a third is fault-free at the same load, and a
fourth serves (the simulator's 5-minute load swing) with a straggler, whose load
dips take it out of the peer comparison now and then. The
rules with an hour-long or 15-minute ``for:`` get 5 minutes here so the history
stays half an hour; the bound on each delay is the principle the benchmark
judges by (README, "Alert benchmark"): from the fault's observable onset, two
scrape intervals plus the rule's ``for:`` plus the time its window must hold the
fault before its expression can be true.
"""

from pathlib import Path

import pytest

from gpuscale.alerts.config import AlertConfig, duration_seconds, parse_config
from gpuscale.alerts.history import HostRun
from gpuscale.alerts.simtest import run_backtest
from gpuscale.telemetry.faults import parse_fault

pytestmark = pytest.mark.integration

STEP_S = 15.0
AT_S = 600
TRAINING = "constant:0.9"
FAULTS = {
    "GpuStraggler": f"straggler@{AT_S}:gpu=1",
    "GpuPowerCapped": f"power-cap@{AT_S}:gpu=2",
    "GpuMemoryNearFull": f"memory-full@{AT_S}:gpu=3",
    "GpuIdleWhileAllocated": f"idle-allocated@{AT_S}:gpu=4",
    "GpuMetricsStale": f"stale@{AT_S}:gpu=5",
}
SETTINGS = """
alerts:
  GpuIdleWhileAllocated: {for: 5m}
  GpuPowerCapped: {for: 5m}
"""


def window_fill_s(alert: str, config: AlertConfig) -> float:
    """Seconds the rule's window must hold the fault before its expression can be true.

    A share-of-time rule needs ``threshold x window`` of violation (all of it at this
    load, where the capped card is always at its limit); the stale rule needs its whole
    window frozen (``changes() == 0``), less the one sample the window starts on.
    """
    a = config.alerts
    if alert == "GpuPowerCapped":
        return a.GpuPowerCapped.threshold * duration_seconds(a.GpuPowerCapped.window)
    if alert == "GpuMetricsStale":
        return duration_seconds(a.GpuMetricsStale.window) - STEP_S
    return 0.0


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    config = parse_config(SETTINGS, Path("test-settings.yml"))
    faults = tuple(parse_fault(spec, "exporter") for spec in FAULTS.values())
    runs = [
        HostRun("faulty", 8, 11, faults, load=TRAINING),
        HostRun("down", 2, 12, (parse_fault(f"exporter-down@{AT_S}", "exporter"),)),
        HostRun("fine", 8, 13, load=TRAINING),
        HostRun("serving", 8, 14, (parse_fault(f"straggler@{AT_S}:gpu=6", "exporter"),)),
    ]
    scores, _ = run_backtest(runs, 1800, STEP_S, config=config)
    return config, {s.alert: s for s in scores}


@pytest.mark.parametrize("alert", [*FAULTS, "GpuExporterDown"])
def test_each_fault_is_caught_by_its_rule_within_the_bound_from_its_onset(scored, alert):
    config, scores = scored
    s = scores[alert]
    n = 2 if alert == "GpuStraggler" else 1  # on the training and the serving host
    assert (s.faults, s.detected, s.false_positives) == (n, n, 0)
    bound = 2 * STEP_S + s.for_s + window_fill_s(alert, config)
    for delay in s.onset_delays_s:
        assert 0 <= delay <= bound
        # The rule cannot fire before its for: has passed since the fault showed.
        assert delay >= s.for_s


def test_nothing_fires_on_the_fault_free_host(scored):
    _, scores = scored
    assert [a for a, s in scores.items() if "fine" in s.false_hosts] == []


def test_onsets_of_gradual_signals_are_where_the_series_show_them(scored):
    _, scores = scored
    power = scores["GpuPowerCapped"]
    # At 90 % busy a card capped at 30 % of TDP hits the cap in the sample it is capped in.
    assert power.delays_s == power.onset_delays_s
