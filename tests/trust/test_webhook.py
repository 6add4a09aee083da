"""Webhook receiver over real HTTP on loopback."""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from reconciler.ops.http_server import ServerLimits
from reconciler.ops.metrics import Metrics
from reconciler.sim.waiting import wait_for
from reconciler.trust.webhook import (
    PushEvent,
    WatchedBranch,
    WebhookConfigError,
    WebhookReceiver,
    WebhookSecret,
    WebhookServer,
    load_secret,
    normalize_repository,
)
from tests.trust.helpers import Recorder

SECRET = b"s3cr3t-webhook-value-that-must-never-be-logged"
REPO = "https://github.com/example-org/gpu-fleet.git"


def sign(body: bytes, secret: bytes = SECRET) -> str:
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def push_payload(
    ref: str = "refs/heads/main", full_name: str = "example-org/gpu-fleet", **extra: Any
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "ref": ref,
        "before": "0" * 40,
        "after": "a" * 40,
        "repository": {
            "full_name": full_name,
            "clone_url": f"https://github.com/{full_name}.git",
            "ssh_url": f"git@github.com:{full_name}.git",
            "html_url": f"https://github.com/{full_name}",
        },
        "pusher": {"name": "alice", "email": "alice@example.org"},
    }
    payload.update(extra)
    return payload


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def server(recorder: Recorder, metrics: Metrics) -> Iterator[WebhookServer]:
    receiver = WebhookReceiver(
        secret=WebhookSecret(SECRET),
        watched=WatchedBranch(REPO, "main"),
        trigger=recorder,
        metrics=metrics,
        max_body_bytes=64 * 1024,
    )
    with WebhookServer("127.0.0.1", 0, receiver) as srv:
        yield srv


def post(
    srv: WebhookServer,
    body: bytes,
    *,
    signature: str | None,
    event: str = "push",
    content_type: str = "application/json",
    conn: http.client.HTTPConnection | None = None,
) -> tuple[int, dict[str, Any]]:
    own = conn is None
    c = conn or http.client.HTTPConnection(*srv.address, timeout=5)
    headers = {"Content-Type": content_type, "X-GitHub-Event": event, "X-GitHub-Delivery": "d-1"}
    if signature is not None:
        headers["X-Hub-Signature-256"] = signature
    c.request("POST", "/webhook", body=body, headers=headers)
    resp = c.getresponse()
    data = json.loads(resp.read())
    if own:
        c.close()
    return resp.status, data


def test_signed_push_to_watched_branch_triggers_within_one_second(
    server: WebhookServer, recorder: Recorder
) -> None:
    body = json.dumps(push_payload()).encode()
    status, data = post(server, body, signature=sign(body))
    assert (status, data["result"]) == (202, "triggered")
    assert recorder.fired.wait(1.0)
    [event] = recorder.events
    assert event.ref == "refs/heads/main"
    assert event.after == "a" * 40
    assert event.pusher == "alice"
    assert event.repository == "example-org/gpu-fleet"


def test_form_encoded_payload_is_accepted(server: WebhookServer, recorder: Recorder) -> None:
    body = urlencode({"payload": json.dumps(push_payload())}).encode()
    status, data = post(
        server, body, signature=sign(body), content_type="application/x-www-form-urlencoded"
    )
    assert (status, data["result"]) == (202, "triggered")
    assert len(recorder.events) == 1


@pytest.mark.parametrize(
    "signature",
    [
        pytest.param(None, id="missing"),
        pytest.param("", id="empty"),
        pytest.param("sha256=" + "0" * 64, id="zeros"),
        pytest.param("sha1=abc", id="wrong-algorithm"),
        pytest.param("garbage", id="garbage"),
    ],
)
def test_missing_or_malformed_signature_is_401(
    server: WebhookServer, recorder: Recorder, signature: str | None
) -> None:
    body = json.dumps(push_payload()).encode()
    status, data = post(server, body, signature=signature)
    assert status == 401
    assert data["result"] == "unauthorized"
    assert recorder.events == []


