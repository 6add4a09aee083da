"""Where new commits come from: a remote fetched on an interval and on demand, and a local
working copy whose refs are watched with watchdog.

Both end in the same place: fetch into the mirror, compare each watched branch's head with the
last one seen, and report ``NewCommit`` when the new range holds at least one commit that is not
the reconciler's own (so status and write-back commits never retrigger a sync). ``trigger()``
is thread-safe and returns at once; the webhook receiver calls it.

A local working copy is watched only for ref changes (a commit, a merge, a pull): edits that are
not committed are never applied. Bursts of filesystem events (a commit writes objects, logs, the
index and the ref) coalesce into one fetch after ``debounce`` seconds of quiet.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from git.exc import GitCommandError
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

from reconciler import clock as clocks
from reconciler.clock import Clock
from reconciler.gitops.commits import CommitInfo
from reconciler.gitops.errors import GitOpsError, RemoteUnavailable
from reconciler.gitops.mirror import Mirror

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class NewCommit:
    """Branch ``branch`` now points at ``sha``; ``previous`` is the head seen before (None on
    the first look), ``commits`` the new commits of other authors, newest first."""

    branch: str
    sha: str
    previous: str | None
    commits: tuple[CommitInfo, ...]


class CommitSource:
    def __init__(
        self,
        mirror: Mirror,
        branches: Sequence[str],
        on_commit: Callable[[NewCommit], None],
        *,
        interval: float = 30.0,
        watch: str | Path | None = None,
        debounce: float = 0.05,
        monotonic: Clock = clocks.monotonic,
    ) -> None:
        self.mirror = mirror
        self.branches = tuple(branches)
        self.on_commit = on_commit
        #: the debounce of ref events takes its time from here
        self.monotonic = monotonic
        self.interval = interval
        self.debounce = debounce
        self.watch_dir = _git_common_dir(Path(watch)) if watch is not None else None
        self._seen: dict[str, str] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._last_event = 0.0
        self._poll_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._observer: BaseObserver | None = None
        self._unreachable = False
        self.fetches = 0
        #: told the operation ("fetch") of each failed Git operation (metrics)
        self.on_git_error: Callable[[str], None] | None = None

    def trigger(self) -> None:
        """Fetch now (thread-safe, returns at once)."""
        self._wake.set()

    def poll(self) -> list[NewCommit]:
        """Fetch once and report what is new (also what the background loop does)."""
        with self._poll_lock:
            try:
                heads = self.mirror.fetch()
            except RemoteUnavailable as exc:
                if not self._unreachable:
                    log.warning("%s", exc)
                self._unreachable = True
                if self.on_git_error is not None:
                    self.on_git_error("fetch")
                return []
            finally:
                self.fetches += 1
            if self._unreachable:
                log.info("%s is reachable again", self.mirror.url)
                self._unreachable = False
            found = []
            for branch in self.branches:
                head = heads.get(branch)
                previous = self._seen.get(branch)
                if head is None or head == previous:
                    continue
                self._seen[branch] = head
                try:
                    new = (self.mirror.commits_between(previous, head) if previous is not None
                           else [self.mirror.commit_info(head)])
                except (GitCommandError, ValueError) as exc:  # previous gone: a first look
                    log.warning("history of %s was rewritten: %s", branch, exc)
                    new, previous = [], None
                others = tuple(c for c in new if not c.is_own)
                if previous is not None and not others:
                    log.debug("%s -> %s: only the reconciler's own commits", branch, head[:12])
                    continue
                found.append(NewCommit(branch, head, previous, others))
        for item in found:
            self.on_commit(item)
        return found

    # -- background --------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        if self.watch_dir is not None:
            handler = _RefChangeHandler(self.watch_dir, self._on_ref_event)
            observer = Observer()
            # refs/ for branch updates, the git dir itself (not recursively) for packed-refs;
            # objects/ and logs/ churn on every commit and are never watched
            observer.schedule(handler, str(self.watch_dir), recursive=False)
            observer.schedule(handler, str(self.watch_dir / "refs"), recursive=True)
            observer.daemon = True
            observer.start()
            self._observer = observer
        self._thread = threading.Thread(target=self._run, name="commit-source", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout)
            self._observer = None
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _on_ref_event(self) -> None:
        self._last_event = self.monotonic()
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception:  # a bug in a callback must not stop the watch
                log.exception("polling %s failed", self.mirror.url)
            self._wake.wait(timeout=self.interval)
            self._wake.clear()
            # coalesce a burst of ref events: wait until they have been quiet for `debounce`
            while not self._stop.is_set():
                quiet_for = self.monotonic() - self._last_event
                if quiet_for >= self.debounce:
                    break
                time.sleep(self.debounce - quiet_for)


_WRITE_EVENTS = frozenset({"created", "modified", "moved", "deleted", "closed"})


class _RefChangeHandler(FileSystemEventHandler):
    """Reacts to ref updates only; objects, logs, the index and lock files are noise."""

    def __init__(self, git_dir: Path, on_change: Callable[[], None]) -> None:
        self.git_dir = str(git_dir)
        self.on_change = on_change

    def on_any_event(self, event: FileSystemEvent) -> None:
        # opening or reading a ref (our own fetch from this repository does) is not a change
        if event.is_directory or event.event_type not in _WRITE_EVENTS:
            return
        for raw in (event.src_path, getattr(event, "dest_path", "")):
            path = os.fsdecode(raw)
            if path and self._is_ref(path):
                self.on_change()
                return

    def _is_ref(self, path: str) -> bool:
        relative = os.path.relpath(path, self.git_dir)
        if relative.endswith(".lock") or relative.startswith(".."):
            return False
        return relative.startswith("refs" + os.sep) or relative in ("packed-refs", "HEAD")


def _git_common_dir(working_copy: Path) -> Path:
    """Where a working copy's refs live (``.git``, or the main repository's for a worktree)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(working_copy), "rev-parse", "--path-format=absolute",
             "--git-common-dir"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise GitOpsError(f"{working_copy} is not a Git working copy") from exc
    return Path(out)
