"""``MetricsSource`` over the Prometheus HTTP API, for Prometheus and whatever speaks it.

In production the controller reads the same Signals the simulator reads from its
in-process store, from Prometheus or from a server with the same query API
(VictoriaMetrics, Thanos Query, Mimir). Signals are compiled to PromQL by
``promql.compile_signal`` and sent to ``/api/v1/query`` and
``/api/v1/query_range`` as POST forms, as Grafana does, so long queries never
hit URL length limits.

The connection options are those of KEDA's Prometheus scaler, so a user moving
a ScaledObject over finds the same knobs: bearer or basic auth (``authModes``),
a CA and a client certificate (``tls``), ``unsafeSsl`` and ``customHeaders``.

Every failure (refused, timed out, a non-2xx answer, ``status: error``, a body
that is not the API's JSON) becomes one ``MetricsUnavailable`` with a one-line
message naming the URL and the cause, so the controller can hold and say why.
"""

import json
import math
import ssl
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlsplit

import httpx

from gpuscale.errors import config_error
from gpuscale.metrics.promql import compile_signal, newest_by_query, newest_query
from gpuscale.metrics.signal import LabelledValue, MetricsUnavailable, Signal
from gpuscale.redact import redact_url

MAX_BODY_IN_MESSAGE = 200
"""Characters of an unexpected answer quoted in an error message."""


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= MAX_BODY_IN_MESSAGE else flat[:MAX_BODY_IN_MESSAGE] + "..."


def _format_time(t: float) -> str:
    """Unix seconds as the API takes them (Prometheus keeps millisecond resolution)."""
    if not math.isfinite(t):
        raise ValueError(f"query time must be finite, got {t}")
    return f"{t:.3f}"


def _readable(option: str, path: str | Path | None) -> str | None:
    if path is None:
        return None
    if not Path(path).is_file():
        raise config_error(f"{option}={path}", "no such file", "give the path of a PEM file")
    return str(path)


def tls_context(
    ca_file: str | Path | None = None,
    cert_file: str | Path | None = None,
    key_file: str | Path | None = None,
    *,
    insecure_skip_verify: bool = False,
) -> ssl.SSLContext:
    """The client TLS settings: trusted CAs, a client certificate, or no verification.

    Returns:
        A context for httpx's ``verify``.

    Raises:
        ConfigError: A file is missing or unreadable as PEM, or only one of
            ``cert_file`` and ``key_file`` is given.
    """
    ca = _readable("ca_file", ca_file)
    cert = _readable("cert_file", cert_file)
    key = _readable("key_file", key_file)
    if (cert is None) != (key is None):
        raise config_error(
            "cert_file/key_file", "only one of the pair is set", "give both or neither"
        )
    try:
        ctx = ssl.create_default_context(cafile=ca)
        if cert is not None:
            ctx.load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as exc:
        raise config_error(
            f"ca_file={ca_file} cert_file={cert_file} key_file={key_file}",
            f"cannot be loaded ({_one_line(str(exc))})",
            "give PEM files: a CA certificate, a client certificate and its private key",
        ) from exc
    if insecure_skip_verify:  # KEDA's unsafeSsl: the user asked for it by name
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def check_url(url: str, option: str = "url") -> None:
    """Refuse a base URL no request could be sent to, naming the option it came from.

    Args:
        url: The base URL, e.g. ``http://prometheus:9090``.
        option: How the user gave it (``--prometheus``, ``serverAddress``), for the message.

    Raises:
        ConfigError: Not http(s), no host, or a port that is not a number from 1 to 65535.
    """
    try:
        parts = urlsplit(url)
        port = parts.port  # parsed here: out of range or not a number raises
    except ValueError as exc:  # e.g. "Port out of range 0-65535", "Invalid IPv6 URL"
        problem = f"not a valid URL ({exc})"
    else:
        problem = ""
        if parts.scheme not in ("http", "https") or not parts.hostname:
            problem = "not an http(s) URL with a host"
        elif port == 0:
            problem = "port 0 is no server's port"
    if problem:
        raise config_error(
            f"{option} {redact_url(url)}", problem, "give e.g. http://prometheus:9090"
        )


