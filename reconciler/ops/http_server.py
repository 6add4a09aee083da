"""A threaded HTTP server that runs in the background, shared by the ops and webhook endpoints.

The standard library server is enough for a few endpoints answering small bodies, and it keeps
the request path visible: no framework between the socket and the signature check. What the
standard library leaves open to an unauthenticated client is closed here (``ServerLimits``):

- a total deadline per request (waiting for it, request line, headers and body), counted on an
  injected monotonic clock, instead of a timeout per socket read that a client sending one byte
  a second never trips; a request cut by it gets 408;
- a cap on header bytes, on connections per client address and on connections overall, so slow
  clients from one address cannot take the slots every other client needs;
- an answer for every malformed request (the standard library's own 400/414/431/501, and 500
  for anything a handler did not expect), never a silent close or a traceback on stderr;
- refusal log lines rate-limited per reason and client (``RefusalLog``).
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import io
import ipaddress
import logging
import re
import socket
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

from reconciler.clock import Clock, monotonic

log = logging.getLogger(__name__)

#: longest request line, as the standard library has it (longer: 414)
MAX_REQUEST_LINE = 65536
#: an HTTP method is a token (RFC 9110 5.6.2)
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


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


def listen_failure(exc: OSError, *, flag: str, address: str, off: bool = False) -> str:
    """One line for a listener that could not bind ``address`` (``flag``'s value): the port and
    the flag that moves it, instead of a traceback. ``off``: the flag also takes ``off``."""
    try:
        host, port = parse_listen_address(address)
    except ListenAddressError:
        host, port = address, 0
    moves = f"give it another with {flag} HOST:PORT" + (f" or {flag} off" if off else "")
    if exc.errno == errno.EADDRINUSE:
        return (f"{flag} {address}: port {port} is already in use (another process listens on "
                f"it, e.g. a second reconciler on this host); {moves}")
    if exc.errno == errno.EACCES:
        return (f"{flag} {address}: not allowed to listen on port {port} (below 1024 needs "
                f"privileges); {moves}")
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"{flag} {address}: {host} is not an address of this host; {moves}"
    return f"{flag} {address}: cannot listen on port {port}: {exc.strerror or exc}; {moves}"


def try_listen(host: str, port: int) -> None:
    """Binds ``host:port`` as the servers here do (``SO_REUSEADDR``) and lets it go again: an
    ``OSError`` says a listener started there later would fail (a listener that starts only
    once something else is ready checks its port at start with this)."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1)


@dataclass(frozen=True)
class ServerLimits:
    """What one client may cost the server. The defaults are documented in docs/security.md."""

    #: connections served at once; more get 503 at once
    max_connections: int = 128
    #: connections served at once per client address (an IPv6 client: its /64); more get 429
    max_connections_per_client: int = 16
    #: seconds from waiting for a request to having read all of it (line, headers, body)
    request_deadline: float = 10.0
    #: request line and headers together; more gets 431 (the standard library also refuses
    #: more than 100 header lines and a line over 64 KiB)
    max_header_bytes: int = 64 * 1024
    #: seconds an answer may take to write, even one sent once the deadline has passed
    write_grace: float = 2.0
    #: seconds to read what a client still sends after a final answer, so closing does not
    #: reset the connection before the client has read the answer
    linger: float = 1.0

    def __post_init__(self) -> None:
        for name in ("max_connections", "max_connections_per_client", "max_header_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        for name in ("request_deadline", "write_grace"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")
        if self.linger < 0:
            raise ValueError("linger must not be negative")


def client_key(host: str) -> str:
    """The address one client is counted under: IPv4 as is, IPv6 by its /64.

    One IPv6 host usually has a whole /64 to pick source addresses from; an IPv4 client seen
    on a dual-stack socket (``::ffff:a.b.c.d``) counts as that IPv4 address.
    """
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class RefusalLog:
    """Refusal warnings, at most one per reason and client per ``interval`` seconds.

    A flood (forged pushes, slow clients, a scanner) must not flood the logs: the lines left out
    go to debug, and the next warning for that reason and client says how many there were. The
    table is bounded: once ``max_clients`` entries are live, new clients share one entry.
    """

    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval: float = 10.0,
        clock: Clock = monotonic,
        max_clients: int = 1024,
    ) -> None:
        self.logger = logger
        self.interval = interval
        self._clock = clock
        self._max = max_clients
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}
        self._lock = threading.Lock()

    def report(
        self, reason: str, client: str, message: str, *, level: int = logging.WARNING
    ) -> bool:
        """Log ``message`` (about a refusal for ``reason`` from ``client``); False if held back."""
        now = self._clock()
        key = (reason, client_key(client))
        with self._lock:
            if key not in self._seen and len(self._seen) >= self._max:
                self._prune(now)
                if len(self._seen) >= self._max:
                    key = (reason, "*")
            last, suppressed = self._seen.get(key, (float("-inf"), 0))
            held = now - last < self.interval
            self._seen[key] = (last, suppressed + 1) if held else (now, 0)
        if held:
            self.logger.debug("%s", message)
            return False
        more = f" ({suppressed} more since the last report)" if suppressed else ""
        self.logger.log(level, "%s%s", message, more)
        return True

    def _prune(self, now: float) -> None:
        # an entry whose interval is over holds nothing back any more (its count is lost)
        for key in [k for k, (last, _) in self._seen.items() if now - last >= self.interval]:
            del self._seen[key]


