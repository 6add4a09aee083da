"""A forge's commit-status API played by an HTTP server on 127.0.0.1 (the tests of
``reconciler.gitops.forge_status`` and of the sync role's statuses): it records each post and
answers ``code``, or hangs until ``hang`` is set."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class ForgeStub:
    """What the forge was sent, and how it answers: ``code``, or ``hang`` until released."""

    code: int = 201
    hang: threading.Event | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    arrived: threading.Condition = field(default_factory=threading.Condition)
    url: str = ""

    def wait_for(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.requests) >= count, timeout), \
                self.requests
            return list(self.requests)


@contextlib.contextmanager
def serve_forge() -> Iterator[ForgeStub]:
    stub = ForgeStub()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with stub.arrived:
                # header names are case-insensitive (urllib sends ``Private-token``)
                stub.requests.append({"path": self.path,
                                      "headers": {k.lower(): v for k, v in self.headers.items()},
                                      "body": json.loads(body)})
                stub.arrived.notify_all()
            if stub.hang is not None:
                stub.hang.wait(30)
            # a careless forge echoes the credentials it was given
            answer = json.dumps({"echo": dict(self.headers)}).encode()
            self.send_response(stub.code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    stub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        if stub.hang is not None:
            stub.hang.set()
        server.shutdown()
        server.server_close()