def test_forged_signature_with_another_secret_is_401(
    server: WebhookServer, recorder: Recorder
) -> None:
    body = json.dumps(push_payload()).encode()
    status, data = post(server, body, signature=sign(body, b"not-the-secret"))
    assert status == 401
    assert "does not match" in data["message"]
    assert recorder.events == []


def test_replayed_signature_with_altered_body_is_401(
    server: WebhookServer, recorder: Recorder
) -> None:
    original = json.dumps(push_payload(ref="refs/heads/feature")).encode()
    signature = sign(original)
    altered = original.replace(b"refs/heads/feature", b"refs/heads/main")
    assert altered != original
    status, _ = post(server, altered, signature=signature)
    assert status == 401
    # one byte of whitespace is an alteration too
    status, _ = post(server, original + b" ", signature=signature)
    assert status == 401
    assert recorder.events == []


def _read_until_closed(s: socket.socket) -> str:
    chunks = []
    while chunk := s.recv(4096):
        chunks.append(chunk)
    return b"".join(chunks).decode()


def test_oversized_body_gets_413_before_the_body_is_sent(
    server: WebhookServer, recorder: Recorder
) -> None:
    # Only headers go out: the answer must come without the server waiting for the body.
    with socket.create_connection(server.address, timeout=5) as s:
        s.sendall(
            b"POST /webhook HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\n"
            b"X-Hub-Signature-256: sha256=00\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100000000\r\n\r\n"
        )
        response = _read_until_closed(s)
    assert response.startswith("HTTP/1.1 413 ")
    assert "exceeds the limit of 65536" in response
    assert recorder.events == []


def test_body_just_over_the_limit_is_413_and_at_the_limit_is_read(
    server: WebhookServer, recorder: Recorder
) -> None:
    limit = 64 * 1024
    pad = push_payload()
    base = json.dumps(pad).encode()
    at_limit = base[:-1] + b"," + b'"p":"' + b"x" * (limit - len(base) - 7) + b'"}'
    assert len(at_limit) == limit
    status, data = post(server, at_limit, signature=sign(at_limit))
    assert (status, data["result"]) == (202, "triggered")
    over = at_limit[:-2] + b'x"}'
    status, _ = post(server, over, signature=sign(over))
    assert status == 413


def test_missing_content_length_is_411(server: WebhookServer) -> None:
    with socket.create_connection(server.address, timeout=5) as s:
        s.sendall(
            b"POST /webhook HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            b"X-GitHub-Event: push\r\n\r\n0\r\n\r\n"
        )
        response = _read_until_closed(s)
    assert response.startswith("HTTP/1.1 411 ")


@pytest.mark.parametrize(
    "body",
    [b"{not json", b'["a list"]', b"\xff\xfe", b""],
    ids=["syntax", "not-object", "not-utf8", "empty"],
)
def test_signed_malformed_json_is_400(
    server: WebhookServer, recorder: Recorder, body: bytes
) -> None:
    status, data = post(server, body, signature=sign(body))
    assert status == 400
    assert data["result"] == "bad_request"
    assert "malformed payload" in data["message"]
    assert recorder.events == []


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (push_payload(ref="refs/heads/feature"), "ref refs/heads/feature ignored"),
        (push_payload(ref="refs/tags/v1"), "ref refs/tags/v1 ignored"),
        (push_payload(ref="refs/heads/main-old"), "watching refs/heads/main"),
        (push_payload(full_name="someone/else"), "not the watched repository"),
        (push_payload(deleted=True), "was deleted"),
    ],
    ids=["other-branch", "tag", "prefix-branch", "other-repo", "deleted"],
)
def test_other_repositories_and_branches_are_ignored_with_a_reason(
    server: WebhookServer, recorder: Recorder, payload: dict[str, Any], reason: str
) -> None:
    body = json.dumps(payload).encode()
    status, data = post(server, body, signature=sign(body))
    assert (status, data["result"]) == (202, "ignored")
    assert reason in data["message"]
    assert recorder.events == []


