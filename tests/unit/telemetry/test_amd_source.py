"""AmdSource against a fake amdsmi: exporter names, units, absence, loss, start-up errors."""

import ast
import importlib.util
import inspect
import sys
from importlib.machinery import PathFinder
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscale.errors import SourceUnavailableError
from gpuscale.fields.amd import AMD_FIELDS, AMD_LABELS, split_labelled_key
from gpuscale.telemetry import amd as amd_module
from gpuscale.telemetry.amd import AmdSource
from gpuscale.telemetry.base import GpuSource

FAKES = Path(__file__).resolve().parents[2] / "fakes"
MIB = 1024 * 1024

# What the fake's default MI300X reports, in the exporter's units.
EXPECTED = {
    "gpu_gfx_activity": 76.0,
    "gpu_umc_activity": 33.0,
    # gpu_mma_activity: amdsmi says "N/A" -> absent
    "gpu_total_vram": 196592.0,
    "gpu_used_vram": 70000.0,
    "gpu_free_vram": 126592.0,
    "gpu_package_power": 612.0,
    # gpu_average_package_power: "N/A" on MI300 -> absent
    "gpu_power_usage": 612.0,
    "gpu_energy_consumed": 1_000_000 * 15.259,  # ticks x uJ/tick
    "gpu_junction_temperature": 63.0,
    "gpu_edge_temperature": 41.0,
    "gpu_memory_temperature": 55.0,
    "gpu_clock|system": 2100.0,
    "gpu_clock|memory": 1300.0,
    "gpu_ecc_correct_total": 12.0,
    "gpu_ecc_uncorrect_total": 1.0,
    "pcie_speed": 32.0,  # 32000 MT/s -> GT/s
    "pcie_bandwidth": 9000.0,
    "pcie_replay_count": 5.0,
}

GETTER_FIELDS = {
    "amdsmi_get_gpu_activity": ("gpu_gfx_activity", "gpu_umc_activity"),
    "amdsmi_get_gpu_vram_usage": ("gpu_total_vram", "gpu_used_vram", "gpu_free_vram"),
    "amdsmi_get_power_info": ("gpu_package_power", "gpu_power_usage"),
    "amdsmi_get_energy_count": ("gpu_energy_consumed",),
    "amdsmi_get_temp_metric": (
        "gpu_junction_temperature",
        "gpu_edge_temperature",
        "gpu_memory_temperature",
    ),
    "amdsmi_get_clock_info": ("gpu_clock|system", "gpu_clock|memory"),
    "amdsmi_get_gpu_total_ecc_count": ("gpu_ecc_correct_total", "gpu_ecc_uncorrect_total"),
    "amdsmi_get_pcie_info": ("pcie_speed", "pcie_bandwidth", "pcie_replay_count"),
}
assert set().union(*GETTER_FIELDS.values()) == set(EXPECTED)


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
def smi(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
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
    assert device.values == pytest.approx(EXPECTED)
    assert device.up
    assert device.error is None
    assert device.failed_fields == ()
    assert set(device.values) <= set(AMD_FIELDS)


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
    assert isinstance(source, GpuSource)
    assert source.vendor == "amd"


def test_identity_falls_back_when_details_are_unsupported(smi):
    unsupported = {"amdsmi_get_gpu_board_info", "amdsmi_get_gpu_enumeration_info"}
    (info,) = start(smi, [smi.FakeAmdGpu(unsupported=unsupported)]).devices()
    assert (info.device, info.serial) == ("card0", "0x9F2A11B0C0DE0001")


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
    gpu = smi.FakeAmdGpu(activity=activity, clocks={0: 2100, 4: "N/A"})
    (device,) = start(smi, [gpu]).sample().devices
    assert "gpu_gfx_activity" not in device.values
    assert "gpu_clock|memory" not in device.values
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
@given(st.sets(st.sampled_from(sorted(GETTER_FIELDS))))
def test_unsupported_getters_remove_exactly_their_fields(smi, unsupported):
    (device,) = start(smi, [smi.FakeAmdGpu(unsupported=set(unsupported))]).sample().devices
    gone = {f for fn in unsupported for f in GETTER_FIELDS[fn]}
    assert device.values == pytest.approx({k: v for k, v in EXPECTED.items() if k not in gone})
    assert device.failed_fields == ()


def test_generic_error_on_one_getter_is_absent_and_listed(smi):
    gpu = smi.FakeAmdGpu(failing={"amdsmi_get_gpu_total_ecc_count": smi.AMDSMI_STATUS_IO})
    (device,) = start(smi, [gpu]).sample().devices
    assert device.up
    assert device.failed_fields == ("gpu_ecc_correct_total", "gpu_ecc_uncorrect_total")
    assert device.error == (
        "fields failed: amdsmi_get_gpu_total_ecc_count: "
        "Error code: 12 | AMDSMI_STATUS_IO - I/O Error"
    )
    gone = {"gpu_ecc_correct_total", "gpu_ecc_uncorrect_total"}
    assert device.values == pytest.approx({k: v for k, v in EXPECTED.items() if k not in gone})


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
    assert healthy.values == pytest.approx(EXPECTED)


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
    assert delta["amdsmi_get_temp_metric"] == 6  # three sensors
    assert delta["amdsmi_get_clock_info"] == 4  # GFX and MEM
    assert delta["amdsmi_get_processor_handles"] == 0


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
    assert {split_labelled_key(k)[0] for k in AMD_FIELDS} >= {
        "gpu_gfx_activity",
        "gpu_umc_activity",
        "gpu_used_vram",
        "gpu_free_vram",
        "gpu_total_vram",
        "gpu_package_power",
        "gpu_average_package_power",
        "gpu_power_usage",
        "gpu_energy_consumed",
        "gpu_junction_temperature",
        "gpu_edge_temperature",
        "gpu_memory_temperature",
        "gpu_clock",
        "gpu_ecc_correct_total",
        "gpu_ecc_uncorrect_total",
        "pcie_bandwidth",
    }
    assert split_labelled_key("gpu_clock|system") == ("gpu_clock", "system")
    assert split_labelled_key("gpu_used_vram") == ("gpu_used_vram", None)
    assert AMD_FIELDS["gpu_energy_consumed"].unit == "uJ"
    assert AMD_FIELDS["gpu_used_vram"].unit == "MB"
    assert all(f.field_id == 0 for f in AMD_FIELDS.values())
    assert {"gpu_id", "serial_number", "card_model", "hostname", "driver_version"} <= set(
        AMD_LABELS
    )
    assert "gpu_partition_id" in AMD_LABELS
    assert len(set(AMD_LABELS)) == len(AMD_LABELS)


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
