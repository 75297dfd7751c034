"""NvmlSource against a fake pynvml: field mapping, units, absence, loss, MIG, XID."""

import ctypes.util
import importlib.util
import inspect
import sys
import threading
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscale.errors import GpuscaleError, PermanentError, SourceUnavailableError, TransientError
from gpuscale.fields import DCGM_FIELDS
from gpuscale.telemetry.base import GpuSource, ProcessUsage, XidEvent
from gpuscale.telemetry.batch import DeviceLostError, FieldError
from gpuscale.telemetry.nvml import NvmlSource

FAKES = Path(__file__).resolve().parents[2] / "fakes"
GIB = 1024**3

# What the fake's default GPU reports, in the DCGM catalogue's units.
EXPECTED = {
    "DCGM_FI_DEV_SM_CLOCK": 1980.0,
    "DCGM_FI_DEV_MEM_CLOCK": 2619.0,
    "DCGM_FI_DEV_GPU_TEMP": 45.0,
    "DCGM_FI_DEV_MEMORY_TEMP": 52.0,
    "DCGM_FI_DEV_POWER_USAGE": 250.0,  # 250000 mW
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 123456789.0,  # mJ, unchanged
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 3.0,
    "DCGM_FI_DEV_GPU_UTIL": 87.0,
    "DCGM_FI_DEV_MEM_COPY_UTIL": 41.0,
    "DCGM_FI_DEV_ENC_UTIL": 5.0,
    "DCGM_FI_DEV_DEC_UTIL": 7.0,
    "DCGM_FI_DEV_FB_TOTAL": 81920.0,  # 80 GiB in MiB
    "DCGM_FI_DEV_FB_USED": 20480.0,
    "DCGM_FI_DEV_FB_RESERVED": 512.0,
    "DCGM_FI_DEV_FB_FREE": 60928.0,
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 11.0,
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 2.0,
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": 101.0,
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": 12.0,
    "DCGM_FI_DEV_RETIRED_SBE": 2.0,
    "DCGM_FI_DEV_RETIRED_DBE": 1.0,
    "DCGM_FI_DEV_RETIRED_PENDING": 1.0,
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 4.0,
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 1.0,
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0.0,
    "DCGM_FI_DEV_POWER_VIOLATION": 5_000_000.0,  # ns, as NVML and DCGM both report it
    "DCGM_FI_DEV_THERMAL_VIOLATION": 2000.0,
    "DCGM_FI_DEV_SYNC_BOOST_VIOLATION": 0.0,
    "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION": 7000.0,
    "DCGM_FI_DEV_LOW_UTIL_VIOLATION": 9_000_000.0,
    "DCGM_FI_DEV_RELIABILITY_VIOLATION": 0.0,
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": 700.0,  # 700000 mW
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 4.0,  # the bitmask, unchanged
    "DCGM_FI_DEV_FB_USED_PERCENT": 20480 / (81920 - 512),  # used / (total - reserved)
    "DCGM_FI_PROF_PCIE_TX_BYTES": 1000.0 * 1024,  # KB/s -> B/s
    "DCGM_FI_PROF_PCIE_RX_BYTES": 2000.0 * 1024,
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": 1000.0,  # KB/s, as NVML samples it
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": 2000.0,
}

