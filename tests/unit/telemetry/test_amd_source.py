"""AmdSource against a fake amdsmi: exporter names, units, absence, loss, start-up errors."""

import ast
import importlib.util
import inspect
import logging
import sys
from importlib.machinery import PathFinder
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscale.errors import SourceUnavailableError
from gpuscale.fields.amd import (
    AMD_FIELDS,
    AMD_LABELS,
    AMD_PROFILER_ONLY,
    ECC_BLOCKS,
    labelled_key,
    split_labelled_key,
)
from gpuscale.telemetry import amd as amd_module
from gpuscale.telemetry.amd import AmdSource
from gpuscale.telemetry.amd_reads import FEEDS
from gpuscale.telemetry.base import GpuSource

FAKES = Path(__file__).resolve().parents[2] / "fakes"
MIB = 1024 * 1024

# What the fake's default MI300X reports, in the exporter's units, per series
# without an index label (values read off the fake's defaults, not the code).
EXPECTED = {
    "gpu_gfx_activity": 76.0,
    "gpu_umc_activity": 33.0,
    # gpu_mma_activity: amdsmi says "N/A" -> absent
    "gpu_prof_gui_util_percent": 76.0,  # the same gfx_activity reading
    "gpu_total_vram": 196592.0,
    "gpu_used_vram": 70000.0,
    "gpu_free_vram": 126592.0,
    "gpu_total_visible_vram": 196592.0,
    "gpu_used_visible_vram": 70000.0,
    "gpu_free_visible_vram": 126592.0,
    "gpu_total_gtt": 128 * 1024.0,  # 128 GiB in MiB
    "gpu_used_gtt": 6.0,
    "gpu_free_gtt": 128 * 1024.0 - 6.0,
    "gpu_package_power": 612.0,
    # gpu_average_package_power: "N/A" on MI300 -> absent
    "gpu_power_usage": 612.0,
    "gpu_energy_consumed": 1_000_000 * 15.259,  # ticks x uJ/tick
    "gpu_junction_temperature": 63.0,
    "gpu_edge_temperature": 41.0,
    "gpu_memory_temperature": 55.0,
    # gpu_hbm_temperature: MI300X reports "N/A" for every stack -> absent
    "gpu_vram_max_bandwidth": 5300.0,
    "gpu_ecc_correct_total": 12.0,
    "gpu_ecc_uncorrect_total": 0.0,
    "gpu_ecc_deferred_total": 0.0,
    "gpu_ecc_correct_umc": 12.0,
    "gpu_ecc_uncorrect_umc": 0.0,
    "gpu_ecc_deferred_umc": 0.0,
    "gpu_ecc_correct_gfx": 0.0,
    "gpu_ecc_uncorrect_gfx": 0.0,
    "gpu_ecc_deferred_gfx": 0.0,
    "gpu_ecc_correct_sdma": 0.0,
    "gpu_ecc_uncorrect_sdma": 0.0,
    "gpu_ecc_deferred_sdma": 0.0,
    "gpu_health": 1.0,
    "pcie_speed": 32.0,  # 32000 MT/s -> GT/s
    "pcie_max_speed": 32.0,
    "pcie_bandwidth": 9000.0,
    "pcie_replay_count": 5.0,
    "pcie_recovery_count": 2.0,
    "pcie_replay_rollover_count": 0.0,
    "pcie_nack_sent_count": 1.0,
    "pcie_nack_received_count": 3.0,
    "pcie_bidirectional_bandwidth": 123456.0,
    "gpu_violation_current_accumulated_counter": 1234.0,
    "gpu_violation_ppt_residency_accumulated": 57.0,
    "gpu_violation_ppt_residency_percentage": 4.0,
    **{
        f"gpu_violation_{v}_{kind}": 0.0
        for v in ("processor_hot", "socket_thermal", "vr_thermal", "hbm_thermal")
        for kind in ("residency_accumulated", "residency_percentage")
    },
}

