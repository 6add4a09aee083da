"""Writes status snapshots of one cluster to ``status/<cluster>.yaml`` (docs/gitops.md).

The when-to-commit decision is ``status_policy`` (pure); this adapter feeds it snapshots and the
clock, and hands due snapshots to the ``Publisher`` (queue, push, rebase, retry). On start it
takes the state already committed from Git (or from its own queue, if the remote is down), so a
restart never commits a state twice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from reconciler.clock import Clock, wall
from reconciler.config.sync import SyncSettings
from reconciler.gitops import status_policy
from reconciler.gitops.edits import parse_status
from reconciler.gitops.errors import RemoteUnavailable
from reconciler.gitops.publisher import PendingChange, Publisher
from reconciler.gitops.status_policy import WriterState, WriterTiming

log = logging.getLogger(__name__)


def rfc3339(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds").replace(
        "+00:00", "Z"
    )


class StatusWriter:
    def __init__(
        self,
        publisher: Publisher,
        cluster: str,
        *,
        config: SyncSettings | None = None,
        timing: WriterTiming | None = None,
        clock: Clock = wall,
    ) -> None:
        self.publisher = publisher
        self.cluster = cluster
        self.config = config or SyncSettings()
        self.timing = timing or WriterTiming(min_interval=self.config.status_min_interval)
        self.path = self.config.status_file(cluster)
        self._clock = clock
        self._cond = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None
        #: the completion record the newest snapshot carries
        #: (docs/configuration.md#the-completion-record), and the version the last active snapshot
        #: was rolling out
        self._last_rollout: Mapping[str, Any] | None = None
        #: ``fleet`` of the newest snapshot (docs/plan.md): kept across snapshots and restarts
        self._fleet: Mapping[str, Any] | None = None
        self._active_version: str | None = None
        self._state = WriterState(committed_key=self._committed_key())

    def _committed_key(self) -> status_policy.SnapshotKey | None:
        """The newest state this cluster has in Git, counting our own not yet pushed changes."""
        existing = self._newest_snapshot()
        if existing is None:
            return None
        record = existing.get("lastRollout")
        self._last_rollout = record if isinstance(record, Mapping) else None
        fleet = existing.get("fleet")
        self._fleet = fleet if isinstance(fleet, Mapping) else None
        upgrade = existing.get("upgradeStatus")
        if isinstance(upgrade, Mapping):
            self._active_version = status_policy.rollout_version(upgrade)
        return status_policy.snapshot_key(existing)

    def _newest_snapshot(self) -> Mapping[str, Any] | None:
        for change in reversed(self.publisher.pending()):
            if change.kind == "status" and change.path == self.path and change.snapshot:
                return change.snapshot
        try:
            self.publisher.mirror.fetch()
        except RemoteUnavailable as exc:
            log.warning("reading the last status from the mirror: %s", exc)
        head = self.publisher.mirror.head(self.publisher.branch)
        return parse_status(self.publisher.mirror.read_file(head, self.path)) if head else None

    @property
    def state(self) -> WriterState:
        with self._cond:
            return self._state

    def offer(self, snapshot: Mapping[str, Any]) -> None:
        """The cluster's latest status (call it on every change; counters alone cost nothing)."""
        now = self._clock()
        full = {"cluster": self.cluster, "observedAt": rfc3339(now), **snapshot}
        with self._cond:
            upgrade = snapshot.get("upgradeStatus")
            upgrade = upgrade if isinstance(upgrade, Mapping) else {}
            record = status_policy.last_rollout(
                upgrade, self._last_rollout, active_version=self._active_version,
                now_text=full["observedAt"])
            self._active_version = status_policy.rollout_version(upgrade) or (
                self._active_version if record == self._last_rollout else None)
            self._last_rollout = record
            if record is not None:
                full["lastRollout"] = record
            measured = snapshot.get("fleet")
            fleet = status_policy.fleet_record(
                upgrade, self._fleet, measured if isinstance(measured, Mapping) else None)
            self._fleet = fleet
            if fleet is not None:
                full["fleet"] = fleet
            else:
                full.pop("fleet", None)
            self._state = status_policy.observe(self._state, full, now)
            self._cond.notify_all()

    def poll(self, *, force: bool = False) -> PendingChange | None:
        """Queue the pending snapshot if it is due (or at all, with ``force``); returns the
        queued change."""
        with self._cond:
            now = self._clock()
            due = status_policy.due_at(self._state, self.timing)
            if due is None or (due > now and not force) or self._state.pending is None:
                return None
            snapshot = self._state.pending
            change = PendingChange(
                kind="status",
                cluster=self.cluster,
                path=self.path,
                subject=status_policy.describe(snapshot),
                trailers=tuple(status_policy.trailers(snapshot)),
                created_at=now,
                snapshot=dict(snapshot),
            )
            self.publisher.enqueue(change)
            self._state = status_policy.committed(self._state, now)
            return change

    def next_due(self) -> float | None:
        with self._cond:
            return status_policy.due_at(self._state, self.timing)

    # -- background --------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._stop = False
            self._thread = threading.Thread(target=self._run, name=f"status-{self.cluster}",
                                            daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop; a snapshot still waiting for its interval is queued, not lost."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self.poll(force=True)

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stop:
                    return
                due = status_policy.due_at(self._state, self.timing)
                wait = None if due is None else max(0.0, due - self._clock())
                if wait is None or wait > 0:
                    self._cond.wait(timeout=wait)
                    continue
            if self.poll() is not None:
                self.publisher.kick()
