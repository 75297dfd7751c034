"""Faults against the exporter process: lost GPU, bad config files, TLS, auth and load."""

import base64
import os
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path

import bcrypt
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuscale.fields import DEFAULT_COUNTERS_CSV
from tests.support.certs import self_signed
from tests.support.exposition import parse
from tests.support.servers import Process, free_port, gpuscale_cmd, start_exporter, wait_http


def _trust(cert) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert))


def _samples(body: str, name: str) -> dict[str, float]:
    out = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            if s.name == name:
                out[s.labels.get("gpu", "") + "/" + s.labels.get("xid", "")] = s.value
    return out


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_gpu_falling_off_the_bus_mid_run(tmp_path):
    counters = tmp_path / "counters.csv"  # the XID count is served only when listed
    counters.write_text(DEFAULT_COUNTERS_CSV + "DCGM_EXP_XID_ERRORS_COUNT, counter, XIDs\n")
    proc, port = start_exporter(
        tmp_path,
        "--source",
        "sim",
        "--gpus",
        "4",
        "--collect-interval",
        "200",
        "--fault",
        "xid:79:gpu=2:at=1.5",
        "-f",
        str(counters),
    )
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        before = wait_http(url, 15).text
        assert set(_samples(before, "DCGM_FI_DEV_GPU_UTIL")) == {"0/", "1/", "2/", "3/"}
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            body = httpx.get(url).text
            if _samples(body, "gpuscale_gpu_up").get("2/") == 0.0:
                break
            time.sleep(0.2)
        assert _samples(body, "gpuscale_gpu_up") == {"0/": 1.0, "1/": 1.0, "2/": 0.0, "3/": 1.0}
        assert set(_samples(body, "DCGM_FI_DEV_GPU_UTIL")) == {"0/", "1/", "3/"}
        xids = {
            dict(p)["gpu"] + "/" + dict(p).get("xid", ""): v
            for p, v in parse(body)["DCGM_EXP_XID_ERRORS_COUNT"].samples
        }
        assert xids == {"0/": 0.0, "1/": 0.0, "2/79": 1.0, "3/": 0.0}
        assert httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200
        assert proc.proc.poll() is None
    finally:
        proc.stop()


def _run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*gpuscale_cmd(), *args], capture_output=True, text=True, timeout=60)


def test_bad_counters_file_exits_2_with_file_and_line_and_serves_nothing(tmp_path):
    bad = tmp_path / "counters.csv"
    bad.write_text("# ok\nDCGM_FI_DEV_GPU_UTIL, gauge, util\nDCGM_FI_DEV_GPU_UTILL, gauge, typo\n")
    port = free_port()
    result = _run_cli("exporter", "--address", f"127.0.0.1:{port}", "--collectors", str(bad))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"gpuscale: error: {bad}:3:1: not a DCGM field name: "
        "use one from `gpuscale fields` or remove the row"
    )
    assert "Traceback" not in result.stderr
    assert not _listening(port)


def test_bad_web_config_file_exits_2_with_one_line(tmp_path):
    bad = tmp_path / "web.yml"
    bad.write_text("tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n")
    port = free_port()
    result = _run_cli("exporter", "--address", f"127.0.0.1:{port}", "--web-config-file", str(bad))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert str(bad) in lines[0]
    assert "cert_file" in lines[0]
    assert not _listening(port)


def _self_signed(tmp_path):
    return self_signed(tmp_path / "tls.crt", tmp_path / "tls.key")[0]