# Per-index series: how many values, and with which index label.
INDEXED = {
    "gpu_gfx_busy_instantaneous": ("xcc_index", 8),
    "gpu_vcn_busy_instantaneous": ("xcc_index", 4),
    "gpu_jpeg_busy_instantaneous": ("xcc_index", 32),
    "gpu_xgmi_link_rx": ("link_index", 8),
    "gpu_xgmi_link_tx": ("link_index", 8),
    **{
        f"gpu_violation_{v}": ("xcc_index", 8)
        for v in (
            "gfx_clock_below_host_limit_power_accumulated",
            "gfx_clock_below_host_limit_thermal_accumulated",
            "low_utilization_accumulated",
            "gfx_clock_below_host_limit_total_accumulated",
            "gfx_clock_below_host_limit_power_percentage",
            "gfx_clock_below_host_limit_thermal_percentage",
            "low_utilization_percentage",
            "gfx_clock_below_host_limit_total_percentage",
        )
    },
}

# The fake's clocks as the exporter lists them: one clock_index over all of them.
CLOCKS = (
    [("system", 2100.0)] * 8
    + [("memory", 1300.0)]
    + [("video", 914.0)] * 4
    + [("data", 711.0)] * 4
    + [("soc", 1143.0)] * 4
)

GETTER_FAMILIES = {
    "amdsmi_get_gpu_activity": (
        "gpu_gfx_activity",
        "gpu_umc_activity",
        "gpu_prof_gui_util_percent",
    ),
    "amdsmi_get_gpu_vram_usage": ("gpu_total_vram", "gpu_used_vram", "gpu_free_vram"),
    "amdsmi_get_power_info": ("gpu_package_power", "gpu_power_usage"),
    "amdsmi_get_energy_count": ("gpu_energy_consumed",),
    "amdsmi_get_temp_metric": (
        "gpu_junction_temperature",
        "gpu_edge_temperature",
        "gpu_memory_temperature",
    ),
    "amdsmi_get_clock_info": ("gpu_min_clock", "gpu_max_clock"),
    "amdsmi_get_gpu_total_ecc_count": (
        "gpu_ecc_correct_total",
        "gpu_ecc_uncorrect_total",
        "gpu_ecc_deferred_total",
    ),
    "amdsmi_get_pcie_info": tuple(
        n for n in EXPECTED if n.startswith("pcie_") and "bidir" not in n
    ),
    "amdsmi_get_gpu_metrics_info": (
        "gpu_clock",
        "gpu_min_clock",
        "gpu_max_clock",
        "gpu_vram_max_bandwidth",
        "pcie_bidirectional_bandwidth",
        "gpu_gfx_busy_instantaneous",
        "gpu_vcn_busy_instantaneous",
        "gpu_jpeg_busy_instantaneous",
        "gpu_xgmi_link_rx",
        "gpu_xgmi_link_tx",
    ),
}


