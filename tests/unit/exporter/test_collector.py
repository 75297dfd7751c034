from collections import Counter

from prometheus_client.parser import text_string_to_metric_families

from gpuscale.exporter.collector import SnapshotFamilies
from gpuscale.exporter.exposition import render
from gpuscale.fields import default_counters, parse_counters
from gpuscale.ids import GpuUuid
from gpuscale.telemetry.base import DeviceSample, GpuInfo, Snapshot
from tests.support.exposition import parse


def _parse(text: bytes) -> dict[str, list]:
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text.decode()):
        for s in family.samples:
            out.setdefault(s.name, []).append(s)
    return out


def test_series_carry_dcgm_exporter_names_and_labels(source):
    families = SnapshotFamilies(default_counters())
    text = render(families.build(source.sample(), {}))
    samples = _parse(text)
    (util0,) = [s for s in samples["DCGM_FI_DEV_GPU_UTIL"] if s.labels["gpu"] == "0"]
    assert util0.value == 50.0
    assert util0.labels == {
        "gpu": "0",
        "UUID": "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd",
        "pci_bus_id": "00000000:01:00.0",
        "device": "nvidia0",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": "node-a",
        "DCGM_FI_DRIVER_VERSION": "550.54.15",
    }
    # Label order on the wire is dcgm-exporter's, not alphabetical.
    line = next(ln for ln in text.decode().splitlines() if ln.startswith("DCGM_FI_DEV_GPU_UTIL{"))
    assert line.startswith('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-')


def test_counters_keep_their_name_without_total_suffix(source):
    source.values[0]["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] = 123456.0
    text = render(SnapshotFamilies(default_counters()).build(source.sample(), {})).decode()
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in text
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" in text
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total" not in text


def test_absent_field_is_absent_not_zero(source):
    text = render(SnapshotFamilies(default_counters()).build(source.sample(), {})).decode()
    assert "DCGM_FI_DEV_SM_CLOCK" not in text  # the source never reported it


def test_lost_gpu_loses_its_series_and_reports_up_zero(source):
    source.lost.add(1)
    samples = _parse(render(SnapshotFamilies(default_counters()).build(source.sample(), {})))
    assert {s.labels["gpu"] for s in samples["DCGM_FI_DEV_GPU_UTIL"]} == {"0"}
    up = {s.labels["gpu"]: s.value for s in samples["gpuscale_gpu_up"]}
    assert up == {"0": 1.0, "1": 0.0}


def test_only_enabled_counters_are_exported(source):
    counters = parse_counters("DCGM_FI_DEV_POWER_USAGE, gauge, power")
    samples = _parse(render(SnapshotFamilies(counters).build(source.sample(), {})))
    assert "DCGM_FI_DEV_POWER_USAGE" in samples
    assert "DCGM_FI_DEV_GPU_UTIL" not in samples
    assert "DCGM_FI_DRIVER_VERSION" not in samples["DCGM_FI_DEV_POWER_USAGE"][0].labels


XID_ROW = "DCGM_EXP_XID_ERRORS_COUNT, counter, reported XIDs during last window"


def test_xid_window_counts_are_labelled_by_code_and_window_with_a_zero_series_per_gpu(source):
    snapshot = source.sample()
    key = snapshot.devices[1].info.key
    families = SnapshotFamilies(parse_counters(XID_ROW), xid_window_ms=60_000)
    text = render(families.build(snapshot, {key: Counter({79: 1, 48: 2})})).decode()
    got = {
        (dict(pairs)["gpu"], dict(pairs).get("xid"), dict(pairs)["window_size_in_ms"]): value
        for pairs, value in parse(text)["DCGM_EXP_XID_ERRORS_COUNT"].samples
    }
    # GPU 0 had none: one 0 series without an xid label, as dcgm-exporter writes it.
    assert got == {("0", None, "60000"): 0.0, ("1", "48", "60000"): 2.0, ("1", "79", "60000"): 1.0}
    # Typed and described by the counters file's row, not by our catalogue.
    assert "# TYPE DCGM_EXP_XID_ERRORS_COUNT counter" in text
    assert "# HELP DCGM_EXP_XID_ERRORS_COUNT reported XIDs during last window" in text


def test_xid_count_is_absent_unless_listed(source):
    text = render(SnapshotFamilies(default_counters()).build(source.sample(), {})).decode()
    assert "DCGM_EXP_XID_ERRORS_COUNT" not in text


def test_mig_instances_get_gpu_i_labels():
    parent = GpuUuid("GPU-11111111-2222-3333-4444-555555555555")
    infos = [
        GpuInfo(
            0,
            parent,
            "NVIDIA A100-SXM4-40GB",
            "00000000:07:00.0",
            "nvidia0",
            "nvidia",
            "550",
            mig_profile=p,
            mig_instance_id=g,
        )
        for p, g in (("1g.5gb", 7), ("3g.20gb", 2))
    ]
    snap = Snapshot(1.0, "h", tuple(DeviceSample(i, {"DCGM_FI_DEV_FB_USED": 10.0}) for i in infos))
    samples = _parse(render(SnapshotFamilies(default_counters()).build(snap, {})))
    got = {
        (s.labels["GPU_I_PROFILE"], s.labels["GPU_I_ID"], s.labels["UUID"])
        for s in samples["DCGM_FI_DEV_FB_USED"]
    }
    assert got == {("1g.5gb", "7", str(parent)), ("3g.20gb", "2", str(parent))}


class _Pods:
    def lookup(self, uuid, index, mig_instance_id=None):
        if index != 0:
            return None

        class Ref:
            pod, namespace, container = "llm-0", "serving", "vllm"

        return Ref()


def test_pod_labels_added_where_a_mapping_exists(source):
    samples = _parse(
        render(SnapshotFamilies(default_counters(), pods=_Pods()).build(source.sample(), {}))
    )
    by_gpu = {s.labels["gpu"]: s.labels for s in samples["DCGM_FI_DEV_GPU_UTIL"]}
    assert (by_gpu["0"]["pod"], by_gpu["0"]["namespace"], by_gpu["0"]["container"]) == (
        "llm-0",
        "serving",
        "vllm",
    )
    assert "pod" not in by_gpu["1"]


def test_amd_gpus_use_device_metrics_exporter_names_and_labels():
    info = GpuInfo(
        0,
        GpuUuid("1fff74a1-0000-1000-80dc-f0a2c1b3d4e5"),
        "AMD Instinct MI300X",
        "0000:0c:00.0",
        "card1",
        "amd",
        "6.8.5",
        serial="692251001124",
    )
    values = {
        "gpu_gfx_activity": 87.0,
        "gpu_clock|clock_index=0,clock_type=system": 2100.0,
        "gpu_clock|clock_index=1,clock_type=memory": 1300.0,
    }
    snap = Snapshot(1.0, "node-b", (DeviceSample(info, values),))
    samples = _parse(render(SnapshotFamilies(default_counters()).build(snap, {})))
    (gfx,) = samples["gpu_gfx_activity"]
    assert gfx.value == 87.0
    assert gfx.labels["gpu_id"] == "0"
    assert gfx.labels["card_model"] == "AMD Instinct MI300X"
    assert gfx.labels["serial_number"] == "692251001124"
    assert gfx.labels["hostname"] == "node-b"
    clocks = {s.labels["clock_type"]: s.value for s in samples["gpu_clock"]}
    assert clocks == {"system": 2100.0, "memory": 1300.0}
    assert not any(name.startswith("DCGM_") for name in samples)
    assert samples["gpuscale_gpu_up"][0].labels["gpu_id"] == "0"