# Which fields each getter feeds, written from the DCGM and NVML docs.
GETTER_FIELDS = {
    "nvmlDeviceGetClockInfo": ("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK"),
    "nvmlDeviceGetTemperature": ("DCGM_FI_DEV_GPU_TEMP",),
    "nvmlDeviceGetFieldValues": ("DCGM_FI_DEV_MEMORY_TEMP",),
    "nvmlDeviceGetPowerUsage": ("DCGM_FI_DEV_POWER_USAGE",),
    "nvmlDeviceGetTotalEnergyConsumption": ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",),
    "nvmlDeviceGetPcieReplayCounter": ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER",),
    "nvmlDeviceGetUtilizationRates": ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL"),
    "nvmlDeviceGetEncoderUtilization": ("DCGM_FI_DEV_ENC_UTIL",),
    "nvmlDeviceGetDecoderUtilization": ("DCGM_FI_DEV_DEC_UTIL",),
    "nvmlDeviceGetTotalEccErrors": (
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
    ),
    "nvmlDeviceGetRetiredPages": ("DCGM_FI_DEV_RETIRED_SBE", "DCGM_FI_DEV_RETIRED_DBE"),
    "nvmlDeviceGetRetiredPagesPendingStatus": ("DCGM_FI_DEV_RETIRED_PENDING",),
    "nvmlDeviceGetRemappedRows": (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    ),
    "nvmlDeviceGetViolationStatus": tuple(k for k in EXPECTED if k.endswith("_VIOLATION")),
    "nvmlDeviceGetPcieThroughput": (
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
    ),
    "nvmlDeviceGetPowerManagementLimit": ("DCGM_FI_DEV_POWER_MGMT_LIMIT",),
    "nvmlDeviceGetCurrentClocksEventReasons": ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS",),
}
assert set().union(*GETTER_FIELDS.values()) | {
    f"DCGM_FI_DEV_FB_{k}" for k in ("TOTAL", "USED", "FREE", "RESERVED", "USED_PERCENT")
} == set(EXPECTED)


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
def nv(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    fake = load_fake(monkeypatch, "fake_pynvml")
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def start(nv: ModuleType, gpus: list, clock: FakeClock | None = None, **kw) -> NvmlSource:
    nv.configure(gpus, **kw)
    return NvmlSource(clock=clock or FakeClock(), hostname="node-a")


def gpu_uuid(i: int) -> str:
    return f"GPU-{i:08d}-2222-3333-4444-555555555555"


def test_every_mapped_field_has_its_value_in_catalogue_units(nv):
    source = start(nv, [nv.FakeGpu()])
    (device,) = source.sample().devices
    assert dict(device.values) == EXPECTED
    assert device.up
    assert device.error is None
    assert device.failed_fields == ()
    assert set(device.values) <= set(DCGM_FIELDS)


def test_devices_report_identity_and_driver_version(nv):
    gpus = [
        nv.FakeGpu(uuid=gpu_uuid(i), minor=i, pci_bus_id=f"00000000:{i:02X}:00.0") for i in (0, 1)
    ]
    source = start(nv, gpus, driver_version="560.35.03")
    infos = source.devices()
    assert [(i.index, i.uuid, i.device, i.pci_bus_id) for i in infos] == [
        (0, gpu_uuid(0), "nvidia0", "00000000:00:00.0"),
        (1, gpu_uuid(1), "nvidia1", "00000000:01:00.0"),
    ]
    first = infos[0]
    assert (first.vendor, first.model, first.driver_version) == (
        "nvidia",
        "NVIDIA H100 80GB HBM3",
        "560.35.03",
    )
    assert first.serial == "1650123456789"
    assert first.memory_total_bytes == 80 * GIB
    assert first.mig_profile is None
    assert first.mig_instance_id is None


def test_snapshot_carries_clock_time_and_hostname(nv, clock):
    source = start(nv, [nv.FakeGpu()], clock)
    clock.now = 1234.5
    snapshot = source.sample()
    assert (snapshot.timestamp, snapshot.hostname) == (1234.5, "node-a")
    assert isinstance(source, GpuSource)
    assert source.vendor == "nvidia"


def test_source_accepts_the_library_module_directly(nv, monkeypatch):
    monkeypatch.delitem(sys.modules, "pynvml")
    nv.configure([nv.FakeGpu()])
    source = NvmlSource(clock=FakeClock(), hostname="h", library=nv)
    assert source.sample().devices[0].values["DCGM_FI_DEV_GPU_TEMP"] == 45.0


def test_not_supported_fields_are_absent_never_zero(nv):
    gpu = nv.FakeGpu(memory_temp=None, unsupported={"nvmlDeviceGetPowerUsage"})
    (device,) = start(nv, [gpu]).sample().devices
    assert "DCGM_FI_DEV_POWER_USAGE" not in device.values
    assert "DCGM_FI_DEV_MEMORY_TEMP" not in device.values
    assert device.failed_fields == ()
    assert device.error is None
    assert device.values["DCGM_FI_DEV_GPU_TEMP"] == 45.0


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.sets(st.sampled_from(sorted(GETTER_FIELDS))))
def test_unsupported_getters_remove_exactly_their_fields(nv, unsupported):
    (device,) = start(nv, [nv.FakeGpu(unsupported=set(unsupported))]).sample().devices
    gone = {f for fn in unsupported for f in GETTER_FIELDS[fn]}
    assert dict(device.values) == {k: v for k, v in EXPECTED.items() if k not in gone}
    assert device.failed_fields == ()


