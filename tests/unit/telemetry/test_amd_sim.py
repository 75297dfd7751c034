"""Simulated AMD GPUs: device-metrics-exporter's series from the same physics as DCGM's fields."""

import pytest

from gpuscale.fields.amd import AMD_FIELDS, AMD_PROFILER_ONLY, split_labelled_key
from gpuscale.telemetry.amd_config import AmdConfig
from gpuscale.telemetry.amd_sim import WAVES_PER_CU, AmdSimSource, put_profiler
from gpuscale.telemetry.faults import parse_fault
from gpuscale.telemetry.gpus import GPU_MODELS
from gpuscale.telemetry.loads import parse_load_spec
from gpuscale.telemetry.physics import FleetPhysics
from gpuscale.telemetry.sim import SimSource

PROF = "DCGM_FI_PROF_"


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def sim(models=("MI300X", "MI210"), load="constant:0.6", **kw) -> SimSource:
    kw.setdefault("hostname", "node-a")
    return SimSource(len(models), models, load=parse_load_spec(load, 0), clock=Clock(), **kw)


@pytest.fixture
def no_jobs(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUSCALE_SLURM_JOB_DIR", str(tmp_path / "slurm"))
    monkeypatch.delenv("GPUSCALE_CLUSTER_NAME", raising=False)


def test_every_value_is_an_exporter_series_in_its_units(no_jobs):
    plain, amd = sim(), AmdSimSource(sim())
    for _ in range(3):
        dcgm, snap = plain.sample(), amd.sample()
    for device, same in zip(snap.devices, dcgm.devices, strict=True):
        assert device.info.vendor == "amd"
        assert {split_labelled_key(k)[0] for k in device.values} <= set(AMD_FIELDS)
        v, d = device.values, same.values
        # DCGM energy is mJ, the exporter's uJ; framebuffer MiB is amd-smi's MB.
        assert v["gpu_energy_consumed"] == 1000 * d["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
        assert v["gpu_used_vram"] == d["DCGM_FI_DEV_FB_USED"]
        assert v["gpu_power_usage"] == d["DCGM_FI_DEV_POWER_USAGE"]
    mi300x, mi210 = snap.devices
    # MI300X reports current socket power and 8 XCC clocks; MI210 average power and one.
    assert "gpu_package_power" in mi300x.values
    assert "gpu_average_package_power" in mi210.values
    assert "gpu_average_package_power" not in mi300x.values
    clocks = [k for k in mi300x.values if k.startswith("gpu_clock|")]
    assert len(clocks) == 9  # 8 system (XCC) clocks, then memory
    labels = dict(mi300x.info.vendor_labels)
    assert labels["card_model"] == "102-G30211-00"  # matches the dashboards' MI3xx filter
    assert mi300x.info.pci_bus_id == "0000:0c:00.0"


def test_profiler_series_are_dcgm_activity_normalised_as_rocprofiler_counters(no_jobs):
    plain, amd = sim(), AmdSimSource(sim())
    for _ in range(3):
        dcgm, snap = plain.sample(), amd.sample()
    for device, same in zip(snap.devices, dcgm.devices, strict=True):
        v, d = device.values, same.values
        gr, sm = d[f"{PROF}GR_ENGINE_ACTIVE"], d[f"{PROF}SM_ACTIVE"]
        # GPU_UTIL = GRBM_GUI_ACTIVE / GRBM_COUNT: the engine's busy share of elapsed time.
        assert v["gpu_prof_gui_util_percent"] == pytest.approx(100 * gr)
        # SIMD_UTILIZATION: busy CU cycles over elapsed cycles, DCGM's SM_ACTIVE.
        assert v["gpu_prof_simd_utilization"] == pytest.approx(sm)
        # VALUBusy and MfmaUtil are per active GPU cycle (divided by GRBM_GUI_ACTIVE).
        assert v["gpu_prof_sm_active"] == pytest.approx(100 * sm / gr)
        assert v["gpu_prof_tensor_active_percent"] == pytest.approx(
            100 * d[f"{PROF}PIPE_TENSOR_ACTIVE"] / gr
        )
        # Occupancy in waves: no CU holds more than its wave slots, and busy CUs hold
        # at least the mean over all of them (SM_ACTIVE <= GR_ENGINE_ACTIVE).
        per_cu, per_active = v["gpu_prof_occupancy_per_cu"], v["gpu_prof_occupancy_per_active_cu"]
        assert 0 < per_cu <= per_active <= WAVES_PER_CU


def test_sm_active_occupancy_and_tensor_follow_batch_fill():
    """docs/telemetry-model.md: while busy, fuller batches keep more of the GPU active."""
    low, full = (FleetPhysics([GPU_MODELS["MI300X"]], seed=1) for _ in range(2))
    low.step(1.0, [0.5], batch_fill=0.1)
    full.step(1.0, [0.5], batch_fill=1.0)
    a, b = {}, {}
    put_profiler(a, {k: float(x[0]) for k, x in low.fields().items()})
    put_profiler(b, {k: float(x[0]) for k, x in full.fields().items()})
    for name in (
        "gpu_prof_sm_active",
        "gpu_prof_occupancy_per_cu",
        "gpu_prof_tensor_active_percent",
    ):
        assert b[name] > a[name], name


def test_an_idle_gpu_has_no_per_active_cycle_counters(no_jobs):
    snap = AmdSimSource(sim(("MI300X",), load="constant:0")).sample()
    values = snap.devices[0].values
    assert values["gpu_prof_gui_util_percent"] == 0.0
    # 0 active cycles: rocprofiler's derived counters divide by 0 and give no number.
    assert "gpu_prof_sm_active" not in values
    assert "gpu_prof_occupancy_per_active_cu" not in values


def test_faults_reach_the_amd_series(no_jobs):
    faults = [
        parse_fault("ecc-dbe@0:gpu=1", "exporter"),
        parse_fault("gpu-lost@0:gpu=2", "exporter"),
    ]
    amd = AmdSimSource(sim(("MI300X", "MI300X", "MI210"), faults=faults))
    healthy, sick, lost = amd.sample().devices
    assert healthy.values["gpu_health"] == 1.0
    assert sick.values["gpu_health"] == 0.0  # upstream: any uncorrectable ECC error
    assert sick.values["gpu_ecc_uncorrect_total"] >= 1
    assert not lost.up
    assert lost.values == {}


def test_config_turns_the_profiler_off_selects_fields_and_adds_labels(no_jobs):
    config = AmdConfig(
        custom_labels=(("cluster_name", "lab"), ("rack", "r1")),
        fields=frozenset({"gpu_prof_gui_util_percent", "gpu_prof_sm_active", "gpu_used_vram"}),
    )
    amd = AmdSimSource(sim(("MI300X",)), config=config)
    device = amd.sample().devices[0]
    # Without the profiler, amdsmi's graphics busy share stands in, as on a real node.
    assert set(device.values) == {"gpu_prof_gui_util_percent", "gpu_used_vram"}
    assert not set(AMD_PROFILER_ONLY) & set(device.values)
    assert dict(device.info.vendor_labels)["rack"] == "r1"
    assert dict(device.info.vendor_labels)["cluster_name"] == "lab"
