"""Hostile clients against gpuscale's HTTP servers, on 127.0.0.1 and bounded in count and time.

The exporter runs as a process (``gpuscale exporter --source sim``), as in
production; the controller's and ``up``'s servers share its server base
(``gpuscale.httpserver``) and are checked here for TLS, auth and binding.
"""

import inspect
import json
import os
import resource
import socket
import ssl
import threading
import time
from pathlib import Path

import bcrypt
import httpx
import pytest

from gpuscale.cli.autoscale import autoscale
from gpuscale.cli.up import up
from gpuscale.control.server import ControllerMetrics, HealthState, TelemetryServer
from gpuscale.exporter.webconfig import load_web_config
from gpuscale.httpserver import HardenedHTTPServer, RequestHandler, ServerLimits
from tests.support.certs import self_signed
from tests.support.servers import Process, free_port, gpuscale_cmd, start_exporter, wait_http

IDLE_CLIENTS = 1000
SCRAPE_DEADLINE_S = 1.0  # Prometheus's scrape_timeout in our tests' configs is 1 s
PASSWORD = "right horse battery"


def _raise_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"needs {needed} open files; the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _half_sent(port: int, count: int) -> list[socket.socket]:
    socks = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # the head never ends
        socks.append(s)
    return socks


@pytest.fixture
def exporter(tmp_path):
    proc, port = start_exporter(tmp_path, "--source", "sim", "--gpus", "8")
    try:
        wait_http(f"http://127.0.0.1:{port}/health", 30)
        yield proc, port
    finally:
        proc.stop()


def test_a_thousand_idle_half_sent_requests_neither_pin_threads_nor_delay_scrapes(exporter):
    proc, port = exporter
    _raise_fd_limit(IDLE_CLIENTS + 256)
    idle = _half_sent(port, IDLE_CLIENTS)
    try:
        latencies = []
        with httpx.Client(timeout=SCRAPE_DEADLINE_S) as client:
            for _ in range(20):
                start = time.perf_counter()
                response = client.get(f"http://127.0.0.1:{port}/metrics")
                latencies.append(time.perf_counter() - start)
                assert response.status_code == 200
                assert "DCGM_FI_DEV_GPU_UTIL{" in response.text
                time.sleep(0.05)
        assert max(latencies) < SCRAPE_DEADLINE_S
        # One thread per connection would be over a thousand; the pool is ServerLimits.workers.
        assert _threads(proc.proc.pid) < 64
    finally:
        for s in idle:
            s.close()


