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
  only from a file. Only the first of ``curve_preferences`` is used, and a
  curve this Python's ``ssl`` cannot set (tried once on a throwaway context;
  Debian 12's Python 3.11.2 refuses X25519) is refused.
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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import bcrypt
import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from gpuscale.errors import ConfigError, config_error, require
from gpuscale.exporter.tls import TlsSection, build_ssl_context
from gpuscale.inputs import load_yaml, read_text_file

logger = logging.getLogger(__name__)

_CACHE_MAX = 64  # successful logins remembered; a scrape job uses one user
_BCRYPT_SLOTS = 2  # bcrypt checks at once; a check finding both busy is refused, not queued
_BCRYPT_HASH = re.compile(r"\$2[aby]\$(0[4-9]|[12]\d|3[01])\$[./A-Za-z0-9]{53}")
_HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _HttpSection(_Strict):
    http2: bool = True
    headers: dict[str, str] | None = None


class _Root(_Strict):
    tls_server_config: TlsSection | None = None
    http_server_config: _HttpSection | None = None
    basic_auth_users: dict[str, str] | None = None


_SECTIONS: dict[str, type[BaseModel]] = {"": _Root, "http_server_config": _HttpSection}
_SECTIONS["tls_server_config"] = TlsSection
_TLS = "tls_server_config."
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
    _checking: dict[tuple[str, bytes], _Check] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _bcrypt_slots: threading.BoundedSemaphore = field(
        default_factory=lambda: threading.BoundedSemaphore(_BCRYPT_SLOTS),
        init=False,
        repr=False,
        compare=False,
    )

    def authenticate(self, authorization_header: str | None) -> bool:
        """Check an ``Authorization`` header against ``basic_auth_users``.

        A success is remembered as (user, SHA-256 of the password) and compared
        in constant time, so repeated scrapes skip bcrypt, as exporter-toolkit
        caches them. At most ``_BCRYPT_SLOTS`` bcrypt checks run at once;
        requests with the same credentials as a running check wait for its
        answer, and others that find every slot busy are refused at once rather
        than queued. A flood of wrong passwords thus costs at most that many
        cores and holds a server worker for at most one check: a client that has
        logged in before waits for no bcrypt, and a first login during such a
        flood may be refused (its next scrape retries). An unknown user pays a
        check too, so timing does not reveal which users exist.

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
        if b"\0" in password:  # the bcrypt library ends keys with a NUL: "\0" would pass as ""
            return False
        digest = hashlib.sha256(password).digest()
        if hmac.compare_digest(self._cache.get(user, b""), digest):
            return True
        stored = self.users.get(user)  # an unknown user is checked against a real hash too
        target = stored if stored is not None else next(iter(self.users.values()))
        with self._lock:
            check = self._checking.get((user, digest))
            owner = check is None
            if check is None:
                if not self._bcrypt_slots.acquire(blocking=False):
                    logger.debug("basic auth: %d checks already running; refused", _BCRYPT_SLOTS)
                    return False
                check = self._checking[(user, digest)] = _Check()
        if not owner:  # the same credentials are being checked: share that answer
            check.done.wait()
            return check.ok
        try:
            matched = bcrypt.checkpw(password[:72], target)  # run even for an unknown user
            check.ok = matched and stored is not None
        except ValueError:  # bcrypt reads 72 bytes; a malformed hash was refused at load
            logger.warning("a basic_auth_users entry is not a bcrypt hash")
        finally:
            with self._lock:
                del self._checking[(user, digest)]
                self._bcrypt_slots.release()
                if check.ok:
                    self._cache.pop(user, None)
                    self._cache[user] = digest
                    while len(self._cache) > _CACHE_MAX:
                        del self._cache[next(iter(self._cache))]
            check.done.set()
        return check.ok


@dataclass(slots=True)
class _Check:
    """One bcrypt check in flight, which identical requests wait for instead of repeating."""

    ok: bool = False
    done: threading.Event = field(default_factory=threading.Event)


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


@dataclass(frozen=True, slots=True)
class _Where:
    """Names a place in the file for ``config_error``: ``web.yml:4 tls_server_config.key_file``.

    ``lines`` maps each dotted key to its 1-based line; ``_parse_yaml`` fills it.
    """

    path: Path
    lines: dict[str, int] = field(default_factory=dict)

    def __call__(self, key: str = "", line: int | None = None) -> str:
        line = self.lines.get(key) if line is None else line
        return f"{self.path}{'' if line is None else f':{line}'}{' ' if key else ''}{key}"


def _one_line(text: object) -> str:
    """YAML's text folded onto one line."""
    return " ".join(str(text).split())


