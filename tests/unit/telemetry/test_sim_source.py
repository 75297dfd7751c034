"""The sim GpuSource: identity, snapshots on a fake clock, scheduled faults."""

import itertools
import math
import re

import pytest

from gpuscale.errors import ConfigError
from gpuscale.fields import DCGM_FIELDS
from gpuscale.telemetry.base import GpuSource, Snapshot, XidEvent
from gpuscale.telemetry.faults import Fault, parse_fault
from gpuscale.telemetry.loads import constant
from gpuscale.telemetry.physics import GPU_MODELS
from gpuscale.telemetry.sim import LOST_ERROR, SimSource

START = 1_700_000_000.0


class FakeClock:
    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def source(clock: FakeClock, **kwargs) -> SimSource:
    kwargs.setdefault("hostname", "sim-host")
    return SimSource(clock=clock, **kwargs)


def run(src: SimSource, clock: FakeClock, samples: int, every: float = 15.0) -> list[Snapshot]:
    snaps = []
    for _ in range(samples):
        snaps.append(src.sample())
        clock.advance(every)
    return snaps


def test_sim_source_is_a_gpu_source_with_dcgm_style_identity():
    src = source(FakeClock(), gpus=4, models=("H100", "L4"), seed=3)
    assert isinstance(src, GpuSource)
    assert src.vendor == "nvidia"
    devices = src.devices()
    assert [d.index for d in devices] == [0, 1, 2, 3]
    assert [d.model for d in devices] == [GPU_MODELS[s].name for s in ("H100", "L4", "H100", "L4")]
    assert [d.device for d in devices] == ["nvidia0", "nvidia1", "nvidia2", "nvidia3"]
    assert [d.pci_bus_id for d in devices] == [f"00000000:{i:02X}:00.0" for i in range(1, 5)]
    pattern = re.compile(
        r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"
    )
    assert all(pattern.match(d.uuid) for d in devices)
    assert len({d.uuid for d in devices}) == 4
    assert devices[1].memory_total_bytes == GPU_MODELS["L4"].memory_bytes
    assert devices[0].driver_version == "550.54.15"
    src.close()


def test_same_seed_gives_identical_snapshots_and_other_seeds_other_uuids():
    def snapshots(seed: int) -> list[Snapshot]:
        clock = FakeClock()
        src = source(
            clock,
            gpus=3,
            models=("H100", "A100"),
            seed=seed,
            faults=[parse_fault("ecc-dbe@20:gpu=1", "exporter")],
        )
        return run(src, clock, 6)

    assert snapshots(11) == snapshots(11)
    uuids = {seed: [d.uuid for d in source(FakeClock(), seed=seed).devices()] for seed in (1, 2)}
    assert set(uuids[1]).isdisjoint(uuids[2])


def test_snapshot_carries_every_reportable_field_without_nan():
    clock = FakeClock()
    src = source(clock, gpus=2, models=("H100", "L4"), load=constant(0.7))
    snap = run(src, clock, 2)[-1]
    assert snap.timestamp == START + 15.0
    assert snap.hostname == "sim-host"
    h100, l4 = snap.devices
    assert h100.up
    assert l4.up
    assert all(not math.isnan(v) for d in snap.devices for v in d.values.values())
    assert set(h100.values) <= set(DCGM_FIELDS)
    assert h100.values["DCGM_FI_DEV_GPU_UTIL"] == 70.0
    assert "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL" in h100.values
    assert "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL" not in l4.values  # absent, never 0
    assert "DCGM_FI_DEV_MEMORY_TEMP" not in l4.values
    fb = h100.values
    assert (
        fb["DCGM_FI_DEV_FB_USED"] + fb["DCGM_FI_DEV_FB_FREE"] + fb["DCGM_FI_DEV_FB_RESERVED"]
        == fb["DCGM_FI_DEV_FB_TOTAL"]
    )


