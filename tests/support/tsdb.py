"""History for time-series databases in tests: one set of samples, three ways in.

A test that compares metric sources writes its samples once as ``Series`` and
loads them into each store the way its users would: Prometheus through
``promtool tsdb create-blocks-from openmetrics`` (backfill), VictoriaMetrics
through its ``/api/v1/import/prometheus`` endpoint, and the in-process
``MetricStore`` through ``ingest``, one scrape per timestamp.

Also here: ``VictoriaMetrics``, a server like ``support.servers.Prometheus``, and
``BearerProxy``, a reverse proxy that demands a bearer token, as a
kube-rbac-proxy or OAuth proxy does in front of Prometheus (Prometheus itself
offers basic auth and TLS only).
"""

import http.server
import subprocess
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

from tests.support.servers import Process, Prometheus, free_port, wait_http

DAY_S = 86400


def history_start(now: float) -> int:
    """A whole hour about two hours before ``now``, never a UTC midnight.

    Two hours back is inside both servers' retention and clear of VictoriaMetrics'
    30 s latency offset. Not midnight: VictoriaMetrics looks a series up in per-day
    indexes, and an instant query at exactly 00:00:00.000 UTC does not find a series
    whose first sample is at that instant (Debian's victoria-metrics, reproduced with
    a two-sample import; upstream issues 3305 and 3309 are of the same per-day index).

    Returns:
        Unix seconds.
    """
    start = int(now - 7200) // 3600 * 3600
    return start - 3600 if start % DAY_S == 0 else start


@dataclass(frozen=True)
class Series:
    """One gauge series: name, labels and (time seconds, value) samples, oldest first."""

    metric: str
    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        # Every writer reads the points, so a generator passed here would feed only the first.
        object.__setattr__(self, "points", tuple(self.points))


def _escape(value: str) -> str:
    # Label values in both text formats escape backslash, double quote and newline.
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items())) + "}"


def _by_family(series: Iterable[Series]) -> dict[str, list[Series]]:
    families: dict[str, list[Series]] = defaultdict(list)
    for s in series:
        families[s.metric].append(s)
    return families


def openmetrics(series: Iterable[Series]) -> str:
    """OpenMetrics text with timestamps in seconds, as promtool's backfill reads it.

    Each family's samples are contiguous (OpenMetrics forbids interleaving), each
    series' in time order; the text ends with ``# EOF``.
    """
    lines = []
    for metric, members in _by_family(series).items():
        lines.append(f"# TYPE {metric} gauge")
        for s in members:
            head = metric + _labels(s.labels)
            lines.extend(f"{head} {float(v)!r} {float(t)!r}" for t, v in s.points)
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def prometheus_text(series: Iterable[Series]) -> str:
    """Prometheus text exposition with millisecond timestamps, for VictoriaMetrics' import."""
    lines = []
    for metric, members in _by_family(series).items():
        lines.append(f"# TYPE {metric} gauge")
        for s in members:
            head = metric + _labels(s.labels)
            lines.extend(f"{head} {float(v)!r} {round(t * 1000)}" for t, v in s.points)
    return "\n".join(lines) + "\n"


def backfill(promtool: str, text: str, data_dir: Path, workdir: Path) -> Path:
    """Write OpenMetrics ``text`` as TSDB blocks into ``data_dir`` (before Prometheus starts).

    Returns:
        ``data_dir``, for ``Prometheus(..., data_dir=...)``.
    """
    source = workdir / "history.om.txt"
    source.write_text(text)
    data_dir.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"promtool backfill failed: {done.stderr.strip() or done.stdout}")
    return data_dir


