"""TLS and basic auth from a Prometheus exporter-toolkit web-config file.

dcgm-exporter, like every Prometheus exporter, takes ``--web-config-file`` in
the exporter-toolkit format, so operators already have these files. All is
checked at load (certificate and key loaded into a ready ``ssl.SSLContext``,
every hash checked), so a mistake stops the exporter at start with one line
instead of failing the first scrape.

Differences from exporter-toolkit, all on the safe side:

* Certificates are read once; the toolkit rereads them on each connection.
* ``RequestClientCert`` asks for no certificate (nothing reads one); modes that
  require or verify one need a client CA, which Python's TLS always checks.
* ``client_allowed_sans`` and ``rate_limit`` are refused rather than ignored;
  so are inline ``cert``/``key``/``client_ca``, as Python's TLS can load a key
  only from a file. Only the first of ``curve_preferences`` is used.
* ``http2`` is accepted and has no effect: the server speaks HTTP/1.1.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
import ssl
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TypeVar

import bcrypt
import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from gpuscale.errors import ConfigError

logger = logging.getLogger(__name__)

_CACHE_MAX = 64  # successful logins remembered; a scrape job uses one user
_BCRYPT_HASH = re.compile(r"\$2[aby]\$(0[4-9]|[12]\d|3[01])\$[./A-Za-z0-9]{53}")
_TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
_CLIENT_AUTH = {  # RequestClientCert: Go fetches a certificate nothing reads, so don't ask
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_NONE,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "RequireClientCert": ssl.CERT_REQUIRED,  # the toolkit's old name of the one above
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
# Go's (IANA) names -> OpenSSL's; "-" for TLS 1.3 suites, which are fixed, as in Go.
_CIPHERS = {
    "TLS_AES_128_GCM_SHA256": "-",
    "TLS_AES_256_GCM_SHA384": "-",
    "TLS_CHACHA20_POLY1305_SHA256": "-",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA": "DES-CBC3-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA": "ECDHE-RSA-DES-CBC3-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
_CURVES = dict(
    CurveP256="prime256v1", CurveP384="secp384r1", CurveP521="secp521r1", X25519="X25519"
)
# The toolkit's allow-list: header -> accepted values (empty: any value).
_HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}
_TLS = "tls_server_config."
_T = TypeVar("_T")
_Pem = tuple[Path, str]  # a resolved file and its text


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _TlsSection(_Strict):
    cert_file: str | None = None
    key_file: str | None = None
    client_auth_type: str | None = None
    client_ca_file: str | None = None
    min_version: str = "TLS12"
    max_version: str = "TLS13"
    cipher_suites: list[str] | None = None
    prefer_server_cipher_suites: bool = True
    curve_preferences: list[str] | None = None


class _HttpSection(_Strict):
    http2: bool = True
    headers: dict[str, str] | None = None


class _Root(_Strict):
    tls_server_config: _TlsSection | None = None
    http_server_config: _HttpSection | None = None
    basic_auth_users: dict[str, str] | None = None


_SECTIONS: dict[str, type[_Strict]] = {"": _Root, "http_server_config": _HttpSection}
_SECTIONS["tls_server_config"] = _TlsSection
# exporter-toolkit keys that gpuscale refuses rather than ignores -> what to do instead.
_UNSUPPORTED = {
    "rate_limit": "rate-limit in a proxy in front of the exporter",
    _TLS + "client_allowed_sans": "give client certificates only to allowed clients",
    _TLS + "cert": "put the certificate in a file and set cert_file",
    _TLS + "key": "put the key in a file (mode 0600) and set key_file",
    _TLS + "client_ca": "put the CA in a file and set client_ca_file",
}


@dataclass(frozen=True, slots=True)
class WebConfig:
    """What the HTTP server needs from a web-config file, checked and ready.

    Attributes:
        ssl_context: Server TLS context with certificate, versions, client auth
            and CA loaded; None serves plain HTTP.
        users: Username -> bcrypt hash; empty means no authentication.
        headers: Extra headers to set on every response.
    """

    ssl_context: ssl.SSLContext | None
    users: Mapping[str, bytes]
    headers: Mapping[str, str]
    _cache: dict[str, bytes] = field(default_factory=dict, init=False, repr=False, compare=False)
    _lock: threading.Lock = field(
        default_factory=threading.Lock, init=False, repr=False, compare=False
    )

    def authenticate(self, authorization_header: str | None) -> bool:
        """Check an ``Authorization`` header against ``basic_auth_users``.

        A success is remembered as (user, SHA-256 of the password) and compared
        in constant time, so repeated scrapes skip bcrypt. bcrypt runs one call
        at a time (bad guesses cost at most one core), and an unknown user pays
        it too, so timing does not reveal which users exist.

        Args:
            authorization_header: The raw header value, or None when absent.

        Returns:
            True if no users are configured or the credentials match; False for
            a missing, malformed or non-Basic header or a wrong user/password.
        """
        if not self.users:
            return True
        credentials = _parse_basic(authorization_header)
        if credentials is None:
            return False
        user, password = credentials
        digest = hashlib.sha256(password).digest()
        if hmac.compare_digest(self._cache.get(user, b""), digest):
            return True
        stored = self.users.get(user)  # an unknown user is checked against a real hash too
        target = stored if stored is not None else next(iter(self.users.values()))
        with self._lock:  # also guards the cache; readers need no lock for one get()
            try:
                matched = bcrypt.checkpw(password[:72], target)  # bcrypt reads 72 bytes
            except ValueError:
                logger.warning("basic_auth_users entry for %r is not a bcrypt hash", user)
                return False
            if not (matched and stored is not None):
                return False
            self._cache.pop(user, None)
            self._cache[user] = digest
            while len(self._cache) > _CACHE_MAX:
                del self._cache[next(iter(self._cache))]
        return True


def _parse_basic(header: str | None) -> tuple[str, bytes] | None:
    """Split ``Basic base64(user:password)``; None when it is anything else."""
    scheme, _, token = (header or "").strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        raw = base64.b64decode(token.strip().encode("ascii"), validate=True)
        user, sep, password = raw.partition(b":")
        return (user.decode("utf-8"), password) if sep else None
    except ValueError:  # binascii.Error and Unicode errors are ValueErrors
        return None


class _Bad(Exception):  # noqa: N818 - internal, never escapes load_web_config
    """Args (where, what, todo): a dotted key, ``line N`` or ``file``; what is wrong; what to do."""


def load_web_config(path: Path) -> WebConfig:
    """Read, validate and build a web-config file.

    Relative ``cert_file``, ``key_file`` and ``client_ca_file`` resolve against
    the directory of ``path``, as exporter-toolkit does.

    Args:
        path: The ``--web-config-file`` path.

    Returns:
        The ready configuration.

    Raises:
        ConfigError: One line, ``<path>: <key or line>: <what is wrong>: <what to do>``.
    """
    lines: dict[str, int] = {}
    try:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = f"cannot be read ({getattr(exc, 'strerror', None) or exc})"
            raise _Bad("file", why, "check the --web-config-file path and permissions") from None
        try:
            root = _Root.model_validate(_parse_yaml(text, lines))
        except ValidationError as exc:
            raise _translate(exc) from None
        users = _check_users(root.basic_auth_users or {})
        headers = _check_headers(root.http_server_config)
        context = _build_ssl_context(path, root.tls_server_config or _TlsSection())
    except _Bad as bad:
        where, what, todo = bad.args
        where = f"{where} (line {lines[where]})" if where in lines else where
        raise ConfigError(" ".join(f"{path}: {where}: {what}: {todo}".split())) from None
    if users and context is None:
        logger.warning("%s: basic_auth_users without TLS sends passwords in clear text", path)
    logger.info("web config %s: TLS %s, %d basic-auth users", path, context is not None, len(users))
    return WebConfig(ssl_context=context, users=users, headers=headers)


def _parse_yaml(text: str, lines: dict[str, int]) -> object:
    """Load YAML, filling ``lines`` with each dotted key's 1-based line; reject duplicate keys."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}" if mark is not None else "file"
        raise _Bad(where, f"YAML syntax error: {exc.problem}", "fix the YAML") from None
    except yaml.YAMLError as exc:
        raise _Bad("file", f"YAML error: {exc}", "fix the YAML") from None
    pending = [("", node)]
    while pending:
        prefix, mapping = pending.pop()
        if not isinstance(mapping, yaml.MappingNode):
            continue
        for key, value in mapping.value:
            dotted, line = f"{prefix}{key.value}", key.start_mark.line + 1
            if dotted in lines:
                raise _Bad(f"line {line}", f"duplicate key {dotted}", "keep only one")
            lines[dotted] = line
            pending.append((f"{dotted}.", value))
    return {} if data is None else data


