"""NVIDIA families as dcgm-exporter 4.x writes them: labels, their order, XID and DCGM_EXP_*."""

from dataclasses import replace

from gpuscale.exporter.collector import SnapshotFamilies
from gpuscale.exporter.dcgm import LabelStyle
from gpuscale.exporter.exposition import render
from gpuscale.exporter.hpc import JobMap
from gpuscale.fields import parse_counters
from gpuscale.fields.xid import xid_message
from gpuscale.telemetry.base import DeviceSample, Snapshot
from tests.support.exposition import parse

LABEL_ROWS = """DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).
DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error encountered.
DCGM_FI_DRIVER_VERSION, label, Driver Version
DCGM_FI_DEV_SERIAL, label, Device Serial Number
DCGM_FI_DEV_VBIOS_VERSION, label, VBIOS version of the device
DCGM_FI_DEV_BRAND, label, Device Brand
DCGM_FI_DEV_POWER_INFOROM_VER, label, Power management object inforom version
"""


class Pods:
    def lookup(self, uuid, index, mig_instance_id=None):
        from types import SimpleNamespace

        return SimpleNamespace(pod=f"pod-{index}", namespace="ml", container="server")


def _snapshot(source, **values):
    snap = source.sample()
    devices = []
    for d in snap.devices:
        info = replace(
            d.info,
            attributes=(
                ("DCGM_FI_DEV_SERIAL", f"16501234{d.info.index}"),
                ("DCGM_FI_DEV_VBIOS_VERSION", "96.00.74.00.01"),
                ("DCGM_FI_DEV_BRAND", "NVIDIA"),
            ),
        )
        devices.append(DeviceSample(info, {**d.values, **values}))
    return Snapshot(snap.timestamp, snap.hostname, tuple(devices))


def _first(text: bytes, name: str) -> list[tuple[str, str]]:
    return list(parse(text.decode())[name].samples[0][0])


def test_label_order_is_upstreams_template_with_sorted_labels_then_attributes(source):
    families = SnapshotFamilies(parse_counters(LABEL_ROWS), pods=Pods())
    text = render(families.build(_snapshot(source), {}))
    keys = [k for k, _ in _first(text, "DCGM_FI_DEV_GPU_UTIL")]
    assert keys == [
        "gpu",
        "UUID",
        "pci_bus_id",
        "device",
        "modelName",
        "Hostname",
        # label rows, sorted (the power inforom row has no value here: no label, not "")
        "DCGM_FI_DEV_BRAND",
        "DCGM_FI_DEV_SERIAL",
        "DCGM_FI_DEV_VBIOS_VERSION",
        "DCGM_FI_DRIVER_VERSION",
        # attributes, sorted
        "container",
        "namespace",
        "pod",
    ]


def test_xid_errors_carry_err_code_and_err_msg_among_the_attributes(source):
    families = SnapshotFamilies(parse_counters(LABEL_ROWS), pods=Pods())
    text = render(families.build(_snapshot(source, DCGM_FI_DEV_XID_ERRORS=79.0), {}))
    labels = _first(text, "DCGM_FI_DEV_XID_ERRORS")
    assert [k for k, _ in labels][-5:] == ["container", "err_code", "err_msg", "namespace", "pod"]
    assert dict(labels)["err_code"] == "79"
    assert dict(labels)["err_msg"] == "GPU has fallen off the bus"
    assert xid_message(0) == "No Error"
    assert xid_message(10_000) == "Unknown Error"  # past upstream's table


def test_hostname_spelling_no_hostname_old_namespace_and_model_blanks(source):
    rows = parse_counters("DCGM_FI_DEV_GPU_UTIL, gauge, u")
    cases = {
        LabelStyle(hostname_label="hostname"): ("hostname", "UUID", "pod"),
        LabelStyle(no_hostname=True): (None, "UUID", "pod"),
        LabelStyle(old_namespace=True): ("Hostname", "uuid", "pod_name"),
    }
    for style, (host, uuid, pod) in cases.items():
        text = render(SnapshotFamilies(rows, pods=Pods(), style=style).build(source.sample(), {}))
        labels = dict(_first(text, "DCGM_FI_DEV_GPU_UTIL"))
        assert host in labels if host else not {"Hostname", "hostname"} & set(labels), style
        assert uuid in labels, style
        assert pod in labels, style
    blanks = SnapshotFamilies(rows, style=LabelStyle(replace_blanks=True))
    text = render(blanks.build(source.sample(), {}))
    assert dict(_first(text, "DCGM_FI_DEV_GPU_UTIL"))["modelName"] == "NVIDIA-H100-80GB-HBM3"


