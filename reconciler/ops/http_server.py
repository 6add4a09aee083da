"""A threaded HTTP server that runs in the background, shared by the ops and webhook endpoints.

The standard library server is enough for a few endpoints answering small bodies, and it keeps
the request path visible: no framework between the socket and the signature check.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)


class ListenAddressError(ValueError):
    """A listen address that cannot be parsed."""


def parse_listen_address(address: str) -> tuple[str, int]:
    """``"127.0.0.1:8080"``, ``":8080"`` (all interfaces), ``"[::1]:8080"`` -> (host, port)."""
    text = address.strip()
    host, sep, port_text = text.rpartition(":")
    # ASCII digits only, few of them: int() refuses thousands of digits with a ValueError
    if not sep or not (port_text.isascii() and port_text.isdigit()) or len(port_text) > 5:
        raise ListenAddressError(
            f"listen address {address!r} must be HOST:PORT (e.g. 127.0.0.1:8080, :8080, [::1]:8080)"
        )
    port = int(port_text)
    if port > 65535:
        raise ListenAddressError(f"listen address {address!r}: port {port} is out of range")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return (host or "0.0.0.0", port)


_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n"
    b"Retry-After: 1\r\n\r\n"
)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        app: Any,
        max_connections: int,
    ):
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.app = app
        # One thread per connection; slow or idle clients must not be able to take them all.
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.sendall(_BUSY)
            self.shutdown_request(request)
            log.warning("refused a connection from %s: all slots busy", client_address[0])
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class BackgroundHTTPServer:
    """Serve ``handler`` on ``host:port`` (port 0 picks a free one) from a daemon thread.

    The handler reaches its application object as ``self.server.app``. At most
    ``max_connections`` connections are served at once; more get 503 at once.
    """

    def __init__(
        self,
        host: str,
        port: int,
        handler: type[BaseHTTPRequestHandler],
        app: Any,
        *,
        name: str = "http",
        max_connections: int = 128,
    ) -> None:
        self._name = name
        self._server = _Server((host, port), handler, app, max_connections)
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return (str(host), int(port))

    @property
    def url(self) -> str:
        host, port = self.address
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{port}"

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"{self._name}-server",
            daemon=True,
        )
        self._thread.start()
        log.info("%s server listening on %s", self._name, self.url)

    def stop(self) -> None:
        """Stop accepting, close the socket; requests in progress finish on their threads."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> BackgroundHTTPServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class QuietHandler(BaseHTTPRequestHandler):
    """Request handler that logs through ``logging`` (at debug) instead of stderr.

    Responses go out in one write with Nagle off: headers and body in two small segments
    would otherwise wait for the client's delayed ACK (about 40 ms per request on Linux).
    """

    def setup(self) -> None:
        super().setup()
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send_body(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        # end_headers() would write the headers on their own; queue the body behind them
        self._headers_buffer.append(b"\r\n")  # type: ignore[attr-defined]
        if self.command != "HEAD":
            self._headers_buffer.append(body)  # type: ignore[attr-defined]
        self.flush_headers()

    def version_string(self) -> str:
        return "gpu-reconciler"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def send_text(
        self, status: int, text: str, *, content_type: str = "text/plain; charset=utf-8"
    ) -> None:
        self.send_body(status, text.encode(), {"Content-Type": content_type})