def test_a_client_reset_is_one_json_log_line_and_no_traceback(tmp_path):
    port = free_port()
    proc = Process(
        [
            *gpuscale_cmd(),
            "--log-format",
            "json",
            "exporter",
            "--source",
            "sim",
            "--gpus",
            "8",
            "--address",
            f"127.0.0.1:{port}",
        ],
        tmp_path / "exporter.log",
        {**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/health", 30)
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        time.sleep(0.2)  # the response is in flight or in our buffer: a reset now is mid-stream
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()  # linger 0: RST, not FIN
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and "connection from" not in proc.output():
            time.sleep(0.05)
    finally:
        proc.stop()
    lines = proc.output().splitlines()
    assert "Traceback" not in proc.output()
    records = [json.loads(line) for line in lines]  # every line is one JSON record
    about = [r for r in records if "connection from 127.0.0.1" in r["msg"]]
    assert len(about) == 1, about
    assert about[0]["logger"] == "gpuscale.httpserver"
    assert "exc" not in about[0]


class _Ok(RequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server dispatches on this name
        body = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_a_head_not_finished_within_the_header_timeout_is_closed():
    server = HardenedHTTPServer(("127.0.0.1", 0), _Ok, limits=ServerLimits(header_timeout_s=0.5))
    server.serve_in_background()
    try:
        (slow,) = _half_sent(server.port, 1)
        start = time.monotonic()
        assert slow.recv(100) == b""  # closed by the server, nothing sent
        assert 0.4 < time.monotonic() - start < 3.0
        slow.close()
    finally:
        server.shutdown()


def test_connections_past_the_cap_get_503_and_the_rest_are_served():
    limits = ServerLimits(max_connections=10, header_timeout_s=5)
    server = HardenedHTTPServer(("127.0.0.1", 0), _Ok, limits=limits)
    server.serve_in_background()
    idle = _half_sent(server.port, 10)
    try:
        time.sleep(0.2)
        over = httpx.get(f"http://127.0.0.1:{server.port}/", timeout=2)
        assert over.status_code == 503
        for s in idle[:5]:
            s.close()
        time.sleep(0.2)
        assert httpx.get(f"http://127.0.0.1:{server.port}/", timeout=2).text == "ok\n"
    finally:
        for s in idle:
            s.close()
        server.shutdown()


@pytest.fixture
def web_config(tmp_path) -> Path:
    cert, key = self_signed(tmp_path / "server.crt", tmp_path / "server.key", ca=True)
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=10)).decode()
    path = tmp_path / "web.yml"
    path.write_text(
        f"tls_server_config:\n  cert_file: {cert.name}\n  key_file: {key.name}\n"
        f"basic_auth_users:\n  prometheus: '{hashed}'\n"
    )
    return path


def _tls(web_config: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=web_config.parent / "server.crt")


def test_controller_endpoint_serves_tls_and_basic_auth_from_a_web_config(web_config):
    gate = load_web_config(web_config)
    server = TelemetryServer(ControllerMetrics(), HealthState(60), "127.0.0.1", 0, gate)
    server.start()
    url = f"https://127.0.0.1:{server.port}"
    try:
        with httpx.Client(verify=_tls(web_config), timeout=5) as client:
            assert client.get(f"{url}/healthz").status_code == 401
            wrong = client.get(f"{url}/healthz", auth=("prometheus", "guess"))
            assert wrong.status_code == 401
            ok = client.get(f"{url}/metrics", auth=("prometheus", PASSWORD))
            assert ok.status_code == 200
            assert "gpuscale_autoscaler_leader" in ok.text
        with pytest.raises(httpx.HTTPError):  # plain HTTP on a TLS port is refused
            httpx.get(f"http://127.0.0.1:{server.port}/healthz", timeout=2)
    finally:
        server.stop()


def _default(command: str, option: str) -> object:
    function = {"autoscale": autoscale, "up": up}[command]
    return inspect.signature(function).parameters[option].default


@pytest.mark.parametrize(
    ("command", "option", "expected"),
    [
        ("autoscale", "address", "127.0.0.1:8080"),
        ("up", "address", "127.0.0.1:9400"),
        ("up", "api_address", "127.0.0.1:9090"),
    ],
)
def test_controller_and_up_listen_on_loopback_unless_told(command, option, expected):
    assert _default(command, option) == expected


def test_up_serves_both_endpoints_behind_the_web_config(tmp_path, web_config):
    port, api_port = free_port(), free_port()
    proc = Process(
        [
            *gpuscale_cmd(),
            "up",
            "--source",
            "sim",
            "--gpus",
            "2",
            "--address",
            f"127.0.0.1:{port}",
            "--api-address",
            f"127.0.0.1:{api_port}",
            "--web-config-file",
            str(web_config),
            "--duration",
            "60",
        ],
        tmp_path / "up.log",
    )
    try:
        auth = ("prometheus", PASSWORD)
        verify = _tls(web_config)
        wait_http(f"https://127.0.0.1:{port}/health", 30, verify=verify, auth=auth)
        with httpx.Client(verify=verify, timeout=5) as client:
            for url in (
                f"https://127.0.0.1:{port}/metrics",
                f"https://127.0.0.1:{api_port}/api/v1/rules",
            ):
                assert client.get(url).status_code == 401
                assert client.get(url, auth=auth).status_code == 200
    finally:
        proc.stop()


def test_a_wrong_password_flood_delays_no_login_by_more_than_one_bcrypt(tmp_path):
    """Known clients skip bcrypt; a first login is answered within one check, never queued.

    The bound is the brief's: a flood may cost a login at most one bcrypt check
    (timed here, at the hashes' cost of 10) plus a loopback round trip (0.1 s).
    A first login that finds both check slots busy is refused (401) at once, and
    its next scrape tries again.
    """
    hashes = {u: bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=10)) for u in ("a", "b")}
    web = tmp_path / "web.yml"
    web.write_text(
        "basic_auth_users:\n" + "".join(f"  {u}: '{h.decode()}'\n" for u, h in hashes.items())
    )
    proc, port = start_exporter(
        tmp_path, "--source", "sim", "--gpus", "2", "--web-config-file", str(web)
    )
    url = f"http://127.0.0.1:{port}/health"
    start = time.perf_counter()
    bcrypt.checkpw(b"guess", hashes["a"])
    one_bcrypt_s = time.perf_counter() - start
    stop = threading.Event()

    def flood(i: int) -> None:
        with httpx.Client(timeout=30) as client:
            n = 0
            while not stop.is_set():
                n += 1
                client.get(url, auth=("a", f"guess-{i}-{n}"))

    flooders = [threading.Thread(target=flood, args=(i,)) for i in range(16)]
    try:
        wait_http(url, 30, auth=("a", PASSWORD))  # "a" has logged in: it is cached
        for t in flooders:
            t.start()
        time.sleep(1.0)
        with httpx.Client(timeout=30) as client:
            known = []
            for _ in range(5):
                start = time.perf_counter()
                assert client.get(url, auth=("a", PASSWORD)).status_code == 200
                known.append(time.perf_counter() - start)
            start = time.perf_counter()
            first = client.get(url, auth=("b", PASSWORD))  # never logged in: needs bcrypt
            first_s = time.perf_counter() - start
    finally:
        stop.set()
        for t in flooders:
            t.join(30)
        proc.stop()
    assert sorted(known)[len(known) // 2] < one_bcrypt_s + 0.1
    assert first.status_code in (200, 401)
    assert first_s < one_bcrypt_s + 0.1
