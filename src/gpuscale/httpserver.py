"""One HTTP server for every endpoint gpuscale serves, safe against hostile clients.

The exporter, the controller's telemetry and ``gpuscale up``'s rules API each
answer a few small GET requests, but they listen where anyone on the network
can connect. A thread per connection lets idle or half-sent connections pin
threads and file descriptors until real scrapes time out, so connections are
held here by one asyncio loop instead: TLS handshakes, request heads and bodies
are read there under deadlines (``ServerLimits``, after Go's
``ReadHeaderTimeout`` and ``IdleTimeout``), and only a complete request is
handed to a bounded pool of worker threads, which run the usual
``http.server`` handler on it. Connections past the cap and requests past the
queue get a 503. A client that resets or times out ends its connection with
one line through ``logging``, never a traceback.

TLS, basic auth and response headers come from a ``WebGate`` (the exporter's
web-config file), checked here for every server alike.
"""

import asyncio
import concurrent.futures
import contextlib
import io
import logging
import re
import resource
import socket
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar, Protocol

logger = logging.getLogger(__name__)

_CONTENT_LENGTH = re.compile(rb"^content-length[ \t]*:[ \t]*(\S*)[ \t]*\r?$", re.I | re.M)
_CHUNKED = re.compile(rb"^transfer-encoding[ \t]*:", re.I | re.M)


class WebGate(Protocol):
    """What a server needs from a web-config file: TLS, who may ask, extra headers."""

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        """Server TLS context; None serves plain HTTP."""
        ...

    @property
    def headers(self) -> Mapping[str, str]:
        """Headers added to every response."""
        ...

    def authenticate(self, authorization_header: str | None) -> bool:
        """Whether the request's ``Authorization`` header lets it in."""
        ...


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """Deadlines and caps of one server.

    Attributes:
        header_timeout_s: Seconds to complete the TLS handshake and the request
            head after connecting (Go's ``ReadHeaderTimeout``; exporter-toolkit
            servers use 10 s).
        idle_timeout_s: Seconds a kept-alive connection may wait for its next request.
        body_timeout_s: Seconds to read a request body once its head arrived.
        write_timeout_s: Seconds for the client to take a response.
        max_connections: Open connections; one more is answered 503 and closed.
        workers: Threads running handlers.
        max_queued: Requests waiting for a worker; one more is answered 503.
        max_head_bytes: Size of a request line plus headers (Go's default is 1 MiB;
            our clients send a few hundred bytes).
        max_body_bytes: Size of a request body (our endpoints take none).
    """

    header_timeout_s: float = 10.0
    idle_timeout_s: float = 60.0
    body_timeout_s: float = 10.0
    write_timeout_s: float = 30.0
    max_connections: int = 4096
    workers: int = 8
    max_queued: int = 256
    max_head_bytes: int = 64 * 1024
    max_body_bytes: int = 64 * 1024


def raise_open_file_limit() -> None:
    """Raise this process's soft limit on open files to its hard limit, as Go's runtime does.

    Connections are file descriptors; the usual soft limit of 1024 would let a
    thousand idle clients exhaust it long before memory or CPU run short.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _status_response(status: HTTPStatus) -> bytes:
    body = f"{status.phrase}\n".encode()
    head = (
        f"HTTP/1.1 {status.value} {status.phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


@dataclass(slots=True)
class _Exchange:
    """One buffered request and the response its handler writes."""

    data: bytes
    out: io.BytesIO


class RequestHandler(BaseHTTPRequestHandler):
    """Base of every handler: one buffered request, the gate's auth and headers.

    Subclasses implement ``do_GET`` (and others) as with ``http.server`` and
    write to ``self.wfile``; it is sent when the handler returns.
    """

    server: "HardenedHTTPServer"  # type: ignore[assignment]  # not a socketserver.BaseServer
    protocol_version = "HTTP/1.1"
    realm: ClassVar[str] = "gpuscale"

    def setup(self) -> None:
        """Read from the buffered request and write into a buffer, not the socket."""
        exchange: _Exchange = self.request
        self.rfile = io.BytesIO(exchange.data)
        self.wfile = exchange.out

    def handle(self) -> None:
        """Serve the one request the connection's reader handed over."""
        self.handle_one_request()

    def finish(self) -> None:
        """Nothing to flush: the server sends ``wfile``."""

    def parse_request(self) -> bool:
        """Parse the head, then ask the gate; a refused request gets 401.

        Returns:
            Whether the request may proceed to its ``do_*`` method.
        """
        if not super().parse_request():
            return False
        gate = self.server.gate
        if gate is None or gate.authenticate(self.headers.get("Authorization")):
            return True
        body = b"Unauthorized\n"
        self.send_response(HTTPStatus.UNAUTHORIZED)
        self.send_header("WWW-Authenticate", f'Basic realm="{self.realm}"')
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        return False

    def end_headers(self) -> None:
        """Add the gate's headers to every response."""
        gate = self.server.gate
        if gate is not None:
            for name, value in gate.headers.items():
                self.send_header(name, value)
        super().end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: ANN401
        """Log each request at DEBUG through ``logging``, not on stderr."""
        logger.debug("%s %s " + format, self.server.name, self.client_address[0], *args)


