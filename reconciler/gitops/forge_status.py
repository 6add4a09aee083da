"""Commit statuses to the forge (docs/forges.md): the HTTP calls of GitHub, GitLab and
Gitea/Forgejo, and the worker thread that makes them.

The sync loop only ``offer``s a state: the newest one per context waits in a small slot map
(bounded: a full map drops the offer, counted), and one background thread posts it when the
``PostGate`` lets it (deduplicated, at most one post per context per 10 s), retrying a failed
post with back-off (``RETRIES`` times, ``FIRST_RETRY`` doubling); a newer state replaces one that
waits for its retry. Nothing here blocks or slows the rollout: a forge that answers 500 or
hangs (each request has ``TIMEOUT``) holds only this thread. Only the leader posts
(``is_leader``). The token file is read again at each post; the token goes in a header only and
is never logged, raised or written (an answer's text is redacted before it is logged).

Where the statuses go is asked at each post (``ForgeTarget``: the flags, each missing one from the
``forge:`` section in force, which the sync publishes with every commit it applies), so a change
of ``forge:`` in Git takes effect at the next commit, without a restart.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import quote

from reconciler import clock as clocks
from reconciler.clock import Clock
from reconciler.files import FileRefused, read_bounded
from reconciler.policy.forge_config import (
    ForgeConfig,
    ForgeConfigError,
    ForgeSection,
    forge_config,
)
from reconciler.views.commit_status import CommitStatus, PostGate, forge_state

log = logging.getLogger("reconciler.forge")

#: seconds a forge has to answer one post
TIMEOUT = 10.0
#: a failed post is tried again this many times, after FIRST_RETRY seconds doubling
RETRIES = 4
FIRST_RETRY = 1.0
MAX_RETRY = 60.0
#: most contexts waiting at once (one per cluster: a process syncs one)
MAX_PENDING = 16
_MAX_TOKEN_BYTES = 16 * 1024


class StatusMetrics(Protocol):
    def count_forge_status_post(self, forge: str, outcome: str) -> None: ...


class ForgePostError(Exception):
    """A post the forge did not take (the message never holds the token)."""


@dataclass(frozen=True, slots=True)
class StatusRequest:
    url: str
    headers: dict[str, str]
    body: dict[str, str]


def status_request(forge: ForgeConfig, status: CommitStatus, token: str) -> StatusRequest:
    """The forge's own call for ``status``."""
    state = forge_state(forge.kind, status.state)
    body = {"state": state, "description": status.description}
    if status.target_url:
        body["target_url"] = status.target_url
    headers = {"Content-Type": "application/json", "Accept": "application/json",
               "User-Agent": "gpu-gitops-reconciler"}
    sha = quote(status.commit, safe="")
    if forge.kind == "gitlab":
        body["name"] = status.context
        project = quote(forge.repository, safe="")
        headers["PRIVATE-TOKEN"] = token
        return StatusRequest(f"{forge.url}/projects/{project}/statuses/{sha}", headers, body)
    body["context"] = status.context
    headers["Authorization"] = (f"Bearer {token}" if forge.kind == "github"
                                else f"token {token}")
    if forge.kind == "github":
        headers["Accept"] = "application/vnd.github+json"
    repo = "/".join(quote(part, safe="") for part in forge.repository.split("/"))
    return StatusRequest(f"{forge.url}/repos/{repo}/statuses/{sha}", headers, body)


def read_token(path: Path) -> str:
    """The token, read now (a rotated file takes effect at the next post)."""
    try:  # a Secret's mounted file is a link: followed; a FIFO is refused, not waited on
        token = read_bounded(path, limit=_MAX_TOKEN_BYTES, follow_links=True).decode(
            "utf-8").strip()
    except FileRefused as exc:
        raise ForgePostError(f"the forge token file {path} is unusable: {exc.reason}") from None
    except UnicodeDecodeError:
        raise ForgePostError(f"the forge token file {path} is not UTF-8") from None
    if not token:
        raise ForgePostError(f"the forge token file {path} is empty")
    return token


def post_status(forge: ForgeConfig, status: CommitStatus, token_file: Path, *,
                timeout: float = TIMEOUT) -> int:
    """One post; returns the HTTP status (2xx). Raises ForgePostError."""
    token = read_token(token_file)
    request = status_request(forge, status, token)
    http = urllib.request.Request(request.url, data=json.dumps(request.body).encode(),
                                  headers=request.headers, method="POST")
    try:
        with urllib.request.urlopen(http, timeout=timeout) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        text = exc.read(300).decode("utf-8", "replace") if exc.fp is not None else ""
        raise ForgePostError(f"{forge.kind} answered {exc.code}: "
                             f"{_redact(' '.join(text.split()), token)}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise ForgePostError(f"{forge.kind} unreachable: "
                             f"{_redact(str(reason), token)}") from None


def _redact(text: str, token: str) -> str:
    return text.replace(token, "***") if token else text