class PrometheusSource:
    """Reads Signals from a Prometheus-compatible query API (a ``MetricsSource``).

    One source may serve several threads at once: its state is fixed after
    construction and ``httpx.Client`` is thread-safe.

    Args:
        url: Base URL of the API, e.g. ``http://prometheus:9090`` or a path-prefixed
            ``http://vmselect:8481/select/0/prometheus``; ``/api/v1/...`` is appended.
        timeout_s: Limit for each request (connect, send, wait, read), seconds.
        bearer_token: Sent as ``Authorization: Bearer <token>``.
        basic_auth: (user, password) for HTTP basic auth.
        ca_file: PEM bundle of CAs trusted for the server's certificate (else the system's).
        cert_file: PEM client certificate, for servers that require one (with ``key_file``).
        key_file: PEM private key of ``cert_file``.
        insecure_skip_verify: Do not verify the server's certificate (KEDA's ``unsafeSsl``).
        headers: Extra request headers, e.g. ``X-Scope-OrgID`` for a Mimir tenant.
        client: An httpx client to use instead of one built from the TLS options
            (then it is not closed by ``close``, and TLS options may not be given).
        params: Extra URL parameters sent with every query (KEDA's ``queryParameters``
            and ``namespace``, e.g. a Thanos Querier's tenant namespace).

    Raises:
        ConfigError: Conflicting or unusable options (both bearer and basic auth, a
            missing PEM file, a URL that is not http(s)).
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 5.0,
        bearer_token: str | None = None,
        basic_auth: tuple[str, str] | None = None,
        ca_file: str | Path | None = None,
        cert_file: str | Path | None = None,
        key_file: str | Path | None = None,
        insecure_skip_verify: bool = False,
        headers: Mapping[str, str] | None = None,
        client: httpx.Client | None = None,
        params: Mapping[str, str] | None = None,
    ) -> None:
        check_url(url)
        if not (timeout_s > 0 and math.isfinite(timeout_s)):
            raise config_error(f"timeout_s={timeout_s}", "must be > 0", "give seconds, e.g. 5")
        if bearer_token is not None and basic_auth is not None:
            raise config_error(
                "bearer_token/basic_auth", "both are set", "choose one authentication mode"
            )
        self.url = url.rstrip("/")
        self._shown = redact_url(self.url)
        self.timeout_s = float(timeout_s)
        self._headers = {"Accept": "application/json", **dict(headers or {})}
        self._params = dict(params or {})
        if bearer_token is not None:
            self._headers["Authorization"] = f"Bearer {bearer_token}"
        self._auth = httpx.BasicAuth(*basic_auth) if basic_auth is not None else None
        tls_given = any(f is not None for f in (ca_file, cert_file, key_file))
        if client is not None:
            if tls_given or insecure_skip_verify:
                raise config_error(
                    "client", "given together with TLS options", "set TLS on the client you pass"
                )
            self._client, self._owns_client = client, False
        else:
            verify = tls_context(
                ca_file, cert_file, key_file, insecure_skip_verify=insecure_skip_verify
            )
            self._client = httpx.Client(verify=verify, timeout=self.timeout_s)
            self._owns_client = True

    # --------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Close the HTTP client if this source made it."""
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------- MetricsSource
    def instant(self, signal: Signal, at: float) -> list[LabelledValue]:
        """Evaluate a signal at one time (``/api/v1/query``).

        Returns:
            One result per series or group, each with one point; sorted by labels.

        Raises:
            ValueError: The signal cannot be written in PromQL (see ``compile_signal``).
            MetricsUnavailable: The server could not answer.
        """
        return self._query("query", {"query": compile_signal(signal), "time": _format_time(at)})

    def range(self, signal: Signal, start: float, end: float, step: float) -> list[LabelledValue]:
        """Evaluate a signal at ``start, start + step, ...`` up to ``end`` (``query_range``).

        Returns:
            One result per series or group, with a point at every time it had a value.

        Raises:
            ValueError: ``step`` <= 0, ``end`` < ``start``, or a signal PromQL cannot say.
            MetricsUnavailable: The server could not answer.
        """
        if not step > 0 or end < start:
            raise ValueError(f"bad range: start={start} end={end} step={step}")
        form = {
            "query": compile_signal(signal),
            "start": _format_time(start),
            "end": _format_time(end),
            "step": repr(float(step)),
            # VictoriaMetrics rounds start and end to the step to cache results unless
            # told not to; the others ignore the parameter.
            "nocache": "1",
        }
        return self._query("query_range", form)

    def newest(self, signal: Signal, at: float) -> float | None:
        """Time of the newest raw sample among the signal's series (``max(timestamp(...))``).

        Returns:
            Seconds, or None when no series has a sample within the server's lookback.

        Raises:
            MetricsUnavailable: The server could not answer.
        """
        query = newest_query(signal)
        if not query:  # a raw query that names no series: nothing can be stale
            return None
        found = self._query("query", {"query": query, "time": _format_time(at)})
        if not found or not found[0].points:
            return None
        t = found[0].points[-1][1]
        return t if math.isfinite(t) else None

    def newest_by(self, signal: Signal, at: float, label: str) -> dict[str, float]:
        """Time of the newest raw sample per value of ``label`` (``max by (label)`` of it).

        Returns:
            {value of ``label``: seconds}; series without the label are left out.

        Raises:
            MetricsUnavailable: The server could not answer.
        """
        query = newest_by_query(signal, label)
        if not query:
            return {}
        found = self._query("query", {"query": query, "time": _format_time(at)})
        out: dict[str, float] = {}
        for res in found:
            key = res.labels.get(label)
            if key and res.points and math.isfinite(res.points[-1][1]):
                out[key] = res.points[-1][1]
        return out

    def check(self, at: float) -> None:
        """Ask the server one trivial query (``1``): is it there, and does it let us in?

        Args:
            at: Evaluation time, seconds.

        Raises:
            MetricsUnavailable: It did not answer as a Prometheus API does (refused,
                DNS, TLS, 401/403, timeout, not the API's JSON).
        """
        self._query("query", {"query": "1", "time": _format_time(at)})

    # ------------------------------------------------------------------- HTTP
    def _query(self, endpoint: str, form: Mapping[str, str]) -> list[LabelledValue]:
        where = f"{self._shown}/api/v1/{endpoint}"
        try:
            resp = self._client.post(
                f"{self.url}/api/v1/{endpoint}",
                params=self._params,
                data=dict(form),
                headers=self._headers,
                auth=self._auth if self._auth is not None else httpx.USE_CLIENT_DEFAULT,
                timeout=self.timeout_s,
            )
        except httpx.TimeoutException as exc:
            raise MetricsUnavailable(
                f"{where}: no answer within {self.timeout_s:g} s ({type(exc).__name__})", "timeout"
            ) from None
        except httpx.TransportError as exc:
            cause = _one_line(str(exc)) or type(exc).__name__
            raise MetricsUnavailable(f"{where}: cannot connect ({cause})", "connect") from None
        try:
            body = resp.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        if isinstance(body, dict) and body.get("status") == "error":
            kind = body.get("errorType", "error")
            error = _one_line(str(body.get("error", "")))
            raise MetricsUnavailable(
                f"{where}: HTTP {resp.status_code}, {kind}: {error}", "query"
            ) from None
        if not resp.is_success:
            raise MetricsUnavailable(
                f"{where}: HTTP {resp.status_code} {resp.reason_phrase}: {_one_line(resp.text)}",
                "http",
            )
        if not isinstance(body, dict) or body.get("status") != "success" or "data" not in body:
            raise MetricsUnavailable(
                f"{where}: not a Prometheus API answer: {_one_line(resp.text)}", "response"
            )
        return _results(body["data"], where)