class _RequestBudget:
    """The deadline of the request being read, on the injected clock."""

    def __init__(self, clock: Clock, seconds: float) -> None:
        self._clock = clock
        self.seconds = seconds
        self.deadline = clock() + seconds
        self.received = 0  # bytes from the socket since the request began

    def start(self) -> None:
        self.deadline = self._clock() + self.seconds
        self.received = 0

    def remaining(self) -> float:
        return self.deadline - self._clock()


class _DeadlineReader(io.RawIOBase):
    """Socket reads that end at the request's deadline, however the bytes trickle in."""

    def __init__(self, sock: socket.socket, budget: _RequestBudget) -> None:
        self._sock = sock
        self._budget = budget

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        remaining = self._budget.remaining()
        if remaining <= 0:
            raise TimeoutError("the request deadline has passed")
        self._sock.settimeout(remaining)
        n = self._sock.recv_into(buffer)
        self._budget.received += n
        return n


class _HeaderBudget(io.BufferedIOBase):
    """``readline`` for the header parser, refusing more than ``budget`` bytes in all."""

    def __init__(self, rfile: io.BufferedIOBase, budget: int, limit: int) -> None:
        self._rfile = rfile
        self._budget = budget
        self._limit = limit

    def readline(self, size: int | None = -1) -> bytes:
        want = self._budget + 1 if size is None or size < 0 else min(size, self._budget + 1)
        line = self._rfile.readline(want)
        self._budget -= len(line)
        if self._budget < 0:
            raise http.client.HTTPException(
                f"request line and headers exceed the limit of {self._limit} bytes"
            )
        return line


def _answer_now(sock: socket.socket, response: bytes) -> None:
    """Answer a connection that will not be served, without blocking the accepting thread."""
    with contextlib.suppress(OSError):
        sock.setblocking(False)
        sock.send(response)
        sock.shutdown(socket.SHUT_WR)
    sock.close()


def _refusal(status: int, reason: str, message: str) -> bytes:
    body = f"{message}\n".encode()
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
    ).encode() + body


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        app: Any,
        *,
        name: str,
        limits: ServerLimits,
        clock: Clock,
        refusals: RefusalLog,
    ):
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.app = app
        self.name = name
        self.limits = limits
        self.clock = clock
        self.refusals = refusals
        # One thread per connection: these counts keep slow or idle clients from taking them all.
        self._lock = threading.Lock()
        self._active = 0
        self._per_client: dict[str, int] = {}
        super().__init__(address, handler)

    @property
    def active_connections(self) -> int:
        with self._lock:
            return self._active

    def _admit(self, key: str) -> tuple[int, str, str] | None:
        with self._lock:
            held = self._per_client.get(key, 0)
            if held >= self.limits.max_connections_per_client:
                return (
                    429,
                    "Too Many Requests",
                    f"{held} connections from this address are being served; that is the limit",
                )
            if self._active >= self.limits.max_connections:
                return (503, "Service Unavailable", "all connections are busy")
            self._active += 1
            self._per_client[key] = held + 1
        return None

    def _release(self, key: str) -> None:
        with self._lock:
            self._active -= 1
            left = self._per_client.pop(key, 1) - 1
            if left > 0:
                self._per_client[key] = left

    def process_request(self, request: Any, client_address: Any) -> None:
        key = client_key(client_address[0])
        refused = self._admit(key)
        if refused is not None:
            status, reason, message = refused
            _answer_now(request, _refusal(status, reason, message))
            self.refusals.report(
                f"connection {status}",
                client_address[0],
                f"{self.name}: refused a connection from {client_address[0]} with {status}: "
                f"{message}",
            )
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(key)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(client_key(client_address[0]))

    def shutdown_request(self, request: Any) -> None:
        # Closing with unread bytes from the client resets the connection, which can destroy
        # an answer the client has not read yet; read (and drop) for a bounded time first.
        with contextlib.suppress(OSError):
            request.shutdown(socket.SHUT_WR)
            end = self.clock() + self.limits.linger
            for _ in range(16):  # at most 1 MiB, whatever the clock does
                left = end - self.clock()
                if left <= 0:
                    break
                request.settimeout(left)
                if not request.recv(65536):
                    break
        self.close_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # instead of a traceback on stderr for each such connection
        self.refusals.report(
            "error",
            client_address[0],
            f"{self.name}: a connection from {client_address[0]} failed",
            level=logging.ERROR,
        )
        log.debug("connection from %s failed", client_address[0], exc_info=True)