def load_web_config(path: Path) -> WebConfig:
    """Read, validate and build a web-config file.

    Relative ``cert_file``, ``key_file`` and ``client_ca_file`` resolve against
    the directory of ``path``, as exporter-toolkit does.

    Args:
        path: The ``--web-config-file`` path.

    Returns:
        The ready configuration.

    Raises:
        ConfigError: One line, ``<path>[:<line>] [<key>]: <what is wrong>; <what to do>``.
    """
    at = _Where(path)
    text = read_text_file(path, "--web-config-file")
    try:
        root = _Root.model_validate(_parse_yaml(text, at))
    except ValidationError as exc:
        raise _translate(exc, at) from None
    users = _check_users(root.basic_auth_users or {}, at)
    headers = _check_headers(root.http_server_config, at)
    context = build_ssl_context(path, root.tls_server_config or TlsSection(), at)
    if users and context is None:
        logger.warning("%s: basic_auth_users without TLS sends passwords in clear text", path)
    logger.info("web config %s: TLS %s, %d basic-auth users", path, context is not None, len(users))
    return WebConfig(ssl_context=context, users=users, headers=headers)


def _parse_yaml(text: str, at: _Where) -> object:
    """Load YAML, filling ``at.lines`` with each dotted key's line; reject duplicate keys."""
    lines = at.lines

    def place(line: int | None = None, column: int | None = None) -> str:
        return at(line=line) + ("" if column is None else f":{column}")

    documents = load_yaml(text, place)
    require(len(documents) <= 1, at(), "holds several YAML documents", "keep one")
    data, node = documents[0] if documents else (None, None)
    pending = [("", node)]
    while pending:
        prefix, mapping = pending.pop()
        if not isinstance(mapping, yaml.MappingNode):
            continue
        for key, value in mapping.value:
            dotted, line = f"{prefix}{key.value}", key.start_mark.line + 1
            require(dotted not in lines, at(line=line), f"duplicate key {dotted}", "keep only one")
            lines[dotted] = line
            pending.append((f"{dotted}.", value))
    return {} if data is None else data


def _translate(exc: ValidationError, at: _Where) -> ConfigError:
    """Turn the first pydantic error into one actionable ConfigError."""
    err = exc.errors()[0]
    dotted = ".".join(str(part) for part in err["loc"])
    if err["type"] == "extra_forbidden" and dotted in _UNSUPPORTED:
        fix = f"remove it and {_UNSUPPORTED[dotted]}"
        return config_error(at(dotted), "is not supported by gpuscale", fix)
    if err["type"] == "extra_forbidden":  # a typo: list what the section accepts
        section = _SECTIONS.get(".".join(str(part) for part in err["loc"][:-1]))
        valid = ", ".join(section.model_fields) if section else ""
        fix = f"remove it or fix its spelling (valid: {valid})"
        return config_error(at(dotted), "unknown key", fix)
    if err["type"] in ("model_type", "dict_type"):
        return config_error(at(dotted), "is not a mapping", "write `key: value` lines under it")
    # Other messages are generic; the input is not echoed as it may be a secret.
    return config_error(at(dotted), _one_line(err["msg"]).lower(), "fix this value")


def _check_users(users: dict[str, str], at: _Where) -> Mapping[str, bytes]:
    hint = "write the output of `htpasswd -nBC 10 '' | tr -d ':\\n'`, not the password"
    for user, hashed in users.items():
        ok = _BCRYPT_HASH.fullmatch(hashed) is not None
        require(ok, at(f"basic_auth_users.{user}"), "is not a bcrypt hash", hint)
    return MappingProxyType({user: hashed.encode("ascii") for user, hashed in users.items()})


def _check_headers(http: _HttpSection | None, at: _Where) -> Mapping[str, str]:
    headers = {k: v for k, v in ((http.headers or {}) if http else {}).items() if v}
    for name, value in headers.items():
        where = at(f"http_server_config.headers.{name}")
        fix = f"use one of {', '.join(_HEADERS)}"
        require(name in _HEADERS, where, "this header cannot be set", fix)
        allowed = _HEADERS[name]
        ok = not allowed or value in allowed
        require(ok, where, f"invalid value {value!r}", f"use one of {', '.join(allowed)}")
    return MappingProxyType(headers)
