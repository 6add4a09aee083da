"""Push webhooks of every forge (docs/forges.md) over real HTTP on loopback.

The payloads in ``pushes/`` (``helpers.push_body``) follow each forge's documented push payload.
The signatures the tests send come from ``Forge.sign``, which the vector tests check against
values computed here independently (and, for GitHub's HMAC, against the vector GitHub
publishes).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import logging
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from reconciler.trust.forges import (
    BY_NAME,
    BitbucketServer,
    Forge,
    Gitea,
    Gitee,
    GitHub,
    GitLab,
    forge_of,
    gitee_signature,
)
from reconciler.trust.webhook import (
    Deliveries,
    PushEvent,
    WatchedBranch,
    WebhookReceiver,
    WebhookSecret,
    WebhookServer,
)
from tests.trust.helpers import NAMES, WATCHED, Recorder, push_body

SECRET = b"forge-test-secret-that-must-never-be-logged"
NOW = 1_764_000_000.0  # the receiver's wall clock in these tests
OTHERS = [n for n in NAMES if n != "github"]


class Hook:
    """A receiver watching ``main`` of one forge's repository, served on loopback."""

    def __init__(self, forge: str, *, max_body_bytes: int = 64 * 1024) -> None:
        self.forge = BY_NAME[forge]
        self.recorder = Recorder()
        self.now = NOW
        self.receiver = WebhookReceiver(
            WebhookSecret(SECRET),
            WatchedBranch(WATCHED[forge], "main"),
            self.recorder,
            max_body_bytes=max_body_bytes,
            wall_clock=lambda: self.now,
        )
        self.server = WebhookServer("127.0.0.1", 0, self.receiver)

    def headers(self, body: bytes, *, delivery: str = "d-1", secret: bytes = SECRET,
                at: float | None = None) -> dict[str, str]:  # fmt: skip
        signed = self.forge.sign(secret, body, delivery=delivery, now=self.now if at is None
                                 else at)  # fmt: skip
        return {"Content-Type": "application/json", **signed}

    def post(self, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        conn = http.client.HTTPConnection(*self.server.address, timeout=5)
        try:
            conn.request("POST", "/webhook", body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read())
        finally:
            conn.close()


@pytest.fixture(params=NAMES)
def hook(request: pytest.FixtureRequest) -> Iterator[Hook]:
    h = Hook(request.param)
    with h.server:
        yield h


@pytest.fixture(params=OTHERS)
def other_hook(request: pytest.FixtureRequest) -> Iterator[Hook]:
    h = Hook(request.param)
    with h.server:
        yield h


# -- the forges' own vectors ---------------------------------------------------------------

GITHUB_VECTOR_SECRET = b"It's a Secret to Everybody"
GITHUB_VECTOR_BODY = b"Hello, World!"
# published in GitHub's "Validating webhook deliveries"
GITHUB_VECTOR = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


def _refusal(forge: Forge, secret: bytes, headers: dict[str, str], body: bytes) -> str | None:
    lower = {k.lower(): v for k, v in headers.items()}
    return forge.refusal(WebhookSecret(secret), lower, body, NOW)


def test_github_published_vector() -> None:
    headers = GitHub().sign(GITHUB_VECTOR_SECRET, GITHUB_VECTOR_BODY, delivery="x", now=NOW)
    assert headers["X-Hub-Signature-256"] == f"sha256={GITHUB_VECTOR}"
    assert _refusal(GitHub(), GITHUB_VECTOR_SECRET, headers, GITHUB_VECTOR_BODY) is None
    assert _refusal(GitHub(), b"another", headers, GITHUB_VECTOR_BODY) is not None


def test_gitea_and_forgejo_sign_the_same_hmac_bare_hex() -> None:
    # Gitea publishes no vector; its X-Gitea-Signature is the same HMAC as GitHub's, bare hex
    headers = Gitea().sign(GITHUB_VECTOR_SECRET, GITHUB_VECTOR_BODY, delivery="x", now=NOW)
    assert headers["X-Gitea-Signature"] == headers["X-Forgejo-Signature"] == GITHUB_VECTOR
    for name in ("X-Forgejo-Signature", "X-Gitea-Signature", "X-Gogs-Signature"):
        alone = {"X-Gitea-Event": "push", name: GITHUB_VECTOR}
        assert _refusal(Gitea(), GITHUB_VECTOR_SECRET, alone, GITHUB_VECTOR_BODY) is None
        prefixed = {"X-Gitea-Event": "push", name: f"sha256={GITHUB_VECTOR}"}
        assert _refusal(Gitea(), GITHUB_VECTOR_SECRET, prefixed, GITHUB_VECTOR_BODY) is not None


def test_bitbucket_server_signs_like_github_under_x_hub_signature() -> None:
    headers = BitbucketServer().sign(
        GITHUB_VECTOR_SECRET, GITHUB_VECTOR_BODY, delivery="x", now=NOW
    )
    assert headers["X-Hub-Signature"] == f"sha256={GITHUB_VECTOR}"
    assert _refusal(BitbucketServer(), GITHUB_VECTOR_SECRET, headers, GITHUB_VECTOR_BODY) is None


def test_gitlab_token_is_the_secret_itself() -> None:
    headers = GitLab().sign(b"glpat-like-secret", b"{}", delivery="x", now=NOW)
    assert headers["X-Gitlab-Token"] == "glpat-like-secret"
    assert _refusal(GitLab(), b"glpat-like-secret", headers, b"anything") is None
    assert _refusal(GitLab(), b"glpat-like-secre", headers, b"{}") == (
        "X-Gitlab-Token does not match the secret"
    )


def test_gitee_signature_as_its_documentation_computes_it() -> None:
    # Gitee's help page: HmacSHA256 over "<timestamp>\n<secret>", keyed with the secret, base64
    secret, stamp = b"this is secret", "1576754827988"
    expected = base64.b64encode(
        hmac.new(secret, f"{stamp}\n{secret.decode()}".encode(), hashlib.sha256).digest()
    ).decode()
    assert gitee_signature(secret, stamp) == expected
    headers = Gitee().sign(secret, b"{}", delivery="", now=int(stamp) / 1000)
    assert headers["X-Gitee-Token"] == expected
    assert headers["X-Gitee-Timestamp"] == stamp
    refuse = Gitee().refusal
    lower = {k.lower(): v for k, v in headers.items()}
    assert refuse(WebhookSecret(secret), lower, b"{}", int(stamp) / 1000 + 60) is None
    # the URL-encoded form of the documentation's step 3 is accepted too
    lower["x-gitee-token"] = expected.replace("+", "%2B").replace("/", "%2F").replace("=", "%3D")
    assert refuse(WebhookSecret(secret), lower, b"{}", int(stamp) / 1000) is None


# -- told apart by their headers -------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_each_forge_is_told_by_the_headers_it_sends(name: str) -> None:
    sent = BY_NAME[name].sign(SECRET, b"{}", delivery="d", now=NOW)
    assert forge_of({k.lower(): v for k, v in sent.items()}).name == name


def test_a_request_naming_no_forge_is_checked_as_github() -> None:
    assert forge_of({"content-type": "application/json"}).name == "github"


# -- over HTTP, per forge ----------------------------------------------------------------------


def test_a_correct_delivery_triggers(hook: Hook) -> None:
    body = push_body(hook.forge.name)
    status, data = hook.post(body, hook.headers(body))
    assert (status, data["result"]) == (202, "triggered")
    assert hook.recorder.fired.wait(1.0)
    [event] = hook.recorder.events
    assert (event.forge, event.ref, event.after, event.pusher) == (
        hook.forge.name,
        "refs/heads/main",
        "a" * 40,
        "alice",
    )
    assert event.delivery  # every forge's delivery carries an id the repeat check uses


def test_a_wrong_secret_is_401_and_triggers_nothing(hook: Hook) -> None:
    body = push_body(hook.forge.name)
    status, data = hook.post(body, hook.headers(body, secret=b"not-the-secret"))
    assert (status, data["result"]) == (401, "unauthorized")
    assert "does not match" in data["message"]
    assert hook.recorder.events == []


def test_no_proof_at_all_is_401(hook: Hook) -> None:
    body = push_body(hook.forge.name)
    proofs = {"x-hub-signature-256", "x-gitea-signature", "x-forgejo-signature",
              "x-gitlab-token", "x-hub-signature", "x-gitee-token"}  # fmt: skip
    headers = {k: v for k, v in hook.headers(body).items() if k.lower() not in proofs}
    status, data = hook.post(body, headers)
    assert (status, data["result"]) == (401, "unauthorized")
    assert data["message"].startswith("missing ")
    assert hook.recorder.events == []


def test_a_replayed_delivery_is_acted_on_once(hook: Hook) -> None:
    body = push_body(hook.forge.name)
    headers = hook.headers(body, delivery="f6266f16-1bf3-46a5-9ea4-602e06ead473")
    assert hook.post(body, headers)[0] == 202
    status, data = hook.post(body, headers)
    assert (status, data["result"]) == (200, "ignored")
    assert "acted on already" in data["message"]
    assert len(hook.recorder.events) == 1
    # another delivery of the same push is acted on (the fetch is idempotent)
    again = hook.headers(body, delivery="0c8a5d40-second", at=hook.now + 1)
    assert hook.post(body, again)[0] == 202
    assert len(hook.recorder.events) == 2


def test_other_branches_are_ignored(hook: Hook) -> None:
    body = push_body(hook.forge.name, ref="refs/heads/feature")
    status, data = hook.post(body, hook.headers(body))
    assert (status, data["result"]) == (202, "ignored")
    assert "ignored: watching refs/heads/main" in data["message"]
    assert hook.recorder.events == []


def test_a_branch_deletion_triggers_nothing(hook: Hook) -> None:
    # GitHub and Gitee say "deleted": true, GitLab and Gitea an all-zero "after", Bitbucket
    # Server a change of type DELETE
    body = push_body(hook.forge.name, after="0" * 40).replace(
        b'"deleted": false', b'"deleted": true'
    )
    if hook.forge.name == "bitbucket-server":
        body = body.replace(b'"type": "UPDATE"}]', b'"type": "DELETE"}]')
    status, data = hook.post(body, hook.headers(body))
    assert (status, data["result"]) == (202, "ignored")
    assert "was deleted" in data["message"]
    assert hook.recorder.events == []


def test_the_limits_hold_for_every_forge_body_size(other_hook: Hook) -> None:
    # decided from Content-Length before the forge is even known: the body is never sent
    body = push_body(other_hook.forge.name)
    head = "".join(f"{k}: {v}\r\n" for k, v in other_hook.headers(body).items())
    with socket.create_connection(other_hook.server.address, timeout=5) as s:
        s.sendall(f"POST /webhook HTTP/1.1\r\nHost: x\r\n{head}Content-Length: 100000000\r\n\r\n"
                  .encode())  # fmt: skip
        response = b""
        while chunk := s.recv(4096):
            response += chunk
    assert response.startswith(b"HTTP/1.1 413 ")
    # one byte over the limit with a valid proof: still 413
    limit = 64 * 1024
    base = len(push_body(other_hook.forge.name))
    over = push_body(other_hook.forge.name, pad=limit + 1 - base - len(', "padding": ""'))
    assert len(over) == limit + 1
    assert other_hook.post(over, other_hook.headers(over))[0] == 413
    assert other_hook.recorder.events == []


def test_the_limits_hold_for_every_forge_json_depth(other_hook: Hook) -> None:
    deep = json.loads(push_body(other_hook.forge.name))
    deep["nested"] = json.loads("[" * 70 + "]" * 70)
    body = json.dumps(deep).encode()
    status, data = other_hook.post(body, other_hook.headers(body))
    assert (status, data["result"]) == (400, "bad_request")
    assert "nested deeper than 64 levels" in data["message"]
    assert other_hook.recorder.events == []


# -- per forge specifics -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("forge", "body", "event", "message"),
    [
        pytest.param("github", b'{"zen": "Design for failure.", "hook_id": 1}', "ping", "pong",
                     id="github-ping"),
        pytest.param("bitbucket-server", b'{"test": true}', "diagnostics:ping", "pong",
                     id="bitbucket-server-diagnostics-ping"),
        # Gitea's "Test Delivery" is a push of the branch head to itself
        pytest.param("gitea", push_body("gitea", before="c" * 40, after="c" * 40), None,
                     "test delivery: refs/heads/main did not move; nothing to fetch",
                     id="gitea-test-delivery"),
    ],
)  # fmt: skip
def test_pings_and_test_deliveries_are_answered_without_a_sync(
    forge: str, body: bytes, event: str | None, message: str
) -> None:
    h = Hook(forge)
    header = h.forge.event_headers[0]
    with h.server:
        signed = h.headers(body)
        forged = h.headers(body, secret=b"x", delivery="d-2")
        if event is not None:
            signed = {k: event if k.lower() == header else v for k, v in signed.items()}
            forged = {k: event if k.lower() == header else v for k, v in forged.items()}
        assert h.post(body, signed) == (200, {"result": "ping", "message": message})
        assert h.post(body, forged)[0] == 401  # a ping proves the secret too
    assert h.recorder.events == []


