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
import time
from pathlib import Path

from reconciler.gitops.mirror import Mirror
from reconciler.gitops.source import CommitSource, NewCommit
from reconciler.trust.webhook import WatchedBranch, WebhookReceiver, WebhookSecret, WebhookServer

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


def test_signed_push_makes_the_source_fetch_within_one_second(tmp_path: Path) -> None:
    bare = tmp_path / "remote.git"
    git("init", "-q", "--bare", "-b", "main", str(bare))
    work = tmp_path / "work"
    git("clone", "-q", str(bare), str(work))
    (work / "policy.yaml").write_text("pause: false\n")
    git("add", "policy.yaml", cwd=work)
    git("commit", "-q", "-m", "initial policy", cwd=work)
    git("push", "-q", "origin", "HEAD:main", cwd=work)

    reported: list[NewCommit] = []
    arrived = threading.Condition()

    def on_commit(new: NewCommit) -> None:
        with arrived:
            reported.append(new)
            arrived.notify_all()

    source = CommitSource(Mirror(bare.as_uri(), tmp_path / "state"), ["main"], on_commit,
                          interval=3600)  # fmt: skip
    receiver = WebhookReceiver(
        WebhookSecret(SECRET),
        WatchedBranch("example-org/gpu-fleet", "main"),
        lambda event: source.trigger(),
    )
    source.start()
    try:
        with arrived:
            assert arrived.wait_for(lambda: len(reported) == 1, timeout=10), "first look"
        with WebhookServer("127.0.0.1", 0, receiver) as server:
            (work / "policy.yaml").write_text("pause: true\n")
            git("commit", "-q", "-am", "pause the rollout", cwd=work)
            git("push", "-q", "origin", "HEAD:main", cwd=work)
            sha = git("rev-parse", "HEAD", cwd=work)

            # a forged delivery triggers nothing
            assert deliver(server.address, sha, secret=b"forged") == 401
            time.sleep(0.5)
            assert [c.sha for c in reported][1:] == []

            assert deliver(server.address, sha) == 202
            with arrived:
                assert arrived.wait_for(lambda: len(reported) == 2, timeout=10)
    finally:
        source.stop()
    assert reported[1].sha == sha
    assert reported[1].commits[0].sha == sha
