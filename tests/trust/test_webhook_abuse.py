"""The webhook receiver under abuse by unauthenticated (or merely signing) clients.

Real server on loopback, raw sockets. 127.0.0.1 and 127.0.0.2 are different client addresses
on Linux loopback: a socket bound to one before connecting speaks from it.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import select
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from reconciler.ops.http_server import RefusalLog, ServerLimits
from reconciler.sim.waiting import wait_for
from reconciler.trust.webhook import (
    PushEvent,
    WatchedBranch,
    WebhookReceiver,
    WebhookSecret,
    WebhookServer,
    content_length,
    json_depth_exceeds,
)

SECRET = b"abuse-test-secret"
REPO = "https://github.com/example-org/gpu-fleet.git"
#: generous bound on any single answer; the server's own limits are far shorter
ANSWER_TIMEOUT = 10.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def sign(body: bytes) -> str:
    return "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()


def push_body(**extra: Any) -> bytes:
    payload: dict[str, Any] = {
        "ref": "refs/heads/main",
        "after": "b" * 40,
        "repository": {"full_name": "example-org/gpu-fleet"},
        "pusher": {"name": "alice"},
    }
    payload.update(extra)
    return json.dumps(payload).encode()


def request(body: bytes, *, signature: str | None = None, extra: str = "") -> bytes:
    head = (
        "POST /webhook HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}"
    )
    if signature is not None:
        head += f"X-Hub-Signature-256: {signature}\r\n"
    return head.encode() + b"\r\n" + body


def connect(srv: WebhookServer, source: str = "127.0.0.1") -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(ANSWER_TIMEOUT)
    s.bind((source, 0))
    s.connect(srv.address)
    return s


def answer(s: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    chunks = []
    try:
        while chunk := s.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


def exchange(srv: WebhookServer, data: bytes, source: str = "127.0.0.1") -> bytes:
    with connect(srv, source) as s:
        # a refusal may come (and the server close) before all of it is sent
        with contextlib.suppress(OSError):
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)  # no more bytes are coming: the server must answer now
        return answer(s)


def status_of(response: bytes) -> int:
    assert response.startswith(b"HTTP/1.1 "), response[:200]
    return int(response[9:12])


def json_body(response: bytes) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(response.split(b"\r\n\r\n", 1)[1])
    return data


class Recorder:
    def __init__(self) -> None:
        self.events: list[PushEvent] = []

    def __call__(self, event: PushEvent) -> None:
        self.events.append(event)


def receiver(recorder: Recorder, **kwargs: Any) -> WebhookReceiver:
    return WebhookReceiver(
        secret=WebhookSecret(SECRET),
        watched=WatchedBranch(REPO, "main"),
        trigger=recorder,
        max_body_bytes=1024 * 1024,
        **kwargs,
    )


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def server(recorder: Recorder) -> Iterator[WebhookServer]:
    with WebhookServer("127.0.0.1", 0, receiver(recorder)) as srv:
        yield srv


# --- JSON the parser must not recurse into ---------------------------------------------------

DEEP = 100_000


@pytest.mark.parametrize(
    "body",
    [
        b"[" * DEEP,
        b"[" * DEEP + b"]" * DEEP,  # valid JSON, just deep
        b'{"a":' * DEEP + b"1" + b"}" * DEEP,
        b'{"ref":"refs/heads/main","x":' + b'[{"y":' * DEEP,
    ],
    ids=["open-arrays", "closed-arrays", "objects", "inside-a-push"],
)
def test_deeply_nested_json_with_a_valid_signature_gets_400(
    server: WebhookServer, recorder: Recorder, body: bytes
) -> None:
    response = exchange(server, request(body, signature=sign(body)))
    assert status_of(response) == 400
    assert "nested deeper than 64 levels" in json_body(response)["message"]
    assert recorder.events == []


def test_json_nested_to_the_limit_is_parsed_and_one_deeper_is_refused(
    server: WebhookServer, recorder: Recorder
) -> None:
    # the payload object is level 1, so 63 more levels reach the limit of 64
    at_limit = push_body(x=json.loads("[" * 63 + "]" * 63))
    assert status_of(exchange(server, request(at_limit, signature=sign(at_limit)))) == 202
    over = push_body(x=json.loads("[" * 64 + "]" * 64))
    assert status_of(exchange(server, request(over, signature=sign(over)))) == 400
    assert len(recorder.events) == 1


def test_brackets_inside_strings_are_not_nesting(server: WebhookServer, recorder: Recorder) -> None:
    body = push_body(commits=[{"message": '[[{{"\\"[[' * 20_000}])
    assert status_of(exchange(server, request(body, signature=sign(body)))) == 202
    assert len(recorder.events) == 1


@pytest.mark.parametrize(
    ("text", "deeper"),
    [
        ("[]", False),
        ('"[[[["', False),
        ('["\\"[[[[["]', False),  # an escaped quote does not end the string
        ('"\\\\"[[[[', True),  # an escaped backslash does
        ('"unterminated [[[[[[', False),  # the parser fails at the string, before any bracket
        ("[[[[", True),
        ('[1"[[[[', False),
        ("{" * 5, True),
    ],
)
def test_json_depth_scan_reads_strings_as_the_parser_does(text: str, deeper: bool) -> None:
    assert json_depth_exceeds(text, 3) is deeper


def test_json_depth_scan_is_linear_on_unterminated_escapes() -> None:
    # '"' followed by '\"' pairs: a string scan restarting at every quote would be quadratic
    text = '"' + '\\"' * 500_000
    assert json_depth_exceeds(text + "[[[[", 3) is False


# --- malformed requests all get an answer ----------------------------------------------------


@pytest.mark.parametrize(
    ("header", "status"),
    [
        ("Content-Length: \u00b2", 400),  # superscript two: str.isdigit() says yes, int() no
        ("Content-Length: 1e3", 400),
        ("Content-Length: -1", 400),
        ("Content-Length: +5", 400),
        ("Content-Length: 0x10", 400),
        ("Content-Length: 5_0", 400),
        ("Content-Length: 5 5", 400),
        ("Content-Length: ", 400),
        ("Content-Length: \u0663", 400),  # an Arabic-Indic digit, which int() would take
        ("Content-Length: 5\r\nContent-Length: 6", 400),
        ("Content-Length: 5\r\nContent-Length: 5", 400),
        ("Content-Length: 5, 5", 400),
        ("Content-Length: " + "9" * 5000, 413),  # int() refuses 4300+ digits
        ("Content-Length: 99999999999999999999999", 413),
        ("Transfer-Encoding: chunked", 411),
        ("Transfer-Encoding: chunked\r\nContent-Length: 5", 411),
        ("X-Other: 1", 411),  # no Content-Length at all
    ],
    ids=lambda v: repr(v)[:40] if isinstance(v, str) else str(v),
)
def test_malformed_content_length_gets_an_answer(
    server: WebhookServer, recorder: Recorder, header: str, status: int
) -> None:
    head = f"POST /webhook HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\n{header}\r\n\r\n"
    # as one byte where HTTP's Latin-1 has the character (the server sees "\u00b2" itself)
    data = head.encode("latin-1") if head.isascii() or max(head) <= "\xff" else head.encode()
    response = exchange(server, data + b"hello")
    assert status_of(response) == status
    assert json_body(response)["result"] in ("bad_request", "too_large", "length_required")
    assert recorder.events == []


def test_content_length_with_leading_zeros_is_a_number() -> None:
    assert content_length("0" * 5000 + "17") == 17
    assert content_length(" 42\t") == 42
    for text in ("\u00b2", "\u0663", "\uff15", "1\u00a0", "-0", "+0", "0x1"):
        assert content_length(text) is None


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"GARBAGE\r\n\r\n", 400),
        (b"\xff\xfe\x00 / HTTP/1.1\r\n\r\n", 400),
        (b"POST /webhook HTTP/9.9\r\n\r\n", 505),
        (b"POST /webhook HTTP/1.1 extra\r\n\r\n", 400),
        (b"POST /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414),
        (b"POST /webhook HTTP/1.1\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", 431),
        (b"POST /webhook HTTP/1.1\r\n" + b"X-Many: 1\r\n" * 101 + b"\r\n", 431),
        # 40 lines of 2 KiB: each line is fine, together they pass the 64 KiB budget
        (b"POST /webhook HTTP/1.1\r\n" + (b"X-Wide: " + b"w" * 2048 + b"\r\n") * 40 + b"\r\n", 431),
        (b"DELETE /webhook HTTP/1.1\r\n\r\n", 501),
        (b"GET /webhook HTTP/1.1\r\n\r\n", 405),
        (b"POST /elsewhere HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 404),
        (b"POST /webhook HTTP/1.1\r\nnot a header line\r\n\r\n", 411),
        (b"POST /webhook HTTP/1.1\r\nContent-Length: 50\r\n\r\nshort", 400),
        (b"\r\n" * 20 + b"POST /webhook HTTP/1.1\r\n\r\n", 400),
        (b" \t \r\n\r\n", 400),
    ],
    ids=[
        "garbage-line",
        "binary-line",
        "http-9.9",
        "four-words",
        "long-request-line",
        "long-header",
        "101-headers",
        "64KiB-of-headers",
        "unknown-method",
        "get",
        "other-path",
        "header-without-colon",
        "body-cut-short",
        "many-blank-lines",
        "whitespace-line",
    ],
)
def test_malformed_request_gets_an_answer(server: WebhookServer, data: bytes, status: int) -> None:
    assert status_of(exchange(server, data)) == status


def test_absolute_form_request_target_reaches_the_webhook(
    server: WebhookServer, recorder: Recorder
) -> None:
    body = push_body()
    data = request(body, signature=sign(body)).replace(
        b"POST /webhook ", b"POST http://reconciler.example/webhook?x=1 ", 1
    )
    assert status_of(exchange(server, data)) == 202
    assert len(recorder.events) == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\xc3\x28", "not UTF-8"),
        (b"[1, 2]", "expected a JSON object, got list"),
        (b'"text"', "expected a JSON object, got str"),
        (b'{"ref": "refs/heads/main", "n": ' + b"7" * 5000 + b"}", "invalid JSON"),
        (b'{"ref": "refs/heads/main"}', "lacks repository or ref"),
        (b'{"repository": {"full_name": "example-org/gpu-fleet"}}', "lacks repository or ref"),
        (b'{"ref": 5, "repository": {}}', "lacks repository or ref"),
        (b'{"ref": "refs/heads/main", "repository": []}', "lacks repository or ref"),
    ],
    ids=["not-utf8", "list", "string", "huge-integer", "no-repo", "no-ref", "ref-int", "repo-list"],
)
def test_signed_body_that_is_not_a_push_gets_400(
    server: WebhookServer, recorder: Recorder, body: bytes, message: str
) -> None:
    response = exchange(server, request(body, signature=sign(body)))
    assert status_of(response) == 400
    assert message in json_body(response)["message"]
    assert recorder.events == []


def test_form_with_too_many_fields_gets_400(server: WebhookServer) -> None:
    body = b"payload=%7B%7D&" + b"&".join(b"f%d=1" % i for i in range(1000))
    data = request(body, signature=sign(body)).replace(
        b"application/json", b"application/x-www-form-urlencoded"
    )
    response = exchange(server, data)
    assert status_of(response) == 400
    assert "Max number of fields exceeded" in json_body(response)["message"]


def test_control_characters_from_the_sender_are_escaped_in_logs(
    server: WebhookServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="reconciler.trust.webhook")
    body = push_body(ref="refs/heads/x\n2026-01-01 CRITICAL forged line\ud800")
    response = exchange(server, request(body, signature=sign(body)))
    assert status_of(response) == 202
    lines = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert lines
    assert all("\n" not in line and "\ud800" not in line for line in lines)
    assert "x\\n2026-01-01 CRITICAL" in lines[0]


# --- the total deadline ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "part",
    ["request-line", "headers", "body"],
)
def test_request_trickled_a_byte_at_a_time_is_cut_at_the_total_deadline(
    recorder: Recorder, part: str
) -> None:
    body = push_body()
    full = request(body, signature=sign(body))
    start_at = {
        "request-line": 0,
        "headers": full.index(b"\r\n") + 2,
        "body": full.index(b"\r\n\r\n") + 4,
    }[part]
    limits = ServerLimits(request_deadline=1.0)
    # everything before the slow part at once, then a byte every 0.2 s: each read is far
    # inside any per-read timeout, and the whole would take 1 s per 5 bytes
    with WebhookServer("127.0.0.1", 0, receiver(recorder), limits=limits) as srv, connect(srv) as s:
        s.sendall(full[:start_at])
        start = time.monotonic()
        sent = start_at
        while sent < len(full):
            s.send(full[sent : sent + 1])
            sent += 1
            if select.select([s], [], [], 0.2)[0]:
                break
        response, took = answer(s), time.monotonic() - start
    assert sent < len(full), "the server waited for the whole trickle"
    assert status_of(response) == 408
    assert "not complete within 1 s" in json_body(response)["message"]
    assert took < ANSWER_TIMEOUT
    assert recorder.events == []


def test_deadline_runs_on_the_injected_clock(recorder: Recorder) -> None:
    clock = FakeClock()
    with WebhookServer("127.0.0.1", 0, receiver(recorder, clock=clock)) as srv, connect(srv) as s:
        s.sendall(b"POST /webhook HTTP/1.1\r\nHost: x\r\n")
        # past the default 10 s deadline, though no real time went by: the clock moves on
        # with each header byte until the server, reading on, finds its deadline gone
        for _ in range(50):
            clock.now += 10.5
            s.sendall(b"X")
            if select.select([s], [], [], 0.2)[0]:
                break
        response = answer(s)
    assert status_of(response) == 408
    assert "within 10 s" in json_body(response)["message"]


def test_idle_keep_alive_connection_is_closed_at_the_deadline(recorder: Recorder) -> None:
    limits = ServerLimits(request_deadline=0.5)
    with WebhookServer("127.0.0.1", 0, receiver(recorder), limits=limits) as srv, connect(srv) as s:
        body = push_body()
        s.sendall(request(body, signature=sign(body)))
        first = s.recv(65536)
        assert status_of(first) == 202
        # then nothing: the connection is closed without an answer to a request never sent
        assert answer(s) == b""
    assert len(recorder.events) == 1


# --- connection caps ----------------------------------------------------------------------------


def test_one_address_holding_its_cap_does_not_starve_another(recorder: Recorder) -> None:
    # the default caps; a long deadline, so no held connection is cut (408) while we look
    limits = ServerLimits(request_deadline=60.0)
    with WebhookServer("127.0.0.1", 0, receiver(recorder), limits=limits) as srv:
        slow = [connect(srv, "127.0.0.1") for _ in range(200)]
        try:
            for s in slow:
                s.sendall(b"POST /webhook HTTP/1.1\r\nHost: x\r\n")  # and never more
            body = push_body()
            response = exchange(srv, request(body, signature=sign(body)), source="127.0.0.2")
            assert status_of(response) == 202
            # every connection beyond the cap was answered at once; the cap's worth is held
            refused = []
            end = time.monotonic() + 5
            while len(refused) < 200 - limits.max_connections_per_client:
                pending = [s for s in slow if s not in refused]
                readable, _, _ = select.select(pending, [], [], max(0.0, end - time.monotonic()))
                if not readable:
                    break
                for s in readable:
                    assert status_of(answer(s)) == 429
                    refused.append(s)
            assert len(refused) == 200 - limits.max_connections_per_client
        finally:
            for s in slow:
                s.close()
    assert len(recorder.events) == 1


def test_many_addresses_fill_the_global_cap_and_the_rest_get_503(recorder: Recorder) -> None:
    limits = ServerLimits(max_connections=4, max_connections_per_client=2)
    with WebhookServer("127.0.0.1", 0, receiver(recorder), limits=limits) as srv:
        held = [connect(srv, a) for a in ("127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.2")]
        try:
            wait_for(lambda: srv.active_connections == 4, timeout=10, what="4 admitted",
                     observe=lambda: srv.active_connections)
            assert status_of(exchange(srv, b"", source="127.0.0.1")) == 429
            assert status_of(exchange(srv, b"", source="127.0.0.3")) == 503
        finally:
            for s in held:
                s.close()
        body = push_body()
        # the slots come back once the holders are gone
        wait_for(lambda: srv.active_connections == 0, timeout=10, what="the slots given back",
                 observe=lambda: srv.active_connections)
        response = exchange(srv, request(body, signature=sign(body)), source="127.0.0.3")
        assert status_of(response) == 202


# --- the refusal log ------------------------------------------------------------------------------


def test_refusal_log_is_rate_limited_per_reason_and_client(
    recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="reconciler.trust.webhook")
    clock = FakeClock()
    # a cap of 4: room for a finished connection or two not yet released between exchanges
    limits = ServerLimits(max_connections_per_client=4)
    forged = request(push_body(), signature="sha256=" + "0" * 64)
    with WebhookServer("127.0.0.1", 0, receiver(recorder, clock=clock), limits=limits) as srv:
        for source in ("127.0.0.1", "127.0.0.2"):
            for _ in range(30):
                assert status_of(exchange(srv, forged, source)) == 401
        # the exchanges' connections released, then 4 held from 127.0.0.2, all admitted
        wait_for(lambda: srv.active_connections == 0, timeout=10, what="no connection served",
                 observe=lambda: srv.active_connections)
        held = [connect(srv, "127.0.0.2") for _ in range(4)]
        try:
            wait_for(lambda: srv.active_connections == 4, timeout=10, what="4 admitted",
                     observe=lambda: srv.active_connections)
            for _ in range(20):
                assert status_of(exchange(srv, b"", "127.0.0.2")) == 429
        finally:
            for s in held:
                s.close()
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 3, warnings
        assert sum("401 unauthorized from 127.0.0.1" in w for w in warnings) == 1
        assert sum("401 unauthorized from 127.0.0.2" in w for w in warnings) == 1
        assert sum("from 127.0.0.2 with 429" in w for w in warnings) == 1
        clock.now += 10  # the interval is over: the next line says how many were left out
        assert status_of(exchange(srv, forged, "127.0.0.1")) == 401
    last = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING][-1]
    assert "401 unauthorized from 127.0.0.1" in last
    assert last.endswith("(29 more since the last report)")


def test_refusal_log_stays_bounded_with_many_clients(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test.refusals")
    caplog.set_level(logging.INFO, logger="test.refusals")
    clock = FakeClock()
    refusals = RefusalLog(logger, interval=10, clock=clock, max_clients=10)
    for i in range(5000):
        refusals.report("401", f"10.0.{i // 256}.{i % 256}", f"refused {i}")
    assert len(caplog.records) == 11  # ten clients of their own, then one line for all others
    assert len(refusals._seen) == 11
    clock.now += 10
    refusals.report("401", "10.9.9.9", "refused again")  # stale entries make room
    assert len(refusals._seen) == 1
