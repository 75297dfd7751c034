"""A ``/metrics`` endpoint on 127.0.0.1 serving whatever a stand-in renders at each scrape."""

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self

TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"
"""The Prometheus text format's content type: answered whatever ``Accept`` asks for."""


class ScrapeTarget:
    """Serves ``render()`` at ``/metrics`` in the text format, from a daemon thread.

    Args:
        render: Builds the body at each scrape.
    """

    def __init__(self, render: Callable[[], bytes]) -> None:
        target = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = target.render() if self.path == "/metrics" else b""
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Type", TEXT_FORMAT)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                """Scrapes are not logged."""

        self.render = render
        self._server: ThreadingHTTPServer | None = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port: int = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class StandIn:
    """A stand-in server's lifecycle: ``start`` serves ``body()`` until ``stop``."""

    port: int = 0
    _target: ScrapeTarget | None = None

    def body(self) -> bytes:
        """The ``/metrics`` body at this moment."""
        raise NotImplementedError

    def start(self) -> Self:
        """Serve ``/metrics`` on a free port of 127.0.0.1.

        Returns:
            Itself, ``port`` set.
        """
        self._target = ScrapeTarget(self.body)
        self.port = self._target.port
        return self

    def stop(self) -> None:
        """Stop serving."""
        if self._target is not None:
            self._target.stop()
            self._target = None
