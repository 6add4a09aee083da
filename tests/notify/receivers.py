"""HTTP receivers on loopback (``http.server`` in a thread) that record what they got and answer
as told: a status per request, or no answer until the test ends (a sink that hangs)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Received:
    path: str  # with the query
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    url: str = ""
    #: the statuses to answer, in order (the last one repeats)
    statuses: list[int] = field(default_factory=lambda: [200])
    hang: bool = False
    got: list[Received] = field(default_factory=list)
    released: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)


@contextmanager
def receiver(*, statuses: list[int] | None = None, hang: bool = False,
             path: str = "/hook") -> Iterator[Receiver]:
    state = Receiver(statuses=statuses or [200], hang=hang)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with state.lock:
                state.got.append(Received(self.path, {k.lower(): v for k, v in
                                                      self.headers.items()}, body))
                status = state.statuses[min(len(state.got), len(state.statuses)) - 1]
            if state.hang:
                state.released.wait(30)
                return
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}{path}"
    try:
        yield state
    finally:
        state.released.set()
        server.shutdown()
        server.server_close()
        thread.join(10)
