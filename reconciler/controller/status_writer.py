"""The rollout controller's status writer: a thread that writes the newest planned
``upgradeStatus`` through the status subresource, once the requests handed out before it
landed (the planner's contract: a status never runs ahead of the actions it records).

Passes that follow each other quickly coalesce into one write. A status whose requests failed
is not written (the next plan repairs). A conflict re-reads the object; the planned status is
kept only if nobody else wrote the status meanwhile.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Set
from concurrent.futures import Future
from concurrent.futures import wait as wait_for_futures
from typing import Protocol

from reconciler.kube.api import JSON, Conflict, KubeError
from reconciler.stored_status import same_record, upgrade_status_of

log = logging.getLogger(__name__)


class WriterStats(Protocol):
    conflicts: int
    errors: int


class StatusWriter:
    """``lock`` is the controller's (it also guards ``planned``, ``base`` and ``after``);
    ``write`` sends one status, ``refetch`` reads the ClusterOperator again into the cache,
    ``touch`` asks for a pass (called with ``lock`` held)."""

    def __init__(
        self,
        *,
        lock: threading.Lock,
        write: Callable[[JSON], None],
        refetch: Callable[[], JSON | None],
        touch: Callable[[], None],
        stop: threading.Event,
        is_leader: Callable[[], bool],
        stats: WriterStats,
        role: str,
    ) -> None:
        self._write = write
        self._refetch = refetch
        self._touch = touch
        self._stop = stop
        self.is_leader = is_leader
        self.stats = stats
        self.role = role
        #: the newest status planned and not yet written (None: the cache's is the newest)
        self.planned: JSON | None = None
        #: the written status that plan descends from (a conflict keeps the plan only if the
        #: server still has that one: nobody else wrote the status meanwhile)
        self.base: JSON | None = None
        #: the requests handed out up to the pass that planned it: a status is written only
        #: after they landed, and not at all if one failed
        self.after: frozenset[Future[None]] = frozenset()
        self.ready = threading.Condition(lock)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"{self.role}-status",
                                        daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> None:
        with self.ready:
            self.ready.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def publish(self, status: JSON, after: Set[Future[None]]) -> None:
        """``status`` is the newest planned; written once ``after`` landed. The caller holds
        the lock."""
        self.planned = status
        self.after = frozenset(after)
        self.ready.notify_all()

    def wait_written(self, status: JSON) -> None:
        """Waits (the lock held) until ``status`` is written or overtaken, or leadership or
        the controller stops."""
        while self.planned is status and not self._stop.is_set() and self.is_leader():
            self.ready.wait(0.5)

    def _run(self) -> None:
        backoff = 0.2
        while True:
            with self.ready:
                while self.planned is None and not self._stop.is_set():
                    self.ready.wait(1.0)
                status, after = self.planned, self.after
                if status is None:
                    return  # stopping, nothing left to write
            if not self.is_leader():
                if self._stop.wait(0.5):
                    return
                continue
            wait_for_futures(after)
            if any(f.exception() is not None for f in after):
                with self.ready:
                    if self.planned is status:
                        self.planned = None
                        self.ready.notify_all()
                        self._touch()
                continue
            try:
                self._write(status)
                backoff = 0.2
            except Conflict:
                self.stats.conflicts += 1
                if self._stop.is_set():
                    return  # the next leader plans from what the server has
                self._after_conflict()
                continue
            except KubeError as exc:
                self.stats.errors += 1
                log.warning("%s status write failed: %s; retrying in %.1f s", self.role, exc,
                            backoff)
                if self._stop.wait(backoff):
                    return
                backoff = min(backoff * 2, 10.0)
                continue
            except Exception:
                self.stats.errors += 1
                log.exception("%s status write failed", self.role)
                if self._stop.wait(backoff):
                    return
                continue
            with self.ready:
                self.base = status
                if self.planned is status:
                    self.planned = None
                    self.ready.notify_all()  # a pass may wait for this one
                stopping = self._stop.is_set() and self.planned is None
            if stopping:
                return

    def _after_conflict(self) -> None:
        fresh = self._refetch()
        with self.ready:
            theirs = upgrade_status_of(fresh) or None
            if fresh is None or not same_record(theirs, self.base):
                self.planned = None  # someone else wrote it: plan from theirs
                self.ready.notify_all()
            self._touch()
