"""``gpuscale up``: a simulated GPU falls off the bus and the alert reaches a webhook through
the real Alertmanager, with no Prometheus (embedded), and with the rules reading a real one."""

import os
import socket
import time

import httpx
import pytest

from gpuscale.telemetry.sim import SimSource
from tests.support.alertmanager import Alertmanager, Webhook
from tests.support.servers import Process, Prometheus, free_port, gpuscale_cmd, wait_http

pytestmark = pytest.mark.integration

COLLECT_S = 1.0  # gpuscale up's exporter collects every second
SCRAPE_S = 1.0  # --scrape-interval in these tests
EVAL_S = 1.0  # --evaluation-interval
FOR_S = 0.0  # GpuFellOffBus's default for:
GROUP_WAIT_S = 1.0  # Alertmanager's group_wait
# Margin: two HTTP hops (gpuscale up -> Alertmanager -> webhook) and process scheduling
# on a shared 2-core machine, as in test_alerts_alertmanager.
MARGIN_S = 3.0
BOUND_S = COLLECT_S + SCRAPE_S + EVAL_S + FOR_S + GROUP_WAIT_S + MARGIN_S
"""The loss shows at the next collect, is scraped at the next scrape, fires at the next
evaluation once its for: has passed, and Alertmanager sends it after group_wait."""


def _gpu_up(port: int) -> dict[str, float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    out = {}
    for line in text.splitlines():
        if line.startswith("gpuscale_gpu_up{"):
            labels, value = line.rsplit(" ", 1)
            out[labels.split('gpu="', 1)[1].split('"', 1)[0]] = float(value)
    return out


def _start_up(tmp_path, am_url: str, *extra: str) -> tuple[Process, int, int]:
    port, api = free_port(), free_port()
    # The fault comes from the environment, as a DaemonSet would set it.
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "GPUSCALE_FAULTS": "gpu-lost@5:gpu=1"}
    proc = Process(
        [
            *gpuscale_cmd(),
            "up",
            "--gpus",
            "4",
            "--address",
            f"127.0.0.1:{port}",
            "--api-address",
            f"127.0.0.1:{api}",
            "--scrape-interval",
            str(SCRAPE_S),
            "--evaluation-interval",
            str(EVAL_S),
            "--alertmanager",
            am_url,
            *extra,
        ],
        tmp_path / "up.log",
        env,
    )
    wait_http(f"http://127.0.0.1:{port}/metrics", 20)
    wait_http(f"http://127.0.0.1:{api}/-/ready", 20)
    return proc, port, api


def _wait_lost(port: int, proc: Process) -> float:
    deadline = time.monotonic() + 30
    while _gpu_up(port).get("1") != 0.0:
        assert time.monotonic() < deadline, proc.output()
        time.sleep(0.05)
    return time.monotonic()


def _check_alert(hook: Webhook, lost_at: float, bound: float, am: Alertmanager) -> None:
    while not hook.alerts() and time.monotonic() < lost_at + bound + 20:
        time.sleep(0.05)
    received = hook.alerts()
    assert received, f"no alert within {bound + 20} s\n{am.process.output()[-2000:]}"
    arrived, alert = received[0]
    lost = SimSource(gpus=4, seed=0).devices()[1]  # gpuscale up's default seed
    assert alert["labels"]["alertname"] == "GpuFellOffBus"
    assert alert["status"] == "firing"
    assert {k: alert["labels"].get(k) for k in ("UUID", "gpu", "Hostname", "severity")} == {
        "UUID": lost.uuid,
        "gpu": "1",
        "Hostname": socket.gethostname(),
        "severity": "critical",
    }
    assert alert["annotations"]["summary"] == (
        f"GPU 1 ({lost.uuid}) on {socket.gethostname()} fell off the bus"
    )
    assert arrived - lost_at <= bound, f"{arrived - lost_at:.1f} s > bound {bound:.1f} s"
    assert {a["labels"]["gpu"] for _, a in received} == {"1"}


def test_embedded_up_sends_a_lost_gpu_to_alertmanager_and_serves_it(tmp_path):
    hook = Webhook()
    stops = [hook.stop]
    try:
        am = Alertmanager(tmp_path, hook.url, group_wait=f"{GROUP_WAIT_S:g}s")
        stops.append(am.process.stop)
        proc, port, api = _start_up(tmp_path, am.url)
        stops.append(proc.stop)
        lost_at = _wait_lost(port, proc)
        _check_alert(hook, lost_at, BOUND_S, am)
        # up's default is the simulator, and its series say so.
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        (info,) = [ln for ln in metrics.splitlines() if ln.startswith("gpuscale_exporter_info{")]
        assert 'source="sim"' in info
        body = httpx.get(f"http://127.0.0.1:{api}/api/v1/alerts", timeout=5).json()
        assert body["status"] == "success"
        (firing,) = [a for a in body["data"]["alerts"] if a["state"] == "firing"]
        assert firing["labels"]["alertname"] == "GpuFellOffBus"
        assert firing["activeAt"].endswith("Z")
        rules = httpx.get(f"http://127.0.0.1:{api}/api/v1/rules?type=alert", timeout=5).json()
        states = {r["name"]: r["state"] for g in rules["data"]["groups"] for r in g["rules"]}
        assert states["GpuFellOffBus"] == "firing"
        assert all(r["type"] == "alerting" for g in rules["data"]["groups"] for r in g["rules"])
    finally:
        for stop in reversed(stops):
            stop()


def test_up_with_prometheus_reads_the_rules_series_from_it(prometheus_bin, tmp_path):
    hook = Webhook()
    stops = [hook.stop]
    try:
        am = Alertmanager(tmp_path, hook.url, group_wait=f"{GROUP_WAIT_S:g}s")
        stops.append(am.process.stop)
        port = free_port()
        prom = Prometheus(prometheus_bin, tmp_path, [f"127.0.0.1:{port}"])
        stops.append(prom.process.stop)
        # gpuscale up serves its exporter on the port Prometheus scrapes.
        api = free_port()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "GPUSCALE_FAULTS": "gpu-lost@5:gpu=1"}
        proc = Process(
            [
                *gpuscale_cmd(),
                "up",
                "--gpus",
                "4",
                "--address",
                f"127.0.0.1:{port}",
                "--api-address",
                f"127.0.0.1:{api}",
                "--evaluation-interval",
                str(EVAL_S),
                "--alertmanager",
                am.url,
                "--prometheus",
                prom.url,
            ],
            tmp_path / "up.log",
            env,
        )
        stops.append(proc.stop)
        wait_http(f"http://127.0.0.1:{port}/metrics", 20)
        lost_at = _wait_lost(port, proc)
        # Prometheus scrapes every second (tests/support/servers.Prometheus).
        _check_alert(hook, lost_at, BOUND_S, am)
        assert "reading http://127.0.0.1" in proc.output()
    finally:
        for stop in reversed(stops):
            stop()