def backfilled_prometheus(
    workdir: Path,
    series: Iterable[Series],
    *,
    prometheus: str = "prometheus",
    promtool: str = "promtool",
    **kw,
) -> Prometheus:
    """A Prometheus with no scrape targets serving ``series`` (backfilled before it starts).

    Keep the samples within the retention (15 d) and older than about 2 h so they
    never overlap the head block. ``kw`` goes to ``Prometheus`` (``web_config``, ...).

    Returns:
        The running server; stop it with ``.process.stop()``.
    """
    data = backfill(promtool, openmetrics(series), workdir / "data", workdir)
    return Prometheus(prometheus, workdir, [], data_dir=data, **kw)


def feed_store(store, series: Iterable[Series]) -> None:
    """Ingest the samples into a ``MetricStore``, one scrape per family and timestamp.

    A series missing from a timestamp its family has is absent there; the store
    then marks it stale, as Prometheus does for a series gone from a scrape.
    """
    for metric, members in _by_family(series).items():
        times = sorted({t for s in members for t, _ in s.points})
        index = {t: i for i, t in enumerate(times)}
        values = np.full((len(times), len(members)), np.nan)
        for j, s in enumerate(members):
            for t, v in s.points:
                values[index[t], j] = v
        labels = [dict(s.labels) for s in members]
        for i, t in enumerate(times):
            present = ~np.isnan(values[i])
            store.ingest(
                t,
                metric,
                [lab for lab, p in zip(labels, present, strict=True) if p],
                values[i][present],
            )


class VictoriaMetrics:
    """A single-node VictoriaMetrics on 127.0.0.1 with its data in ``workdir``.

    Args:
        binary: Path of ``victoria-metrics``.
        workdir: Temporary directory for data and the log.
        extra_args: More flags, e.g. ``-search.minStalenessInterval=5m``, or
            ``-httpAuth.username=...``/``-tls ...`` (then give ``scheme`` and ``http_kw``).
        scheme: ``https`` when ``extra_args`` turn TLS on.
        http_kw: httpx arguments (``auth``, ``verify``) for this helper's own requests.
    """

    def __init__(
        self,
        binary: str,
        workdir: Path,
        extra_args: tuple[str, ...] = (),
        *,
        scheme: str = "http",
        http_kw: dict | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self._kw = dict(http_kw or {})
        self.process = Process(
            [
                binary,
                f"-httpListenAddr=127.0.0.1:{self.port}",
                f"-storageDataPath={workdir / 'data'}",
                "-retentionPeriod=1y",
                *extra_args,
            ],
            workdir / "victoria-metrics.log",
        )
        wait_http(f"{self.url}/health", 30, **self._kw)

    def import_prometheus(self, text: str) -> None:
        """Import Prometheus text (millisecond timestamps) and make it searchable now."""
        with httpx.Client(timeout=60, **self._kw) as client:
            r = client.post(f"{self.url}/api/v1/import/prometheus", content=text.encode())
            r.raise_for_status()
            client.get(f"{self.url}/internal/force_flush").raise_for_status()

    def stop(self) -> None:
        self.process.stop()


class BearerProxy:
    """Forwards requests to ``upstream`` only when they carry ``Authorization: Bearer <token>``.

    Answers 401 otherwise, as kube-rbac-proxy does for a missing or wrong token.
    """

    def __init__(self, upstream: str, token: str) -> None:
        expected = f"Bearer {token}"
        client = httpx.Client(base_url=upstream, timeout=10)

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                if self.headers.get("Authorization") != expected:
                    self.send_response(401)
                    self.send_header("Content-Type", "text/plain")
                    self.end_headers()
                    self.wfile.write(b"Unauthorized\n")
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                up = client.post(
                    self.path,
                    content=body,
                    headers={"Content-Type": self.headers.get("Content-Type", "")},
                )
                self.send_response(up.status_code)
                self.send_header("Content-Type", up.headers.get("Content-Type", ""))
                self.send_header("Content-Length", str(len(up.content)))
                self.end_headers()
                self.wfile.write(up.content)

            def log_message(self, *args) -> None:
                pass

        self._client = client
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
        self._client.close()
