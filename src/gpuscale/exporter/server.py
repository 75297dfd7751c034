"""HTTP endpoint of the exporter: /metrics, /health, and a landing page.

Scrapes read only what the sampler published, so they are cheap and many can
run at once (one thread each). TLS is negotiated on the connection's own
thread, so a slow or plain-HTTP client cannot hold up the accept loop.
"""

import logging
import os
import socket
import ssl
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from gpuscale.errors import ConfigError, require
from gpuscale.exporter.sampler import Sampler

if TYPE_CHECKING:  # pydantic and bcrypt load only when a web-config file is given
    from gpuscale.exporter.webconfig import WebConfig

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


class _Handler(BaseHTTPRequestHandler):
    server: "ExporterServer"
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; without TCP_NODELAY the body waits
    # for the client's delayed ACK (about 40 ms) on keep-alive connections.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: ANN401
        logger.debug("%s " + format, self.client_address[0], *args)

    def _send(self, status: int, body: bytes, content_type: str, *, gzipped: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if gzipped:
            self.send_header("Content-Encoding", "gzip")
        if self.server.web is not None:
            for name, value in self.server.web.headers.items():
                self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        web = self.server.web
        if web is not None and not web.authenticate(self.headers.get("Authorization")):
            self.send_response(HTTPStatus.UNAUTHORIZED)
            self.send_header("WWW-Authenticate", 'Basic realm="gpuscale"')
            self.send_header("Content-Length", "13")
            self.end_headers()
            self.wfile.write(b"Unauthorized\n")
            return
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


class ExporterServer(ThreadingHTTPServer):
    """Threaded HTTP(S) server bound to one address.

    Args:
        address: (host, port); port 0 picks a free one.
        sampler: Where /metrics and /health read from.
        web: TLS, basic-auth and header settings; None serves plain HTTP to anyone.
        listen_fd: A listening socket handed over by systemd socket activation; the
            address is then ignored, as dcgm-exporter's ``--web-systemd-socket`` does.
    """

    daemon_threads = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        sampler: Sampler,
        web: "WebConfig | None" = None,
        *,
        listen_fd: int | None = None,
    ) -> None:
        self.sampler = sampler
        self.web = web
        if listen_fd is not None:
            super().__init__(address, _Handler, bind_and_activate=False)
            self.socket.close()
            self.socket = socket.socket(fileno=listen_fd)  # family and type read from the fd
            self.address_family = self.socket.family
            self.server_address = self.socket.getsockname()
            return
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self.server_address[1])

    def finish_request(self, request: Any, client_address: Any) -> None:  # noqa: ANN401
        """Negotiate TLS on this connection's thread, then serve it."""
        context: ssl.SSLContext | None = None if self.web is None else self.web.ssl_context
        if context is not None:
            request.settimeout(10.0)
            try:
                request = context.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError) as exc:
                logger.debug("TLS handshake with %s failed: %s", client_address, exc)
                return
        super().finish_request(request, client_address)

    def serve_in_background(self) -> threading.Thread:
        """Serve on a daemon thread.

        Returns:
            The serving thread.
        """
        thread = threading.Thread(target=self.serve_forever, name="gpuscale-http", daemon=True)
        thread.start()
        return thread
