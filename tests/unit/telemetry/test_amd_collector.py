"""AmdSource over the amdsmi fake, rendered as device-metrics-exporter renders it."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuscale.exporter.collector import SnapshotFamilies
from gpuscale.exporter.exposition import render
from gpuscale.fields import default_counters
from gpuscale.fields.amd import AMD_FIELDS, AMD_LABELS, AMD_MANDATORY_LABELS
from gpuscale.telemetry.amd import AmdSource

FAKES = Path(__file__).resolve().parents[2] / "fakes"

# Extra labels per indexed family, from the exporter's NewGaugeVec declarations.
INDEX_LABELS = {
    "gpu_clock": {"clock_index", "clock_type"},
    "gpu_min_clock": {"clock_index", "clock_type"},
    "gpu_max_clock": {"clock_index", "clock_type"},
    "gpu_hbm_temperature": {"hbm_index"},
    "gpu_gfx_busy_instantaneous": {"xcc_index"},
    "gpu_vcn_busy_instantaneous": {"xcc_index"},
    "gpu_jpeg_busy_instantaneous": {"xcc_index"},
    "gpu_xgmi_link_rx": {"link_index"},
    "gpu_xgmi_link_tx": {"link_index"},
    **{
        f"gpu_violation_{v}_{kind}": {"xcc_index"}
        for v in (
            "gfx_clock_below_host_limit_power",
            "gfx_clock_below_host_limit_thermal",
            "low_utilization",
            "gfx_clock_below_host_limit_total",
        )
        for kind in ("accumulated", "percentage")
    },
}


@pytest.fixture
def smi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ModuleType:
    # No Slurm prolog files from the host: an empty job folder of our own.
    monkeypatch.setenv("GPUSCALE_SLURM_JOB_DIR", str(tmp_path / "slurm"))
    spec = importlib.util.spec_from_file_location("_gpuscale_fake_amdsmi", FAKES / "fake_amdsmi.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "amdsmi", module)
    return module


def scrape(source: AmdSource, pods: object = None) -> tuple[str, dict[str, list]]:
    text = render(SnapshotFamilies(default_counters(), pods=pods).build(source.sample(), {}))
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text.decode()):
        for s in family.samples:
            out.setdefault(s.name, []).append(s)
    return text.decode(), out


def fleet(smi: ModuleType) -> AmdSource:
    mi210 = smi.FakeAmdGpu(
        uuid="5fff74a1-0000-1000-80bd-000000000002",
        market_name="AMD Instinct MI210",
        model_number="102-D67305-00",
        current_socket_power="N/A",
        average_socket_power=300,
        hbm_temps=[51, 52, 50, 53],
    )
    smi.configure([smi.FakeAmdGpu(), mi210])
    return AmdSource(hostname="node-b")


def test_every_gpu_series_has_the_mandatory_labels_in_the_exporters_order(smi):
    text, samples = scrape(fleet(smi))
    gpu_series = {n: s for n, s in samples.items() if n in AMD_FIELDS and n != "gpu_nodes_total"}
    assert len(gpu_series) >= 60
    for name, series in gpu_series.items():
        for s in series:
            extra = set(s.labels) - set(AMD_LABELS)
            assert extra == INDEX_LABELS.get(name, set()), name
            assert set(AMD_LABELS) <= set(s.labels), name
    line = next(ln for ln in text.splitlines() if ln.startswith("gpu_gfx_activity{"))
    order = [part.split("=")[0] for part in line[line.index("{") + 1 :].split('",')]
    assert order[: len(AMD_MANDATORY_LABELS)] == list(AMD_MANDATORY_LABELS)


def test_label_values_match_the_exporter(smi):
    _, samples = scrape(fleet(smi))
    by_gpu = {s.labels["gpu_id"]: s.labels for s in samples["gpu_gfx_activity"]}
    assert by_gpu["0"] == {
        "gpu_id": "0",
        "card_model": "102-G30211-00",
        "gpu_partition_id": "0",
        "gpu_compute_partition_type": "spx",
        "gpu_memory_partition_type": "nps1",
        "deployment_mode": "baremetal",
        "serial_number": "692251001124",
        "pod": "",
        "namespace": "",
        "container": "",
        "job_id": "",
        "job_user": "",
        "job_partition": "",
        "hostname": "node-b",
        "gpu_uuid": "5fff74a1-0000-1000-80bd-4f2b5fcd1c5a",
        "card_series": "AMD Instinct MI300X",
        "card_vendor": "Advanced Micro Devices Inc. [AMD/ATI]",
        "driver_version": "6.8.5",
        "vbios_version": "022.040.003.043.000001",
    }
    assert by_gpu["1"]["card_model"] == "102-D67305-00"


def test_node_gpu_count_carries_only_the_hostname(smi):
    _, samples = scrape(fleet(smi))
    (nodes,) = samples["gpu_nodes_total"]
    assert (nodes.labels, nodes.value) == ({"hostname": "node-b"}, 2.0)


def test_per_index_series_and_vendor_specific_ones_appear_where_amdsmi_answers(smi):
    _, samples = scrape(fleet(smi))
    hbm = {(s.labels["gpu_id"], s.labels["hbm_index"]) for s in samples["gpu_hbm_temperature"]}
    assert hbm == {("1", str(i)) for i in range(4)}  # MI210 only: MI300X reports N/A
    assert {s.labels["gpu_id"] for s in samples["gpu_package_power"]} == {"0"}
    assert {s.labels["gpu_id"] for s in samples["gpu_average_package_power"]} == {"1"}
    clock = next(
        s
        for s in samples["gpu_clock"]
        if s.labels["gpu_id"] == "0" and s.labels["clock_index"] == "8"
    )
    assert (clock.labels["clock_type"], clock.value) == ("memory", 1300.0)
    # No amdsmi call gives these rocprofiler counters: no series at all, never 0.
    assert "gpu_prof_sm_active" not in samples
    assert "gpu_prof_tensor_active_percent" not in samples


class _Pods:
    def lookup(self, uuid, index, mig_instance_id=None):
        if index != 1:
            return None

        class Ref:
            pod, namespace, container = "rocm-0", "ml", "hip"

        return Ref()


def test_pod_labels_fill_the_mandatory_slots(smi):
    _, samples = scrape(fleet(smi), pods=_Pods())
    by_gpu = {s.labels["gpu_id"]: s.labels for s in samples["gpu_used_vram"]}
    assert [by_gpu["1"][k] for k in ("pod", "namespace", "container")] == ["rocm-0", "ml", "hip"]
    assert [by_gpu["0"][k] for k in ("pod", "namespace", "container")] == ["", "", ""]


def test_cluster_name_goes_on_every_series_only_when_set(smi, monkeypatch):
    monkeypatch.delenv("GPUSCALE_CLUSTER_NAME", raising=False)
    _, plain = scrape(fleet(smi))
    assert all("cluster_name" not in s.labels for series in plain.values() for s in series)
    monkeypatch.setenv("GPUSCALE_CLUSTER_NAME", "lab-a")
    _, named = scrape(fleet(smi))
    gpu_and_node = [s for n, series in named.items() if n in AMD_FIELDS for s in series]
    assert {s.labels["cluster_name"] for s in gpu_and_node} == {"lab-a"}
    assert named["gpu_nodes_total"][0].labels == {"hostname": "node-b", "cluster_name": "lab-a"}
