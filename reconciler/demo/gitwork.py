"""The demo's Git side: a bare remote (what GitHub would be), and people's working copies that
commit, merge and push as people do, then tell the reconciler through a signed push webhook."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from reconciler.gitops.edits import EditOutcome, FieldEdit, edit_policy_text


class DemoGitError(RuntimeError):
    pass


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=False,
        # a person's global git settings (commit signing, hooks path) must not break the demo
        env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_COUNT": "2",
             "GIT_CONFIG_KEY_0": "commit.gpgsign", "GIT_CONFIG_VALUE_0": "false",
             "GIT_CONFIG_KEY_1": "core.hooksPath", "GIT_CONFIG_VALUE_1": "hooks",
             **(env or {})},
    )
    if done.returncode != 0:
        raise DemoGitError(f"git {' '.join(args)} (in {cwd}): {done.stderr.strip()}")
    return done.stdout


@dataclass(frozen=True)
class Person:
    name: str
    email: str

    @property
    def env(self) -> dict[str, str]:
        return {"GIT_AUTHOR_NAME": self.name, "GIT_AUTHOR_EMAIL": self.email,
                "GIT_COMMITTER_NAME": self.name, "GIT_COMMITTER_EMAIL": self.email}


@dataclass(frozen=True)
class Webhook:
    """Where the daemon's push webhook listens, and the shared secret (GitHub's scheme)."""

    url: str
    secret: bytes
    repository: str

    def push(self, branch: str, after: str) -> int:
        body = json.dumps({
            "ref": f"refs/heads/{branch}",
            "after": after,
            "repository": {"full_name": self.repository},
        }).encode()
        signature = "sha256=" + hmac.new(self.secret, body, hashlib.sha256).hexdigest()
        request = urllib.request.Request(self.url, data=body, method="POST", headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": "push",
            "X-Hub-Signature-256": signature,
        })
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except OSError:
            return 0  # the daemon's interval fetch picks the commit up all the same


class Remote:
    """A bare repository standing in for the Git host."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.url = path.resolve().as_uri()

    @classmethod
    def create(cls, path: Path) -> Remote:
        path.mkdir(parents=True)
        git(path, "init", "--bare", "--quiet", "--initial-branch=main")
        return cls(path)

    def log(self, *args: str) -> list[str]:
        return git(self.path, "log", "--format=%h %an: %s", "main", *args).splitlines()

    def show(self, spec: str) -> str | None:
        try:
            return git(self.path, "show", spec)
        except DemoGitError:
            return None

    def head(self) -> str:
        return git(self.path, "rev-parse", "main").strip()


class WorkingCopy:
    """A person's clone of the remote."""

    def __init__(self, remote: Remote, path: Path, person: Person,
                 webhook: Webhook | None = None) -> None:
        self.remote = remote
        self.path = path
        self.person = person
        self.webhook = webhook

    @classmethod
    def clone(cls, remote: Remote, path: Path, person: Person) -> WorkingCopy:
        git(path.parent, "clone", "--quiet", remote.url, str(path))
        git(path, "config", "pull.rebase", "false")
        return cls(remote, path, person)

    def git(self, *args: str) -> str:
        return git(self.path, *args, env=self.person.env)

    def import_tree(self, source: Path, message: str, *, drop: tuple[str, ...] = ()) -> str:
        """The first commit: a copy of ``source`` (``drop`` lists paths left out)."""
        for entry in source.iterdir():
            if entry.name in drop:
                continue
            target = self.path / entry.name
            if entry.is_dir():
                shutil.copytree(entry, target, ignore=shutil.ignore_patterns(*drop))
            else:
                shutil.copy2(entry, target)
        for relative in drop:
            candidate = self.path / relative
            if candidate.is_file():
                candidate.unlink()
        self.git("checkout", "--quiet", "-B", "main")
        self.git("add", "--all")
        self.git("commit", "--quiet", "-m", message)
        return self.push()

    def edit_policy(self, relative: str, edits: list[FieldEdit], message: str) -> str:
        path = self.path / relative
        result = edit_policy_text(path.read_text(), edits)
        if result.outcome is not EditOutcome.CHANGED or result.text is None:
            raise DemoGitError(f"{relative}: {result.outcome.value} {result.detail or ''}")
        path.write_text(result.text)
        self.git("add", relative)
        self.git("commit", "--quiet", "-m", message)
        return self.git("rev-parse", "HEAD").strip()

    def pull(self) -> None:
        self.git("pull", "--quiet", "--ff-only", "origin", "main")

    def push(self, attempts: int = 5) -> str:
        """Push main; when the reconciler pushed a status commit in between, merge it in (as a
        person would) and push again. Never forces."""
        for attempt in range(attempts):
            try:
                self.git("push", "--quiet", "origin", "main")
                break
            except DemoGitError:
                if attempt == attempts - 1:
                    raise
                self.git("fetch", "--quiet", "origin")
                self.git("merge", "--quiet", "--no-edit", "origin/main")
        head = self.git("rev-parse", "HEAD").strip()
        if self.webhook is not None:
            self.webhook.push("main", head)
        return head