def _translate(exc: ValidationError) -> _Bad:
    """Turn the first pydantic error into one actionable problem."""
    err = exc.errors()[0]
    dotted = ".".join(str(part) for part in err["loc"]) or "file"
    if err["type"] == "extra_forbidden" and dotted in _UNSUPPORTED:
        return _Bad(dotted, "is not supported by gpuscale", f"remove it; {_UNSUPPORTED[dotted]}")
    if err["type"] == "extra_forbidden":  # a typo: list what the section accepts
        section = _SECTIONS.get(".".join(str(part) for part in err["loc"][:-1]))
        valid = ", ".join(section.model_fields) if section else ""
        return _Bad(dotted, "unknown key", f"remove it or fix its spelling (valid: {valid})")
    if err["type"] in ("model_type", "dict_type"):
        return _Bad(dotted, "is not a mapping", "write `key: value` lines under it")
    # Other messages are generic; the input is not echoed as it may be a secret.
    return _Bad(dotted, err["msg"].lower(), "fix this value")


def _check_users(users: dict[str, str]) -> Mapping[str, bytes]:
    for user, hashed in users.items():
        if not _BCRYPT_HASH.fullmatch(hashed):
            hint = "write the output of `htpasswd -nBC 10 '' | tr -d ':\\n'`, not the password"
            raise _Bad(f"basic_auth_users.{user}", "is not a bcrypt hash", hint)
    return MappingProxyType({user: hashed.encode("ascii") for user, hashed in users.items()})