def test_ping_is_answered_and_other_events_ignored(
    server: WebhookServer, recorder: Recorder
) -> None:
    body = json.dumps({"zen": "Design for failure.", "hook_id": 1}).encode()
    assert post(server, body, signature=sign(body), event="ping") == (
        200,
        {"result": "ping", "message": "pong"},
    )
    status, data = post(server, body, signature=sign(body), event="issues")
    assert (status, data["result"]) == (202, "ignored")
    # a ping needs a valid signature too
    assert post(server, body, signature=sign(body, b"x"), event="ping")[0] == 401
    assert recorder.events == []


def test_wrong_path_and_method(server: WebhookServer) -> None:
    c = http.client.HTTPConnection(*server.address, timeout=5)
    c.request("GET", "/webhook")
    assert c.getresponse().status == 405
    c.close()
    c = http.client.HTTPConnection(*server.address, timeout=5)
    c.request("POST", "/other", body=b"{}")
    assert c.getresponse().status == 404
    c.close()


def test_keep_alive_connection_survives_refusals(server: WebhookServer, recorder: Recorder) -> None:
    c = http.client.HTTPConnection(*server.address, timeout=5)
    body = json.dumps(push_payload()).encode()
    for _ in range(5):
        assert post(server, body, signature=sign(body, b"bad"), conn=c)[0] == 401
    assert post(server, body, signature=sign(body), conn=c)[0] == 202
    c.close()
    assert len(recorder.events) == 1


def test_failing_trigger_is_500_and_logged(metrics: Metrics) -> None:
    def broken(event: PushEvent) -> None:
        raise RuntimeError("queue closed")

    receiver = WebhookReceiver(WebhookSecret(SECRET), WatchedBranch(REPO, "main"), broken, metrics)
    with WebhookServer("127.0.0.1", 0, receiver) as srv:
        body = json.dumps(push_payload()).encode()
        status, data = post(srv, body, signature=sign(body))
    assert (status, data["result"]) == (500, "error")


def test_requests_are_counted_by_outcome(server: WebhookServer, metrics: Metrics) -> None:
    body = json.dumps(push_payload()).encode()
    post(server, body, signature=sign(body))
    post(server, body, signature=None)
    post(server, body, signature=sign(body, b"x"))
    other = json.dumps(push_payload(ref="refs/heads/dev")).encode()
    post(server, other, signature=sign(other))
    text = metrics.exposition().decode()
    assert 'gpu_reconciler_webhook_requests_total{outcome="triggered"} 1.0' in text
    assert 'gpu_reconciler_webhook_requests_total{outcome="unauthorized"} 2.0' in text
    assert 'gpu_reconciler_webhook_requests_total{outcome="ignored"} 1.0' in text
    assert 'gpu_reconciler_webhook_requests_total{outcome="too_large"} 0.0' in text


def test_secret_is_never_logged(server: WebhookServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    body = json.dumps(push_payload()).encode()
    post(server, body, signature=sign(body))
    post(server, body, signature=sign(body, b"x"))
    post(server, b"{", signature=sign(b"{"))
    assert caplog.records, "the receiver logs its decisions"
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert SECRET.decode() not in logged
    assert sign(body) not in logged  # nor a valid signature, which would help a replay
    assert SECRET.decode() not in repr(server.receiver)


def test_load_secret_from_file_env_and_errors(tmp_path: Path) -> None:
    f = tmp_path / "secret"
    f.write_bytes(SECRET + b"\n")
    f.chmod(0o600)
    body = b"{}"
    assert load_secret(f).signature(body) == sign(body)
    assert load_secret(None, env_var="HOOK", environ={"HOOK": SECRET.decode()}).verify(
        body, sign(body)
    )
    # the file wins over the environment
    assert load_secret(f, env_var="HOOK", environ={"HOOK": "other"}).verify(body, sign(body))
    with pytest.raises(WebhookConfigError, match="set environment variable HOOK"):
        load_secret(None, env_var="HOOK", environ={})
    with pytest.raises(WebhookConfigError, match="cannot read the webhook secret file"):
        load_secret(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.write_bytes(b"\n")
    with pytest.raises(WebhookConfigError, match="is empty"):
        load_secret(empty)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("https://github.com/Org/Repo.git", ("github.com", "org/repo")),
        ("git@github.com:org/repo.git", ("github.com", "org/repo")),
        ("ssh://git@github.com:22/org/repo", ("github.com", "org/repo")),
        ("git://github.com/org/repo.git", ("github.com", "org/repo")),
        ("org/repo", ("", "org/repo")),
        ("https://gitea.local/group/sub/repo.git/", ("gitea.local", "group/sub/repo")),
    ],
)
def test_normalize_repository(value: str, expected: tuple[str, str]) -> None:
    assert normalize_repository(value) == expected


