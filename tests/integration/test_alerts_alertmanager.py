"""A simulated GPU falls off the bus; GpuFellOffBus reaches a webhook through the real
Prometheus and the real Alertmanager, with the GPU's UUID, node and pod, within a bound."""

import shutil
import socket
import tempfile
import time
from pathlib import Path

import httpx
import pytest
import yaml

from gpuscale.alerts.catalogue import build_catalogue
from gpuscale.alerts.config import parse_config
from gpuscale.alerts.render import render
from gpuscale.telemetry.sim import SimSource
from tests.support.alertmanager import Alertmanager, Kubelet, RulingPrometheus, Webhook
from tests.support.servers import Process, free_port, gpuscale_cmd, wait_http

pytestmark = pytest.mark.integration

SCRAPE_S = 1.0  # Prometheus scrape and evaluation interval in this test
EVAL_S = 1.0
GROUP_WAIT_S = 1.0  # Alertmanager's group_wait
COLLECT_S = 0.5  # the exporter's --collect-interval: the loss shows at the next collect
# Margin: one HTTP hop each from Prometheus to Alertmanager and Alertmanager to the
# webhook, and process scheduling on a shared 2-core machine.
MARGIN_S = 3.0


def _gpu_up(port: int) -> dict[str, float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    out = {}
    for line in text.splitlines():
        if line.startswith("gpuscale_gpu_up{"):
            labels, value = line.rsplit(" ", 1)
            gpu = labels.split('gpu="', 1)[1].split('"', 1)[0]
            out[gpu] = float(value)
    return out


@pytest.fixture
def short_dir():
    # Unix socket paths are limited to 107 bytes; pytest's tmp_path can be longer.
    directory = Path(tempfile.mkdtemp(prefix="gs-al-", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def test_gpu_off_the_bus_reaches_the_webhook_with_uuid_node_and_pod(
    prometheus_bin, tmp_path, short_dir
):
    settings = parse_config("exporter_job: gpu\n", tmp_path / "alerts.yml")
    for_s = settings.alerts.GpuFellOffBus.for_
    rules = tmp_path / "rules.yml"
    rules.write_text(render(build_catalogue(settings)))
    lost = SimSource(gpus=4, seed=0).devices()[1]  # the exporter's default seed
    kubelet = Kubelet(str(short_dir / "kubelet.sock"), [("serve", "llm-0", "vllm", lost.uuid)])
    hook = Webhook()
    stops = [kubelet.stop, hook.stop]
    try:
        am = Alertmanager(tmp_path, hook.url, group_wait=f"{GROUP_WAIT_S:g}s")
        stops.append(am.process.stop)
        port = free_port()
        prom = RulingPrometheus(
            prometheus_bin, tmp_path, [f"127.0.0.1:{port}"], rules, am.url, int(SCRAPE_S)
        )
        stops.append(prom.process.stop)
        exporter = Process(
            [
                *gpuscale_cmd(),
                "exporter",
                "--address",
                f"127.0.0.1:{port}",
                "--source",
                "sim",
                "--gpus",
                "4",
                "--collect-interval",
                str(int(COLLECT_S * 1000)),
                "--fault",
                "gpu-lost@5:gpu=1",
                "--kubernetes",
                "--pod-resources-kubelet-socket",
                kubelet.socket_path,
            ],
            tmp_path / "exporter.log",
        )
        stops.append(exporter.stop)
        wait_http(f"http://127.0.0.1:{port}/metrics", 15)
        deadline = time.monotonic() + 30
        while _gpu_up(port).get("1") != 0.0:
            assert time.monotonic() < deadline, exporter.output()
            time.sleep(0.05)
        lost_at = time.monotonic()
        bound = SCRAPE_S + EVAL_S + float(for_s.rstrip("s") or 0) + GROUP_WAIT_S + COLLECT_S
        bound += MARGIN_S
        while not hook.alerts() and time.monotonic() < lost_at + bound + 20:
            time.sleep(0.05)
        received = hook.alerts()
        assert received, f"no alert within {bound + 20} s\n{am.process.output()[-2000:]}"
        arrived, alert = received[0]
        assert alert["labels"]["alertname"] == "GpuFellOffBus"
        assert alert["status"] == "firing"
        assert {k: alert["labels"].get(k) for k in ("UUID", "gpu", "Hostname")} == {
            "UUID": lost.uuid,
            "gpu": "1",
            "Hostname": socket.gethostname(),
        }
        assert (alert["labels"]["namespace"], alert["labels"]["pod"]) == ("serve", "llm-0")
        assert alert["labels"]["container"] == "vllm"
        assert alert["labels"]["severity"] == "critical"
        assert alert["annotations"]["summary"] == (
            f"GPU 1 ({lost.uuid}) on {socket.gethostname()} fell off the bus"
        )
        assert arrived - lost_at <= bound, f"{arrived - lost_at:.1f} s > bound {bound:.1f} s"
        # Only the lost GPU alerts.
        assert {a["labels"]["gpu"] for _, a in received} == {"1"}
        assert yaml.safe_load(rules.read_text())["groups"]
    finally:
        for stop in reversed(stops):
            stop()
