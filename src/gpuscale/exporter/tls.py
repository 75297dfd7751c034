"""Server TLS from the ``tls_server_config`` section of an exporter-toolkit web-config file.

Split from ``webconfig`` so each stays readable: this module maps Go's names
(TLS versions, client-auth types, cipher suites, curves) to Python's ``ssl``
and builds one ready ``ssl.SSLContext``, raising a one-line ConfigError for
any value this Python cannot honour. ``webconfig`` reads the file and says
where each key is.
"""

from __future__ import annotations

import functools
import logging
import ssl
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ConfigDict

from gpuscale.errors import config_error, require

logger = logging.getLogger(__name__)

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
# exporter-toolkit's (Go's) curve names -> OpenSSL's.
_CURVES = dict(
    CurveP256="prime256v1", CurveP384="secp384r1", CurveP521="secp521r1", X25519="X25519"
)
# The toolkit's allow-list: header -> accepted values (empty: any value).
_TLS = "tls_server_config."
_T = TypeVar("_T")
_Pem = tuple[Path, str]  # a resolved file and its text
Where = Callable[[str], str]
"""Dotted key -> the ``where`` of its error, e.g. ``web.yml:4 tls_server_config.key_file``."""


class TlsSection(BaseModel):
    """The ``tls_server_config`` section as written, before any check but its types."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    cert_file: str | None = None
    key_file: str | None = None
    client_auth_type: str | None = None
    client_ca_file: str | None = None
    min_version: str = "TLS12"
    max_version: str = "TLS13"
    cipher_suites: list[str] | None = None
    prefer_server_cipher_suites: bool = True
    curve_preferences: list[str] | None = None


def _one_line(text: object) -> str:
    """OpenSSL's text folded onto one line."""
    return " ".join(str(text).split())


def _pick(table: Mapping[str, _T], value: str, key: str, at: Where) -> _T:
    fix = f"use one of {', '.join(table)}"
    require(value in table, at(_TLS + key), f"invalid value {value!r}", fix)
    return table[value]


@functools.cache
def _supported_curves() -> tuple[str, ...]:
    """The exporter-toolkit curve names this interpreter's ``ssl`` can set, probed once.

    Support depends on the Python build, not only on OpenSSL: Debian 12's Python
    3.11.2 refuses ``X25519`` with ``UNKNOWN_GROUP`` although its OpenSSL 3.0 offers
    it for TLS, while a Python 3.11.7 on the same OpenSSL accepts it.
    """
    supported = []
    for name, openssl_name in _CURVES.items():
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).set_ecdh_curve(openssl_name)
        except (ssl.SSLError, ValueError):
            continue
        supported.append(name)
    return tuple(supported)


def _pick_curve(name: str, at: Where) -> str:
    """OpenSSL's name of a curve ``set_ecdh_curve`` accepts here; ConfigError otherwise."""
    supported = _supported_curves()
    if name in supported:
        return _CURVES[name]
    problem = f"invalid value {name!r}"
    if name in _CURVES:
        problem = f"curve {name!r} is not supported by this Python's TLS ({ssl.OPENSSL_VERSION})"
    fix = f"use one of {', '.join(supported)}" if supported else "remove curve_preferences"
    raise config_error(at(_TLS + "curve_preferences"), problem, fix)


def _read_pem(path: Path, tls: TlsSection, key: str, at: Where) -> _Pem | None:
    """Resolve a file key against the config's directory and read it; None when unset."""
    name = getattr(tls, key) or None
    if name is None:
        return None
    resolved = path.parent / name  # an absolute name stays absolute
    try:
        return resolved, resolved.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        why = f"cannot read {resolved} ({getattr(exc, 'strerror', None) or _one_line(exc)})"
        raise config_error(at(_TLS + key), why, "check the path and permissions") from None