def test_physics_advances_by_clock_time_clamped_to_a_minute():
    clock = FakeClock()
    src = source(clock, gpus=1, load=constant(1.0))
    energy = [src.sample().devices[0].values["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]]
    for jump in (10.0, 3600.0, -30.0):
        clock.advance(jump)
        energy.append(src.sample().devices[0].values["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"])
    steps = [b - a for a, b in itertools.pairwise(energy)]
    power = src.sample().devices[0].values["DCGM_FI_DEV_POWER_USAGE"]
    assert steps[0] == pytest.approx(10.0 * power * 1000, rel=0.03)  # mJ over 10 s
    assert steps[1] == pytest.approx(60.0 * power * 1000, rel=0.03)  # an hour's gap counts as 60 s
    assert steps[2] == 0  # the clock went backwards: no time passes


def test_xid_79_fault_loses_one_gpu_at_its_time_and_others_keep_reporting():
    clock = FakeClock()
    src = source(clock, gpus=3, faults=[parse_fault("gpu-lost@30:gpu=1", "exporter")])
    snaps = run(src, clock, 5)  # samples at 0, 15, 30, 45, 60 s
    assert [s.devices[1].up for s in snaps] == [True, True, False, False, False]
    lost = snaps[2].devices[1]
    assert lost.values == {}
    assert lost.error == LOST_ERROR
    assert lost.xid_events == (XidEvent(timestamp=START + 30.0, xid=79),)
    assert snaps[3].devices[1].xid_events == ()  # reported once
    for snap in snaps:
        for i in (0, 2):
            assert snap.devices[i].up
            assert "DCGM_FI_DEV_GPU_UTIL" in snap.devices[i].values


def test_ecc_dbe_fault_increments_counters_and_reports_xid_48():
    clock = FakeClock()
    src = source(clock, gpus=2, faults=[parse_fault("ecc-dbe@10:gpu=1", "exporter")])
    before, after = run(src, clock, 2)
    for name in (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    ):
        assert before.devices[1].values[name] == 0
        assert after.devices[1].values[name] == 1
        assert after.devices[0].values[name] == 0
    assert after.devices[1].values["DCGM_FI_DEV_XID_ERRORS"] == 48
    assert after.devices[1].xid_events == (XidEvent(timestamp=START + 10.0, xid=48),)
    assert after.devices[1].up


def test_row_remap_fault_sets_failure_flag_and_reports_xid_64():
    clock = FakeClock()
    src = source(clock, gpus=1)
    src.inject(parse_fault("row-remap@0:gpu=0", "exporter"))
    sample = src.sample().devices[0]
    assert sample.values["DCGM_FI_DEV_ROW_REMAP_FAILURE"] == 1
    assert [e.xid for e in sample.xid_events] == [64]


def test_thermal_fault_throttles_a_busy_gpu():
    clock = FakeClock()
    src = source(clock, gpus=2, load=constant(1.0), faults=[Fault("thermal", 60.0, gpu=0)])
    last = run(src, clock, 60)[-1]  # 15 minutes
    hot, cool = last.devices[0].values, last.devices[1].values
    h100 = GPU_MODELS["H100"]
    assert hot["DCGM_FI_DEV_GPU_TEMP"] >= h100.slowdown_temp_c
    assert hot["DCGM_FI_DEV_SM_CLOCK"] < h100.max_sm_clock_mhz
    assert hot["DCGM_FI_DEV_THERMAL_VIOLATION"] > 0
    assert cool["DCGM_FI_DEV_SM_CLOCK"] == h100.max_sm_clock_mhz
    assert cool["DCGM_FI_DEV_THERMAL_VIOLATION"] == 0


def test_fault_on_a_missing_gpu_is_a_config_error():
    with pytest.raises(ConfigError) as err:
        source(FakeClock(), gpus=4, faults=[parse_fault("thermal@0:gpu=4")])
    assert str(err.value) == (
        "--fault 'thermal@0:gpu=4': this simulated host has GPUs 0..3; pick an index in that range"
    )


@pytest.mark.parametrize(("gpus", "models"), [(0, ("H100",)), (2, ()), (2, ("H100", "TPU"))])
def test_bad_host_shape_is_a_config_error(gpus, models):
    with pytest.raises(ConfigError):
        source(FakeClock(), gpus=gpus, models=models)


def test_no_gpu_models_names_the_real_flag():
    with pytest.raises(ConfigError) as err:
        source(FakeClock(), gpus=2, models=())
    assert str(err.value) == "--gpu-models: names no GPU model; name at least one, e.g. H100"


def test_xid_fault_reports_its_code_and_keeps_the_gpu():
    clock = FakeClock()
    src = source(clock, gpus=2, faults=[parse_fault("xid@15:code=13:gpu=1", "exporter")])
    before, after = run(src, clock, 2)
    assert before.devices[1].xid_events == ()
    assert after.devices[1].xid_events == (XidEvent(timestamp=START + 15.0, xid=13),)
    assert after.devices[1].up


def test_old_exporter_spelling_still_injects():
    clock = FakeClock()
    src = source(clock, gpus=2, faults=[parse_fault("xid:79:gpu=1:at=15", "exporter")])
    assert [s.devices[1].up for s in run(src, clock, 3)] == [True, False, False]


def test_thermal_fault_with_a_duration_cools_down_again():
    clock = FakeClock()
    spec = "thermal@0:gpu=0:rise_c=40:duration=600"
    src = source(clock, gpus=2, load=constant(1.0), faults=[parse_fault(spec, "exporter")])
    snaps = run(src, clock, 120)  # 30 minutes: hot for 10, then 20 to cool
    h100 = GPU_MODELS["H100"]
    hot = snaps[39].devices[0].values  # 9:45, still failed
    cooled = snaps[-1].devices[0].values
    assert hot["DCGM_FI_DEV_SM_CLOCK"] < h100.max_sm_clock_mhz
    assert hot["DCGM_FI_DEV_GPU_TEMP"] >= h100.slowdown_temp_c
    assert cooled["DCGM_FI_DEV_SM_CLOCK"] == h100.max_sm_clock_mhz
    assert cooled["DCGM_FI_DEV_GPU_TEMP"] < h100.slowdown_temp_c - 5


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        (Fault("straggler", 0.0, replica=0), "replica=N does not apply to gpuscale exporter"),
        (Fault("exporter-down", 0.0, gpu=1), "exporter-down hits the whole host"),
        (Fault("ecc-dbe", 0.0), "gpu=N is required"),
    ],
)
def test_faults_the_exporter_cannot_inject_are_config_errors(fault, message):
    with pytest.raises(ConfigError, match=message):
        source(FakeClock(), gpus=2, faults=[fault])