def test_generic_error_on_one_field_is_absent_and_listed(nv):
    gpu = nv.FakeGpu(failing={"nvmlDeviceGetTemperature": nv.NVML_ERROR_NO_PERMISSION})
    (device,) = start(nv, [gpu]).sample().devices
    assert device.up
    assert "DCGM_FI_DEV_GPU_TEMP" not in device.values
    assert device.failed_fields == ("DCGM_FI_DEV_GPU_TEMP",)
    assert device.error == "fields failed: nvmlDeviceGetTemperature: Insufficient Permissions"
    expected = {k: v for k, v in EXPECTED.items() if k != "DCGM_FI_DEV_GPU_TEMP"}
    assert dict(device.values) == expected


def test_failing_struct_getter_lists_every_field_it_feeds(nv):
    gpu = nv.FakeGpu(failing={"nvmlDeviceGetRemappedRows": nv.NVML_ERROR_NO_DATA})
    (device,) = start(nv, [gpu]).sample().devices
    assert set(device.failed_fields) == set(GETTER_FIELDS["nvmlDeviceGetRemappedRows"])
    assert not set(device.failed_fields) & set(device.values)


@pytest.mark.parametrize("code", [15, 999, 10], ids=["gpu-is-lost", "unknown", "timeout"])
def test_lost_gpu_is_down_while_others_keep_reporting(nv, code):
    gpus = [nv.FakeGpu(uuid=gpu_uuid(0)), nv.FakeGpu(uuid=gpu_uuid(1), minor=1)]
    source = start(nv, gpus)
    gpus[0].failing["nvmlDeviceGetClockInfo"] = code
    lost, healthy = source.sample().devices
    assert (lost.up, dict(lost.values), lost.info.uuid) == (False, {}, gpu_uuid(0))
    assert lost.error is not None
    assert lost.error.startswith("GPU is lost: nvmlDeviceGetClockInfo")
    assert healthy.up
    assert dict(healthy.values) == EXPECTED


def test_lost_gpu_says_gpu_is_lost_and_reports_again_when_it_answers(nv):
    gpus = [nv.FakeGpu(), nv.FakeGpu(uuid=gpu_uuid(1), minor=1)]
    source = start(nv, gpus)
    gpus[0].lost = True
    down = source.sample().devices[0]
    assert down.error == "GPU is lost: nvmlDeviceGetClockInfo: GPU is lost"
    assert source.sample().devices[1].up
    gpus[0].lost = False
    assert source.sample().devices[0].up


@pytest.mark.parametrize("error", [DeviceLostError, FieldError])
def test_lost_device_and_failed_field_are_transient_gpuscale_errors(error):
    # Each holds for one sample: the source counts it and asks again next time.
    assert issubclass(error, TransientError)
    assert issubclass(error, GpuscaleError)
    assert not issubclass(error, PermanentError)
    err = error("nvmlDeviceGetClockInfo: GPU is lost")
    assert (str(err), err.delay) == ("nvmlDeviceGetClockInfo: GPU is lost", 1.0)


def test_lost_device_error_keeps_the_library_code():
    err = DeviceLostError("nvmlDeviceGetClockInfo: GPU is lost", 15, delay=2.0)
    assert (err.code, err.delay) == (15, 2.0)


def test_gpu_lost_at_start_up_is_skipped_and_the_rest_start(nv):
    gpus = [nv.FakeGpu(lost=True), nv.FakeGpu(uuid=gpu_uuid(1), minor=1)]
    source = start(nv, gpus)
    assert [d.uuid for d in source.devices()] == [gpu_uuid(1)]


def test_each_device_is_read_once_per_sample(nv):
    source = start(nv, [nv.FakeGpu(uuid=gpu_uuid(i), minor=i) for i in range(3)])
    before = nv.calls.copy()
    source.sample()
    delta = nv.calls - before
    assert delta["nvmlDeviceGetTemperature"] == 3
    assert delta["nvmlDeviceGetPowerUsage"] == 3
    assert delta["nvmlDeviceGetClockInfo"] == 6  # SM and memory clocks
    assert delta["nvmlDeviceGetViolationStatus"] == 18  # six policies
    # NVML blocks 20 ms per PCIe counter read: TX and RX once each, for both fields.
    assert delta["nvmlDeviceGetPcieThroughput"] == 6
    assert delta["nvmlDeviceGetHandleByIndex"] == 0  # handles come from start-up


