"""Operator mode's maintenance windows (docs/configuration.md#maintenance-windows), the thin
adapter: at each window edge it reads the policy at the watched head, asks
``reconciler.fleet.window_pause`` what to commit, and commits it through the policy publisher (no
force, rebased on a race, one change id per edge). The commit is a policy change the sync applies,
so the vendor stops (or goes on).

Restart-safe: whether Git's ``pause: true`` is the window's own is read from Git every time (the
newest commit that changed the cluster's policy file carries ``Reconciler-Window: pause``); a
person's later edit of the file makes the pause theirs, and it is never undone."""

from __future__ import annotations

import logging
from collections.abc import Callable

from reconciler.clock import Clock, wall
from reconciler.fieldpath import resolve
from reconciler.fleet.window_pause import WindowEdge, window_edge, window_holds
from reconciler.fleet.windows import WindowCalendar
from reconciler.gitops.commits import WINDOW_TRAILER
from reconciler.gitops.edits import PAUSE_FIELD
from reconciler.gitops.errors import GitOpsError
from reconciler.gitops.reader import PolicyFileRefused
from reconciler.gitops.repository import PolicyRepository
from reconciler.policy.validation import parse_only
from reconciler.runtime.failures import RetryLater
from reconciler.runtime.worker import Worker

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
        #: the edges committed by this process (the publisher drops a repeat anyway)
        self.committed: list[WindowEdge] = []
        # the loop every controller runs on; only the leader looks
        self.worker = Worker(
            self._look, name=f"windows-{cluster}", clock=clock, is_leader=is_leader,
            ready=lambda: True, not_leader_requeue=MAX_SLEEP,
            failures=RetryLater(clock, what=f"{cluster}: maintenance windows",
                                retry=lambda: MAX_SLEEP, logger=log,
                                expected=(GitOpsError, PolicyFileRefused)),
        )

    def start(self) -> WindowPauseWatch:
        self.worker.start_thread()
        return self

    def stop(self) -> None:
        self.worker.stop_thread(10)

    def _look(self) -> float:
        """One look, as the worker's pass: the next at the edge, at least 0.5 s and at most
        ``MAX_SLEEP`` later."""
        now = self.clock()
        return max(now + 0.5, min(self.run_once(), now + MAX_SLEEP))

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

    def holds(self) -> list[dict[str, str]]:
        """The window's hold for the status snapshot (operator mode records its holds there)."""
        return window_holds(self.windows(), self.clock())

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