@pytest.fixture(scope="module")
def tls_exporter(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tls")
    cert = _self_signed(tmp)
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    (tmp / "web.yml").write_text(
        "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n"
        f"basic_auth_users:\n  prom: {hashed}\n"
    )
    proc, port = start_exporter(
        tmp, "--source", "sim", "--gpus", "2", "--web-config-file", str(tmp / "web.yml")
    )
    try:
        wait_http(f"https://127.0.0.1:{port}/metrics", 15, verify=_trust(cert))
        yield port, cert
    finally:
        proc.stop()


def test_right_password_over_tls_gets_metrics(tls_exporter):
    port, cert = tls_exporter
    r = httpx.get(f"https://127.0.0.1:{port}/metrics", auth=("prom", "s3cret"), verify=_trust(cert))
    assert r.status_code == 200
    assert r.text.count("DCGM_FI_DEV_GPU_UTIL{") == 2


def test_wrong_password_gets_401(tls_exporter):
    port, cert = tls_exporter
    r = httpx.get(f"https://127.0.0.1:{port}/metrics", auth=("prom", "wrong"), verify=_trust(cert))
    assert r.status_code == 401
    assert r.headers["WWW-Authenticate"].startswith("Basic")
    no_auth = httpx.get(f"https://127.0.0.1:{port}/metrics", verify=_trust(cert))
    assert no_auth.status_code == 401
    token = base64.b64encode(b"nobody:s3cret").decode()
    other = httpx.get(
        f"https://127.0.0.1:{port}/metrics",
        headers={"Authorization": f"Basic {token}"},
        verify=_trust(cert),
    )
    assert other.status_code == 401


def test_plain_http_against_tls_listener_fails_and_tls_still_works(tls_exporter):
    port, cert = tls_exporter
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    r = httpx.get(f"https://127.0.0.1:{port}/metrics", auth=("prom", "s3cret"), verify=_trust(cert))
    assert r.status_code == 200


def test_fifty_concurrent_scrapers_for_ten_seconds_never_fail(sim_exporter):
    _, port, _ = sim_exporter
    url = f"http://127.0.0.1:{port}/metrics"
    stop_at = time.monotonic() + 10.0
    ok = [0] * 50
    failures: list[str] = []

    def scrape(i: int) -> None:
        with httpx.Client(timeout=10) as client:
            while time.monotonic() < stop_at:
                try:
                    r = client.get(url)
                    if r.status_code == 200 and "DCGM_FI_DEV_GPU_UTIL{" in r.text:
                        ok[i] += 1
                    else:
                        failures.append(f"status {r.status_code}")
                except httpx.HTTPError as exc:
                    failures.append(repr(exc))

    threads = [threading.Thread(target=scrape, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert failures == []
    assert all(n > 0 for n in ok), ok
    assert sum(ok) >= 100


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("nvml", "install the NVIDIA driver or use --source sim"),
        ("amd", "install ROCm and the amdsmi package or use --source sim"),
    ],
)
def test_missing_gpu_driver_exits_1_with_one_line_and_a_hint(source, message):
    from gpuscale.errors import SourceUnavailableError
    from gpuscale.telemetry.amd import AmdSource
    from gpuscale.telemetry.nvml import NvmlSource

    try:
        (NvmlSource if source == "nvml" else AmdSource)().close()
    except SourceUnavailableError:
        pass
    else:
        pytest.skip(f"this machine has a working {source} driver")
    port = free_port()
    result = _run_cli("exporter", "--source", source, "--address", f"127.0.0.1:{port}")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gpuscale: error: ")
    assert lines[0].endswith(message)
    assert result.stdout == ""
    assert not _listening(port)


def test_the_default_source_on_a_machine_without_gpus_exits_1_and_serves_nothing():
    from gpuscale.errors import SourceUnavailableError
    from gpuscale.telemetry.amd import AmdSource
    from gpuscale.telemetry.nvml import NvmlSource

    for backend in (NvmlSource, AmdSource):
        try:
            backend().close()
        except SourceUnavailableError:
            continue
        pytest.skip(f"this machine has a working {backend.__name__}")
    port = free_port()
    result = _run_cli("exporter", "--address", f"127.0.0.1:{port}")
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("gpuscale: error: --source auto: no GPUs found (nvml: ")
    assert line.endswith("or serve simulated GPUs with --source sim")
    assert result.stdout == ""
    assert not _listening(port)


def test_the_default_source_on_an_amd_node_serves_its_gpus_and_says_amd(tmp_path):
    from gpuscale.errors import SourceUnavailableError
    from gpuscale.telemetry.nvml import NvmlSource

    try:
        NvmlSource().close()
    except SourceUnavailableError:
        pass
    else:
        pytest.skip("this machine has a working NVIDIA driver, which auto would choose first")
    site = Path(__file__).resolve().parents[1] / "fakes" / "amdsmi_site"  # amdsmi, faked
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p),
        "FAKE_AMDSMI_FLEET": "mi300x:3",
        "GPUSCALE_SLURM_JOB_DIR": str(tmp_path / "slurm"),
    }
    env.pop("GPUSCALE_SOURCE", None)
    port = free_port()
    proc = Process(
        [*gpuscale_cmd(), "exporter", "--address", f"127.0.0.1:{port}"], tmp_path / "log", env
    )
    try:
        body = wait_http(f"http://127.0.0.1:{port}/metrics", 20).text
    finally:
        proc.stop()
    named = {s.name: s for f in text_string_to_metric_families(body) for s in f.samples}
    assert named["gpuscale_exporter_info"].labels["source"] == "amd"
    assert named["gpu_nodes_total"].value == 3.0  # AMD's exporter counts the node's GPUs


def test_sim_only_options_with_a_real_source_exit_2_even_at_their_default_values():
    result = _run_cli("exporter", "--source", "nvml", "--gpus", "8", "--fault", "xid:79:gpu=0")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "gpuscale: error: --gpus, --fault only apply to --source sim: remove them"
    )