def test_gitea_signature_is_checked_even_beside_a_good_github_one() -> None:
    h = Hook("gitea")
    with h.server:
        body = push_body("gitea")
        headers = {**h.headers(body), "X-Forgejo-Signature": "0" * 64}
        status, data = h.post(body, headers)
    assert (status, data["message"]) == (401, "X-Forgejo-Signature does not match the body")
    assert h.recorder.events == []


def test_other_gitlab_and_gitee_events_are_ignored() -> None:
    for name, event_header in (("gitlab", "X-Gitlab-Event"), ("gitee", "X-Gitee-Event")):
        h = Hook(name)
        with h.server:
            body = push_body(name)
            status, data = h.post(body, {**h.headers(body), event_header: "Tag Push Hook"})
        assert (status, data["result"]) == (202, "ignored")
        assert h.recorder.events == []


@pytest.mark.parametrize(
    ("offset", "accepted"),
    [(-3601.0, False), (-3599.0, True), (0.0, True), (3599.0, True), (3601.0, False)],
)
def test_gitee_timestamp_must_be_within_an_hour(offset: float, accepted: bool) -> None:
    h = Hook("gitee")
    with h.server:
        body = push_body("gitee")
        status, data = h.post(body, h.headers(body, at=h.now + offset))
    if accepted:
        assert status == 202
        assert len(h.recorder.events) == 1
    else:
        assert (status, data["result"]) == (401, "unauthorized")
        assert "accepted within an hour" in data["message"]
        assert h.recorder.events == []