class BackgroundHTTPServer:
    """Serve ``handler`` on ``host:port`` (port 0 picks a free one) from a daemon thread.

    The handler reaches its application object as ``self.server.app``. ``limits`` bounds what
    each client may hold (see ``ServerLimits``); ``clock`` is the monotonic clock the request
    deadline runs on; refusals are logged through ``refusals``.
    """

    def __init__(
        self,
        host: str,
        port: int,
        handler: type[BaseHTTPRequestHandler],
        app: Any,
        *,
        name: str = "http",
        limits: ServerLimits | None = None,
        clock: Clock = monotonic,
        refusals: RefusalLog | None = None,
    ) -> None:
        self._name = name
        self.limits = limits or ServerLimits()
        self._server = _Server(
            (host, port),
            handler,
            app,
            name=name,
            limits=self.limits,
            clock=clock,
            refusals=refusals or RefusalLog(log, clock=clock),
        )
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return (str(host), int(port))

    @property
    def active_connections(self) -> int:
        """Connections admitted and not yet released (tests wait on it instead of sleeping)."""
        return self._server.active_connections

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

    Every request it cannot serve gets an answer through ``refuse``: the standard library's
    parse errors, a request not complete by its deadline (408), and 500 for an exception a
    handler did not expect.

    Responses go out in one write with Nagle off: headers and body in two small segments
    would otherwise wait for the client's delayed ACK (about 40 ms per request on Linux).
    """

    _budget: _RequestBudget
    _answered: bool = False

    @property
    def _host(self) -> _Server:
        return cast(_Server, self.server)

    def setup(self) -> None:
        super().setup()
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rfile.close()
        self._budget = _RequestBudget(self._host.clock, self._host.limits.request_deadline)
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, self._budget))

    def handle_one_request(self) -> None:
        """Read one request within its deadline and answer it, whatever it holds."""
        self._budget.start()
        self._answered = False
        self.command, self.requestline, self.request_version = "", "", ""
        self.raw_requestline = b""
        try:
            self.raw_requestline = self.rfile.readline(MAX_REQUEST_LINE + 1)
            for _ in range(8):  # blank lines before a request are to be ignored (RFC 9112 2.2)
                if self.raw_requestline not in (b"\r\n", b"\n"):
                    break
                self.raw_requestline = self.rfile.readline(MAX_REQUEST_LINE + 1)
            if not self.raw_requestline:
                self.close_connection = True  # the client is done
                return
            if len(self.raw_requestline) > MAX_REQUEST_LINE:
                self.refuse(414, f"the request line exceeds {MAX_REQUEST_LINE} bytes")
                return
            if not self.parse_request():
                if not self._answered:  # it returns False without an answer for a blank line
                    self.refuse(400, "no request line")
                return
            if not _TOKEN.fullmatch(self.command):
                self.refuse(400, f"the method {self.command!r} is not an HTTP token")
                return
            method = getattr(self, f"do_{self.command}", None)
            if method is None:
                self.refuse(501, f"method {self.command!r} is not supported")
                return
            method()
            self.wfile.flush()
        except TimeoutError:
            self.close_connection = True
            if self.raw_requestline or self._budget.received:
                self._refuse_late(
                    408,
                    f"the request was not complete within {self._budget.seconds:g} s",
                )
            # else an idle keep-alive connection: closing it is the answer
        except OSError:
            self.close_connection = True  # the client went away; nobody to answer
        except Exception:
            self.close_connection = True
            log.debug("%s: request from %s failed", self._host.name, self.client_address[0],
                      exc_info=True)  # fmt: skip
            self._refuse_late(500, "internal error; see the server's logs")

    def _refuse_late(self, status: int, detail: str) -> None:
        if self._answered:
            return
        try:
            self.refuse(status, detail)
        except Exception:  # an answer that cannot be written: nothing more to do
            log.debug("%s: cannot answer %s", self._host.name, self.client_address[0],
                      exc_info=True)  # fmt: skip

    def parse_request(self) -> bool:
        # the standard parser reads headers through readline(); give it a budget
        rfile = self.rfile
        limit = self._host.limits.max_header_bytes
        self.rfile = _HeaderBudget(rfile, limit - len(self.raw_requestline), limit)
        try:
            return super().parse_request()
        finally:
            self.rfile = rfile

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # the standard library's parse errors (400, 431, 505) come through here
        detail = explain or message or self.responses.get(code, ("error", ""))[0]
        self.refuse(code, detail)

    def refuse(self, status: int, detail: str) -> None:
        """Answer a request that is not served, log it (rate-limited) and close."""
        client = self.client_address[0]
        self._host.refusals.report(
            f"request {status}", client, f"{self._host.name} {status} from {client}: {detail}"
        )
        self.close_connection = True
        self.send_text(status, detail + "\n")

    def send_response_only(self, code: int, message: str | None = None) -> None:
        if code >= 200:
            self._answered = True
        super().send_response_only(code, message)

    def flush_headers(self) -> None:
        # an answer may go out after the deadline (408), but not be written forever
        with contextlib.suppress(OSError):
            self.connection.settimeout(
                max(self._budget.remaining(), self._host.limits.write_grace)
            )
        super().flush_headers()

    def send_body(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        if self.request_version == "HTTP/0.9":
            # what the parser assumes until it has read a version: answer with a status line
            # (nobody speaks 0.9 any more, and a refusal without one is no answer)
            self.request_version = "HTTP/1.0"
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
