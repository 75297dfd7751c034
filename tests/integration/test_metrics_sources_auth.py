"""PrometheusSource against real servers that demand credentials, TLS, or are not there.

Basic auth and TLS (with a required client certificate) are Prometheus' own
``--web.config.file`` settings. Prometheus has no bearer-token check of its
own, so the bearer test puts ``BearerProxy`` in front of it, as a
kube-rbac-proxy is. Each server holds one backfilled sample, so a query that
gets through returns a known value.
"""

import datetime
import ipaddress
import shutil
import socket
import ssl
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import bcrypt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gpuscale.metrics import MetricsUnavailable, Signal
from gpuscale.metrics.prometheus import PrometheusSource
from tests.support.servers import Prometheus
from tests.support.tsdb import (
    BearerProxy,
    Series,
    VictoriaMetrics,
    backfill,
    history_start,
    openmetrics,
    prometheus_text,
)

pytestmark = pytest.mark.integration

T0 = history_start(time.time())  # inside retention, away from the head (support.tsdb)
SIG = Signal("gpuscale_test_value", {"pod": "a"})
VALUE = 42.5
USER, PASSWORD = "alice", "s3cret"


def _binaries() -> tuple[str, str]:
    prom, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if prom is None or promtool is None:
        pytest.fail("prometheus/promtool not installed: run ./scripts/test, which installs them")
    return prom, promtool


def _start(tmp: Path, web_config: str | None = None, **kw) -> Prometheus:
    prom, promtool = _binaries()
    history = [Series(SIG.metric, {"pod": "a"}, ((T0, VALUE),))]
    data = backfill(promtool, openmetrics(history), tmp / "data", tmp)
    config = None
    if web_config is not None:
        config = tmp / "web.yml"
        config.write_text(web_config)
    return Prometheus(prom, tmp, [], data_dir=data, web_config=config, **kw)


def _value(src: PrometheusSource) -> float:
    (res,) = src.instant(SIG, T0 + 1.0)
    return res.points[0][1]


def _key(path: Path) -> ec.EllipticCurvePrivateKey:
    key = ec.generate_private_key(ec.SECP256R1())
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return key


def _issue(tmp: Path, name: str, ca: tuple | None, *, server: bool = False) -> tuple:
    """A certificate signed by ``ca`` (self-signed CA when None); returns (cert, key)."""
    key = _key(tmp / f"{name}.key")
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    issuer_cert, issuer_key = ca if ca is not None else (None, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_cert.subject if issuer_cert is not None else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca is None, path_length=None), critical=True)
    )
    if server:
        san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
        builder = builder.add_extension(san, critical=False)
    cert = builder.sign(issuer_key, hashes.SHA256())
    (tmp / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


@pytest.fixture(scope="module")
def basic_server(tmp_path_factory) -> Iterator[Prometheus]:
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    server = _start(
        tmp_path_factory.mktemp("prom-basic"),
        f"basic_auth_users:\n  {USER}: {hashed}\n",
        wait_kw={"auth": (USER, PASSWORD)},
    )
    yield server
    server.process.stop()


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory) -> Iterator[tuple[Prometheus, Path]]:
    tmp = tmp_path_factory.mktemp("prom-tls")
    ca = _issue(tmp, "ca", None)
    _issue(tmp, "server", ca, server=True)
    _issue(tmp, "client", ca)
    web = (
        "tls_server_config:\n"
        f"  cert_file: {tmp / 'server.crt'}\n  key_file: {tmp / 'server.key'}\n"
        f"  client_ca_file: {tmp / 'ca.crt'}\n  client_auth_type: RequireAndVerifyClientCert\n"
    )
    trust = ssl.create_default_context(cafile=str(tmp / "ca.crt"))
    trust.load_cert_chain(tmp / "client.crt", tmp / "client.key")
    server = _start(tmp, web, scheme="https", wait_kw={"verify": trust})
    yield server, tmp
    server.process.stop()


@pytest.fixture(scope="module")
def open_server(tmp_path_factory) -> Iterator[Prometheus]:
    server = _start(tmp_path_factory.mktemp("prom-open"))
    yield server
    server.process.stop()


def test_basic_auth(basic_server):
    with PrometheusSource(basic_server.url, basic_auth=(USER, PASSWORD)) as src:
        assert _value(src) == VALUE
        assert src.newest(SIG, T0 + 1.0) == T0
    for kw in ({"basic_auth": (USER, "wrong")}, {}):
        with (
            PrometheusSource(basic_server.url, **kw) as src,
            pytest.raises(
                MetricsUnavailable, match=r"/api/v1/query: HTTP 401 Unauthorized"
            ) as info,
        ):
            src.instant(SIG, T0 + 1.0)
        assert info.value.reason == "http"


def test_bearer_token_through_a_proxy(open_server):
    proxy = BearerProxy(open_server.url, "t0ken")
    try:
        with PrometheusSource(proxy.url, bearer_token="t0ken") as src:
            assert _value(src) == VALUE
        with (
            PrometheusSource(proxy.url, bearer_token="other") as src,
            pytest.raises(MetricsUnavailable, match="HTTP 401"),
        ):
            src.instant(SIG, T0 + 1.0)
    finally:
        proxy.stop()