def test_gitee_password_mode_and_a_malformed_timestamp() -> None:
    h = Hook("gitee")
    with h.server:
        body = push_body("gitee")
        plain = {**h.headers(body), "X-Gitee-Token": SECRET.decode()}
        assert h.post(body, plain)[0] == 202
        no_stamp = {k: v for k, v in plain.items() if k != "X-Gitee-Timestamp"}
        status, data = h.post(body, no_stamp)
        assert status == 401
        assert "X-Gitee-Timestamp" in data["message"]
        wrong = {**h.headers(body, at=h.now + 5), "X-Gitee-Token": "wrong-password"}
        assert h.post(body, wrong)[0] == 401
    assert len(h.recorder.events) == 1


def test_a_failed_trigger_leaves_the_delivery_to_the_forges_retry() -> None:
    calls: list[PushEvent] = []

    def flaky(event: PushEvent) -> None:
        calls.append(event)
        if len(calls) == 1:
            raise RuntimeError("queue closed")

    receiver = WebhookReceiver(WebhookSecret(SECRET), WatchedBranch(WATCHED["gitlab"], "main"),
                               flaky)  # fmt: skip
    body = push_body("gitlab")
    headers = {k.lower(): v for k, v in GitLab().sign(SECRET, body, delivery="r-1",
                                                     now=NOW).items()}  # fmt: skip
    assert receiver.handle(headers, body, 0.0).status == 500
    assert receiver.handle(headers, body, 0.0).status == 202
    assert receiver.handle(headers, body, 0.0).status == 200
    assert len(calls) == 2