def build_ssl_context(path: Path, tls: TlsSection, at: Where) -> ssl.SSLContext | None:
    """Build and verify the server context; None when the section sets no TLS key."""
    mode = _pick(_CLIENT_AUTH, tls.client_auth_type or "NoClientCert", "client_auth_type", at)
    low = _pick(_TLS_VERSIONS, tls.min_version, "min_version", at)
    high = _pick(_TLS_VERSIONS, tls.max_version, "max_version", at)
    fix = "raise it or lower min_version"
    require(low <= high, at(_TLS + "max_version"), "is below min_version", fix)
    suites = [_pick(_CIPHERS, name, "cipher_suites", at) for name in tls.cipher_suites or []]
    curves = [_pick_curve(name, at) for name in tls.curve_preferences or []]
    cert, key = _read_pem(path, tls, "cert_file", at), _read_pem(path, tls, "key_file", at)
    ca = _read_pem(path, tls, "client_ca_file", at)
    if cert is None and key is None and ca is None and tls.client_auth_type is None:
        return None
    if cert is None:
        fix = "set it to the server certificate (PEM)"
        raise config_error(at(_TLS + "cert_file"), "missing", fix)
    if key is None:
        fix = "set it to the certificate's private key (PEM)"
        raise config_error(at(_TLS + "key_file"), "missing", fix)
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=cert[1])
    except (ssl.SSLError, ValueError) as exc:
        why = f"{cert[0]} is not a PEM certificate ({_one_line(exc)})"
        raise config_error(at(_TLS + "cert_file"), why, "give the PEM certificate") from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:  # a password callback stops OpenSSL prompting on the terminal for an encrypted key
        context.load_cert_chain(cert[0], key[0], password=lambda: b"")
    except ssl.SSLError as exc:
        why = f"{key[0]} is not a usable key for the certificate ({_one_line(exc.reason or exc)})"
        fix = "give the unencrypted PEM key of cert_file"
        raise config_error(at(_TLS + "key_file"), why, fix) from None
    if low < ssl.TLSVersion.TLSv1_2:
        logger.warning("%s: min_version %s allows deprecated TLS versions", path, tls.min_version)
    with warnings.catch_warnings():  # Python deprecates TLS 1.0/1.1; the user asked for it
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version, context.maximum_version = low, high
    _set_client_auth(context, tls.client_auth_type or "NoClientCert", mode, ca, at)
    _set_ciphers(context, suites, at, prefer_server=tls.prefer_server_cipher_suites)
    if curves:
        context.set_ecdh_curve(curves[0])
    if len(curves) > 1:
        logger.warning("%s: Python TLS uses only the first of curve_preferences", path)
    return context


def _set_client_auth(
    ctx: ssl.SSLContext, name: str, mode: ssl.VerifyMode, ca: _Pem | None, at: Where
) -> None:
    where = at(_TLS + "client_auth_type")
    hint = "use RequireAndVerifyClientCert or drop the CA"
    require(ca is None or mode != ssl.CERT_NONE, where, f"{name} with a client CA", hint)
    hint = "set client_ca_file to the CA of the clients' certificates"
    require(ca is not None or mode == ssl.CERT_NONE, where, f"{name} needs a client CA", hint)
    if ca is not None:
        try:
            ctx.load_verify_locations(cadata=ca[1])
        except (ssl.SSLError, ValueError) as exc:
            why = f"{ca[0]} is not a PEM CA certificate ({_one_line(exc)})"
            raise config_error(at(_TLS + "client_ca_file"), why, "give the PEM CA") from None
    ctx.verify_mode = mode


def _set_ciphers(
    context: ssl.SSLContext, suites: list[str], at: Where, *, prefer_server: bool
) -> None:
    if suites := [name for name in suites if name != "-"]:
        try:
            context.set_ciphers(":".join(suites))
        except ssl.SSLError:
            hint = "add a modern one such as TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
            why = "none is available in this OpenSSL"
            raise config_error(at(_TLS + "cipher_suites"), why, hint) from None
    context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    if prefer_server:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
