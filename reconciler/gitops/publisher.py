"""Commits the reconciler's own changes to a branch and pushes them, without ever forcing.

Changes wait in a queue persisted in the state directory, so a remote that is down, or a
restart, loses nothing. A flush rebuilds every queued change on top of the remote head just
fetched (this is our rebase: each change is re-applied to the files as they are now, so a person's
commit that landed in between is kept), pushes the result as one fast-forward, and on a lost race
fetches and rebuilds again, with back-off, a bounded number of times. A change already in Git
(found by its ``Reconciler-Change-Id`` trailer, or because Git already says the same) is dropped,
so nothing is committed twice.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from reconciler.clock import Clock, wall
from reconciler.gitops.commits import (
    CHANGE_ID_TRAILER,
    Identity,
    applied_trailers,
    format_message,
    own_trailers,
)
from reconciler.gitops.edits import (
    EditOutcome,
    FieldEdit,
    edit_policy_text,
    is_cluster_operator,
    status_change,
)
from reconciler.gitops.errors import GitOpsError, PushDeclined, PushRejected, RemoteUnavailable
from reconciler.gitops.mirror import Mirror
from reconciler.policy.document import YamlRefused, parse_yaml

log = logging.getLogger(__name__)

#: ``spec``: the rollout's own write-backs (ignored by the sync,
#: docs/gitops.md#git-stays-the-truth); ``promotion`` (a ``mode: auto`` promotion), ``window`` (an
#: operator-mode window pause) and ``health`` (an operator-mode health pause): policy changes the
#: sync applies like a person's (docs/health.md and docs/configuration.md#promotion)
ChangeKind = Literal["status", "spec", "promotion", "window", "health"]
#: the kinds whose commits are not "own": the sync applies them
APPLIED_KINDS: frozenset[str] = frozenset({"promotion", "window", "health"})
#: how far back a flush looks for change ids already pushed (a crash between push and queue save)
_LANDED_SCAN = 200


@dataclass(frozen=True, slots=True)
class PendingChange:
    """One commit to make: a status snapshot file, or field edits of a cluster's policy file
    (``spec`` and ``promotion``)."""

    kind: ChangeKind
    cluster: str
    #: status: the snapshot file; spec: the cluster's folder (its ClusterOperator file is found
    #: at the head the change is rebuilt on)
    path: str
    subject: str
    body: str = ""
    trailers: tuple[tuple[str, str], ...] = ()
    created_at: float = 0.0
    snapshot: Mapping[str, Any] | None = None
    edits: tuple[FieldEdit, ...] = ()
    change_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def message(self) -> str:
        if self.kind in APPLIED_KINDS:
            return format_message(self.subject, self.body,
                                  applied_trailers(self.change_id, self.trailers))
        return format_message(self.subject, self.body, own_trailers(self.change_id, self.trailers))

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "cluster": self.cluster, "path": self.path,
            "subject": self.subject, "body": self.body,
            "trailers": [list(t) for t in self.trailers], "createdAt": self.created_at,
            "snapshot": self.snapshot, "edits": [e.to_json() for e in self.edits],
            "changeId": self.change_id,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> PendingChange:
        return cls(
            kind=raw["kind"], cluster=raw["cluster"], path=raw["path"], subject=raw["subject"],
            body=raw.get("body", ""),
            trailers=tuple((str(k), str(v)) for k, v in raw.get("trailers", ())),
            created_at=float(raw.get("createdAt", 0.0)), snapshot=raw.get("snapshot"),
            edits=tuple(FieldEdit.from_json(e) for e in raw.get("edits", ())),
            change_id=raw["changeId"],
        )


@dataclass(frozen=True, slots=True)
class Skipped:
    change: PendingChange
    reason: str


@dataclass(slots=True)
class FlushResult:
    landed: list[tuple[PendingChange, str]] = field(default_factory=list)  # change, commit sha
    skipped: list[Skipped] = field(default_factory=list)
    remaining: int = 0
    error: str | None = None
    head: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.remaining == 0


_QUEUE_LOCKS: dict[Path, threading.Lock] = {}
_QUEUE_LOCKS_GUARD = threading.Lock()


class ChangeQueue:
    """The pending changes of one branch, persisted as JSON (written atomically)."""

    def __init__(self, path: Path, *, max_status: int = 500, clock: Clock = wall) -> None:
        """``clock``: wall time, for the name an unreadable queue file is kept under."""
        self.path = path
        self.clock = clock
        self.max_status = max_status
        with _QUEUE_LOCKS_GUARD:  # every queue object on one file shares its lock
            self._lock = _QUEUE_LOCKS.setdefault(path.resolve(), threading.Lock())

    def load(self) -> list[PendingChange]:
        with self._lock:
            return self._load()

    def _load(self) -> list[PendingChange]:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            # keep the unreadable file for a person to look at; never crash on it
            broken = self.path.with_suffix(f".broken-{int(self.clock())}")
            os.replace(self.path, broken)
            log.error("unreadable change queue %s moved to %s: %s", self.path, broken, exc)
            return []
        return [PendingChange.from_json(item) for item in raw.get("changes", ())]

    def _save(self, changes: list[PendingChange]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".queue-")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump({"version": 1, "changes": [c.to_json() for c in changes]}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)

    def append(self, change: PendingChange) -> None:
        with self._lock:
            changes = [*self._load(), change]
            statuses = [c for c in changes if c.kind == "status"]
            if len(statuses) > self.max_status:
                # a very long outage: keep the newest snapshots, every spec change
                dropped = {c.change_id for c in statuses[: len(statuses) - self.max_status]}
                log.warning("status queue full: dropping %d oldest snapshots", len(dropped))
                changes = [c for c in changes if c.change_id not in dropped]
            self._save(changes)

    def remove(self, change_ids: set[str]) -> None:
        with self._lock:
            self._save([c for c in self._load() if c.change_id not in change_ids])


class Publisher:
    """Pushes queued changes to ``branch`` of the mirror's remote."""

    def __init__(
        self,
        mirror: Mirror,
        branch: str,
        *,
        state_dir: Path | str,
        identity: Identity | None = None,
        max_attempts: int = 6,
        backoff: float = 0.2,
        max_backoff: float = 5.0,
        retry_interval: float = 2.0,
        max_retry_interval: float = 60.0,
        on_landed: Callable[[PendingChange, str], None] | None = None,
        on_skipped: Callable[[Skipped], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.mirror = mirror
        self.branch = branch
        self.identity = identity or Identity()
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", branch)
        self.queue = ChangeQueue(Path(state_dir) / "queue" / f"{mirror.path.stem}--{safe}.json")
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.retry_interval = retry_interval
        self.max_retry_interval = max_retry_interval
        self.on_landed = on_landed
        self.on_skipped = on_skipped
        self._sleep = sleep
        self._flush_lock = threading.Lock()
        self._kick = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_result: FlushResult | None = None
        #: told the operation ("push") of each flush that left changes queued (metrics)
        self.on_git_error: Callable[[str], None] | None = None

    # -- queue -------------------------------------------------------------------------------
    def enqueue(self, change: PendingChange) -> None:
        self.queue.append(change)
        self._kick.set()

    def pending(self) -> list[PendingChange]:
        return self.queue.load()

    # -- flushing ----------------------------------------------------------------------------
    def flush(self) -> FlushResult:
        """Try to get every queued change into the remote branch now."""
        with self._flush_lock:
            result = self._flush()
        self.last_result = result
        for change, sha in result.landed:
            log.info("pushed %s (%s) as %s", change.subject, change.change_id[:8], sha[:12])
            if self.on_landed:
                self.on_landed(change, sha)
        for skipped in result.skipped:
            log.info("dropped %s: %s", skipped.change.subject, skipped.reason)
            if self.on_skipped:
                self.on_skipped(skipped)
        if result.error:
            log.warning("%d change(s) wait for %s: %s", result.remaining, self.mirror.url,
                        result.error)
            if self.on_git_error is not None:
                self.on_git_error("push")
        return result

    def _flush(self) -> FlushResult:
        result = FlushResult()
        for attempt in range(self.max_attempts):
            changes = self.queue.load()
            if not changes:
                return result
            try:
                self.mirror.fetch()
            except RemoteUnavailable as exc:
                result.error, result.remaining = str(exc), len(changes)
                return result
            base = self.mirror.head(self.branch)
            landed_ids = self._landed_ids(base)
            tip = base
            built: list[tuple[PendingChange, str]] = []
            skipped: list[Skipped] = []
            for change in changes:
                if change.change_id in landed_ids:
                    skipped.append(Skipped(change, "already in Git"))
                    continue
                try:
                    outcome = self._build(change, tip)
                except GitOpsError as exc:
                    skipped.append(Skipped(change, f"could not build the commit: {exc}"))
                    continue
                if isinstance(outcome, NoCommit):
                    skipped.append(Skipped(change, outcome.reason))
                else:
                    tip = outcome
                    built.append((change, tip))
            if not built:
                self.queue.remove({c.change_id for c in changes})
                result.skipped += skipped
                result.head = base
                return result
            assert tip is not None
            try:
                self.mirror.push(tip, self.branch)
            except PushRejected as exc:
                log.info("push race on %s (attempt %d): %s", self.branch, attempt + 1, exc)
                self._sleep(min(self.max_backoff, self.backoff * 2**attempt)
                            * random.uniform(0.5, 1.0))
                continue
            except (RemoteUnavailable, PushDeclined) as exc:
                result.error, result.remaining = str(exc), len(changes)
                return result
            self.queue.remove({c.change_id for c in changes})
            result.landed += built
            result.skipped += skipped
            result.head = tip
            return result
        changes = self.queue.load()
        result.error = f"gave up after {self.max_attempts} push races; will retry"
        result.remaining = len(changes)
        return result

    def _landed_ids(self, base: str | None) -> set[str]:
        if base is None:
            return set()
        return set(self.mirror.trailer_values(base, CHANGE_ID_TRAILER, limit=_LANDED_SCAN))

    def _build(self, change: PendingChange, tip: str | None) -> str | NoCommit:
        """The new tip with ``change`` committed on top, or why no commit is needed."""
        if change.kind == "status":
            assert change.snapshot is not None
            current = self.mirror.read_file(tip, change.path) if tip else None
            text = status_change(current, change.snapshot)
            if text is None:
                return NoCommit("Git already holds a snapshot of this state")
            path = change.path
        else:
            if tip is None:
                return NoCommit(f"branch {self.branch} does not exist")
            located = self._policy_file(tip, change.path)
            if located is None:
                return NoCommit(f"no ClusterOperator policy file under {change.path}/")
            path, current_text = located
            edit = edit_policy_text(current_text, change.edits)
            if edit.outcome is not EditOutcome.CHANGED or edit.text is None or (
                edit.text == current_text
            ):
                reason = edit.detail or "Git already says so"
                return NoCommit(f"{edit.outcome.value}: {reason}")
            text = edit.text
        return self.mirror.create_commit(
            tip, {path: text.encode("utf-8")}, change.message(), self.identity,
            authored_at=change.created_at or None,
        )

    def _policy_file(self, tip: str, cluster_dir: str) -> tuple[str, str] | None:
        for name in self.mirror.list_dir(tip, cluster_dir):
            if not name.endswith((".yaml", ".yml")):
                continue
            path = f"{cluster_dir}/{name}"
            data = self.mirror.read_file(tip, path)
            if data is None:
                continue
            text = data.decode("utf-8", errors="replace")
            try:
                docs = [parse_yaml(text, path)]
            except YamlRefused:
                continue
            if any(is_cluster_operator(doc) for doc in docs):
                return path, text
        return None

    # -- background --------------------------------------------------------------------------
    def kick(self) -> None:
        self._kick.set()

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._kick.set()  # a queue left by the last run is pushed at once
            self._thread = threading.Thread(target=self._run, name=f"publisher-{self.branch}",
                                            daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0, *, flush: bool = True) -> None:
        """Stop the push loop; with ``flush``, try once more to push what is queued (what
        cannot be pushed stays in the queue for the next start)."""
        self._stop.set()
        self._kick.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
            if flush and self.queue.load():
                self.flush()

    def _run(self) -> None:
        delay = self.retry_interval
        while not self._stop.is_set():
            has_pending = bool(self.queue.load())
            self._kick.wait(timeout=delay if has_pending else None)
            self._kick.clear()
            if self._stop.is_set():
                return
            try:
                result = self.flush()
            except Exception:  # a bug must not kill the push loop; the queue is kept
                log.exception("flush of %s failed", self.branch)
                result = FlushResult(error="internal error", remaining=1)
            delay = self.retry_interval if result.ok else min(self.max_retry_interval, delay * 2)


@dataclass(frozen=True, slots=True)
class NoCommit:
    """Why a change needs no commit on the current head."""

    reason: str