def test_remembered_deliveries_are_bounded_and_shared_by_no_two_forges() -> None:
    seen = Deliveries(capacity=3)
    assert all(seen.take("github", d) for d in ("a", "b", "c"))
    assert not seen.take("github", "a")  # now the most recent
    assert seen.take("gitlab", "a")  # another forge's id space
    assert seen.take("github", "b")  # pushed out by the gitlab entry: acted on again
    assert seen.take("github", "") and seen.take("github", "")  # no id: nothing to compare


def test_a_gitlab_project_in_a_subgroup_matches_its_whole_path() -> None:
    payload = json.loads(push_body("gitlab").replace(b"platform/", b"platform/gpu/"))
    push = GitLab().push(payload)
    assert not isinstance(push, str)
    for configured in (
        "platform/gpu/gpu-fleet",
        "https://gitlab.example.org/platform/gpu/gpu-fleet",
    ):
        assert WatchedBranch(configured, "main").matches_repository(push.repository)
    assert not WatchedBranch("platform/gpu-fleet", "main").matches_repository(push.repository)


def test_a_github_push_to_an_all_zero_commit_is_no_deletion_without_deleted() -> None:
    # GitHub marks a deletion with "deleted": true; without it the push triggers a fetch,
    # which reads the branch from Git whatever "after" says (as before forges were told apart)
    payload = json.loads(push_body("github", after="0" * 40))
    push = GitHub().push(payload)
    assert not isinstance(push, str)
    assert not push.changes[0].deleted
    payload["deleted"] = True
    push = GitHub().push(payload)
    assert not isinstance(push, str) and push.changes[0].deleted


def test_no_forges_secret_or_token_reaches_a_log(
    hook: Hook, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    body = push_body(hook.forge.name)
    hook.post(body, hook.headers(body))
    hook.post(body, hook.headers(body, secret=b"a-wrong-secret-also-unlogged", delivery="d-2"))
    hook.post(b"{", hook.headers(b"{", delivery="d-3"))
    assert caplog.records, "the receiver logs its decisions"
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert SECRET.decode() not in logged  # GitLab's and Gitee's token is the secret itself
    assert "a-wrong-secret-also-unlogged" not in logged
    for value in hook.headers(body).values():
        if len(value) > 20 and value != "application/json":
            assert value not in logged  # nor a valid signature, which would help a replay