class HardenedHTTPServer:
    """An HTTP(S) server whose connections cost no thread until a request is complete.

    Args:
        address: (host, port) to bind; port 0 picks a free one. Ignored with ``listen_socket``.
        handler: The ``RequestHandler`` subclass that answers requests.
        gate: TLS, basic auth and headers; None serves plain HTTP to anyone.
        limits: Deadlines and caps.
        listen_socket: A listening socket to serve (systemd socket activation).
        name: Names the server in logs and its thread.

    Raises:
        OSError: The address cannot be bound.
    """

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[RequestHandler],
        *,
        gate: WebGate | None = None,
        limits: ServerLimits | None = None,
        listen_socket: socket.socket | None = None,
        name: str = "http",
    ) -> None:
        self.handler, self.gate, self.name = handler, gate, name
        self.limits = limits or ServerLimits()
        if listen_socket is None:
            family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
            # "[::]" takes IPv4 too, as it did with http.server and as Go's listeners do.
            dualstack = address[0] == "::" and socket.has_dualstack_ipv6()
            listen_socket = socket.create_server(
                address, family=family, backlog=1024, dualstack_ipv6=dualstack
            )
        self.socket = listen_socket
        self.server_address: tuple[Any, ...] = listen_socket.getsockname()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            self.limits.workers, thread_name_prefix=f"{name}-worker"
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._connections = 0
        self._queued = 0

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self.server_address[1])

    def serve_in_background(self) -> threading.Thread:
        """Serve on a daemon thread until ``shutdown``.

        Returns:
            The serving thread.
        """
        raise_open_file_limit()
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, args=(ready,), name=f"gpuscale-{self.name}", daemon=True
        )
        self._thread.start()
        ready.wait(10)
        return self._thread

    def shutdown(self) -> None:
        """Stop serving, close the listening socket and wait for the loop to end."""
        loop = self._loop
        if loop is not None and not self._stopped.is_set():
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.server_close()

    def server_close(self) -> None:
        """Close the listening socket."""
        self.socket.close()

    def _serve(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        loop.set_exception_handler(self._loop_error)
        context = None if self.gate is None else self.gate.ssl_context
        try:
            server = loop.run_until_complete(
                asyncio.start_server(
                    self._connection,
                    sock=self.socket,
                    ssl=context,
                    ssl_handshake_timeout=self.limits.header_timeout_s if context else None,
                    limit=self.limits.max_head_bytes,
                )
            )
            ready.set()
            loop.run_forever()
            server.close()
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            if tasks:  # let each connection close its socket
                loop.run_until_complete(asyncio.wait(tasks, timeout=2.0))
        finally:
            self._stopped.set()
            ready.set()
            loop.close()

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """Log asyncio's reports (a failed accept, a broken transport) as one line, no traceback."""
        exc = context.get("exception")
        if isinstance(exc, asyncio.CancelledError):  # connections cut by shutdown()
            return
        detail = f": {type(exc).__name__}: {exc}" if exc is not None else ""
        logger.warning("%s server: %s%s", self.name, context.get("message", "error"), detail)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("?", 0)
        writer.transport.set_write_buffer_limits(high=0)  # drain() waits until all is sent
        self._connections += 1
        try:
            if self._connections > self.limits.max_connections:
                logger.debug("%s: over %d connections", self.name, self.limits.max_connections)
                await self._reply(writer, _status_response(HTTPStatus.SERVICE_UNAVAILABLE))
                return
            await self._requests(reader, writer, peer)
        except (TimeoutError, asyncio.IncompleteReadError) as exc:
            why = type(exc).__name__
            logger.debug("%s: connection from %s ended (%s)", self.name, peer[0], why)
        except OSError as exc:  # ConnectionResetError, BrokenPipeError, ssl.SSLError
            reason = exc.strerror or str(exc)
            logger.info("%s: connection from %s lost: %s", self.name, peer[0], reason)
        finally:
            await self._close(writer)
            self._connections -= 1

    async def _close(self, writer: asyncio.StreamWriter) -> None:
        writer.close()
        try:
            await asyncio.wait_for(writer.wait_closed(), self.limits.write_timeout_s)
        except (OSError, TimeoutError):
            writer.transport.abort()

    async def _requests(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: tuple[Any, ...]
    ) -> None:
        limits = self.limits
        head_s = limits.header_timeout_s  # a kept-alive connection may idle longer first
        while True:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), head_s)
            except asyncio.LimitOverrunError:
                too_large = HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE
                await self._reply(writer, _status_response(too_large))
                return
            except asyncio.IncompleteReadError as exc:
                if exc.partial:
                    logger.debug("%s: %s closed mid-request", self.name, peer[0])
                return
            body = await self._body(reader, writer, head)
            if body is None:
                return
            if self._queued >= limits.workers + limits.max_queued:
                await self._reply(writer, _status_response(HTTPStatus.SERVICE_UNAVAILABLE))
                return
            self._queued += 1
            try:
                loop = asyncio.get_running_loop()
                response, close = await loop.run_in_executor(
                    self._pool, self._handle, head + body, peer
                )
            finally:
                self._queued -= 1
            writer.write(response)
            await asyncio.wait_for(writer.drain(), limits.write_timeout_s)
            if close:
                return
            head_s = limits.idle_timeout_s

    async def _body(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes
    ) -> bytes | None:
        """The request body by Content-Length; None after refusing it (the connection ends)."""
        if _CHUNKED.search(head):
            await self._reply(writer, _status_response(HTTPStatus.LENGTH_REQUIRED))
            return None
        match = _CONTENT_LENGTH.search(head)
        if match is None:
            return b""
        text = match.group(1)
        if not text.isdigit():
            await self._reply(writer, _status_response(HTTPStatus.BAD_REQUEST))
            return None
        length = int(text)
        if length > self.limits.max_body_bytes:
            await self._reply(writer, _status_response(HTTPStatus.REQUEST_ENTITY_TOO_LARGE))
            return None
        return await asyncio.wait_for(reader.readexactly(length), self.limits.body_timeout_s)

    async def _reply(self, writer: asyncio.StreamWriter, response: bytes) -> None:
        writer.write(response)
        with contextlib.suppress(ConnectionError, TimeoutError, OSError):
            await asyncio.wait_for(writer.drain(), self.limits.write_timeout_s)

    def _handle(self, data: bytes, peer: tuple[Any, ...]) -> tuple[bytes, bool]:
        """Run the handler on one buffered request (on a worker thread).

        Returns:
            The response bytes, and whether the connection closes after them.
        """
        exchange = _Exchange(data, io.BytesIO())
        try:
            handler = self.handler(exchange, peer, self)  # type: ignore[arg-type]
        except Exception:  # a handler's bug must not end the server; say what, once
            logger.exception("%s: handler failed on a request from %s", self.name, peer[0])
            return _status_response(HTTPStatus.INTERNAL_SERVER_ERROR), True
        return exchange.out.getvalue(), bool(handler.close_connection)