def test_tls_with_a_private_ca_and_a_client_certificate(tls_server):
    server, tmp = tls_server
    ca, cert, key = tmp / "ca.crt", tmp / "client.crt", tmp / "client.key"
    with PrometheusSource(server.url, ca_file=ca, cert_file=cert, key_file=key) as src:
        assert _value(src) == VALUE
    # unsafeSsl: the server's certificate is not checked, the client's is still sent
    with PrometheusSource(server.url, insecure_skip_verify=True, cert_file=cert, key_file=key) as s:
        assert _value(s) == VALUE


@pytest.mark.parametrize(
    ("options", "cause"),
    [
        ({"cert_file": "client.crt", "key_file": "client.key"}, "CERTIFICATE_VERIFY_FAILED"),
        ({"ca_file": "ca.crt"}, "cannot connect"),  # no client certificate: handshake refused
    ],
)
def test_tls_failures_are_one_line(tls_server, options, cause):
    server, tmp = tls_server
    paths = {k: tmp / v for k, v in options.items()}
    with (
        PrometheusSource(server.url, timeout_s=5.0, **paths) as src,
        pytest.raises(MetricsUnavailable, match=cause) as info,
    ):
        src.instant(SIG, T0 + 1.0)
    assert str(info.value).startswith(f"{server.url}/api/v1/query: cannot connect")
    assert "\n" not in str(info.value)


def test_a_query_prometheus_rejects_is_one_line_with_its_error(open_server):
    # Prometheus refuses a query_range whose (end - start) / step exceeds 11,000.
    with (
        PrometheusSource(open_server.url) as src,
        pytest.raises(MetricsUnavailable, match=r"HTTP 400, bad_data: .*11,000 points") as info,
    ):
        src.range(SIG, T0, T0 + 11_001.0, 1.0)
    assert info.value.reason == "query"


def test_a_stopped_server_gives_one_metrics_unavailable_at_once(tmp_path):
    server = _start(tmp_path)
    src = PrometheusSource(server.url, timeout_s=2.0)
    try:
        assert _value(src) == VALUE
        server.process.stop()
        started = time.monotonic()
        with pytest.raises(MetricsUnavailable, match="cannot connect") as info:
            src.instant(SIG, T0 + 1.0)
        # A refused connection on loopback is immediate; it must not wait out the timeout.
        assert time.monotonic() - started < src.timeout_s
        assert info.value.reason == "connect"
        assert info.value.__cause__ is None  # no httpx traceback chained to it
        assert info.value.__suppress_context__
    finally:
        src.close()
        server.process.stop()


def test_a_server_that_never_answers_times_out_within_the_bound():
    # A listening socket nobody accepts from: the connection completes in the kernel's
    # backlog and the request is sent, but no answer ever comes.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with PrometheusSource(url, timeout_s=0.5) as src:
            started = time.monotonic()
            with pytest.raises(MetricsUnavailable, match=r"no answer within 0\.5 s") as info:
                src.newest(SIG, T0)
            elapsed = time.monotonic() - started
    assert info.value.reason == "timeout"
    # One request, one read timeout of 0.5 s; one more second of slack for 2 busy cores.
    assert 0.5 <= elapsed < 1.5


def test_victoria_metrics_with_basic_auth_over_tls(tls_server, tmp_path):
    # The same options work unchanged against VictoriaMetrics' own -httpAuth and -tls.
    vm_bin = shutil.which("victoria-metrics")
    if vm_bin is None:
        pytest.fail("victoria-metrics not installed: run ./scripts/test, which installs it")
    _, certs = tls_server
    ca = certs / "ca.crt"
    flags = (
        f"-httpAuth.username={USER}",
        f"-httpAuth.password={PASSWORD}",
        "-tls",
        f"-tlsCertFile={certs / 'server.crt'}",
        f"-tlsKeyFile={certs / 'server.key'}",
    )
    kw = {"auth": (USER, PASSWORD), "verify": ssl.create_default_context(cafile=str(ca))}
    server = VictoriaMetrics(vm_bin, tmp_path, flags, scheme="https", http_kw=kw)
    try:
        server.import_prometheus(
            prometheus_text([Series(SIG.metric, {"pod": "a"}, ((T0, VALUE),))])
        )
        with PrometheusSource(server.url, basic_auth=(USER, PASSWORD), ca_file=ca) as src:
            assert _value(src) == VALUE
        with (
            PrometheusSource(server.url, basic_auth=(USER, "wrong"), ca_file=ca) as src,
            pytest.raises(MetricsUnavailable, match="HTTP 401") as info,
        ):
            src.instant(SIG, T0 + 1.0)
        assert info.value.reason == "http"
    finally:
        server.stop()


def test_one_source_serves_several_threads(open_server):
    # Bounded: 8 threads x 25 queries against one server.
    with PrometheusSource(open_server.url) as src, ThreadPoolExecutor(8) as pool:
        values = list(pool.map(lambda _: _value(src), range(200)))
    assert values == [VALUE] * 200