def test_derived_fields_follow_their_inputs():
    clock = iter(range(1000, 2000, 30))
    src = SimSource(2, ("H100", "L4"), load=constant(0.0), clock=lambda: float(next(clock)))
    src.sample()
    h100, l4 = (d.values for d in src.sample().devices)
    assert h100["DCGM_FI_DEV_POWER_MGMT_LIMIT"] == 700.0  # the H100 SXM datasheet TDP
    used = h100["DCGM_FI_DEV_FB_USED"]
    usable = h100["DCGM_FI_DEV_FB_TOTAL"] - h100["DCGM_FI_DEV_FB_RESERVED"]
    assert h100["DCGM_FI_DEV_FB_USED_PERCENT"] == pytest.approx(used / usable)
    assert 0 < h100["DCGM_FI_DEV_FB_USED_PERCENT"] < 1
    # Idle for the whole step: the low-utilisation violation grew, so the idle bit is set.
    assert int(h100["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"]) & 0x1
    # 18 NVLink 4 links on H100 SXM, none on L4: per-link fields only where links exist.
    links = [k for k in h100 if k.startswith("DCGM_FI_DEV_NVLINK_BANDWIDTH_L")]
    assert len(links) == 18
    assert not [k for k in l4 if k.startswith("DCGM_FI_DEV_NVLINK_BANDWIDTH_L")]


def test_static_label_fields_and_nvlink_p2p_status():
    src = SimSource(3, ("H100", "H100", "L4"), clock=lambda: 1000.0)
    first = dict(src.devices()[0].attributes)
    assert first["DCGM_FI_DEV_SERIAL"] == src.devices()[0].serial
    assert first["DCGM_FI_DEV_VBIOS_VERSION"]
    # NVLink P2P needs NVLink at both ends: OK (0) to the other H100, NotSupported (5) to L4.
    assert (first["DCGM_EXP_P2P_STATUS:1"], first["DCGM_EXP_P2P_STATUS:2"]) == ("0", "5")
