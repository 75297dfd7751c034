"""Device physics: power, heat, throttling, counters and faults, against the model's numbers."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.errors import ConfigError
from gpuscale.fields import DCGM_FIELDS
from gpuscale.telemetry.loads import ActivityMix
from gpuscale.telemetry.physics import GPU_MODELS, MIB, FleetPhysics, GpuModel, gpu_model

H100 = GPU_MODELS["H100"]
REPORTED = {
    name
    for name, f in DCGM_FIELDS.items()
    if f.type != "label" and name != "DCGM_EXP_XID_ERRORS_COUNT"
}


def run(fleet: FleetPhysics, load, seconds: float, dt: float = 1.0, ws=None) -> None:
    for _ in range(round(seconds / dt)):
        fleet.step(dt, np.broadcast_to(np.asarray(load, dtype=float), (fleet.n,)), ws)


def test_catalogue_holds_required_models_with_consistent_figures():
    for short in ("H100", "H200", "A100", "L4", "A10G"):
        m = gpu_model(short)
        assert m.short == short
        assert 0 < m.idle_w < m.tdp_w
        assert 0 < m.base_sm_clock_mhz < m.max_sm_clock_mhz
        assert m.slowdown_temp_c < m.shutdown_temp_c
        # At TDP and 25 C inlet a healthy card sits below its slowdown temperature.
        assert 25.0 + m.thermal_resistance_c_per_w * m.tdp_w < m.slowdown_temp_c
    assert GPU_MODELS["H100"].name == "NVIDIA H100 80GB HBM3"
    assert GPU_MODELS["H100"].tdp_w == 700.0
    assert GPU_MODELS["H100"].memory_bytes == 81559 * MIB
    assert GPU_MODELS["L4"].nvlink_bytes_per_s == 0.0
    assert GPU_MODELS["H200"].memory_bytes > GPU_MODELS["H100"].memory_bytes


def test_unknown_model_error_names_it_and_lists_choices():
    with pytest.raises(ConfigError) as err:
        gpu_model("B300")
    assert "'B300'" in str(err.value)
    assert "H100" in str(err.value)
    assert "L4" in str(err.value)
    assert gpu_model("h100") is H100


@settings(max_examples=40, deadline=None)
@given(
    short=st.sampled_from(sorted(GPU_MODELS)),
    intensity=st.floats(0.0, 1.6),
    loads=st.lists(st.floats(-0.5, 1.5) | st.just(math.nan), min_size=1, max_size=12),
    dt=st.floats(0.0, 60.0),
)
def test_power_stays_between_idle_and_tdp(short, intensity, loads, dt):
    model = GPU_MODELS[short]
    fleet = FleetPhysics([model] * 3, mix=ActivityMix(power_intensity=intensity))
    for load in loads:
        fleet.step(dt, np.full(3, load))
        power = fleet.fields()["DCGM_FI_DEV_POWER_USAGE"]
        assert np.all(power >= model.idle_w - 1e-6)
        assert np.all(power <= model.tdp_w + 1e-6)
        assert np.all((fleet.capacity_factor > 0) & (fleet.capacity_factor <= 1))


def test_steady_state_power_rises_with_load_from_idle():
    loads = np.linspace(0.0, 1.0, 11)
    fleet = FleetPhysics([H100] * 11, seed=3)
    run(fleet, loads, 300, dt=15)
    power = fleet.fields()["DCGM_FI_DEV_POWER_USAGE"]
    assert np.all(np.diff(power) > 0)
    assert power[0] == pytest.approx(H100.idle_w, rel=0.01)
    # Serving draws ~92 % of the dynamic range at full load: 70 + 0.92 * 630 W.
    assert power[-1] == pytest.approx(70 + 0.92 * 630, rel=0.03)


def test_temperature_covers_63_percent_of_the_way_after_one_time_constant():
    fleet = FleetPhysics([H100], ambient_c=25.0, seed=1)
    start = fleet.temperature_c[0]
    assert start == pytest.approx(25.0 + H100.thermal_resistance_c_per_w * H100.idle_w)
    tau = H100.thermal_time_constant_s
    run(fleet, 1.0, tau)
    after_tau = fleet.temperature_c[0]
    run(fleet, 1.0, 10 * tau)
    final = fleet.temperature_c[0]
    target = 25.0 + H100.thermal_resistance_c_per_w * fleet.power_w[0]
    assert final == pytest.approx(target, abs=0.5)
    assert (after_tau - start) / (final - start) == pytest.approx(1 - math.exp(-1), abs=0.02)
    assert fleet.fields()["DCGM_FI_DEV_GPU_TEMP"][0] == round(final)


def test_one_long_step_lands_where_many_short_steps_do():
    coarse, fine = FleetPhysics([H100], seed=2), FleetPhysics([H100], seed=2)
    coarse.step(60.0, np.ones(1))
    run(fine, 1.0, 60)
    assert coarse.temperature_c[0] == pytest.approx(fine.temperature_c[0], abs=0.3)


def test_thermal_fault_throttles_only_the_faulty_gpu_and_clears():
    fleet = FleetPhysics([H100] * 3, seed=4)
    run(fleet, 1.0, 300, dt=5)
    fleet.inject_thermal(1, extra_c=20.0)
    run(fleet, 1.0, 300, dt=5)
    first = fleet.fields()
    run(fleet, 1.0, 60, dt=5)
    f = fleet.fields()
    temp, clock = f["DCGM_FI_DEV_GPU_TEMP"], f["DCGM_FI_DEV_SM_CLOCK"]
    violation = f["DCGM_FI_DEV_THERMAL_VIOLATION"]
    assert temp[1] >= H100.slowdown_temp_c
    assert clock[1] < H100.max_sm_clock_mhz
    assert fleet.capacity_factor[1] < 1.0
    assert violation[1] > first["DCGM_FI_DEV_THERMAL_VIOLATION"][1] > 0
    # Held at the trip point, the last 60 s were all throttled (microseconds).
    assert violation[1] - first["DCGM_FI_DEV_THERMAL_VIOLATION"][1] == pytest.approx(60e6, rel=0.01)
    for other in (0, 2):
        assert temp[other] < H100.slowdown_temp_c
        assert clock[other] == H100.max_sm_clock_mhz
        assert fleet.capacity_factor[other] == 1.0
        assert violation[other] == 0
    fleet.clear_thermal(1)
    run(fleet, 1.0, 600, dt=5)
    assert fleet.capacity_factor[1] == 1.0
    assert fleet.temperature_c[1] < H100.slowdown_temp_c


def test_power_limit_lowers_clock_and_counts_power_violation():
    fleet = FleetPhysics([H100, H100], mix=ActivityMix(power_intensity=1.3), seed=5)
    fleet.step(10.0, np.array([1.0, 0.5]))
    f = fleet.fields()
    assert f["DCGM_FI_DEV_POWER_USAGE"][0] == pytest.approx(H100.tdp_w)
    assert H100.base_sm_clock_mhz <= f["DCGM_FI_DEV_SM_CLOCK"][0] < H100.max_sm_clock_mhz
    assert f["DCGM_FI_DEV_POWER_VIOLATION"][0] == pytest.approx(10e6)
    assert f["DCGM_FI_DEV_POWER_USAGE"][1] < H100.tdp_w
    assert f["DCGM_FI_DEV_POWER_VIOLATION"][1] == 0


def test_energy_counter_is_the_integral_of_power():
    fleet = FleetPhysics([H100, GPU_MODELS["L4"], GPU_MODELS["A100"]], seed=6)
    rng = np.random.default_rng(0)
    e0 = fleet.fields()["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    integral = np.zeros(3)
    for _ in range(200):
        dt = float(rng.uniform(0.5, 5.0))
        fleet.step(dt, rng.uniform(0.0, 1.0, 3))
        integral += fleet.fields()["DCGM_FI_DEV_POWER_USAGE"] * dt * 1000.0  # W*s -> mJ
    delta = fleet.fields()["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] - e0
    np.testing.assert_allclose(delta, integral, rtol=0.01)
    assert np.all(delta > 0)


def test_framebuffer_used_is_resident_plus_working_set_and_parts_sum_to_total():
    models = [GPU_MODELS[s] for s in sorted(GPU_MODELS)]
    resident = np.array([m.memory_bytes * 0.4 for m in models])
    fleet = FleetPhysics(models, resident_bytes=resident)
    working = np.array([m.memory_bytes * 0.25 for m in models])
    fleet.step(1.0, np.full(len(models), 0.5), working)
    f = fleet.fields()
    np.testing.assert_array_equal(f["DCGM_FI_DEV_FB_USED"], np.round((resident + working) / MIB))
    total = f["DCGM_FI_DEV_FB_FREE"] + f["DCGM_FI_DEV_FB_USED"] + f["DCGM_FI_DEV_FB_RESERVED"]
    np.testing.assert_array_equal(total, f["DCGM_FI_DEV_FB_TOTAL"])
    np.testing.assert_array_equal(f["DCGM_FI_DEV_FB_TOTAL"], [m.memory_bytes / MIB for m in models])
    fleet.step(1.0, np.zeros(len(models)))  # no working set given: only the resident model
    np.testing.assert_array_equal(fleet.fields()["DCGM_FI_DEV_FB_USED"], np.round(resident / MIB))


def test_xid_79_takes_the_gpu_off_the_bus_and_others_keep_reporting():
    fleet = FleetPhysics([H100] * 3)
    fleet.step(1.0, np.full(3, 0.5))
    fleet.inject_xid(1, 79, at=12.5)
    fleet.step(1.0, np.full(3, 0.5))
    f = fleet.fields()
    assert all(np.isnan(arr[1]) for arr in f.values())
    assert all(
        not np.isnan(f[name][0]) for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE")
    )
    assert fleet.lost.tolist() == [False, True, False]
    assert fleet.capacity_factor[1] == 0.0
    assert fleet.busy[1] == 0.0
    assert fleet.drain_xid_events() == [(1, 12.5, 79)]
    assert fleet.drain_xid_events() == []


def test_other_xids_are_recorded_without_losing_the_gpu():
    fleet = FleetPhysics([H100] * 2)
    fleet.inject_xid(0, 13, at=3.0)
    fleet.step(1.0, np.ones(2))
    f = fleet.fields()
    assert f["DCGM_FI_DEV_XID_ERRORS"].tolist() == [13.0, 0.0]
    assert not fleet.lost.any()
    assert fleet.drain_xid_events() == [(0, 3.0, 13)]


def test_ecc_double_bit_error_counts_remaps_or_retires_and_emits_xid_48():
    fleet = FleetPhysics([H100, GPU_MODELS["V100"], H100])
    fleet.inject_ecc_dbe(0, at=5.0)
    fleet.inject_ecc_dbe(1, at=6.0)
    f = fleet.fields()
    for name in ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"):
        assert f[name].tolist() == [1.0, 1.0, 0.0]
    assert f["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"][0] == 1.0  # Hopper remaps rows
    assert f["DCGM_FI_DEV_RETIRED_DBE"][1] == 1.0  # Volta retires pages
    assert np.isnan(f["DCGM_FI_DEV_RETIRED_DBE"][0])
    assert np.isnan(f["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"][1])
    assert f["DCGM_FI_DEV_XID_ERRORS"].tolist() == [48.0, 48.0, 0.0]
    assert fleet.drain_xid_events() == [(0, 5.0, 48), (1, 6.0, 48)]


def test_row_remap_failure_sets_the_flag_and_emits_xid_64():
    fleet = FleetPhysics([H100] * 2)
    fleet.inject_row_remap_failure(1, at=7.0)
    f = fleet.fields()
    assert f["DCGM_FI_DEV_ROW_REMAP_FAILURE"].tolist() == [0.0, 1.0]
    assert fleet.drain_xid_events() == [(1, 7.0, 64)]


def test_gpu_past_its_shutdown_temperature_falls_off_the_bus():
    fleet = FleetPhysics([H100, H100], start_s=1000.0)
    fleet.inject_thermal(0, extra_c=80.0)  # hotter than shutdown even at the lowest clock
    run(fleet, 0.2, 600, dt=5)
    assert fleet.lost.tolist() == [True, False]
    (event,) = fleet.drain_xid_events()
    assert event[0] == 0
    assert event[2] == 79
    assert 1000.0 < event[1] < 1600.0


def test_fields_cover_the_catalogue_and_absent_features_are_nan():
    models = [H100, GPU_MODELS["L4"], GPU_MODELS["A100"]]
    fleet = FleetPhysics(models)
    fleet.step(1.0, np.full(3, 0.6))
    f = fleet.fields()
    assert set(f) == REPORTED
    for name in REPORTED:
        assert f[name].shape == (3,)
        assert f[name].dtype == np.float64
    nvlink = [n for n in REPORTED if "NVLINK" in n]
    assert nvlink
    assert all(np.isnan(f[n][1]) and not np.isnan(f[n][0]) for n in nvlink)
    assert np.isnan(f["DCGM_FI_DEV_MEMORY_TEMP"][1])  # GDDR6 has no memory sensor
    # DCGM reports 0, not blank, for encoder use on encoder-less chips and for the vGPU
    # licence on bare metal; dcgm-exporter serves those zeros.
    assert f["DCGM_FI_DEV_ENC_UTIL"].tolist() == [0.0, 0.0, 0.0]
    assert f["DCGM_FI_DEV_VGPU_LICENSE_STATUS"].tolist() == [0.0, 0.0, 0.0]
    assert f["DCGM_FI_DEV_GPU_UTIL"].tolist() == [60.0, 60.0, 60.0]
    for name in REPORTED:
        if name.startswith("DCGM_FI_PROF_") and "BYTES" not in name:
            assert np.all((f[name] >= 0) & (f[name] <= 1)), name


def test_idle_gpu_drops_to_idle_clock_and_counts_low_utilisation():
    fleet = FleetPhysics([H100, H100])
    fleet.step(30.0, np.array([0.0, 0.8]))
    f = fleet.fields()
    assert f["DCGM_FI_DEV_SM_CLOCK"].tolist() == [H100.idle_sm_clock_mhz, H100.max_sm_clock_mhz]
    assert f["DCGM_FI_DEV_LOW_UTIL_VIOLATION"].tolist() == [30e6, 0.0]
    assert fleet.capacity_factor.tolist() == [1.0, 1.0]  # an idle GPU can still serve at full clock


def test_same_seed_gives_identical_fields_and_another_seed_differs():
    def fields_after(seed: int) -> dict[str, np.ndarray]:
        fleet = FleetPhysics([H100] * 4, seed=seed)
        run(fleet, [0.2, 0.4, 0.6, 0.8], 60, dt=15)
        return fleet.fields()

    a, b, c = fields_after(7), fields_after(7), fields_after(8)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    assert not np.array_equal(a["DCGM_FI_DEV_POWER_USAGE"], c["DCGM_FI_DEV_POWER_USAGE"])


def test_ten_thousand_gpus_step_and_report_as_arrays():
    models = [H100, GPU_MODELS["L4"]] * 5000
    fleet = FleetPhysics(models, seed=0)
    load = np.random.default_rng(0).uniform(0.0, 1.0, 10_000)
    fleet.step(15.0, load, np.full(10_000, 1e9))
    fleet.inject_xid(9_999, 79, at=0.0)
    f = fleet.fields()
    assert fleet.n == 10_000
    assert all(arr.shape == (10_000,) for arr in f.values())
    assert fleet.capacity_factor.shape == fleet.busy.shape == fleet.lost.shape == (10_000,)
    np.testing.assert_array_equal(f["DCGM_FI_DEV_GPU_UTIL"][:-1], np.round(100 * load[:-1]))
    assert np.isnan(f["DCGM_FI_DEV_GPU_UTIL"][-1])


def test_step_rejects_negative_time_and_wrong_shapes():
    fleet = FleetPhysics([H100] * 2)
    with pytest.raises(ValueError, match="dt"):
        fleet.step(-1.0, np.zeros(2))
    with pytest.raises(ValueError, match="shape"):
        fleet.step(1.0, np.zeros(3))
    with pytest.raises(ValueError, match="out of range"):
        fleet.inject_thermal(2)
    with pytest.raises(ConfigError):
        FleetPhysics([])


def test_gpu_model_is_a_frozen_value():
    with pytest.raises(AttributeError):
        H100.tdp_w = 1.0  # type: ignore[misc]
    assert isinstance(H100, GpuModel)