def _check_headers(http: _HttpSection | None) -> Mapping[str, str]:
    headers = {k: v for k, v in ((http.headers or {}) if http else {}).items() if v}
    for name, value in headers.items():
        where = f"http_server_config.headers.{name}"
        if name not in _HEADERS:
            raise _Bad(where, "this header cannot be set", f"use one of {', '.join(_HEADERS)}")
        if _HEADERS[name] and value not in _HEADERS[name]:
            raise _Bad(where, f"invalid value {value!r}", f"use one of {', '.join(_HEADERS[name])}")
    return MappingProxyType(headers)


def _pick(table: Mapping[str, _T], value: str, key: str) -> _T:
    if value not in table:
        raise _Bad(_TLS + key, f"invalid value {value!r}", f"use one of {', '.join(table)}")
    return table[value]


def _read_pem(path: Path, tls: _TlsSection, key: str) -> _Pem | None:
    """Resolve a file key against the config's directory and read it; None when unset."""
    name = getattr(tls, key) or None
    if name is None:
        return None
    resolved = path.parent / name  # an absolute name stays absolute
    try:
        return resolved, resolved.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        why = f"cannot read {resolved} ({getattr(exc, 'strerror', None) or exc})"
        raise _Bad(_TLS + key, why, "check the path and permissions") from None


