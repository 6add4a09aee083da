"""The webhook's HTTPS listener: ``POST /validate-clusteroperator`` (docs/admission.md).

Its own listener, not the ops or push-webhook server: the API server must reach it over TLS with
a certificate its configuration trusts, and nothing else is served here.

- TLS: ``tls.crt``/``tls.key`` of a directory (a mounted cert-manager Secret, or what the dev
  cluster issues). Each new connection checks the files' inode, size and mtime and builds a new
  ``SSLContext`` when they changed, so a rotated certificate is served without a restart; a pair
  that does not load (half written, key and certificate not matching) keeps the previous one.
  The handshake runs on the connection's own thread, so a slow client never holds the accept loop.
- Bounds: at most ``max_connections`` at once (more are closed at once); a body over
  :data:`~reconciler.admission.review.MAX_REVIEW_BYTES` gets 413 before a byte of it is read;
  the body must arrive within ``read_timeout`` in total (408); a body that is not an
  AdmissionReview gets 400 and one that cannot be checked a denial. Unexpected errors are 500
  (the API server's ``failurePolicy: Fail`` refuses the change), never a dead listener.
"""

from __future__ import annotations

import io
import json
import logging
import os
import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from reconciler.admission.certificates import CERT_FILE, KEY_FILE
from reconciler.admission.review import MAX_REVIEW_BYTES, NotAReview, review
from reconciler.clock import monotonic

log = logging.getLogger("reconciler.admission")

PATH = "/validate-clusteroperator"
Review = Callable[[Any], dict[str, Any]]


class CertificateError(RuntimeError):
    """The certificate directory holds no usable ``tls.crt``/``tls.key`` pair."""


_Stamp = tuple[tuple[int, int, int, int], ...]


