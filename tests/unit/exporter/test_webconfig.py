"""Web-config (exporter-toolkit format): parsing, errors, basic auth, and real TLS handshakes.

Certificates are generated here with the `cryptography` package (ECDSA P-256, so
generation takes milliseconds); nothing is checked in.
"""

import base64
import datetime
import ipaddress
import re
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import bcrypt
import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscale.errors import ConfigError
from gpuscale.exporter import tls, webconfig
from gpuscale.exporter.webconfig import WebConfig, load_web_config

PASSWORD = "s3cret"
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()


# --- certificates -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    dir: Path
    server_crt: Path
    server_key: Path
    client_ca_crt: Path
    client_crt: Path
    client_key: Path
    stranger_crt: Path  # self-signed client cert, not from the client CA
    stranger_key: Path
    other_key: Path  # a valid key that matches no certificate here


def _write_key(path: Path) -> ec.EllipticCurvePrivateKey:
    key = ec.generate_private_key(ec.SECP256R1())
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return key


def _write_cert(
    path: Path,
    key: ec.EllipticCurvePrivateKey,
    common_name: str,
    *,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None = None,
    ca: bool = False,
    usage: x509.ObjectIdentifier | None = None,
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer[0].subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if usage == ExtendedKeyUsageOID.SERVER_AUTH:
        san = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    cert = builder.sign(issuer[1] if issuer else key, hashes.SHA256())
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    server_key = _write_key(d / "server.key")
    _write_cert(d / "server.crt", server_key, "127.0.0.1", usage=ExtendedKeyUsageOID.SERVER_AUTH)
    ca_key = _write_key(d / "client-ca.key")
    ca_cert = _write_cert(d / "client-ca.crt", ca_key, "scrapers CA", ca=True)
    client_key = _write_key(d / "client.key")
    _write_cert(
        d / "client.crt",
        client_key,
        "prometheus",
        issuer=(ca_cert, ca_key),
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    stranger_key = _write_key(d / "stranger.key")
    _write_cert(d / "stranger.crt", stranger_key, "stranger", usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    _write_key(d / "other.key")
    return Pki(
        dir=d,
        server_crt=d / "server.crt",
        server_key=d / "server.key",
        client_ca_crt=d / "client-ca.crt",
        client_crt=d / "client.crt",
        client_key=d / "client.key",
        stranger_crt=d / "stranger.crt",
        stranger_key=d / "stranger.key",
        other_key=d / "other.key",
    )


def _config(tmp_path: Path, text: str, name: str = "web.yml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _tls_yaml(pki: Pki, extra: str = "") -> str:
    return (
        f"tls_server_config:\n  cert_file: {pki.server_crt}\n  key_file: {pki.server_key}\n" + extra
    )


def _basic(user: str, password: str | bytes) -> str:
    raw = password if isinstance(password, bytes) else password.encode()
    return "Basic " + base64.b64encode(user.encode() + b":" + raw).decode()


# --- loading valid files ------------------------------------------------------------------------


def test_valid_tls_and_auth_config_loads_every_part(tmp_path, pki):
    path = _config(
        tmp_path,
        _tls_yaml(pki)
        + "http_server_config:\n  http2: false\n  headers:\n"
        + "    X-Frame-Options: deny\n    Strict-Transport-Security: max-age=31536000\n"
        + f"basic_auth_users:\n  alice: {HASH}\n  bob: '{HASH}'\n",
    )
    config = load_web_config(path)
    assert config.ssl_context is not None
    assert config.ssl_context.verify_mode == ssl.CERT_NONE
    assert config.ssl_context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert config.ssl_context.maximum_version == ssl.TLSVersion.TLSv1_3
    assert dict(config.users) == {"alice": HASH.encode(), "bob": HASH.encode()}
    assert dict(config.headers) == {
        "X-Frame-Options": "deny",
        "Strict-Transport-Security": "max-age=31536000",
    }


def test_relative_cert_paths_resolve_against_the_config_directory(tmp_path, pki, monkeypatch):
    conf_dir = tmp_path / "etc"
    (conf_dir / "tls").mkdir(parents=True)
    (conf_dir / "tls" / "s.crt").write_bytes(pki.server_crt.read_bytes())
    (conf_dir / "s.key").write_bytes(pki.server_key.read_bytes())
    path = _config(conf_dir, "tls_server_config:\n  cert_file: tls/s.crt\n  key_file: s.key\n")
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert load_web_config(path).ssl_context is not None
    # And through a relative config path too, as exporter-toolkit joins filepath.Dir(path).
    monkeypatch.chdir(tmp_path)
    assert load_web_config(Path("etc/web.yml")).ssl_context is not None


@pytest.mark.parametrize(
    "text", ["", "# only a comment\n", "basic_auth_users:\n", "tls_server_config: {}\n"]
)
def test_empty_config_serves_plain_http_without_auth(tmp_path, text):
    config = load_web_config(_config(tmp_path, text))
    assert config.ssl_context is None
    assert dict(config.users) == {}
    assert config.authenticate(None) is True


def test_users_without_tls_load_and_warn_about_clear_text(tmp_path, caplog):
    config = load_web_config(_config(tmp_path, f"basic_auth_users:\n  alice: {HASH}\n"))
    assert config.ssl_context is None
    assert list(config.users) == ["alice"]
    assert "clear text" in caplog.text


@pytest.mark.parametrize(
    ("auth_type", "mode"),
    [
        ("RequireAndVerifyClientCert", ssl.CERT_REQUIRED),
        ("VerifyClientCertIfGiven", ssl.CERT_OPTIONAL),
        ("RequireAnyClientCert", ssl.CERT_REQUIRED),
        ("RequireClientCert", ssl.CERT_REQUIRED),
    ],
)
def test_client_auth_types_map_to_python_verify_modes(tmp_path, pki, auth_type, mode):
    extra = f"  client_auth_type: {auth_type}\n  client_ca_file: {pki.client_ca_crt}\n"
    context = load_web_config(_config(tmp_path, _tls_yaml(pki, extra))).ssl_context
    assert context is not None
    assert context.verify_mode == mode
    assert [ca["subject"] for ca in context.get_ca_certs()] == [((("commonName", "scrapers CA"),),)]


@pytest.mark.parametrize("auth_type", ["NoClientCert", "RequestClientCert"])
def test_client_auth_types_that_check_nothing_ask_for_no_certificate(tmp_path, pki, auth_type):
    path = _config(tmp_path, _tls_yaml(pki, f"  client_auth_type: {auth_type}\n"))
    context = load_web_config(path).ssl_context
    assert context is not None
    assert context.verify_mode == ssl.CERT_NONE


def test_versions_ciphers_and_server_preference_are_applied(tmp_path, pki):
    extra = (
        "  min_version: TLS10\n  max_version: TLS12\n  prefer_server_cipher_suites: false\n"
        "  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_AES_128_GCM_SHA256]\n"
        "  curve_preferences: [CurveP256]\n"
    )
    context = load_web_config(_config(tmp_path, _tls_yaml(pki, extra))).ssl_context
    assert context is not None
    assert context.minimum_version == ssl.TLSVersion.TLSv1
    assert context.maximum_version == ssl.TLSVersion.TLSv1_2
    assert not context.options & ssl.OP_CIPHER_SERVER_PREFERENCE
    tls12 = {c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert tls12 == {"ECDHE-ECDSA-AES128-GCM-SHA256"}


def test_server_cipher_preference_is_on_by_default(tmp_path, pki):
    context = load_web_config(_config(tmp_path, _tls_yaml(pki))).ssl_context
    assert context is not None
    assert context.options & ssl.OP_CIPHER_SERVER_PREFERENCE


# exporter-toolkit's curve names (Go's crypto/tls CurveID names) and OpenSSL's for them.
TOOLKIT_CURVES = {
    "CurveP256": "prime256v1",
    "CurveP384": "secp384r1",
    "CurveP521": "secp521r1",
    "X25519": "X25519",
}


def _settable(openssl_name: str) -> bool:
    """Whether this interpreter's ssl accepts the curve (Debian's 3.11.2 refuses X25519)."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).set_ecdh_curve(openssl_name)
    except (ssl.SSLError, ValueError):
        return False
    return True


SUPPORTED_CURVES = [name for name, openssl in TOOLKIT_CURVES.items() if _settable(openssl)]


def _curve_error(path: Path, name: str) -> str:
    return (
        f"{path}:4 tls_server_config.curve_preferences: curve {name!r} is not supported by "
        f"this Python's TLS ({ssl.OPENSSL_VERSION}); use one of {', '.join(SUPPORTED_CURVES)}"
    )


@pytest.fixture
def fresh_curve_probe() -> Iterator[None]:
    tls._supported_curves.cache_clear()
    yield
    tls._supported_curves.cache_clear()


def test_more_than_one_curve_logs_that_only_the_first_is_used(tmp_path, pki, caplog):
    if len(SUPPORTED_CURVES) < 2:
        pytest.skip(f"this Python's ssl sets only {SUPPORTED_CURVES}")
    extra = f"  curve_preferences: [{SUPPORTED_CURVES[-1]}, {SUPPORTED_CURVES[0]}]\n"
    assert load_web_config(_config(tmp_path, _tls_yaml(pki, extra))).ssl_context is not None
    assert "only the first of curve_preferences" in caplog.text


@pytest.mark.parametrize("name", list(TOOLKIT_CURVES))
def test_each_toolkit_curve_loads_where_this_python_sets_it_else_is_one_line(tmp_path, pki, name):
    path = _config(tmp_path, _tls_yaml(pki, f"  curve_preferences: [{name}]\n"))
    if name in SUPPORTED_CURVES:
        assert load_web_config(path).ssl_context is not None
    else:
        assert _error_for(path) == _curve_error(path, name)


def test_curve_this_python_cannot_set_names_it_and_the_supported_ones(
    tmp_path, pki, monkeypatch, fresh_curve_probe
):
    # A toolkit name whose OpenSSL name no ssl accepts: what X25519 is on Debian's Python 3.11.2.
    monkeypatch.setitem(tls._CURVES, "CurveP999", "secp999r1")
    path = _config(tmp_path, _tls_yaml(pki, "  curve_preferences: [CurveP256, CurveP999]\n"))
    assert _error_for(path) == _curve_error(path, "CurveP999")


def test_no_curve_this_python_sets_asks_to_remove_the_key(
    tmp_path, pki, monkeypatch, fresh_curve_probe
):
    monkeypatch.setattr(tls, "_CURVES", {"CurveP999": "secp999r1"})
    path = _config(tmp_path, _tls_yaml(pki, "  curve_preferences: [CurveP999]\n"))
    assert _error_for(path).endswith("; remove curve_preferences")


# --- errors -------------------------------------------------------------------------------------


def _error_for(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_web_config(path)
    message = str(info.value)
    assert info.value.exit_code == 2
    assert "\n" not in message
    # path[:line[:column]] [dotted.key]: what is wrong; what to do
    assert re.fullmatch(rf"{re.escape(str(path))}(:\d+){{0,2}}( [\w.-]+)?: [^;]+; .+", message), (
        message
    )
    return message


def test_missing_file_names_the_file(tmp_path):
    message = _error_for(tmp_path / "absent.yml")
    assert message == (
        f"{tmp_path / 'absent.yml'}: cannot be read (No such file or directory); "
        "check the --web-config-file path and permissions"
    )


def test_yaml_syntax_error_names_the_line_and_column(tmp_path):
    path = _config(tmp_path, "tls_server_config:\n  cert_file: [unclosed\n  key_file: x\n")
    assert _error_for(path).startswith(f"{path}:3:11: YAML syntax error: ")


def _case(text: str, *expected: str) -> tuple[str, tuple[str, ...]]:
    return text, expected


BAD = {
    "unknown top-level key": _case(
        "tls_config:\n  cert_file: a\n",
        "web.yml:1 tls_config: unknown key; remove it or fix its spelling",
        "valid: tls_server_config, http_server_config, basic_auth_users",
    ),
    "unknown nested key": _case(
        "tls_server_config:\n  cert_fil: a.crt\n",
        "web.yml:2 tls_server_config.cert_fil: unknown key",
        "cert_file",
    ),
    "cert_file without key_file": _case(
        "tls_server_config:\n  cert_file: {crt}\n",
        "web.yml tls_server_config.key_file: missing; set it to the certificate's private key",
    ),
    "key_file without cert_file": _case(
        "tls_server_config:\n  key_file: {key}\n",
        "web.yml tls_server_config.cert_file: missing",
    ),
    "cert_file that does not exist": _case(
        "tls_server_config:\n  cert_file: nope.crt\n  key_file: {key}\n",
        "web.yml:2 tls_server_config.cert_file: cannot read ",
        "nope.crt (No such file or directory); check the path and permissions",
    ),
    "cert_file that is a directory": _case(
        "tls_server_config:\n  cert_file: {dir}\n  key_file: {key}\n",
        "web.yml:2 tls_server_config.cert_file: cannot read",
    ),
    "cert_file that holds a key": _case(
        "tls_server_config:\n  cert_file: {key}\n  key_file: {key}\n",
        "web.yml:2 tls_server_config.cert_file:",
        "is not a PEM certificate",
    ),
    "key_file that is junk": _case(
        "tls_server_config:\n  cert_file: {crt}\n  key_file: {junk}\n",
        "web.yml:3 tls_server_config.key_file:",
        "is not a usable key for the certificate",
    ),
    "key_file of another certificate": _case(
        "tls_server_config:\n  cert_file: {crt}\n  key_file: {other}\n",
        "web.yml:3 tls_server_config.key_file:",
        "KEY_VALUES_MISMATCH",
    ),
    "password instead of a bcrypt hash": _case(
        "basic_auth_users:\n  alice: hunter2\n",
        "web.yml:2 basic_auth_users.alice: is not a bcrypt hash; write the output of `htpasswd",
    ),
    "number instead of a bcrypt hash": _case(
        "basic_auth_users:\n  alice: 12345\n",
        "web.yml:2 basic_auth_users.alice: input should be a valid string",
    ),
    "unknown client_auth_type": _case(
        "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  client_auth_type: Always\n",
        "web.yml:4 tls_server_config.client_auth_type: invalid value 'Always'; use one of ",
        "RequireAndVerifyClientCert",
    ),
    "unknown client_auth_type with TLS otherwise off": _case(
        "tls_server_config:\n  client_auth_type: Always\n",
        "web.yml:2 tls_server_config.client_auth_type: invalid value 'Always'",
    ),
    "unknown TLS version": _case(
        "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  min_version: TLS14\n",
        "web.yml:4 tls_server_config.min_version: invalid value 'TLS14'; use one of TLS10, TLS11",
    ),
    "min_version above max_version": _case(
        "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n"
        "  min_version: TLS13\n  max_version: TLS12\n",
        "web.yml:5 tls_server_config.max_version: is below min_version",
    ),
    "client CA without client auth": _case(
        "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  client_ca_file: {ca}\n",
        "web.yml tls_server_config.client_auth_type: NoClientCert with a client CA",
    ),
    "client auth without client CA": _case(
        "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n"
        "  client_auth_type: RequireAndVerifyClientCert\n",
        "web.yml:4 tls_server_config.client_auth_type: "
        "RequireAndVerifyClientCert needs a client CA",
    ),
    "client CA file that is junk": _case(
        "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n"
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {junk}\n",
        "web.yml:5 tls_server_config.client_ca_file:",
        "is not a PEM CA certificate",
    ),
    "unknown cipher suite": _case(
        "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  cipher_suites: [RC4]\n",
        "web.yml:4 tls_server_config.cipher_suites: invalid value 'RC4'; use one of ",
    ),
    "unknown curve": _case(
        "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  curve_preferences: [P256]\n",
        "web.yml:4 tls_server_config.curve_preferences: invalid value 'P256'; use one of ",
    ),
    "header that cannot be set": _case(
        "http_server_config:\n  headers:\n    Server: gpuscale\n",
        "web.yml:3 http_server_config.headers.Server: this header cannot be set",
    ),
    "header value outside its enumeration": _case(
        "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
        "web.yml:3 http_server_config.headers.X-Frame-Options: invalid value 'allow'",
        "use one of deny, sameorigin",
    ),
    "non-boolean http2": _case(
        "http_server_config:\n  http2: 'yes'\n",
        "web.yml:2 http_server_config.http2: input should be a valid boolean",
    ),
    "section that is not a mapping": _case(
        "tls_server_config: [a, b]\n", "web.yml:1 tls_server_config: is not a mapping"
    ),
    "top level that is not a mapping": _case("- a\n- b\n", "web.yml: is not a mapping"),
    "duplicate key": _case(
        "basic_auth_users:\n  alice: x\nbasic_auth_users:\n  bob: y\n",
        "web.yml:3: duplicate key basic_auth_users; keep only one",
    ),
    "client_allowed_sans": _case(
        "tls_server_config:\n  client_allowed_sans: [a]\n",
        "web.yml:2 tls_server_config.client_allowed_sans: is not supported by gpuscale; remove it",
    ),
    "rate_limit": _case(
        "rate_limit:\n  interval: 1s\n  burst: 5\n",
        "web.yml:1 rate_limit: is not supported by gpuscale",
    ),
    "inline key": _case(
        "tls_server_config:\n  key: |\n    -----BEGIN PRIVATE KEY-----\n",
        "web.yml:2 tls_server_config.key: is not supported by gpuscale",
        "set key_file",
    ),
}


@pytest.mark.parametrize(("text", "expected"), list(BAD.values()), ids=list(BAD))
def test_each_mistake_is_one_line_naming_file_and_key(tmp_path, pki, text, expected):
    junk = tmp_path / "junk.pem"
    junk.write_text("not a pem file\n")
    fields = {
        "crt": pki.server_crt,
        "key": pki.server_key,
        "ca": pki.client_ca_crt,
        "other": pki.other_key,
        "junk": junk,
        "dir": pki.dir,
    }
    message = _error_for(_config(tmp_path, text.format(**fields)))
    for part in expected:
        assert part in message, message


def test_error_never_echoes_a_password(tmp_path):
    message = _error_for(_config(tmp_path, "basic_auth_users:\n  alice: hunter2-secret\n"))
    assert "hunter2" not in message


# --- authenticate -------------------------------------------------------------------------------


@pytest.fixture
def auth() -> WebConfig:
    return WebConfig(ssl_context=None, users={"alice": HASH.encode()}, headers={})


def test_right_password_is_accepted(auth):
    assert auth.authenticate(_basic("alice", PASSWORD)) is True
    assert auth.authenticate("basic " + _basic("alice", PASSWORD).split()[1]) is True


def test_wrong_password_and_wrong_user_are_rejected(auth):
    assert auth.authenticate(_basic("alice", "S3cret")) is False
    assert auth.authenticate(_basic("alice", "")) is False
    assert auth.authenticate(_basic("mallory", PASSWORD)) is False


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "Basic",
        "Basic ",
        "Basic !!!notbase64",
        "Basic " + base64.b64encode(b"alice" + PASSWORD.encode()).decode(),  # no colon
        "Basic " + base64.b64encode(b"\xff\xfe:" + PASSWORD.encode()).decode(),  # not UTF-8
        "Basic " + base64.b64encode(b"alice:s3cret").decode()[:-2],  # bad padding
        "Basic ñ",
    ],
)
def test_malformed_headers_are_rejected(auth, header):
    assert auth.authenticate(header) is False


@pytest.mark.parametrize(
    "header",
    [
        "Bearer " + base64.b64encode(b"alice:s3cret").decode(),
        "Digest username=alice",
        base64.b64encode(b"alice:s3cret").decode(),
        "Basically " + base64.b64encode(b"alice:s3cret").decode(),
    ],
)
def test_schemes_other_than_basic_are_rejected(auth, header):
    assert auth.authenticate(header) is False


def test_no_users_means_every_request_passes():
    config = WebConfig(ssl_context=None, users={}, headers={})
    assert config.authenticate(None) is True
    assert config.authenticate("Bearer x") is True


@pytest.fixture
def checkpw_calls(monkeypatch) -> list[bytes]:
    calls: list[bytes] = []
    real = bcrypt.checkpw

    def counting(password: bytes, hashed: bytes) -> bool:
        calls.append(password)
        return real(password, hashed)

    monkeypatch.setattr(webconfig.bcrypt, "checkpw", counting)
    return calls


def test_repeated_logins_pay_bcrypt_once(auth, checkpw_calls):
    for _ in range(5):
        assert auth.authenticate(_basic("alice", PASSWORD)) is True
    assert len(checkpw_calls) == 1


def test_cache_does_not_let_a_wrong_password_through(auth, checkpw_calls):
    assert auth.authenticate(_basic("alice", PASSWORD)) is True
    assert auth.authenticate(_basic("alice", "wrong")) is False
    assert auth.authenticate(_basic("alice", "wrong")) is False  # failures are not cached
    assert auth.authenticate(_basic("alice", PASSWORD)) is True
    assert len(checkpw_calls) == 3


def test_unknown_user_still_pays_bcrypt_so_timing_hides_who_exists(auth, checkpw_calls):
    assert auth.authenticate(_basic("mallory", PASSWORD)) is False
    assert checkpw_calls == [PASSWORD.encode()]


def test_cache_stays_bounded_and_keeps_the_latest(monkeypatch):
    monkeypatch.setattr(webconfig, "_CACHE_MAX", 2)
    users = {f"u{i}": bcrypt.hashpw(f"p{i}".encode(), bcrypt.gensalt(rounds=4)) for i in range(4)}
    config = WebConfig(ssl_context=None, users=users, headers={})
    for i in range(4):
        assert config.authenticate(_basic(f"u{i}", f"p{i}")) is True
    assert list(config._cache) == ["u2", "u3"]


def test_password_longer_than_bcrypt_reads_is_checked_not_raised(auth):
    assert auth.authenticate(_basic("alice", "x" * 100)) is False


def test_concurrent_logins_all_succeed(auth):
    results: list[bool] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(auth.authenticate(_basic("alice", PASSWORD)))
        )
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [True] * 8


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    user=st.text(min_size=1, max_size=20).filter(lambda u: ":" not in u),
    password=st.binary(max_size=40).filter(lambda p: b"\0" not in p),  # refused: see below
    other=st.binary(max_size=40),
)
def test_any_credentials_round_trip_and_any_other_password_fails(user, password, other):
    config = WebConfig(
        ssl_context=None,
        users={user: bcrypt.hashpw(password, bcrypt.gensalt(rounds=4))},
        headers={},
    )
    assert config.authenticate(_basic(user, password)) is True
    assert config.authenticate(_basic(user, other)) is (other == password)


def test_a_password_with_a_nul_byte_is_refused():
    config = WebConfig(
        ssl_context=None, users={"u": bcrypt.hashpw(b"", bcrypt.gensalt(rounds=4))}, headers={}
    )
    assert bcrypt.checkpw(b"\0", config.users["u"])  # why: the library ends keys with a NUL
    assert config.authenticate(_basic("u", b"\0")) is False
    assert config.authenticate(_basic("u", b"")) is True


@settings(max_examples=200, deadline=None)
@given(header=st.one_of(st.none(), st.text(max_size=60)))
def test_arbitrary_headers_never_raise_and_never_pass(header):
    config = WebConfig(ssl_context=None, users={"alice": HASH.encode()}, headers={})
    assert config.authenticate(header) is False


# --- real TLS on 127.0.0.1 ----------------------------------------------------------------------


@contextmanager
def serving(config: WebConfig) -> Iterator[int]:
    """A tiny HTTPS server that uses the config's context, auth and headers; yields its port."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            ok = config.authenticate(self.headers.get("Authorization"))
            self.send_response(200 if ok else 401)
            for name, value in config.headers.items():
                self.send_header(name, value)
            body = b"ok\n" if ok else b"unauthorized\n"
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    assert config.ssl_context is not None
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = config.ssl_context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _trusting(pki: Pki, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=pki.server_crt)
    if cert is not None:
        context.load_cert_chain(cert, key)
    return context


def test_tls_handshake_auth_and_headers_work_end_to_end(tmp_path, pki):
    text = (
        _tls_yaml(pki)
        + "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n"
        + f"basic_auth_users:\n  alice: {HASH}\n"
    )
    config = load_web_config(_config(tmp_path, text))
    with serving(config) as port, httpx.Client(verify=_trusting(pki), timeout=5) as client:
        url = f"https://127.0.0.1:{port}/metrics"
        denied = client.get(url)
        allowed = client.get(url, auth=("alice", PASSWORD))
    assert denied.status_code == 401
    assert allowed.status_code == 200
    assert allowed.text == "ok\n"
    assert allowed.headers["X-Content-Type-Options"] == "nosniff"


def test_plain_http_against_the_tls_port_fails(tmp_path, pki):
    config = load_web_config(_config(tmp_path, _tls_yaml(pki)))
    with serving(config) as port, httpx.Client(timeout=5) as client:
        with pytest.raises(httpx.TransportError):
            client.get(f"http://127.0.0.1:{port}/")
        # The server is still healthy for TLS clients afterwards.
        ok = httpx.get(f"https://127.0.0.1:{port}/", verify=_trusting(pki), timeout=5)
    assert ok.status_code == 200


def test_client_that_does_not_trust_the_certificate_fails(tmp_path, pki):
    config = load_web_config(_config(tmp_path, _tls_yaml(pki)))
    untrusting = ssl.create_default_context(cafile=pki.client_ca_crt)
    with serving(config) as port, pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY"):
        httpx.get(f"https://127.0.0.1:{port}/", verify=untrusting, timeout=5)


def test_tls_version_limits_are_enforced_in_the_handshake(tmp_path, pki):
    config = load_web_config(_config(tmp_path, _tls_yaml(pki, "  min_version: TLS13\n")))
    old_client = _trusting(pki)
    old_client.maximum_version = ssl.TLSVersion.TLSv1_2
    with serving(config) as port:
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"https://127.0.0.1:{port}/", verify=old_client, timeout=5)
        ok = httpx.get(f"https://127.0.0.1:{port}/", verify=_trusting(pki), timeout=5)
    assert ok.status_code == 200


def test_require_and_verify_client_cert_rejects_clients_without_a_good_cert(tmp_path, pki):
    extra = (
        f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki.client_ca_crt}\n"
    )
    config = load_web_config(_config(tmp_path, _tls_yaml(pki, extra)))
    with serving(config) as port:
        url = f"https://127.0.0.1:{port}/"
        with pytest.raises(httpx.TransportError):
            httpx.get(url, verify=_trusting(pki), timeout=5)
        with pytest.raises(httpx.TransportError):
            httpx.get(url, verify=_trusting(pki, pki.stranger_crt, pki.stranger_key), timeout=5)
        ok = httpx.get(url, verify=_trusting(pki, pki.client_crt, pki.client_key), timeout=5)
    assert ok.status_code == 200