@pytest.mark.parametrize(
    ("configured", "repo", "matches"),
    [
        ("git@github.com:example-org/gpu-fleet.git", push_payload()["repository"], True),
        ("example-org/gpu-fleet", push_payload()["repository"], True),
        ("https://mirror.local/example-org/gpu-fleet.git", push_payload()["repository"], False),
        ("https://github.com/example-org/gpu-fleet", {"full_name": "example-org/gpu-fleet"}, True),
        ("example-org/gpu-fleet", {"full_name": "example-org/gpu-fleet-2"}, False),
    ],
)
def test_repository_matching(configured: str, repo: dict[str, Any], matches: bool) -> None:
    assert WatchedBranch(configured, "main").matches_repository(repo) is matches


def test_a_flood_of_forged_requests_does_not_flood_the_logs(
    recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="reconciler.trust.webhook")
    now = [1000.0]
    receiver = WebhookReceiver(
        WebhookSecret(SECRET), WatchedBranch(REPO, "main"), recorder, clock=lambda: now[0]
    )
    body = json.dumps(push_payload()).encode()
    with WebhookServer("127.0.0.1", 0, receiver) as server:
        c = http.client.HTTPConnection(*server.address, timeout=5)
        for _ in range(50):
            assert post(server, body, signature=sign(body, b"x"), conn=c)[0] == 401
        c.close()
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        assert "401 unauthorized from 127.0.0.1" in warnings[0].getMessage()
        # after the interval the next one reports how many were left out
        now[0] += receiver.warn_interval
        post(server, body, signature=sign(body, b"x"))
    last = [r for r in caplog.records if r.levelno == logging.WARNING][-1].getMessage()
    assert "(49 more since the last report)" in last


def test_expect_100_continue_is_refused_before_the_body_when_too_large(
    server: WebhookServer, recorder: Recorder
) -> None:
    head = (
        "POST /webhook HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\n"
        "Content-Type: application/json\r\nExpect: 100-continue\r\n"
    )
    with socket.create_connection(server.address, timeout=5) as s:
        s.sendall(f"{head}Content-Length: 10000000\r\n\r\n".encode())
        assert _read_until_closed(s).startswith("HTTP/1.1 413 ")
    body = json.dumps(push_payload()).encode()
    with socket.create_connection(server.address, timeout=5) as s:
        s.sendall(
            f"{head}X-Hub-Signature-256: {sign(body)}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        assert s.recv(4096).startswith(b"HTTP/1.1 100 Continue")
        s.sendall(body)
        assert _read_until_closed(s).startswith("HTTP/1.1 202 ")
    assert len(recorder.events) == 1


def test_idle_connections_cannot_take_every_thread(recorder: Recorder) -> None:
    receiver = WebhookReceiver(WebhookSecret(SECRET), WatchedBranch(REPO, "main"), recorder)
    with WebhookServer("127.0.0.1", 0, receiver, limits=ServerLimits(max_connections=2)) as srv:
        idle = [socket.create_connection(srv.address, timeout=5) for _ in range(2)]
        try:
            with socket.create_connection(srv.address, timeout=5) as s:
                assert _read_until_closed(s).startswith("HTTP/1.1 503 ")
        finally:
            for s in idle:
                s.close()
        body = json.dumps(push_payload()).encode()
        # the slots come back once the idle clients are gone
        wait_for(lambda: srv.active_connections == 0, timeout=10, what="the slots given back",
                 observe=lambda: srv.active_connections)
        status, _ = post(srv, body, signature=sign(body))
        assert status == 202
