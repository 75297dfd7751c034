"""Device physics: power, heat, throttling, counters and faults, against the model's numbers."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.errors import ConfigError
from gpuscale.fields import DCGM_FIELDS
from gpuscale.telemetry.activity import (
    LLM_PHASES,
    PROFILED,
    batch_fill,
    kernel_busy_share,
    phase_levels,
)
from gpuscale.telemetry.loads import ActivityMix
from gpuscale.telemetry.physics import GPU_MODELS, MIB, FleetPhysics, GpuModel, gpu_model
from gpuscale.telemetry.sim import DERIVED

H100 = GPU_MODELS["H100"]
REPORTED = {
    name
    for name, f in DCGM_FIELDS.items()
    if f.type != "label" and f.field_id and name not in DERIVED  # DERIVED: sim.py adds them
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
    # Held at the trip point, the last 60 s were all throttled (nanoseconds, as DCGM).
    assert violation[1] - first["DCGM_FI_DEV_THERMAL_VIOLATION"][1] == pytest.approx(60e9, rel=0.01)
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
    assert f["DCGM_FI_DEV_POWER_VIOLATION"][0] == pytest.approx(10e9)
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
    assert f["DCGM_FI_DEV_LOW_UTIL_VIOLATION"].tolist() == [30e9, 0.0]
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


# ---------------------------------------------------------------- DCGM activity semantics
# GPU_UTIL is time with a kernel running; the profiling ratios follow batch fill and phase.
SLOTS = 64
PROF = "DCGM_FI_PROF_"


def settled(busy, fill=None, prefill=None, *, mix: ActivityMix | None = None, **kw):
    """Fields after 10 min at each busy share, fill and phase, one H100 each.

    Every H100 is its own fleet with the same seed, so all share the silicon spread and
    the step jitter: values differ only through the inputs.
    """
    cases = np.broadcast(np.asarray(busy), np.asarray(fill), np.asarray(prefill))
    rows = []
    for b, f, p in cases:
        fleet = FleetPhysics([H100], seed=11, **({"mix": mix} if mix else {}))
        for _ in range(40):
            fleet.step(15.0, np.full(1, b), batch_fill=f, prefill_share=p, **kw)
        rows.append(fleet.fields())
    return {name: np.concatenate([r[name] for r in rows]) for name in rows[0]}


def test_one_request_decoding_continuously_reads_gpu_util_100_but_low_sm_active():
    f = settled(1.0, 1 / SLOTS, 0.0)
    assert f["DCGM_FI_DEV_GPU_UTIL"][0] == 100.0
    assert f[f"{PROF}GR_ENGINE_ACTIVE"][0] == pytest.approx(1.0, abs=0.03)
    assert f[f"{PROF}SM_ACTIVE"][0] == pytest.approx(0.31, abs=0.02)
    assert f[f"{PROF}SM_OCCUPANCY"][0] < 0.15
    assert f[f"{PROF}PIPE_TENSOR_ACTIVE"][0] < 0.05
    # A card half the time at full batch reads half the GPU_UTIL yet more SM_ACTIVE:
    # GPU_UTIL ranks these two the wrong way round, SM_ACTIVE the right way.
    half = settled(0.5, 1.0, 0.0)
    assert half["DCGM_FI_DEV_GPU_UTIL"][0] == 50.0
    assert half[f"{PROF}SM_ACTIVE"][0] > f[f"{PROF}SM_ACTIVE"][0] + 0.05


def test_no_busy_time_reads_zero_everywhere_whatever_the_batch():
    f = settled(0.0, 1.0, 0.5)
    assert f["DCGM_FI_DEV_GPU_UTIL"][0] == 0.0
    for name in ("GR_ENGINE_ACTIVE", "SM_ACTIVE", "SM_OCCUPANCY", "PIPE_TENSOR_ACTIVE"):
        assert f[f"{PROF}{name}"][0] == 0.0, name
    assert f[f"{PROF}DRAM_ACTIVE"][0] == 0.0
    assert f["DCGM_FI_DEV_POWER_USAGE"][0] == pytest.approx(H100.idle_w, rel=0.01)


def test_sm_active_and_occupancy_rise_with_batch_fill_while_gpu_util_stays_100():
    fills = np.linspace(1 / SLOTS, 1.0, 8)
    decode = settled(1.0, fills, 0.0)
    assert np.all(decode["DCGM_FI_DEV_GPU_UTIL"] == 100.0)
    for name in ("SM_ACTIVE", "SM_OCCUPANCY", "PIPE_TENSOR_ACTIVE", "DRAM_ACTIVE"):
        assert np.all(np.diff(decode[f"{PROF}{name}"]) > 0), name
    assert decode[f"{PROF}SM_ACTIVE"][-1] - decode[f"{PROF}SM_ACTIVE"][0] > 0.4
    # Prefill saturates the SMs sooner: it still rises, by less than the 1 % step jitter
    # between neighbours, so compare one sequence with a full batch, and the exact levels.
    for prefill in (0.25, 1.0):
        ends = settled(1.0, [1 / SLOTS, 1.0], prefill)
        for name in ("SM_ACTIVE", "SM_OCCUPANCY", "PIPE_TENSOR_ACTIVE", "DRAM_ACTIVE"):
            assert ends[f"{PROF}{name}"][1] > ends[f"{PROF}{name}"][0] + 0.03, (prefill, name)
        levels = phase_levels(LLM_PHASES, fills, np.full(fills.size, prefill))
        assert all(np.all(np.diff(levels[name]) > 0) for name in PROFILED)


def test_busy_share_scales_every_profiling_ratio():
    busy = np.array([0.25, 0.5, 1.0])
    f = settled(busy, 0.5, 0.2)
    np.testing.assert_array_equal(f["DCGM_FI_DEV_GPU_UTIL"], 100 * busy)
    for name in ("SM_ACTIVE", "PIPE_TENSOR_ACTIVE", "DRAM_ACTIVE"):
        ratio = f[f"{PROF}{name}"]
        np.testing.assert_allclose(ratio / ratio[-1], busy, rtol=0.05)


def test_decode_is_memory_bound_and_prefill_compute_bound():
    for fill in (1 / SLOTS, 0.5, 1.0):
        decode = settled(1.0, fill, 0.1)
        prefill = settled(1.0, fill, 0.9)
        d, p = decode[f"{PROF}DRAM_ACTIVE"][0], decode[f"{PROF}PIPE_TENSOR_ACTIVE"][0]
        assert d > p + 0.2, fill
        d, p = prefill[f"{PROF}DRAM_ACTIVE"][0], prefill[f"{PROF}PIPE_TENSOR_ACTIVE"][0]
        assert p > d + 0.2, fill
        assert prefill[f"{PROF}SM_ACTIVE"][0] > decode[f"{PROF}SM_ACTIVE"][0]


def test_fb_used_is_weights_plus_kv_cache_in_mib():
    weights, kv = 14e9, np.array([0.0, 3e9, 20e9])
    fleet = FleetPhysics([H100] * 3, resident_bytes=weights)
    fleet.step(15.0, np.ones(3), batch_fill=0.5, kv_cache_bytes=kv)
    f = fleet.fields()
    np.testing.assert_array_equal(f["DCGM_FI_DEV_FB_USED"], np.round((weights + kv) / MIB))
    total = f["DCGM_FI_DEV_FB_FREE"] + f["DCGM_FI_DEV_FB_USED"] + f["DCGM_FI_DEV_FB_RESERVED"]
    np.testing.assert_array_equal(total, f["DCGM_FI_DEV_FB_TOTAL"])
    # A server that allocates its KV pool up front (vLLM) reads the pool until it overflows.
    pooled = FleetPhysics([H100] * 3, resident_bytes=weights, kv_pool_bytes=10e9)
    pooled.step(15.0, np.ones(3), kv_cache_bytes=kv)
    used = pooled.fields()["DCGM_FI_DEV_FB_USED"]
    np.testing.assert_array_equal(used, np.round((weights + np.maximum(kv, 10e9)) / MIB))


def test_power_rises_with_activity_at_equal_busy_time_and_stops_at_the_limit():
    fills = np.linspace(0.0, 1.0, 6)
    decode = settled(1.0, fills, 0.0)["DCGM_FI_DEV_POWER_USAGE"]
    assert np.all(np.diff(decode) > 0)
    shares = np.linspace(0.0, 1.0, 6)
    by_phase = settled(1.0, 1.0, shares)["DCGM_FI_DEV_POWER_USAGE"]
    assert np.all(np.diff(by_phase) > 0)
    assert by_phase[-1] <= H100.tdp_w
    # One decoding sequence draws a fraction of a full decode batch, far above idle.
    assert H100.idle_w + 150 < decode[0] < decode[-1] - 200
    hot = settled(1.0, 1.0, 1.0, mix=ActivityMix(power_intensity=1.3))
    assert hot["DCGM_FI_DEV_POWER_USAGE"][0] == pytest.approx(H100.tdp_w)
    assert hot["DCGM_FI_DEV_POWER_VIOLATION"][0] > 0
    assert hot["DCGM_FI_DEV_SM_CLOCK"][0] < H100.max_sm_clock_mhz


@settings(max_examples=40, deadline=None)
@given(
    busy=st.floats(0.0, 1.0),
    fill=st.floats(-0.5, 1.5) | st.just(math.nan),
    prefill=st.floats(-0.5, 1.5) | st.just(math.nan),
    intensity=st.floats(0.0, 1.6),
)
def test_activity_stays_in_dcgm_ranges_for_any_batch_and_phase(busy, fill, prefill, intensity):
    fleet = FleetPhysics([H100, GPU_MODELS["L4"]], mix=ActivityMix(power_intensity=intensity))
    fleet.step(15.0, np.full(2, busy), batch_fill=fill, prefill_share=prefill)
    f = fleet.fields()
    assert np.all(f["DCGM_FI_DEV_GPU_UTIL"] == round(100 * busy))
    for name, arr in f.items():
        if name.startswith(PROF) and "BYTES" not in name:
            assert np.all((arr >= 0) & (arr <= 1)), name
    tdp = np.array([H100.tdp_w, GPU_MODELS["L4"].tdp_w])
    assert np.all(f["DCGM_FI_DEV_POWER_USAGE"] <= tdp + 1e-6)


def test_gpu_util_reports_the_last_nvml_sample_when_given():
    fleet = FleetPhysics([H100] * 2)
    fleet.step(30.0, np.array([0.4, 0.4]), batch_fill=0.5, sampled_busy=np.array([1.0, 0.0]))
    f = fleet.fields()
    assert f["DCGM_FI_DEV_GPU_UTIL"].tolist() == [100.0, 0.0]
    # The profiling ratios average over the whole step (DCGM's watch interval).
    assert f[f"{PROF}GR_ENGINE_ACTIVE"][0] == pytest.approx(0.4, abs=0.01)
    assert f[f"{PROF}SM_ACTIVE"][0] == pytest.approx(f[f"{PROF}SM_ACTIVE"][1], rel=0.05)


def test_without_batch_or_phase_the_mix_levels_apply_as_before():
    fleet = FleetPhysics([H100], seed=3)
    fleet.step(15.0, np.full(1, 0.5))
    f = fleet.fields()
    mix = ActivityMix()
    wiggle = f[f"{PROF}GR_ENGINE_ACTIVE"][0] / 0.5
    assert f[f"{PROF}SM_ACTIVE"][0] == pytest.approx(0.5 * mix.sm_active * wiggle)
    assert f[f"{PROF}DRAM_ACTIVE"][0] == pytest.approx(0.5 * mix.dram_active * wiggle)


def test_new_per_gpu_inputs_reject_the_wrong_shape():
    fleet = FleetPhysics([H100] * 2)
    for key in ("batch_fill", "prefill_share", "kv_cache_bytes", "sampled_busy"):
        with pytest.raises(ValueError, match=f"{key} must be one value or shape \\(2,\\)"):
            fleet.step(1.0, np.zeros(2), **{key: np.zeros(3)})


def test_kernel_busy_share_is_the_chance_a_request_is_in_service():
    # One slot: busy exactly as often as the slot is occupied (duty cycle).
    np.testing.assert_allclose(kernel_busy_share(np.array([0.0, 0.3, 0.9]), 1), [0.0, 0.3, 0.9])
    # Many slots, light load: Poisson occupancy, 1 - exp(-m).
    m = np.array([0.1, 0.5, 1.0, 3.0])
    np.testing.assert_allclose(kernel_busy_share(m, SLOTS), 1 - np.exp(-m), rtol=1e-9)
    # Erlang's M/M/2 idle probability at a = 1: P0 = 1/3.
    assert kernel_busy_share(1.0, 2) == pytest.approx(2 / 3)
    assert kernel_busy_share(np.array([SLOTS, 2.0 * SLOTS]), SLOTS).tolist() == [1.0, 1.0]
    assert kernel_busy_share(900.0, 1024) == pytest.approx(1.0)  # no overflow at large k
    with pytest.raises(ValueError, match="slots"):
        kernel_busy_share(1.0, 0)


def test_batch_fill_is_sequence_seconds_over_busy_seconds_and_slots():
    in_flight, slots = np.array([0.0, 1.0, 32.0]), SLOTS
    busy = kernel_busy_share(in_flight, slots)
    fill = batch_fill(in_flight, busy, slots)
    assert fill[0] == 0.0
    assert fill[1] == pytest.approx(1.0 / (slots * (1 - math.exp(-1))))
    assert fill[2] == pytest.approx(0.5)
    assert batch_fill(0.4, 0.4, 1) == pytest.approx(1.0)  # one slot: full whenever busy


def test_repeated_batch_fill_gives_the_same_fields_as_computing_the_levels_afresh():
    # The physics keeps the last phase levels while the fill and phase mix repeat; a
    # twin that forgets them before every step must report the same fields bit for bit.
    kept, fresh = FleetPhysics([H100] * 4, seed=9), FleetPhysics([H100] * 4, seed=9)
    fills = [[1.0, 0.5, 0.0, 1.0]] * 3 + [[0.2, 0.5, 0.0, 1.0]] + [[1.0, 0.5, 0.0, 1.0]] * 2
    for i, fill in enumerate(fills):
        load = np.array([0.9, 0.4, 0.0, 1.0]) * (1.0 - 0.1 * i)
        fresh._phase_in = None
        for fleet in (kept, fresh):
            fleet.step(30.0, load, batch_fill=np.array(fill), prefill_share=0.3 + 0.1 * (i == 5))
        a, b = kept.fields(), fresh.fields()
        assert a.keys() == b.keys()
        for name in a:
            np.testing.assert_array_equal(a[name], b[name], err_msg=f"{name} at step {i}")
