"""No credential or file content reaches a log line, at any log level.

``gpuscale up`` reads its rules' series from a real Prometheus through a URL
that carries ``user:password@``; every line it writes (its own, httpx's
request lines at DEBUG, errors) is searched for the password.
"""

import logging
import shutil

import pytest

from gpuscale.cli.logs import configure_logging
from gpuscale.redact import redact_text, redact_url
from tests.support.servers import Process, Prometheus, free_port, gpuscale_cmd

SECRET = "S3cretPassw0rd"  # a test credential, searched for in the logs


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus is not installed (Debian package prometheus)")
    server = Prometheus(binary, tmp_path_factory.mktemp("prometheus"), [])
    yield server
    server.process.stop()


@pytest.mark.parametrize("level", ["info", "debug"])
def test_up_never_logs_the_prometheus_password(tmp_path, prometheus, level):
    host_port = prometheus.url.removeprefix("http://")
    proc = Process(
        [
            *gpuscale_cmd(),
            "--log-level",
            level,
            "up",
            "--source",
            "sim",
            "--gpus",
            "2",
            "--address",
            f"127.0.0.1:{free_port()}",
            "--api-address",
            f"127.0.0.1:{free_port()}",
            "--prometheus",
            f"http://scraper:{SECRET}@{host_port}",
            "--evaluation-interval",
            "0.5",
            "--duration",
            "4",
        ],
        tmp_path / "up.log",
    )
    try:
        proc.proc.wait(60)
    finally:
        proc.stop()
    output = proc.output()
    assert proc.proc.returncode == 0, output[-2000:]
    assert host_port in output  # the URL was logged, so its redaction was exercised
    assert SECRET not in output
    if level == "debug":
        assert "HTTP Request: POST" in output  # httpx's request lines, redacted
    else:
        assert "HTTP Request" not in output  # request loggers stay at WARNING


def test_redaction_keeps_the_url_useful():
    assert redact_url(f"https://user:{SECRET}@prom:9090/x?q=1") == "https://prom:9090/x?q=1"
    assert redact_url("http://[::1]:9090") == "http://[::1]:9090"
    assert redact_url(f"http://u:{SECRET}@[::1]:9090/") == "http://[::1]:9090/"
    assert redact_text(f"GET http://u:{SECRET}@h/a and ftp://x@y") == (
        "GET http://***@h/a and ftp://***@y"
    )


def _fail(message: str) -> None:
    raise RuntimeError(message)


def test_every_record_is_redacted_even_from_libraries(capsys):
    configure_logging("info", "json")
    try:
        logging.getLogger("some.library").warning("calling %s", f"http://u:{SECRET}@h/")
        try:
            _fail(f"failed on http://u:{SECRET}@h/")
        except RuntimeError:
            logging.getLogger("some.library").exception("boom")
    finally:
        logging.getLogger().handlers.clear()
    err = capsys.readouterr().err
    assert SECRET not in err
    assert err.count("***@h/") == 3
