"""A threaded HTTP server that runs in the background, shared by the ops and webhook endpoints.

The standard library server is enough for a few endpoints answering small bodies, and it keeps
the request path visible: no framework between the socket and the signature check.
"""

from __future__ import annotations

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
    if not sep or not port_text.isdigit():
        raise ListenAddressError(
            f"listen address {address!r} must be HOST:PORT (e.g. 127.0.0.1:8080, :8080, [::1]:8080)"
        )
    port = int(port_text)
    if port > 65535:
        raise ListenAddressError(f"listen address {address!r}: port {port} is out of range")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return (host or "0.0.0.0", port)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], app: Any):
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.app = app
        super().__init__(address, handler)


class BackgroundHTTPServer:
    """Serve ``handler`` on ``host:port`` (port 0 picks a free one) from a daemon thread.

    The handler reaches its application object as ``self.server.app``.
    """

    def __init__(
        self,
        host: str,
        port: int,
        handler: type[BaseHTTPRequestHandler],
        app: Any,
        *,
        name: str = "http",
    ) -> None:
        self._name = name
        self._server = _Server((host, port), handler, app)
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
    """Request handler that logs through ``logging`` (at debug) instead of stderr."""

    def version_string(self) -> str:
        return "gpu-reconciler"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def send_text(
        self, status: int, text: str, *, content_type: str = "text/plain; charset=utf-8"
    ) -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