def families(values) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Values grouped by series name, keyed by their sorted extra labels."""
    out: dict[str, dict] = {}
    for key, value in values.items():
        name, labels = split_labelled_key(key)
        out.setdefault(name, {})[tuple(sorted(labels.items()))] = value
    return out


def plain(values) -> dict[str, float]:
    return {k: v for k, v in values.items() if "|" not in k}


class FakeClock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def load_fake(monkeypatch: pytest.MonkeyPatch, name: str) -> ModuleType:
    """A fresh copy of a fake module, so no state leaks between tests."""
    spec = importlib.util.spec_from_file_location(f"_gpuscale_{name}", FAKES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def smi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ModuleType:
    # No Slurm prolog files from the host: an empty job folder of our own.
    monkeypatch.setenv("GPUSCALE_SLURM_JOB_DIR", str(tmp_path / "slurm"))
    fake = load_fake(monkeypatch, "fake_amdsmi")
    monkeypatch.setitem(sys.modules, "amdsmi", fake)
    return fake


def start(smi: ModuleType, gpus: list, clock: FakeClock | None = None, **kw) -> AmdSource:
    smi.configure(gpus, **kw)
    return AmdSource(clock=clock or FakeClock(), hostname="node-b")


def two_gpus(smi: ModuleType) -> list:
    return [
        smi.FakeAmdGpu(),
        smi.FakeAmdGpu(uuid="5fff74a1-0000-1000-80bd-000000000002", bdf="0000:1c:00.0", drm_card=2),
    ]


def test_every_mapped_field_has_its_value_in_exporter_units(smi):
    (device,) = start(smi, [smi.FakeAmdGpu()]).sample().devices
    assert plain(device.values) == pytest.approx(EXPECTED)
    assert device.up
    assert device.error is None
    assert device.failed_fields == ()
    assert {split_labelled_key(k)[0] for k in device.values} <= set(AMD_FIELDS)


def test_indexed_series_carry_the_exporters_index_labels(smi):
    (device,) = start(smi, [smi.FakeAmdGpu()]).sample().devices
    got = families(device.values)
    for name, (label, count) in INDEXED.items():
        assert sorted(got[name]) == [((label, str(i)),) for i in sorted(range(count), key=str)]
    assert [got["gpu_gfx_busy_instantaneous"][(("xcc_index", str(i)),)] for i in range(8)] == [
        71.0, 74.0, 80.0, 77.0, 69.0, 75.0, 79.0, 73.0,
    ]  # fmt: skip
    # XGMI link 0 is the GPU itself: 0 KB, served (a real 0), not dropped.
    assert got["gpu_xgmi_link_rx"][(("link_index", "0"),)] == 0.0


def test_gpu_clock_has_clock_index_and_clock_type_as_the_exporter_lists_them(smi):
    (device,) = start(smi, [smi.FakeAmdGpu()]).sample().devices
    got = families(device.values)
    clocks = {
        dict(k)["clock_index"]: (dict(k)["clock_type"], v) for k, v in got["gpu_clock"].items()
    }
    assert [clocks[str(i)] for i in range(len(CLOCKS))] == CLOCKS
    assert len(clocks) == len(CLOCKS)
    # min/max come from amdsmi_get_clock_info, per clock type.
    assert set(got["gpu_min_clock"]) == set(got["gpu_clock"]) == set(got["gpu_max_clock"])
    assert set(got["gpu_min_clock"].values()) == {500.0}
    assert set(got["gpu_max_clock"].values()) == {2100.0}


def test_mi210_has_hbm_stacks_and_no_mi300_only_series(smi):
    gpu = smi.FakeAmdGpu(
        market_name="AMD Instinct MI210",
        model_number="102-D67305-00",
        current_socket_power="N/A",
        average_socket_power=300,
        hbm_temps=[51, 52, 50, 53],
        gfx_busy_inst=["N/A"] * 8,
        vcn_busy=["N/A"] * 4,
        jpeg_busy=["N/A"] * 32,
    )
    (device,) = start(smi, [gpu]).sample().devices
    got = families(device.values)
    assert got["gpu_hbm_temperature"] == {
        (("hbm_index", str(i)),): t for i, t in enumerate([51.0, 52.0, 50.0, 53.0])
    }
    assert "gpu_gfx_busy_instantaneous" not in got
    assert "gpu_package_power" not in got
    assert got["gpu_average_package_power"] == {(): 300.0}


def test_health_follows_the_exporters_ecc_rule(smi):
    # One uncorrectable error in any block makes the GPU unhealthy (threshold 0).
    sick = smi.FakeAmdGpu(ecc_blocks={1: (12, 0, 0), 2048: (0, 1, 0)})
    healthy, unhealthy = start(smi, [smi.FakeAmdGpu(), sick]).sample().devices
    assert healthy.values["gpu_health"] == 1.0
    assert unhealthy.values["gpu_health"] == 0.0
    assert unhealthy.values["gpu_ecc_uncorrect_mp0"] == 1.0
    assert unhealthy.values["gpu_ecc_uncorrect_total"] == 1.0


def test_absent_series_are_logged_once_per_gpu(smi, caplog):
    with caplog.at_level(logging.INFO, logger="gpuscale.telemetry.amd"):
        source = start(smi, [smi.FakeAmdGpu()])
        source.sample()
        source.sample()
    startup = [r.getMessage() for r in caplog.records if "profiler is off" in r.getMessage()]
    assert len(startup) == 1
    assert all(name in startup[0] for name in AMD_PROFILER_ONLY)
    absent = [r.getMessage() for r in caplog.records if "the series is absent" in r.getMessage()]
    hbm = [m for m in absent if " gpu_hbm_temperature " in m]
    assert hbm == [
        "amdsmi: GPU 0 gives no gpu_hbm_temperature (fed by amdsmi_get_gpu_metrics_info "
        "(temperature_hbm)); the series is absent"
    ]
    assert len(absent) == len(set(absent))
    assert not any("gpu_ecc_correct_umc" in m for m in absent)


def test_init_asks_for_amd_gpus_only(smi):
    start(smi, [smi.FakeAmdGpu()])
    assert smi.init_flag() == smi.AmdSmiInitFlags.INIT_AMD_GPUS


def test_devices_report_identity_as_the_exporter_labels_it(smi):
    source = start(smi, two_gpus(smi))
    first, second = source.devices()
    assert (first.index, first.uuid, first.device, first.pci_bus_id) == (
        0,
        "5fff74a1-0000-1000-80bd-4f2b5fcd1c5a",
        "card1",
        "0000:0c:00.0",
    )
    assert (second.index, second.device) == (1, "card2")
    assert (first.vendor, first.model, first.driver_version) == (
        "amd",
        "AMD Instinct MI300X",
        "6.8.5",
    )
    assert first.serial == "692251001124"  # board serial, the exporter's serial_number
    assert first.memory_total_bytes == 196592 * MIB
    assert dict(first.vendor_labels) == {
        "card_model": "102-G30211-00",  # the board part number the dashboards filter on
        "gpu_partition_id": "0",
        "gpu_compute_partition_type": "spx",
        "gpu_memory_partition_type": "nps1",
        "deployment_mode": "baremetal",
        "card_series": "AMD Instinct MI300X",
        "card_vendor": "Advanced Micro Devices Inc. [AMD/ATI]",
        "vbios_version": "022.040.003.043.000001",
    }
    assert isinstance(source, GpuSource)
    assert source.vendor == "amd"


def test_identity_falls_back_when_details_are_unsupported(smi):
    unsupported = {
        "amdsmi_get_gpu_board_info",
        "amdsmi_get_gpu_enumeration_info",
        "amdsmi_get_gpu_kfd_info",
        "amdsmi_get_gpu_virtualization_mode",
    }
    (info,) = start(smi, [smi.FakeAmdGpu(unsupported=unsupported)]).devices()
    assert (info.device, info.serial) == ("card0", "0x9F2A11B0C0DE0001")
    labels = dict(info.vendor_labels)
    # The exporter's own fallbacks: card series for the model, NA partition, baremetal.
    assert labels["card_model"] == "AMD Instinct MI300X"
    assert labels["gpu_partition_id"] == "NA"
    assert labels["deployment_mode"] == "baremetal"


@pytest.mark.parametrize(
    ("mode", "shown"), [(2, "hypervisor"), (3, "vm_vf"), (4, "vm_pf"), (0, "baremetal")]
)
def test_deployment_mode_maps_amdsmi_virtualization_mode(smi, mode, shown):
    (info,) = start(smi, [smi.FakeAmdGpu(virtualization_mode=mode)]).devices()
    assert dict(info.vendor_labels)["deployment_mode"] == shown


def test_snapshot_carries_clock_time_and_hostname(smi):
    clock = FakeClock()
    source = start(smi, [smi.FakeAmdGpu()], clock)
    clock.now = 99.0
    snapshot = source.sample()
    assert (snapshot.timestamp, snapshot.hostname) == (99.0, "node-b")


def test_mi200_reports_average_power_as_power_usage(smi):
    gpu = smi.FakeAmdGpu(current_socket_power="N/A", average_socket_power=300)
    (device,) = start(smi, [gpu]).sample().devices
    assert "gpu_package_power" not in device.values
    assert device.values["gpu_average_package_power"] == 300.0
    assert device.values["gpu_power_usage"] == 300.0


def test_na_values_are_absent_never_zero(smi):
    activity = {"gfx_activity": "N/A", "umc_activity": 10, "mm_activity": "N/A"}
    gpu = smi.FakeAmdGpu(activity=activity, uclk="N/A", gfxclks=[2100, "N/A"] + ["N/A"] * 6)
    (device,) = start(smi, [gpu]).sample().devices
    got = families(device.values)
    assert "gpu_gfx_activity" not in got
    assert "gpu_prof_gui_util_percent" not in got
    assert {dict(k)["clock_type"] for k in got["gpu_clock"]} == {"system", "video", "data", "soc"}
    assert sum(dict(k)["clock_type"] == "system" for k in got["gpu_clock"]) == 1
    assert device.values["gpu_umc_activity"] == 10.0
    assert device.failed_fields == ()


def test_missing_sensor_is_absent(smi):
    gpu = smi.FakeAmdGpu(temps={1: 70})  # MI300: no edge sensor, no VRAM sensor
    (device,) = start(smi, [gpu]).sample().devices
    temps = {k: v for k, v in device.values.items() if k.endswith("_temperature")}
    assert temps == {"gpu_junction_temperature": 70.0}
    assert device.failed_fields == ()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.sets(st.sampled_from(sorted(GETTER_FAMILIES))))
def test_unsupported_getters_remove_exactly_their_fields(smi, unsupported):
    (base,) = start(smi, [smi.FakeAmdGpu()]).sample().devices
    (device,) = start(smi, [smi.FakeAmdGpu(unsupported=set(unsupported))]).sample().devices
    gone = {f for fn in unsupported for f in GETTER_FAMILIES[fn]}
    want = {k: v for k, v in base.values.items() if split_labelled_key(k)[0] not in gone}
    assert device.values == pytest.approx(want)
    assert device.failed_fields == ()


def test_generic_error_on_one_getter_is_absent_and_listed(smi):
    gpu = smi.FakeAmdGpu(failing={"amdsmi_get_gpu_total_ecc_count": smi.AMDSMI_STATUS_IO})
    (device,) = start(smi, [gpu]).sample().devices
    assert device.up
    gone = ("gpu_ecc_correct_total", "gpu_ecc_uncorrect_total", "gpu_ecc_deferred_total")
    assert device.failed_fields == gone
    assert device.error == (
        "fields failed: amdsmi_get_gpu_total_ecc_count: "
        "Error code: 12 | AMDSMI_STATUS_IO - I/O Error"
    )
    assert plain(device.values) == pytest.approx(
        {k: v for k, v in EXPECTED.items() if k not in gone}
    )


@pytest.mark.parametrize("code", [31, 34, 54, 8], ids=["not-found", "driver", "restart", "timeout"])
def test_lost_gpu_is_down_while_others_keep_reporting(smi, code):
    gpus = two_gpus(smi)
    source = start(smi, gpus)
    gpus[0].failing["amdsmi_get_gpu_activity"] = code
    lost, healthy = source.sample().devices
    assert (lost.up, dict(lost.values)) == (False, {})
    assert lost.error is not None
    assert lost.error.startswith("GPU is lost: amdsmi_get_gpu_activity: Error code: ")
    assert healthy.up
    assert plain(healthy.values) == pytest.approx(EXPECTED)


def test_lost_gpu_reports_again_when_it_answers(smi):
    gpus = two_gpus(smi)
    source = start(smi, gpus)
    gpus[1].lost = True
    assert [d.up for d in source.sample().devices] == [True, False]
    gpus[1].lost = False
    assert [d.up for d in source.sample().devices] == [True, True]


def test_each_gpu_is_read_once_per_sample(smi):
    source = start(smi, two_gpus(smi))
    before = smi.calls.copy()
    source.sample()
    delta = smi.calls - before
    assert delta["amdsmi_get_gpu_activity"] == 2
    assert delta["amdsmi_get_gpu_metrics_info"] == 2
    assert delta["amdsmi_get_temp_metric"] == 6  # three sensors
    assert delta["amdsmi_get_clock_info"] == 10  # min/max of five clock types
    assert delta["amdsmi_get_gpu_ecc_count"] == 2 * len(ECC_BLOCKS)
    assert delta["amdsmi_get_processor_handles"] == 0
    assert delta["amdsmi_get_gpu_board_info"] == 0  # identity is read once, at start-up


def test_missing_package_raises_one_line_source_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "amdsmi", None)  # import amdsmi -> ImportError
    with pytest.raises(SourceUnavailableError) as err:
        AmdSource()
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("amdsmi not available (")
    assert message.endswith("): install ROCm and the amdsmi package or use --source sim")


@pytest.mark.parametrize(
    ("code", "words"),
    [(34, "AMDSMI_STATUS_DRIVER_NOT_LOADED - Driver not loaded"), (18, "Initialization error")],
)
def test_failed_init_raises_source_unavailable_with_the_reason(smi, code, words):
    smi.configure([smi.FakeAmdGpu()], init_error=code)
    with pytest.raises(SourceUnavailableError, match=words) as err:
        AmdSource()
    assert "\n" not in str(err.value)
    assert str(err.value).startswith(f"amdsmi not available (Error code: {code} | ")


@pytest.mark.skipif(PathFinder.find_spec("amdsmi") is None, reason="amdsmi not installed")
def test_real_amdsmi_without_rocm_raises_source_unavailable(monkeypatch):
    if any(Path(p, "libamd_smi.so").exists() for p in ("/opt/rocm/lib", "/usr/lib")):
        pytest.skip("ROCm present")
    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)
    with pytest.raises(SourceUnavailableError) as err:
        AmdSource()
    assert str(err.value) == (
        "amdsmi not available (libamd_smi.so not found): "
        "install ROCm and the amdsmi package or use --source sim"
    )


def test_close_shuts_amdsmi_down_once(smi):
    source = start(smi, [smi.FakeAmdGpu()])
    source.close()
    source.close()
    assert smi.calls["amdsmi_shut_down"] == 1
    with pytest.raises(SourceUnavailableError):
        source.sample()


def test_catalogue_names_and_labels_follow_the_exporter():
    # The 28 series names AMD's Grafana dashboards query (tests/data/amd).
    dashboards = {
        "gpu_average_package_power", "gpu_ecc_correct_total", "gpu_ecc_uncorrect_total",
        "gpu_edge_temperature", "gpu_energy_consumed", "gpu_gfx_activity",
        "gpu_gfx_busy_instantaneous", "gpu_hbm_temperature", "gpu_health",
        "gpu_junction_temperature", "gpu_memory_temperature", "gpu_nodes_total",
        "gpu_package_power", "gpu_total_vram", "gpu_used_vram", "pcie_bandwidth",
        "pcie_max_speed", "pcie_nack_received_count", "pcie_nack_sent_count",
        "pcie_recovery_count", "pcie_replay_count", "pcie_replay_rollover_count",
        "gpu_prof_gui_util_percent",
    }  # fmt: skip
    assert dashboards <= set(AMD_FIELDS)
    assert set(AMD_PROFILER_ONLY) <= set(AMD_FIELDS)  # served when the profiler is on
    assert not set(AMD_PROFILER_ONLY) & dashboards
    assert len(dashboards | set(AMD_PROFILER_ONLY)) == 28
    assert split_labelled_key("gpu_clock|clock_index=3,clock_type=system") == (
        "gpu_clock",
        {"clock_index": "3", "clock_type": "system"},
    )
    assert labelled_key("gpu_clock", clock_index="3", clock_type="system") == (
        "gpu_clock|clock_index=3,clock_type=system"
    )
    assert split_labelled_key("gpu_used_vram") == ("gpu_used_vram", {})
    assert AMD_FIELDS["gpu_energy_consumed"].unit == "uJ"
    assert AMD_FIELDS["gpu_used_vram"].unit == "MB"
    assert all(f.field_id == 0 and f.type == "gauge" for f in AMD_FIELDS.values())
    # The exporter's gpuMandatoryLables, in its order.
    assert AMD_LABELS[:14] == (
        "gpu_id", "card_model", "gpu_partition_id", "gpu_compute_partition_type",
        "gpu_memory_partition_type", "deployment_mode", "serial_number", "pod",
        "namespace", "container", "job_id", "job_user", "job_partition", "hostname",
    )  # fmt: skip
    assert len(set(AMD_LABELS)) == len(AMD_LABELS)


def test_every_series_names_the_amdsmi_call_that_feeds_it():
    # The profiler-only series come from rocpctl (telemetry/amd_prof.py), not amdsmi.
    assert set(FEEDS) == set(AMD_FIELDS) - {"gpu_nodes_total", *AMD_PROFILER_ONLY}
    assert all(call.startswith("amdsmi_") for call in FEEDS.values())


def _amdsmi_sources() -> tuple[dict[str, int], ast.Module]:
    spec = PathFinder.find_spec("amdsmi")  # the installed package, not a fake in sys.modules
    assert spec is not None
    assert spec.submodule_search_locations is not None
    package = Path(next(iter(spec.submodule_search_locations)))
    wrapper = ast.parse((package / "amdsmi_wrapper.py").read_text())
    constants = {
        node.targets[0].id: node.value.value
        for node in wrapper.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, int)
    }
    return constants, ast.parse((package / "amdsmi_interface.py").read_text())


@pytest.mark.skipif(PathFinder.find_spec("amdsmi") is None, reason="amdsmi not installed")
def test_fake_matches_real_amdsmi_codes_enums_and_signatures(smi):
    """Read the installed amdsmi's source (its import fails without ROCm) and compare."""
    constants, interface = _amdsmi_sources()
    for name, value in vars(smi).items():
        if name.startswith("AMDSMI_STATUS_"):
            assert constants[name] == value, name
    absent = ("NOT_SUPPORTED", "NOT_YET_IMPLEMENTED", "NO_DATA")
    lost = ("TIMEOUT", "NOT_FOUND", "DRIVER_NOT_LOADED", "AMDGPU_RESTART_ERR")
    assert {constants[f"AMDSMI_STATUS_{n}"] for n in absent} == amd_module._ABSENT
    assert {constants[f"AMDSMI_STATUS_{n}"] for n in lost} == amd_module._LOST
    classes = {n.name: n for n in interface.body if isinstance(n, ast.ClassDef)}
    functions = {n.name: n for n in interface.body if isinstance(n, ast.FunctionDef)}
    for enum in (
        "AmdSmiInitFlags",
        "AmdSmiClkType",
        "AmdSmiTemperatureType",
        "AmdSmiTemperatureMetric",
        "AmdSmiGpuBlock",
        "AmdSmiMemoryType",
        "AmdSmiVirtualizationMode",
    ):
        real = {
            s.targets[0].id: constants[s.value.attr]
            for s in classes[enum].body
            if isinstance(s, ast.Assign) and isinstance(s.value, ast.Attribute)
        }
        fake = {m: int(getattr(smi, enum)[m]) for m in getattr(smi, enum).__members__}
        assert fake.items() <= real.items(), enum
    checked = 0
    smi.configure([smi.FakeAmdGpu()])
    smi.amdsmi_init()
    (handle,) = smi.amdsmi_get_processor_handles()
    for name, value in vars(smi).items():
        if name.startswith("amdsmi_") and callable(value):
            real_args = [a.arg for a in functions[name].args.args]
            assert list(inspect.signature(value).parameters) == real_args, name
            checked += 1
            if real_args == ["processor_handle"]:  # answers carry the real dict keys
                answer = value(handle)
                real_keys = {
                    k.value
                    for d in ast.walk(functions[name])
                    if isinstance(d, ast.Dict)
                    for k in d.keys
                    if isinstance(k, ast.Constant)
                }
                assert not isinstance(answer, dict) or _keys(answer) <= real_keys, name
    assert checked >= 15


def _keys(answer: dict) -> set[str]:
    nested = [_keys(v) for v in answer.values() if isinstance(v, dict)]
    return set(answer).union(*nested)