def _labels(metric: Mapping[str, str]) -> dict[str, str]:
    return {name: value for name, value in metric.items() if name != "__name__"}


def _results(data: Any, where: str) -> list[LabelledValue]:  # noqa: ANN401 (JSON)
    """Labelled values from an API ``data`` object (vector or matrix), sorted by labels.

    ``__name__`` is dropped so results look the same whether or not PromQL kept it.
    Sample values are parsed with ``float``, so ``NaN``/``+Inf``/``-Inf`` stay so.
    """
    try:
        kind, result = data["resultType"], data["result"]
        out = []
        if kind == "vector":
            for item in result:
                t, v = item["value"]
                labels = _labels(item["metric"])
                out.append(LabelledValue(labels, ((float(t), float(v)),)))
        elif kind == "matrix":
            for item in result:
                labels = _labels(item["metric"])
                points = tuple((float(t), float(v)) for t, v in item["values"])
                out.append(LabelledValue(labels, points))
        elif kind == "scalar":
            t, v = result
            out.append(LabelledValue({}, ((float(t), float(v)),)))
        else:
            raise MetricsUnavailable(f"{where}: unexpected resultType {kind!r}", "response")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise MetricsUnavailable(
            f"{where}: malformed query result ({type(exc).__name__}: {_one_line(str(exc))})",
            "response",
        ) from None
    out.sort(key=lambda lv: sorted(lv.labels.items()))
    return out
