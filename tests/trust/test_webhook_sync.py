"""Webhook -> immediate fetch, end to end with the Git side's CommitSource and a real remote.

The interval fetch is set to an hour, so a commit reported within seconds was fetched because
of the webhook. How fast (the 1 s goal) is measured by bench/webhook.py, not asserted here.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from reconciler.clock import wall
from reconciler.gitops.mirror import Mirror
from reconciler.gitops.source import CommitSource, NewCommit
from reconciler.trust.forges import BY_NAME
from reconciler.trust.webhook import WatchedBranch, WebhookReceiver, WebhookSecret, WebhookServer
from tests.trust.helpers import NAMES, WATCHED, push_body

SECRET = b"end-to-end-secret"
ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "Alice",
    "GIT_AUTHOR_EMAIL": "alice@example.org",
    "GIT_COMMITTER_NAME": "Alice",
    "GIT_COMMITTER_EMAIL": "alice@example.org",
}


def git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True, text=True
    ).stdout.strip()


def deliver(address: tuple[str, int], sha: str, *, secret: bytes = SECRET) -> int:
    body = json.dumps(
        {
            "ref": "refs/heads/main",
            "after": sha,
            "repository": {"full_name": "example-org/gpu-fleet"},
        }
    ).encode()
    signature = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    conn = http.client.HTTPConnection(*address, timeout=5)
    conn.request(
        "POST",
        "/webhook",
        body=body,
        headers={"X-GitHub-Event": "push", "X-Hub-Signature-256": signature},
    )
    status = conn.getresponse().status
    conn.close()
    return status


class Remote:
    """A bare remote with a work clone, and a CommitSource on it that fetches only when told
    (the interval is an hour): what it reports after the first look came by the webhook."""

    def __init__(self, tmp_path: Path) -> None:
        self.bare = tmp_path / "remote.git"
        git("init", "-q", "--bare", "-b", "main", str(self.bare))
        self.work = tmp_path / "work"
        git("clone", "-q", str(self.bare), str(self.work))
        self.commit("pause: false\n", "initial policy")
        self.reported: list[NewCommit] = []
        self.arrived = threading.Condition()
        self.source = CommitSource(Mirror(self.bare.as_uri(), tmp_path / "state"), ["main"],
                                   self._on_commit, interval=3600)  # fmt: skip

    def _on_commit(self, new: NewCommit) -> None:
        with self.arrived:
            self.reported.append(new)
            self.arrived.notify_all()

    def commit(self, text: str, message: str) -> str:
        (self.work / "policy.yaml").write_text(text)
        git("add", "policy.yaml", cwd=self.work)
        git("commit", "-q", "-m", message, cwd=self.work)
        git("push", "-q", "origin", "HEAD:main", cwd=self.work)
        return git("rev-parse", "HEAD", cwd=self.work)

    def wait_reported(self, count: int) -> bool:
        with self.arrived:
            return self.arrived.wait_for(lambda: len(self.reported) == count, timeout=10)

    @contextmanager
    def started(self) -> Iterator[Remote]:
        self.source.start()
        try:
            assert self.wait_reported(1), "first look"
            yield self
        finally:
            self.source.stop()


def test_signed_push_makes_the_source_fetch_within_one_second(tmp_path: Path) -> None:
    remote = Remote(tmp_path)
    reported, source = remote.reported, remote.source
    triggered: list[object] = []
    receiver = WebhookReceiver(
        WebhookSecret(SECRET),
        WatchedBranch("example-org/gpu-fleet", "main"),
        lambda event: (triggered.append(event), source.trigger()),
    )
    with remote.started(), WebhookServer("127.0.0.1", 0, receiver) as server:
        sha = remote.commit("pause: true\n", "pause the rollout")

        # a forged delivery triggers nothing
        assert deliver(server.address, sha, secret=b"forged") == 401
        # the receiver decides before it answers, and the source fetches hourly otherwise
        assert triggered == []
        assert [c.sha for c in reported][1:] == []

        assert deliver(server.address, sha) == 202
        assert remote.wait_reported(2)
    assert reported[1].sha == sha
    assert reported[1].commits[0].sha == sha


@pytest.mark.parametrize("forge", NAMES)
def test_each_forges_push_makes_the_source_fetch(tmp_path: Path, forge: str) -> None:
    remote = Remote(tmp_path)
    receiver = WebhookReceiver(
        WebhookSecret(SECRET),
        WatchedBranch(WATCHED[forge], "main"),
        lambda event: remote.source.trigger(),
    )
    with remote.started(), WebhookServer("127.0.0.1", 0, receiver) as server:
        before = git("rev-parse", "HEAD", cwd=remote.work)
        sha = remote.commit("pause: true\n", f"pause the rollout ({forge})")
        body = push_body(forge, before=before, after=sha)
        hook = BY_NAME[forge]
        conn = http.client.HTTPConnection(*server.address, timeout=5)
        forged = hook.sign(b"forged", body, delivery="d-0", now=wall())
        conn.request("POST", "/webhook", body=body, headers=forged)
        response = conn.getresponse()
        assert (response.status, json.loads(response.read())["result"]) == (401, "unauthorized")
        signed = hook.sign(SECRET, body, delivery="d-1", now=wall())
        conn.request("POST", "/webhook", body=body, headers=signed)
        response = conn.getresponse()
        assert (response.status, json.loads(response.read())["result"]) == (202, "triggered")
        conn.close()
        assert remote.wait_reported(2)
    assert [c.sha for c in remote.reported] == [before, sha]
