"""DCGM_EXP_GPU_HEALTH_STATUS judged from the fields, by DCGM's watch rules."""

from dataclasses import replace

from gpuscale.exporter.health import FAIL, PASS, WARN, HealthJudge
from gpuscale.ids import GpuUuid
from gpuscale.telemetry.base import DeviceSample, GpuInfo

INFO = GpuInfo(
    0, GpuUuid("GPU-x"), "NVIDIA H100 80GB HBM3", "00000000:01:00.0", "nvidia0", "nvidia", "550"
)
OK = {"DCGM_FI_DEV_POWER_USAGE": 300.0}


def verdicts(judge: HealthJudge, values: dict, now: float, info: GpuInfo = INFO) -> dict:
    return {w: (r, c) for w, c, r in judge.judge(DeviceSample(info, values), now)}


def test_pcie_replays_warn_only_above_dcgms_eight_a_minute():
    judge = HealthJudge()
    verdicts(judge, {**OK, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 100.0}, 0.0)
    # 8 more in one minute is DCGM's limit, not past it; 9 more is.
    assert (
        verdicts(judge, {**OK, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 108.0}, 60.0)["PCIE"][0] == PASS
    )
    got = verdicts(judge, {**OK, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 117.0}, 120.0)
    assert got["PCIE"] == (WARN, "DCGM_FR_PCI_REPLAY_RATE")
    assert got["ALL"] == (WARN, "DCGM_FR_PCI_REPLAY_RATE")


def test_thermal_and_power_clock_events_warn_and_the_worst_is_all():
    judge = HealthJudge()
    got = verdicts(
        judge,
        {
            **OK,
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 0x40 | 0x80,
            "DCGM_FI_DEV_ROW_REMAP_FAILURE": 1.0,
        },
        0.0,
    )
    assert got["THERMAL"] == (WARN, "DCGM_FR_CLOCK_THROTTLE_THERMAL")
    assert got["POWER"] == (WARN, "DCGM_FR_CLOCK_THROTTLE_POWER")
    assert got["MEM"] == (FAIL, "DCGM_FR_ROW_REMAP_FAILURE")
    assert got["ALL"] == (FAIL, "DCGM_FR_ROW_REMAP_FAILURE")


def test_unreadable_power_warns_on_a_gpu_but_not_on_a_mig_instance():
    assert verdicts(HealthJudge(), {}, 0.0)["POWER"] == (WARN, "DCGM_FR_POWER_UNREADABLE")
    mig = replace(INFO, mig_profile="1g.10gb", mig_instance_id=7)
    assert verdicts(HealthJudge(), {}, 0.0, mig)["POWER"] == (PASS, "DCGM_FR_OK")