def test_gpus_are_read_at_once_so_blocking_getters_do_not_add_up(nv):
    # Each GPU's PCIe read waits at a barrier for all four: read one after another,
    # the first waits alone, the barrier breaks after 5 s and the sample fails.
    barrier = threading.Barrier(4)
    gpus = [nv.FakeGpu(uuid=gpu_uuid(i), minor=i, pcie_barrier=barrier) for i in range(4)]
    source = start(nv, gpus)
    devices = source.sample().devices
    assert [d.info.uuid for d in devices] == [gpu_uuid(i) for i in range(4)]  # index order
    assert all(d.values["DCGM_FI_DEV_PCIE_RX_THROUGHPUT"] == 2000.0 for d in devices)
    source.close()


def test_memory_falls_back_to_v1_without_reserved(nv):
    (device,) = start(nv, [nv.FakeGpu()], memory_v2=False).sample().devices
    fb = {k: v for k, v in device.values.items() if k.startswith("DCGM_FI_DEV_FB_")}
    # v1 counts the 512 MiB reservation as used and has no reserved figure.
    assert fb == {
        "DCGM_FI_DEV_FB_TOTAL": 81920.0,
        "DCGM_FI_DEV_FB_USED": 20992.0,
        "DCGM_FI_DEV_FB_FREE": 60928.0,
    }


def test_nvlink_error_counters_are_summed_over_active_links(nv):
    # Links 0 and 2 active, link 1 down; counters: 0 replay, 1 recovery, 2 CRC flit, 3 CRC data.
    links = {0: {0: 1, 1: 2, 2: 3, 3: 4}, 2: {0: 10, 1: 20, 2: 30, 3: 40}}
    gpus = [nv.FakeGpu(nvlink=links), nv.FakeGpu(uuid=gpu_uuid(1), minor=1)]
    with_links, without = start(nv, gpus).sample().devices
    assert {k: v for k, v in with_links.values.items() if "NVLINK" in k} == {
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": 11.0,
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": 22.0,
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": 33.0,
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": 44.0,
    }
    assert not [k for k in without.values if "NVLINK" in k]


def test_mig_devices_are_separate_entities_with_profile_and_instance_id(nv):
    migs = [
        nv.FakeMig(gi_id=7, profile_index=0, memory_total=10 * GIB, memory_used=GIB),
        nv.FakeMig(gi_id=1, profile_index=2, memory_total=40 * GIB, utilization=(30, 10)),
    ]
    source = start(nv, [nv.FakeGpu(mig=migs, util=(0, 0))])
    parent, small, big = source.devices()
    assert (small.uuid, small.index, small.device) == (parent.uuid, 0, "nvidia0")
    assert (small.mig_profile, small.mig_instance_id) == ("1g.10gb", 7)
    assert (big.mig_profile, big.mig_instance_id) == ("3g.40gb", 1)
    assert small.key == f"{parent.uuid}/7"
    assert small.memory_total_bytes == 10 * GIB
    whole, s_small, s_big = source.sample().devices
    assert whole.values["DCGM_FI_DEV_GPU_TEMP"] == 45.0
    assert s_small.values["DCGM_FI_DEV_FB_TOTAL"] == 10240.0
    assert s_small.values["DCGM_FI_DEV_FB_USED"] == 1024.0
    assert "DCGM_FI_DEV_GPU_UTIL" not in s_small.values  # NotSupported on this MIG device
    assert "DCGM_FI_DEV_GPU_TEMP" not in s_small.values  # whole-GPU field
    assert s_big.values["DCGM_FI_DEV_GPU_UTIL"] == 30.0
    assert s_small.failed_fields == ()


def test_mig_profile_falls_back_to_attributes_when_instance_calls_are_refused(nv):
    migs = [nv.FakeMig(gi_id=3, profile_index=0), nv.FakeMig(gi_id=4, profile_index=2)]
    gpu = nv.FakeGpu(
        mig=migs, failing={"nvmlDeviceGetGpuInstanceById": nv.NVML_ERROR_NO_PERMISSION}
    )
    _, small, big = start(nv, [gpu]).devices()
    # 9856 MiB -> ceil(9.63) = 10 GB; 40192 MiB -> ceil(39.25) = 40 GB.
    assert (small.mig_profile, big.mig_profile) == ("1g.10gb", "3g.40gb")