def test_hpc_job_files_repeat_each_series_once_per_job(source, tmp_path):
    (tmp_path / "0").write_text("job-a\njob-b\n")
    rows = parse_counters("DCGM_FI_DEV_GPU_UTIL, gauge, u")
    text = render(SnapshotFamilies(rows, jobs=JobMap(tmp_path)).build(source.sample(), {}))
    got = sorted(
        (dict(p)["gpu"], dict(p).get("hpc_job"))
        for p, _ in parse(text.decode())["DCGM_FI_DEV_GPU_UTIL"].samples
    )
    assert got == [("0", "job-a"), ("0", "job-b"), ("1", None)]


def test_health_status_one_series_per_watch_judged_from_the_fields(source):
    rows = parse_counters("DCGM_EXP_GPU_HEALTH_STATUS, counter, DCGM reported health status")
    source.values[1]["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] = 1.0
    text = render(SnapshotFamilies(rows).build(source.sample(), {}))
    family = parse(text.decode())["DCGM_EXP_GPU_HEALTH_STATUS"]
    assert family.type == "counter"
    got = {
        (dict(p)["gpu"], dict(p)["health_watch"]): (dict(p)["health_error_code"], v)
        for p, v in family.samples
    }
    assert len(got) == 2 * 11  # PCIE NVLINK PMU MCU MEM SM INFOROM THERMAL POWER DRIVER ALL
    assert got[("0", "MEM")] == ("DCGM_FR_OK", 0.0)
    assert got[("1", "MEM")] == ("DCGM_FR_VOLATILE_DBE_DETECTED", 20.0)
    assert got[("1", "ALL")] == ("DCGM_FR_VOLATILE_DBE_DETECTED", 20.0)


def test_p2p_status_per_peer_with_link_status_names(source):
    rows = parse_counters("DCGM_EXP_P2P_STATUS, counter, P2P NvLink status")
    snap = source.sample()
    devices = tuple(
        DeviceSample(
            replace(d.info, attributes=((f"DCGM_EXP_P2P_STATUS:{1 - i}", "0" if i else "5"),)),
            d.values,
        )
        for i, d in enumerate(snap.devices)
    )
    text = render(SnapshotFamilies(rows).build(Snapshot(snap.timestamp, "h", devices), {}))
    got = {
        (dict(p)["gpu"], dict(p)["peer_gpu"], dict(p)["link_status"]): v
        for p, v in parse(text.decode())["DCGM_EXP_P2P_STATUS"].samples
    }
    assert got == {("0", "1", "NotSupported"): 5.0, ("1", "0", "OK"): 0.0}


class SharedPods(Pods):
    def lookup_all(self, uuid, index, mig_instance_id=None):
        from gpuscale.exporter.pods import PodRef

        if index == 0:  # GPU 0 time-sliced between two pods
            return (PodRef("a", "ml", "s", vgpu="0"), PodRef("b", "ml", "s", vgpu="1"))
        return (PodRef(f"pod-{index}", "ml", "server"),)


def test_virtual_gpus_write_a_shared_gpu_once_per_pod_with_vgpu(source):
    rows = parse_counters("DCGM_FI_DEV_GPU_UTIL, gauge, u")
    pods = SharedPods()
    text = render(SnapshotFamilies(rows, pods=pods, shared=pods).build(source.sample(), {}))
    got = sorted(
        (dict(p)["gpu"], dict(p)["pod"], dict(p).get("vgpu"))
        for p, _ in parse(text.decode())["DCGM_FI_DEV_GPU_UTIL"].samples
    )
    assert got == [("0", "a", "0"), ("0", "b", "1"), ("1", "pod-1", None)]
    keys = [k for k, _ in parse(text.decode())["DCGM_FI_DEV_GPU_UTIL"].samples[0][0]]
    assert keys[-4:] == ["container", "namespace", "pod", "vgpu"]  # attributes, sorted
