"""Operator mode's maintenance windows (SPEC 10), the thin adapter: at each window edge it reads
the policy at the watched head, asks ``reconciler.fleet.window_pause`` what to commit, and
commits it through the policy publisher (no force, rebased on a race, one change id per edge).
The commit is a policy change the sync applies, so the vendor stops (or goes on).

Restart-safe: whether Git's ``pause: true`` is the window's own is read from Git every time (the
newest commit that changed the cluster's policy file carries ``Reconciler-Window: pause``); a
person's later edit of the file makes the pause theirs, and it is never undone."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from reconciler.clock import Clock, wall
from reconciler.fieldpath import resolve
from reconciler.fleet.window_pause import WindowEdge, window_edge
from reconciler.fleet.windows import WindowCalendar
from reconciler.gitops.commits import WINDOW_TRAILER
from reconciler.gitops.edits import PAUSE_FIELD
from reconciler.gitops.errors import GitOpsError
from reconciler.gitops.reader import PolicyFileRefused
from reconciler.gitops.repository import PolicyRepository
from reconciler.policy.validation import parse_only

log = logging.getLogger("reconciler.sync.loop")

#: the longest sleep between looks (wall seconds; an edge is looked at when it comes)
MAX_SLEEP = 30.0


class WindowPauseWatch:
    def __init__(self, repo: PolicyRepository, *, cluster: str, branch: str,
                 windows: Callable[[], WindowCalendar | None], clock: Clock = wall,
                 is_leader: Callable[[], bool] = lambda: True) -> None:
        self.repo = repo
        self.cluster = cluster
        self.branch = branch
        self.windows = windows
        self.clock = clock
        self.is_leader = is_leader
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: the edges committed by this process (the publisher drops a repeat anyway)
        self.committed: list[WindowEdge] = []

    def start(self) -> WindowPauseWatch:
        self._thread = threading.Thread(target=self._run, name=f"windows-{self.cluster}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            again = self.clock() + MAX_SLEEP
            try:
                if self.is_leader():
                    again = self.run_once()
            except (GitOpsError, PolicyFileRefused) as exc:
                log.warning("%s: maintenance windows: cannot read Git (%s); looking again",
                            self.cluster, exc)
            except Exception:  # one failed look is retried at the next
                log.exception("%s: maintenance windows: a look failed", self.cluster)
            self._stop.wait(min(MAX_SLEEP, max(0.5, again - self.clock())))

    def run_once(self) -> float:
        """One look; returns when to look again (wall seconds)."""
        now = self.clock()
        paused, ours = self._git_pause()
        look = window_edge(self.windows(), now, paused_in_git=paused, window_pause=ours)
        edge = look.edge
        if edge is not None and edge not in self.committed:
            change = self.repo.spec.window_pause(self.cluster, pause=edge.pause,
                                                 reason=edge.reason, edge=edge.edge)
            self.committed.append(edge)
            del self.committed[:-20]
            self.repo.policy_publisher.kick()
            log.info("%s: %s", self.cluster, change.subject)
        return look.again

    def _git_pause(self) -> tuple[bool | None, bool]:
        """``pause`` of the cluster's policy at the watched head (None: no policy), and whether
        the newest commit that changed that file is the window's own pause."""
        mirror = self.repo.mirror
        head = mirror.head(self.branch)
        if head is None:
            return None, False
        for policy in self.repo.reader.cluster_files(head, self.cluster):
            obj = parse_only(policy.data, policy.path).obj
            if not isinstance(obj, dict) or obj.get("kind") != "ClusterOperator":
                continue
            paused = resolve(obj, PAUSE_FIELD, False) is True
            last = mirror.last_commit_touching(head, policy.path)
            ours = last is not None and last.trailers.get(WINDOW_TRAILER) == "pause"
            return paused, ours
        return None, False