class CertificateSource:
    """The ``SSLContext`` for new connections, rebuilt when the files change."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._context: ssl.SSLContext | None = None
        self._stamp: _Stamp | None = None
        self._failed: _Stamp | None = None
        self.loads = 0

    def _current_stamp(self) -> _Stamp | None:
        stamps = []
        for name in (CERT_FILE, KEY_FILE):
            try:
                st = os.stat(self.directory / name)  # follows the ..data link of a Secret mount
            except OSError:
                return None
            stamps.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(stamps)

    def _load(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.directory / CERT_FILE, self.directory / KEY_FILE)
        return context

    def context(self) -> ssl.SSLContext:
        """The current context; raises CertificateError only if none ever loaded."""
        with self._lock:
            stamp = self._current_stamp()
            if stamp is not None and stamp != self._stamp and stamp != self._failed:
                try:
                    context = self._load()
                except (OSError, ssl.SSLError) as exc:
                    self._failed = stamp
                    if self._context is None:
                        raise CertificateError(
                            f"{self.directory}: cannot load {CERT_FILE}/{KEY_FILE}: {exc}"
                        ) from exc
                    log.warning("admission certificate in %s does not load (%s); still "
                                "serving the previous one", self.directory, exc)
                else:
                    if self._context is not None:
                        log.info("admission certificate in %s reloaded", self.directory)
                    self._context, self._stamp, self._failed = context, stamp, None
                    self.loads += 1
            if self._context is None:
                raise CertificateError(
                    f"{self.directory}: no {CERT_FILE} and {KEY_FILE} (mount the serving "
                    "certificate's Secret there)")
            return self._context


@dataclass(frozen=True, slots=True)
class Limits:
    max_connections: int = 128
    #: the whole body must arrive within this many seconds (the API server gives up at 5-30)
    read_timeout: float = 10.0
    #: an idle kept-alive connection is closed after this many seconds
    idle_timeout: float = 30.0
    handshake_timeout: float = 5.0
    max_body: int = MAX_REVIEW_BYTES


class AdmissionServer:
    """``POST /validate-clusteroperator`` over HTTPS, one thread per connection."""

    def __init__(self, host: str, port: int, certs: CertificateSource, *,
                 decide: Review = review, limits: Limits = Limits(),
                 clock: Callable[[], float] = monotonic) -> None:
        self.certs = certs
        self.decide = decide
        self.limits = limits
        self.clock = clock
        certs.context()  # a missing certificate fails at start, not at the first review
        self._server = _HttpsServer((host, port), self)
        self._thread: threading.Thread | None = None
        self.rejected_connections = 0

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def active_connections(self) -> int:
        """Connections holding a slot (tests wait on it instead of sleeping)."""
        return self._server.held

    @property
    def url(self) -> str:
        host = str(self._server.server_address[0])
        host = f"[{host}]" if ":" in host else host
        return f"https://{host}:{self.port}{PATH}"

    def start(self) -> AdmissionServer:
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.2},
                                        name="admission-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(10)


class _HttpsServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128  # the API server may open many connections at once

    def __init__(self, address: tuple[str, int], owner: AdmissionServer) -> None:
        self.owner = owner
        self.slots = threading.BoundedSemaphore(owner.limits.max_connections)
        #: connections holding a slot (guarded by ``_held_lock``)
        self.held = 0
        self._held_lock = threading.Lock()
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _ReviewHandler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.owner.rejected_connections += 1
            self.shutdown_request(request)
            return
        self._count(1)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._free_slot()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._free_slot()

    def _count(self, change: int) -> None:
        with self._held_lock:
            self.held += change

    def _free_slot(self) -> None:
        self._count(-1)
        self.slots.release()

    def finish_request(self, request: Any, client_address: Any) -> None:
        limits = self.owner.limits
        request.settimeout(limits.handshake_timeout)
        try:
            tls = self.owner.certs.context().wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError, CertificateError) as exc:
            log.debug("admission: TLS handshake with %s failed: %s", client_address, exc)
            return
        try:
            _ReviewHandler(tls, client_address, self)
        finally:
            tls.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.warning("admission: connection from %s failed", client_address, exc_info=True)


class _ReviewHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HttpsServer
    server_version = "gpu-reconciler-admission"

    def version_string(self) -> str:
        return self.server_version

    def setup(self) -> None:
        super().setup()
        owner = self.server.owner
        self.connection.settimeout(owner.limits.idle_timeout)
        self._reader = _DeadlineReader(self.connection, owner.clock, owner.limits.idle_timeout)
        self._buffered = io.BufferedReader(self._reader, 1 << 16)
        self.rfile = self._buffered

    def handle_one_request(self) -> None:
        """Waits up to ``idle_timeout`` for a request to begin; from its first byte, the request
        line, headers and body must all arrive within ``read_timeout`` (a client trickling
        bytes cannot hold a connection slot)."""
        self._reader.deadline = None
        try:
            if not self._buffered.peek(1):
                self.close_connection = True
                return
        except (TimeoutError, OSError):
            self.close_connection = True
            return
        owner = self.server.owner
        self._reader.deadline = owner.clock() + owner.limits.read_timeout
        super().handle_one_request()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("admission %s: " + format, self.address_string(), *args)

    def do_POST(self) -> None:
        body = self._body()  # read first, so the connection stays usable after an error
        if body is None:
            return
        if self.path.split("?", 1)[0] != PATH:
            self._error(404, f"not found: the webhook serves POST {PATH}")
            return
        content_type = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        if content_type != "application/json":
            self._error(400, "expected Content-Type application/json (an AdmissionReview), "
                             f"got {content_type or 'none'!r}")
            return
        try:
            obj = json.loads(body.decode("utf-8"))
        except UnicodeDecodeError as exc:
            self._error(400, f"the body is not UTF-8 JSON: {exc.reason} at byte {exc.start}")
            return
        except json.JSONDecodeError as exc:
            self._error(400, f"the body is not JSON (truncated?): {exc.msg} at line "
                             f"{exc.lineno} column {exc.colno}")
            return
        except RecursionError:
            self._error(400, "the body's JSON is nested too deeply")
            return
        try:
            answer = self.server.owner.decide(obj)
        except NotAReview as exc:
            self._error(400, f"not an AdmissionReview: {exc}")
            return
        except RecursionError:
            self._error(400, "the reviewed object is nested too deeply")
            return
        except Exception:
            log.exception("admission: review failed")
            self._error(500, "the review failed; see the reconciler's log")
            return
        self._log_decision(answer)
        self._send(200, "application/json", json.dumps(answer).encode())

    def _body(self) -> bytes | None:
        limits = self.server.owner.limits
        if self.headers.get("Transfer-Encoding"):
            self._error(411, "send the body with a Content-Length, not chunked", close=True)
            return None
        length_text = self.headers.get("Content-Length")
        if length_text is None:
            self._error(411, "a Content-Length is required", close=True)
            return None
        if not length_text.strip().isdigit():
            self._error(400, f"Content-Length {length_text!r} is not a number", close=True)
            return None
        length = int(length_text)
        if length > limits.max_body:
            self._error(413, f"the body of {length} bytes exceeds the limit of {limits.max_body} "
                             "bytes for an AdmissionReview", close=True)
            return None
        chunks: list[bytes] = []
        remaining = length
        while remaining:
            try:
                chunk = self.rfile.read1(min(remaining, 1 << 16))
            except TimeoutError:
                self._error(408, f"the request did not arrive within {limits.read_timeout:g} s",
                            close=True)
                return None
            except OSError:
                self.close_connection = True
                return None
            if not chunk:
                self.close_connection = True  # the client went away mid-body: nobody to answer
                return None
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    def _log_decision(self, answer: dict[str, Any]) -> None:
        response = answer.get("response") or {}
        if response.get("allowed"):
            log.debug("admission: allowed %s", response.get("uid"))
        else:
            message = str((response.get("status") or {}).get("message", ""))
            log.info("admission: denied %s: %s", response.get("uid"),
                     message.splitlines()[0] if message else "")

    def _not_allowed(self) -> None:
        bodiless = (self.headers.get("Content-Length") is None
                    and not self.headers.get("Transfer-Encoding"))
        if bodiless or self._body() is not None:
            self._error(405, f"only POST {PATH}")

    do_GET = do_PUT = do_DELETE = do_PATCH = _not_allowed

    def _error(self, code: int, message: str, *, close: bool = False) -> None:
        if close:
            self.close_connection = True
        self._send(code, "text/plain; charset=utf-8", (message + "\n").encode())

    def _send(self, code: int, content_type: str, body: bytes) -> None:
        self._reader.deadline = None
        try:
            self.connection.settimeout(self.server.owner.limits.idle_timeout)
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
        except OSError as exc:
            self.close_connection = True
            log.debug("admission: answering %s failed: %s", self.address_string(), exc)


class _DeadlineReader(io.RawIOBase):
    """The connection's reads, each bounded by what is left of the request's deadline."""

    def __init__(self, sock: Any, clock: Callable[[], float], idle_timeout: float) -> None:
        self.sock = sock
        self.clock = clock
        self.idle_timeout = idle_timeout
        self.deadline: float | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.deadline is None:
            self.sock.settimeout(self.idle_timeout)
        else:
            left = self.deadline - self.clock()
            if left <= 0:
                raise TimeoutError("the request's deadline passed")
            self.sock.settimeout(left)
        count: int = self.sock.recv_into(buffer)
        return count
