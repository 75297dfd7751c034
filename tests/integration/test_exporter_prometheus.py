"""The exporter as a real process, scraped by a real Prometheus."""

import os

import httpx

from gpuscale.fields import DEFAULT_COUNTERS_CSV, default_counters
from tests.support.servers import Process, Prometheus, free_port, gpuscale_cmd, wait_http

DCGM_LABELS = {
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "Hostname",
    "DCGM_FI_DRIVER_VERSION",
}


def test_metrics_served_within_three_seconds_of_start(sim_exporter):
    _, port, seconds = sim_exporter
    assert seconds < 3.0, f"first /metrics answered after {seconds:.2f} s"
    body = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    assert body.count("DCGM_FI_DEV_GPU_UTIL{") == 8


def test_prometheus_has_every_default_metric_by_dcgm_name_and_labels(prometheus):
    prometheus.wait_for('up{job="gpu"} == 1')
    names = [c.name for c in default_counters() if c.type != "label"]
    prometheus.wait_for(names[0])
    missing = []
    for name in names:
        result = prometheus.query(name)
        gpus = {r["metric"]["gpu"] for r in result}
        if gpus != {str(i) for i in range(8)}:
            missing.append((name, sorted(gpus)))
            continue
        for r in result:
            assert set(r["metric"]) >= DCGM_LABELS, (name, r["metric"])
            assert r["metric"]["UUID"].startswith("GPU-")
            assert r["metric"]["device"] == f"nvidia{r['metric']['gpu']}"
    assert not missing, f"metrics without data for all 8 GPUs: {missing}"


def test_prometheus_sees_counter_types_under_dcgm_names(prometheus):
    prometheus.wait_for("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
    meta = httpx.get(
        f"{prometheus.url}/api/v1/metadata",
        params={"metric": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"},
    ).json()["data"]
    assert meta["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"][0]["type"] == "counter"


def test_exporter_self_metrics_and_gpu_up_reach_prometheus(prometheus):
    up = prometheus.wait_for("gpuscale_gpu_up")
    assert sorted(float(r["value"][1]) for r in up) == [1.0] * 8
    last = prometheus.wait_for("gpuscale_exporter_last_successful_collect_timestamp_seconds")
    assert float(last[0]["value"][1]) > 1.6e9
    prometheus.wait_for("gpuscale_exporter_collect_duration_seconds_count > 0")


def test_energy_counter_increases_in_prometheus(prometheus):
    result = prometheus.wait_for("rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[5s]) > 0", timeout=30)
    assert len(result) == 8


def test_faults_from_gpuscale_faults_reach_prometheus(prometheus_bin, tmp_path):
    """The one fault grammar, read from GPUSCALE_FAULTS, acts on a real exporter process."""
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "GPUSCALE_FAULTS": "gpu-lost@1:gpu=1 xid@1:code=13:gpu=2",
    }
    port = free_port()
    # DCGM_EXP_XID_ERRORS_COUNT is served only when the counters file lists it, as upstream.
    counters = tmp_path / "counters.csv"
    counters.write_text(DEFAULT_COUNTERS_CSV + "DCGM_EXP_XID_ERRORS_COUNT, counter, XIDs\n")
    args = ["--address", f"127.0.0.1:{port}", "--source", "sim", "--gpus", "4", "-f", str(counters)]
    exporter = Process(
        [*gpuscale_cmd(), "exporter", *args],
        tmp_path / "exporter.log",
        env,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/metrics", 15)
        server = Prometheus(prometheus_bin, tmp_path, [f"127.0.0.1:{port}"])
        try:
            lost = server.wait_for("gpuscale_gpu_up == 0")
            assert [r["metric"]["gpu"] for r in lost] == ["1"]
            xids = server.wait_for("DCGM_EXP_XID_ERRORS_COUNT > 0")
            assert sorted((r["metric"]["gpu"], r["metric"]["xid"]) for r in xids) == [
                ("1", "79"),
                ("2", "13"),
            ]
        finally:
            server.process.stop()
    finally:
        exporter.stop()
    assert "deprecated" not in exporter.output()