def _build_ssl_context(path: Path, tls: _TlsSection) -> ssl.SSLContext | None:
    """Build and verify the server context; None when the section sets no TLS key."""
    mode = _pick(_CLIENT_AUTH, tls.client_auth_type or "NoClientCert", "client_auth_type")
    low = _pick(_TLS_VERSIONS, tls.min_version, "min_version")
    high = _pick(_TLS_VERSIONS, tls.max_version, "max_version")
    if low > high:
        raise _Bad(_TLS + "max_version", "is below min_version", "raise it or lower min_version")
    suites = [_pick(_CIPHERS, name, "cipher_suites") for name in tls.cipher_suites or []]
    curves = [_pick(_CURVES, name, "curve_preferences") for name in tls.curve_preferences or []]
    cert, key = _read_pem(path, tls, "cert_file"), _read_pem(path, tls, "key_file")
    ca = _read_pem(path, tls, "client_ca_file")
    if cert is None and key is None and ca is None and tls.client_auth_type is None:
        return None
    if cert is None:
        raise _Bad(_TLS + "cert_file", "missing", "set it to the server certificate (PEM)")
    if key is None:
        raise _Bad(_TLS + "key_file", "missing", "set it to the certificate's private key (PEM)")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=cert[1])
    except (ssl.SSLError, ValueError) as exc:
        why = f"{cert[0]} is not a PEM certificate ({exc})"
        raise _Bad(_TLS + "cert_file", why, "give the PEM certificate") from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:  # a password callback stops OpenSSL prompting on the terminal for an encrypted key
        context.load_cert_chain(cert[0], key[0], password=lambda: b"")
    except ssl.SSLError as exc:
        why = f"{key[0]} is not a usable key for the certificate ({exc.reason or exc})"
        raise _Bad(_TLS + "key_file", why, "give the unencrypted PEM key of cert_file") from None
    if low < ssl.TLSVersion.TLSv1_2:
        logger.warning("%s: min_version %s allows deprecated TLS versions", path, tls.min_version)
    with warnings.catch_warnings():  # Python deprecates TLS 1.0/1.1; the user asked for it
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version, context.maximum_version = low, high
    _set_client_auth(context, tls.client_auth_type or "NoClientCert", mode, ca)
    _set_ciphers(context, suites, prefer_server=tls.prefer_server_cipher_suites)
    if curves:
        context.set_ecdh_curve(curves[0])
    if len(curves) > 1:
        logger.warning("%s: Python TLS uses only the first of curve_preferences", path)
    return context


def _set_client_auth(ctx: ssl.SSLContext, name: str, mode: ssl.VerifyMode, ca: _Pem | None) -> None:
    if ca is not None and mode == ssl.CERT_NONE:
        hint = "use RequireAndVerifyClientCert or drop the CA"
        raise _Bad(_TLS + "client_auth_type", f"{name} with a client CA", hint)
    if ca is None and mode != ssl.CERT_NONE:
        hint = "set client_ca_file to the CA of the clients' certificates"
        raise _Bad(_TLS + "client_auth_type", f"{name} needs a client CA", hint)
    if ca is not None:
        try:
            ctx.load_verify_locations(cadata=ca[1])
        except (ssl.SSLError, ValueError) as exc:
            why = f"{ca[0]} is not a PEM CA certificate ({exc})"
            raise _Bad(_TLS + "client_ca_file", why, "give the PEM CA") from None
    ctx.verify_mode = mode


def _set_ciphers(context: ssl.SSLContext, suites: list[str], *, prefer_server: bool) -> None:
    if suites := [name for name in suites if name != "-"]:
        try:
            context.set_ciphers(":".join(suites))
        except ssl.SSLError:
            hint = "add a modern one such as TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
            raise _Bad(_TLS + "cipher_suites", "none is available in this OpenSSL", hint) from None
    context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    if prefer_server:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