def test_xid_events_are_drained_without_blocking_into_the_snapshot(nv, clock):
    gpus = [nv.FakeGpu(), nv.FakeGpu(uuid=gpu_uuid(1), minor=1)]
    source = start(nv, gpus, clock)
    nv.queue_xid(1, 79)
    nv.queue_xid(1, 48)
    clock.now = 50.0
    quiet, noisy = source.sample().devices
    assert noisy.xid_events == (XidEvent(50.0, 79), XidEvent(50.0, 48))
    assert noisy.values["DCGM_FI_DEV_XID_ERRORS"] == 48.0
    assert quiet.xid_events == ()
    assert "DCGM_FI_DEV_XID_ERRORS" not in quiet.values
    assert set(nv.wait_timeouts) == {0}
    later = source.sample().devices[1]
    assert later.xid_events == ()
    assert later.values["DCGM_FI_DEV_XID_ERRORS"] == 48.0  # the last XID stays reported


def test_xid_on_a_lost_gpu_is_still_reported(nv):
    gpus = [nv.FakeGpu()]
    source = start(nv, gpus)
    nv.queue_xid(0, 79)
    gpus[0].lost = True
    (device,) = source.sample().devices
    assert not device.up
    assert [e.xid for e in device.xid_events] == [79]


def test_unsupported_xid_events_are_skipped_silently(nv):
    source = start(nv, [nv.FakeGpu(events_supported=False)])
    (device,) = source.sample().devices
    assert device.error is None
    assert device.xid_events == ()
    assert nv.calls["nvmlEventSetCreate"] == 0
    assert nv.calls["nvmlEventSetWait"] == 0


def test_processes_carry_memory_and_latest_sm_share(nv):
    gpu = nv.FakeGpu(
        processes=[(100, GIB), (200, None)],
        process_util=[(100, 10, 30), (100, 20, 50), (300, 15, 20)],
    )
    source = start(nv, [gpu])
    (device,) = source.sample().devices
    assert device.processes == (
        ProcessUsage(100, GIB, 0.5),
        ProcessUsage(200, None, None),
        ProcessUsage(300, None, 0.2),
    )
    # No samples newer than the last one seen: NVML answers NOT_FOUND, shares are unknown.
    (again,) = source.sample().devices
    assert again.processes == (ProcessUsage(100, GIB, None), ProcessUsage(200, None, None))


def test_processes_not_supported_give_an_empty_list(nv):
    unsupported = {"nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetProcessUtilization"}
    gpu = nv.FakeGpu(processes=[(100, GIB)], unsupported=unsupported)
    (device,) = start(nv, [gpu]).sample().devices
    assert device.processes == ()
    assert device.failed_fields == ()


def test_missing_library_raises_one_line_source_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    with pytest.raises(SourceUnavailableError) as err:
        NvmlSource()
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("NVML not found (")
    assert message.endswith("): install the NVIDIA driver or use --source sim")


@pytest.mark.parametrize(
    ("code", "words"),
    [(12, "NVML Shared Library Not Found"), (9, "Driver Not Loaded"), (4, "Insufficient")],
)
def test_failed_init_raises_source_unavailable_with_the_reason(nv, code, words):
    nv.configure([nv.FakeGpu()], init_error=code)
    with pytest.raises(SourceUnavailableError, match=words) as err:
        NvmlSource()
    assert str(err.value).endswith("install the NVIDIA driver or use --source sim")
    assert err.value.exit_code == 1


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="NVML present")
def test_real_pynvml_without_a_driver_raises_source_unavailable(monkeypatch):
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    with pytest.raises(SourceUnavailableError) as err:
        NvmlSource()
    assert str(err.value) == (
        "NVML not found (NVML Shared Library Not Found): "
        "install the NVIDIA driver or use --source sim"
    )


def test_close_shuts_nvml_down_once_and_frees_events(nv):
    source = start(nv, [nv.FakeGpu()])
    source.close()
    source.close()
    assert nv.calls["nvmlShutdown"] == 1
    assert nv.calls["nvmlEventSetFree"] == 1
    with pytest.raises(SourceUnavailableError):
        source.sample()


def test_fake_matches_real_pynvml_names_constants_and_signatures(nv, monkeypatch):
    monkeypatch.delitem(sys.modules, "pynvml")
    real = importlib.import_module("pynvml")
    checked = 0
    for name, value in vars(nv).items():
        if name.startswith(("NVML_", "nvmlEventType", "nvmlMemory_v2")) and isinstance(value, int):
            assert getattr(real, name) == value, name
        elif name.startswith("NVMLError_"):
            assert getattr(real, name)().value == value().value, name
        elif name.startswith("nvml") and callable(value):
            real_params = list(inspect.signature(getattr(real, name)).parameters)
            assert list(inspect.signature(value).parameters) == real_params, name
        else:
            continue
        checked += 1
    assert checked > 100