class ForgeTarget:
    """The forge the statuses go to now: the command line's ``--forge``, ``--forge-url`` and
    ``--forge-repository``, each missing one from the ``forge:`` section in force
    (``section()``, the live settings). Resolved again when the section changes; one that
    cannot be used turns the statuses off, said once in an ERROR line, until a commit changes
    it. Safe from any thread."""

    def __init__(self, *, kind: str | None, url: str | None, repository: str | None,
                 remote: str, section: Callable[[], ForgeSection | None]) -> None:
        self.kind = kind
        self.url = url
        self.repository = repository
        self.remote = remote
        self.section = section
        self._lock = threading.Lock()
        #: (the section resolved last, what it gave); None: not resolved yet
        self._resolved: tuple[ForgeSection | None, ForgeConfig | None] | None = None
        #: why the section in force cannot be used (None: it can, or names no forge)
        self.error: str | None = None

    def current(self) -> ForgeConfig | None:
        section = self.section()
        with self._lock:
            if self._resolved is not None and self._resolved[0] == section:
                return self._resolved[1]
            before = self._resolved[1] if self._resolved is not None else None
            try:
                forge = forge_config(kind=self.kind, url=self.url, repository=self.repository,
                                     remote=self.remote, file_section=section)
                self.error = None
            except ForgeConfigError as exc:
                forge, self.error = None, str(exc)
                # a merged change must not keep the daemon (and every rollout) from running:
                # only the statuses are off
                log.error("reconciler.yaml forge: %s; commit statuses are off until it is "
                          "fixed (the next commit that changes it takes effect)", exc)
            self._resolved = (section, forge)
        if forge is not None and forge != before:
            log.info("commit statuses to %s %s (%s)", forge.kind, forge.repository, forge.url)
        elif forge is None and before is not None and self.error is None:
            log.info("commit statuses off: reconciler.yaml names no forge any more")
        return forge


class CommitStatuses:
    """The background poster (see the module's docstring)."""

    def __init__(self, forge: ForgeConfig | Callable[[], ForgeConfig | None], token_file: Path,
                 *, is_leader: Callable[[], bool] = lambda: True,
                 metrics: StatusMetrics | None = None, monotonic: Clock = clocks.monotonic,
                 post: Callable[[ForgeConfig, CommitStatus, Path], int] | None = None,
                 first_retry: float = FIRST_RETRY, retries: int = RETRIES,
                 gate: PostGate | None = None) -> None:
        """``forge``: where to post, or a callable asked before each post (``ForgeTarget``;
        None: nowhere, the statuses are dropped)."""
        if isinstance(forge, ForgeConfig):
            fixed = forge
            self.forge: Callable[[], ForgeConfig | None] = lambda: fixed
        else:
            self.forge = forge
        #: the forge the gate's record of posted states is about
        self._posted_to: ForgeConfig | None = None
        self.token_file = token_file
        self.is_leader = is_leader
        self.metrics = metrics
        self.monotonic = monotonic
        self.post = post or post_status
        self.first_retry = first_retry
        self.retries = retries
        self.gate = gate or PostGate()
        self._cond = threading.Condition()
        #: context -> (status, failed attempts, not before: monotonic)
        self._pending: dict[str, tuple[CommitStatus, int, float]] = {}
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="forge-status", daemon=True)
        #: posts the forge took (tests read them)
        self.posted: list[CommitStatus] = []

    def start(self) -> CommitStatuses:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def offer(self, status: CommitStatus) -> None:
        """Never blocks on the forge: the newest state per context wins."""
        with self._cond:
            waiting = self._pending.get(status.context)
            if waiting is not None and waiting[0] == status:
                return
            if waiting is None and len(self._pending) >= MAX_PENDING:
                self._count(self._posted_to, "dropped")
                return
            self._pending[status.context] = (status, 0, 0.0)
            self._cond.notify_all()

    def idle(self) -> bool:
        """Nothing waits to be posted (tests)."""
        with self._cond:
            return not self._pending

    def _count(self, forge: ForgeConfig | None, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.count_forge_status_post(forge.kind if forge is not None else "none",
                                                 outcome)

    def _next(self) -> tuple[CommitStatus, int, ForgeConfig] | None:
        """The next status whose time came and the forge it goes to (waits for one); None once
        stopped."""
        with self._cond:
            while not self._stopped:
                forge = self.forge()
                if forge != self._posted_to:
                    # another forge (or repository) has none of the states posted so far
                    self.gate.posted.clear()
                    self._posted_to = forge
                if forge is None:
                    self._pending.clear()  # nowhere to post: a later state is offered again
                    self._cond.wait()
                    continue
                now = self.monotonic()
                soonest: float | None = None
                for context, (status, attempts, not_before) in list(self._pending.items()):
                    due = self.gate.due(status, now)
                    if due is None:
                        del self._pending[context]  # the forge has it already
                        continue
                    at = max(due, not_before)
                    if at <= now:
                        del self._pending[context]
                        return status, attempts, forge
                    soonest = at if soonest is None else min(soonest, at)
                self._cond.wait(None if soonest is None else soonest - now)
            return None

    def _run(self) -> None:
        while (item := self._next()) is not None:
            status, attempts, forge = item
            if not self.is_leader():
                continue  # the leader posts; a replica that leads later offers again
            self.gate.attempted(status, self.monotonic())
            try:
                self.post(forge, status, self.token_file)
            except ForgePostError as exc:
                self._failed(forge, status, attempts, str(exc))
            except Exception as exc:  # a bug must not end the thread; never the token in it
                self._failed(forge, status, attempts, type(exc).__name__)
            else:
                self.gate.done(status)
                self.posted.append(status)
                self._count(forge, "posted")
                log.info("commit status %s %s on %s: %s", status.context, status.state,
                         status.commit[:12], status.description)

    def _failed(self, forge: ForgeConfig, status: CommitStatus, attempts: int,
                reason: str) -> None:
        self._count(forge, "failed")
        if attempts >= self.retries:
            self._count(forge, "given_up")
            log.warning("commit status %s %s on %s not posted after %d tries: %s",
                        status.context, status.state, status.commit[:12], attempts + 1, reason)
            return
        wait = min(self.first_retry * 2 ** attempts, MAX_RETRY)
        log.warning("commit status %s %s on %s failed (%s); retrying in %.1f s",
                    status.context, status.state, status.commit[:12], reason, wait)
        with self._cond:
            if status.context not in self._pending:  # a newer state replaces the retry
                self._pending[status.context] = (status, attempts + 1,
                                                 self.monotonic() + wait)
