"""The sim source's faults beyond broken hardware: each shows in the series as on a real host.

Two GPUs under the same load, one faulted: every assertion compares the faulted
GPU with its healthy twin or with the published figure the fault is defined by
(the H100 SXM datasheet's 700 W TDP and 345 MHz idle clock, the fault's own limit
or share), never with a value observed from a run.
"""

import itertools

import pytest

from gpuscale.errors import ConfigError, TransientError
from gpuscale.telemetry.base import Snapshot
from gpuscale.telemetry.faults import DEFAULT_LIMIT_SHARE, DEFAULT_SHARE, parse_fault
from gpuscale.telemetry.loads import constant
from gpuscale.telemetry.physics import GPU_MODELS
from gpuscale.telemetry.sim import HW_SLOWDOWN, SimSource

START = 1_700_000_000.0
STEP = 15.0
H100 = GPU_MODELS["H100"]
NS = 1e9  # DCGM violation counters count nanoseconds
POWER_CAPPED, THERMAL = 0x4, 0x20  # DCGM_CLOCKS_EVENT_REASON_SW_POWER_CAP, SW_THERMAL


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


def snapshots(spec: str, load: float, samples: int, gpus: int = 2) -> list[Snapshot]:
    """``samples`` snapshots STEP apart of H100s at ``load`` with the fault ``spec``."""
    clock = Clock()
    src = SimSource(
        gpus, load=constant(load), clock=clock, hostname="h", faults=[parse_fault(spec, "exporter")]
    )
    out = []
    for _ in range(samples):
        out.append(src.sample())
        clock.now += STEP
    return out


def value(snap: Snapshot, gpu: int, field: str) -> float:
    return snap.devices[gpu].values[f"DCGM_FI_DEV_{field}"]


def test_power_cap_pins_power_at_the_limit_drops_clocks_and_counts_violation():
    snaps = snapshots("power-cap@60:gpu=0", 0.9, 12)
    limit = DEFAULT_LIMIT_SHARE * H100.tdp_w
    before, after, later = snaps[3], snaps[4], snaps[-1]
    assert value(before, 0, "POWER_MGMT_LIMIT") == H100.tdp_w
    assert value(after, 0, "POWER_MGMT_LIMIT") == limit
    # At 90 % busy the card wants more than the limit, so power sits at it exactly.
    assert value(later, 0, "POWER_USAGE") == pytest.approx(limit, abs=0.001)
    assert value(later, 1, "POWER_USAGE") > 2 * limit
    assert value(later, 0, "SM_CLOCK") < value(later, 1, "SM_CLOCK") == H100.max_sm_clock_mhz
    # The counter grows by the whole step each step the limit holds; the twin's not at all.
    grew = value(later, 0, "POWER_VIOLATION") - value(snaps[-2], 0, "POWER_VIOLATION")
    assert grew == STEP * NS
    assert value(later, 1, "POWER_VIOLATION") == 0
    assert int(value(later, 0, "CLOCKS_EVENT_REASONS")) & POWER_CAPPED
    assert not int(value(later, 0, "CLOCKS_EVENT_REASONS")) & THERMAL


def test_power_cap_below_idle_power_is_a_config_error():
    with pytest.raises(ConfigError, match=r"limit_w must be above GPU 0's idle power"):
        snapshots("power-cap@0:gpu=0:limit_w=50", 0.5, 1)


def test_memory_full_holds_the_framebuffer_and_ends_with_its_duration():
    snaps = snapshots("memory-full@60:gpu=0:duration=120", 0.5, 16)

    def share(snap: Snapshot, gpu: int) -> float:
        used = value(snap, gpu, "FB_USED")
        return used / (used + value(snap, gpu, "FB_FREE"))

    # Weights (45 %) and the working set (40 % at full load) never fill it on their own.
    assert share(snaps[3], 0) < 0.95
    for snap in snaps[4:12]:
        assert share(snap, 0) >= DEFAULT_SHARE - 1 / value(snap, 0, "FB_TOTAL")
        assert share(snap, 1) < 0.95
    assert share(snaps[-1], 0) < 0.95


def test_idle_allocated_gpu_runs_nothing_but_keeps_its_model_loaded():
    snaps = snapshots("idle-allocated@30:gpu=0", 0.6, 10)
    last = snaps[-1]
    assert value(last, 0, "GPU_UTIL") == 0
    assert value(last, 1, "GPU_UTIL") == 60
    assert value(last, 0, "SM_CLOCK") == H100.idle_sm_clock_mhz
    assert value(last, 0, "POWER_USAGE") == pytest.approx(H100.idle_w)
    # The pod still holds the weights: the framebuffer is not freed.
    assert value(last, 0, "FB_USED") > 0.4 * value(last, 0, "FB_TOTAL")
    idle = value(last, 0, "LOW_UTIL_VIOLATION") - value(snaps[-2], 0, "LOW_UTIL_VIOLATION")
    assert idle == STEP * NS


def test_stale_gpu_repeats_its_last_values_while_the_energy_counter_should_move():
    snaps = snapshots("stale@60:gpu=0:duration=90", 0.5, 14)
    frozen = snaps[3].devices[0].values  # the last sample before the fault
    for snap in snaps[4:10]:
        assert snap.devices[0].values == frozen
        assert snap.devices[0].up
    # What GpuMetricsStale reads: power above 0, energy not moving; the twin's moves.
    assert value(snaps[9], 0, "POWER_USAGE") > 0
    energy = [value(s, 1, "TOTAL_ENERGY_CONSUMPTION") for s in snaps[4:10]]
    assert all(b > a for a, b in itertools.pairwise(energy))
    after = value(snaps[-1], 0, "TOTAL_ENERGY_CONSUMPTION")
    assert after > frozen["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]


def test_straggler_runs_a_capped_clock_and_is_busy_longer_for_the_same_work():
    factor = 0.5
    last = snapshots(f"straggler@0:gpu=0:factor={factor}", 0.4, 8)[-1]
    assert value(last, 0, "SM_CLOCK") <= round(factor * H100.max_sm_clock_mhz)
    assert value(last, 1, "SM_CLOCK") == H100.max_sm_clock_mhz
    assert value(last, 0, "GPU_UTIL") == pytest.approx(value(last, 1, "GPU_UTIL") / factor)
    assert int(value(last, 0, "CLOCKS_EVENT_REASONS")) & HW_SLOWDOWN
    assert not int(value(last, 1, "CLOCKS_EVENT_REASONS")) & HW_SLOWDOWN
    # The cap is neither the power nor the thermal limit.
    assert value(last, 0, "POWER_VIOLATION") == value(last, 0, "THERMAL_VIOLATION") == 0


def test_exporter_down_fails_every_collect_while_the_gpus_run_on():
    clock = Clock()
    fault = parse_fault("exporter-down@30:duration=60", "exporter")
    src = SimSource(2, load=constant(0.5), clock=clock, hostname="h", faults=[fault])
    answered = []
    for _ in range(8):
        try:
            answered.append(src.sample())
        except TransientError:
            answered.append(None)
        clock.now += STEP
    assert [s is not None for s in answered] == [True, True] + [False] * 4 + [True] * 2
    first, back = answered[1], answered[6]
    assert first is not None
    assert back is not None
    # Energy kept accruing while down: at least idle power over the 75 s between reads.
    gained_mj = value(back, 0, "TOTAL_ENERGY_CONSUMPTION") - value(
        first, 0, "TOTAL_ENERGY_CONSUMPTION"
    )
    assert gained_mj >= H100.idle_w * 5 * STEP * 1e3
