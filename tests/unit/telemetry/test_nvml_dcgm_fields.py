"""The fields dcgm-exporter's counters files add beyond the default set, read from NVML."""

import logging

import pytest

from gpuscale.telemetry.nvml import NvmlSource
from tests.support.nvml import fake_pynvml

GIB = 1024**3


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def nv(monkeypatch):
    return fake_pynvml(monkeypatch)


def test_label_fields_come_from_the_nvml_calls_dcgm_uses(nv):
    nv.configure([nv.FakeGpu()])
    (info,) = NvmlSource(clock=Clock(), hostname="h").devices()
    assert dict(info.attributes) == {
        "DCGM_FI_DEV_BRAND": "NVIDIA",  # NVML_BRAND_NVIDIA = 14
        "DCGM_FI_DEV_SERIAL": "1650123456789",
        "DCGM_FI_DEV_VBIOS_VERSION": "96.00.74.00.01",
        "DCGM_FI_DEV_INFOROM_IMAGE_VER": "G520.0200.00.05",
        "DCGM_FI_DEV_OEM_INFOROM_VER": "2.1",
        "DCGM_FI_DEV_ECC_INFOROM_VER": "7.0",
        # The fake's GPU has no power inforom object: absent, not an empty label.
        "DCGM_FI_NVML_VERSION": "12.550.54.15",
    }


def test_p2p_status_to_each_other_gpu(nv):
    gpus = [
        nv.FakeGpu(p2p={1: 0, 2: 5}),
        nv.FakeGpu(uuid="GPU-b", minor=1),
        nv.FakeGpu(uuid="GPU-c", minor=2),
    ]
    nv.configure(gpus)
    first = dict(NvmlSource(clock=Clock(), hostname="h").devices()[0].attributes)
    assert (first["DCGM_EXP_P2P_STATUS:1"], first["DCGM_EXP_P2P_STATUS:2"]) == ("0", "5")
    assert "DCGM_EXP_P2P_STATUS:0" not in first  # no status to itself


def test_nvlink_bandwidth_is_a_rate_per_link_from_the_second_collect(nv):
    links = {0: {0: 0, 1: 0, 2: 0, 3: 0}, 1: {0: 0, 1: 0, 2: 0, 3: 0}}
    gpu = nv.FakeGpu(nvlink=links, nvlink_kib={0: (1000, 1000), 1: (0, 0)})
    nv.configure([gpu])
    clock = Clock()
    source = NvmlSource(clock=clock, hostname="h")
    (first,) = source.sample().devices
    assert not [k for k in first.values if "BANDWIDTH" in k]  # no rate from one reading
    clock.now += 2.0
    gpu.nvlink_kib = {0: (1000 + 976_562, 1000 + 976_562), 1: (0, 0)}  # 2 x ~1 GB in 2 s
    (second,) = source.sample().devices
    rate0 = (2 * 976_562) * 1024 / 1e6 / 2.0  # KiB -> MB, over 2 s: ~1000 MB/s
    assert second.values["DCGM_FI_DEV_NVLINK_BANDWIDTH_L0"] == pytest.approx(rate0)
    assert second.values["DCGM_FI_DEV_NVLINK_BANDWIDTH_L1"] == 0.0
    assert second.values["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == pytest.approx(rate0)


def test_clock_reasons_fall_back_to_the_throttle_name_of_older_bindings(nv, monkeypatch):
    nv.configure([nv.FakeGpu(clock_reasons=0x40)])
    monkeypatch.delattr(nv, "nvmlDeviceGetCurrentClocksEventReasons")
    monkeypatch.setattr(
        nv,
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        lambda h: h.gpu.clock_reasons,
        raising=False,
    )
    (device,) = NvmlSource(clock=Clock(), hostname="h").sample().devices
    assert device.values["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"] == 0x40


def test_fields_nvml_cannot_give_are_absent_and_logged_once(nv, caplog):
    nv.configure([nv.FakeGpu(unsupported={"nvmlDeviceGetPowerManagementLimit"})])
    source = NvmlSource(clock=Clock(), hostname="h")
    with caplog.at_level(logging.INFO, logger="gpuscale.telemetry.nvml"):
        samples = [source.sample().devices[0] for _ in range(3)]
    assert all("DCGM_FI_DEV_POWER_MGMT_LIMIT" not in s.values for s in samples)
    lines = [r.getMessage() for r in caplog.records if "absent, not 0" in r.getMessage()]
    assert len(lines) == 1
    # Profiling fields need DCGM's profiler, which NVML does not have: named, not zero.
    assert "DCGM_FI_DEV_POWER_MGMT_LIMIT" in lines[0]
    assert "DCGM_FI_PROF_SM_ACTIVE" in lines[0]
