"""HTTP endpoint of the exporter: /metrics, /health, and a landing page.

Scrapes read only what the sampler published, so they are cheap. Connections,
TLS, basic auth and their limits are ``gpuscale.httpserver``'s, shared with
every server gpuscale runs.
"""

import logging
import os
import socket
from http import HTTPStatus

from gpuscale.errors import ConfigError, require
from gpuscale.exporter.sampler import Sampler
from gpuscale.httpserver import HardenedHTTPServer, RequestHandler, ServerLimits, WebGate

logger = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LANDING = (
    b"<html><head><title>gpuscale exporter</title></head><body><h1>gpuscale exporter</h1>"
    b'<p><a href="/metrics">Metrics</a> &middot; <a href="/health">Health</a></p></body></html>\n'
)


SD_LISTEN_FDS_START = 3  # sd_listen_fds(3): the first socket systemd passes


def systemd_listen_fd() -> int:
    """The listening socket systemd passed to this process (``LISTEN_PID``/``LISTEN_FDS``).

    Raises:
        ConfigError: No socket was passed to this process.
    """
    pid, count = os.environ.get("LISTEN_PID", ""), os.environ.get("LISTEN_FDS", "")
    if pid != str(os.getpid()) or not count.isdigit() or int(count) < 1:
        raise ConfigError(
            f"--web-systemd-socket: systemd passed no socket (LISTEN_PID={pid or 'unset'},"
            f" LISTEN_FDS={count or 'unset'}): start it from a .socket unit or drop the flag"
        )
    if int(count) > 1:
        logger.warning("systemd passed %s sockets; serving on the first", count)
    return SD_LISTEN_FDS_START


def parse_address(address: str) -> tuple[str, int]:
    """Split ``host:port`` (``:9400`` means every interface), as dcgm-exporter's --address.

    Raises:
        ConfigError: The address is not ``[host]:port`` with a port from 0 to 65535.
    """
    host, sep, port_text = address.rpartition(":")
    ok = bool(sep) and port_text.isdigit() and int(port_text) <= 65535
    fix = "give [HOST]:PORT with a port from 0 to 65535, such as ':9400' or '127.0.0.1:9400'"
    require(ok, f"--address {address!r}", "not an address to listen on", fix)
    host = host.strip("[]") or "0.0.0.0"  # noqa: S104 - dcgm-exporter's ':9400' binds all
    return host, int(port_text)


class _Handler(RequestHandler):
    server: "ExporterServer"

    def _send(self, status: int, body: bytes, content_type: str, *, gzipped: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if gzipped:
            self.send_header("Content-Encoding", "gzip")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self) -> None:  # noqa: N802 - http.server dispatches on this name
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802 - http.server dispatches on this name
        path = self.path.split("?", 1)[0]
        sampler = self.server.sampler
        if path == "/metrics":
            gz = "gzip" in (self.headers.get("Accept-Encoding") or "")
            self._send(HTTPStatus.OK, sampler.exposition(gzipped=gz), CONTENT_TYPE, gzipped=gz)
        elif path == "/health":
            ok, reason = sampler.health()
            status = HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE
            self._send(status, (reason + "\n").encode(), "text/plain; charset=utf-8")
        elif path == "/":
            self._send(HTTPStatus.OK, _LANDING, "text/html; charset=utf-8")
        else:
            self._send(HTTPStatus.NOT_FOUND, b"Not found\n", "text/plain; charset=utf-8")


class ExporterServer(HardenedHTTPServer):
    """The exporter's HTTP(S) server, bound to one address.

    Args:
        address: (host, port); port 0 picks a free one.
        sampler: Where /metrics and /health read from.
        web: TLS, basic-auth and header settings; None serves plain HTTP to anyone.
        listen_fd: A listening socket handed over by systemd socket activation; the
            address is then ignored, as dcgm-exporter's ``--web-systemd-socket`` does.
        limits: Deadlines and caps of connections.
    """

    def __init__(
        self,
        address: tuple[str, int],
        sampler: Sampler,
        web: WebGate | None = None,
        *,
        listen_fd: int | None = None,
        limits: ServerLimits | None = None,
    ) -> None:
        self.sampler = sampler
        self.web = web
        listen = None if listen_fd is None else socket.socket(fileno=listen_fd)
        super().__init__(
            address, _Handler, gate=web, limits=limits, listen_socket=listen, name="exporter"
        )
