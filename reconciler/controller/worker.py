"""What the rollout controller and the firmware orchestrator share: list+watch caches that mark
the world dirty, and one worker thread that runs observe-plan-act passes, so actions never race
each other. A pass returns when to look again; conflicts re-read the ClusterOperator, API errors
back off."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from reconciler.kube.api import JSON, Conflict, KubeApi, KubeError, NotFound
from reconciler.kube.objects import cluster_operator_path
from reconciler.kube.watch import ListWatch

log = logging.getLogger(__name__)


def newer(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Whether ``new`` is at least as recent as ``old``. resourceVersions are etcd revisions
    here; comparing them keeps a late watch event from overwriting the object the server
    returned to our own write."""
    if old is None:
        return True
    a = str((old.get("metadata") or {}).get("resourceVersion") or "")
    b = str((new.get("metadata") or {}).get("resourceVersion") or "")
    return int(b) >= int(a) if a.isdigit() and b.isdigit() else True


def same_version(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Whether ``new`` is the object we already have (the watch's echo of our own write):
    nothing new to plan from."""
    if old is None:
        return False
    a = (old.get("metadata") or {}).get("resourceVersion")
    return bool(a) and a == (new.get("metadata") or {}).get("resourceVersion")


def generation(obj: Mapping[str, Any]) -> object:
    """``metadata.generation``: moves on spec changes only, not on status writes."""
    return (obj.get("metadata") or {}).get("generation")


class PassStats(Protocol):
    conflicts: int
    errors: int
    status_writes: int


class WatchDrivenWorker:
    """Subclasses fill ``watches`` and ``stats`` and implement ``reconcile_once`` and
    ``_refetch_cluster_operator``; their informer handlers call ``_touch`` under ``_wake``."""

    #: thread name and log prefix
    role = "worker"
    api: KubeApi
    watches: list[ListWatch]
    stats: PassStats

    def __init__(
        self,
        *,
        clock: Callable[[], float],
        settle_seconds: float,
        is_leader: Callable[[], bool],
    ) -> None:
        self.clock = clock
        self.settle_seconds = settle_seconds
        self.is_leader = is_leader
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._dirty = True
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None

    def reconcile_once(self) -> float | None:
        raise NotImplementedError

    def _cluster_operator_name(self) -> str:
        raise NotImplementedError

    def _cached_cluster_operator(self) -> JSON | None:
        raise NotImplementedError

    def _on_cluster_operator(self, event: str, obj: JSON) -> None:
        raise NotImplementedError

    # -- the ClusterOperator's status -------------------------------------------------------

    def _write_status_section(self, key: str, value: JSON) -> None:
        """Replaces ``status.<key>`` through the status subresource, only if nobody wrote the
        object since we read it (a JSON patch "test" of the resourceVersion)."""
        with self._lock:
            co = self._cached_cluster_operator()
        if co is None:
            return
        status = dict(co.get("status") or {})
        status[key] = value
        patch = [
            {"op": "test", "path": "/metadata/resourceVersion",
             "value": co["metadata"]["resourceVersion"]},
            {"op": "add", "path": "/status", "value": status},
        ]
        try:
            obj = self.api.patch(
                cluster_operator_path(self._cluster_operator_name(), subresource="status"),
                patch, patch_type="json")
        except KubeError as exc:
            if exc.status in (409, 422):  # a failed "test": someone wrote in between
                raise Conflict(409, "Conflict", str(exc), method="PATCH", path=exc.path) from exc
            raise
        self.stats.status_writes += 1
        self._index_own_write(obj)

    def _index_own_write(self, cluster_operator: JSON) -> None:
        """The object the server returned to our status write goes into the cache."""
        self._on_cluster_operator("MODIFIED", cluster_operator)

    def _refetch_cluster_operator(self) -> JSON | None:
        """Reads the ClusterOperator again into the cache; returns it (None: it is gone; the
        cached one when the API server could not be asked)."""
        try:
            obj = self.api.get(cluster_operator_path(self._cluster_operator_name()))
        except NotFound:
            return None
        except KubeError as exc:
            log.warning("could not refetch the ClusterOperator: %s", exc)
            with self._lock:
                return self._cached_cluster_operator()
        self._on_cluster_operator("MODIFIED", obj)
        return obj

    # -- lifecycle --------------------------------------------------------------------------

    def _start_worker(self) -> None:
        for watch in self.watches:
            watch.start()
        self._worker = threading.Thread(target=self._run, name=self.role, daemon=True)
        self._worker.start()

    def _stop_worker(self, timeout: float) -> None:
        self._stop.set()
        with self._wake:
            self._wake.notify_all()
        for watch in self.watches:
            watch.stop()
        if self._worker is not None:
            self._worker.join(timeout)

    def synced(self) -> bool:
        return all(w.wait_synced(0) for w in self.watches)

    def wait_synced(self, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        return all(w.wait_synced(max(0.0, deadline - time.monotonic())) for w in self.watches)

    def kick(self) -> None:
        with self._wake:
            self._touch()

    def _touch(self) -> None:
        """Marks the world changed; the caller holds ``_wake``."""
        self._dirty = True
        self._wake.notify()

    # -- the worker ---------------------------------------------------------------------------

    def _run(self) -> None:
        requeue_at: float | None = None
        backoff = 0.2
        while not self._stop.is_set():
            with self._wake:
                while not self._dirty and not self._stop.is_set():
                    timeout = None if requeue_at is None else requeue_at - self.clock()
                    if timeout is not None and timeout <= 0:
                        break
                    self._wake.wait(min(timeout, 5.0) if timeout is not None else 5.0)
                self._dirty = False
            if self._stop.is_set():
                break
            if not self.synced() or not self.is_leader():
                requeue_at = self.clock() + 0.5
                continue
            if self.settle_seconds:
                self._stop.wait(self.settle_seconds)  # gather a burst of events into one pass
            try:
                requeue_at = self.reconcile_once()
                backoff = 0.2
            except Conflict:
                self.stats.conflicts += 1
                self._refetch_cluster_operator()
                requeue_at = self.clock()
            except KubeError as exc:
                self.stats.errors += 1
                log.warning("%s pass failed: %s; retrying in %.1f s", self.role, exc, backoff)
                requeue_at = self.clock() + backoff
                backoff = min(backoff * 2, 10.0)
            except Exception:
                self.stats.errors += 1
                log.exception("%s pass failed; retrying in %.1f s", self.role, backoff)
                requeue_at = self.clock() + backoff
                backoff = min(backoff * 2, 10.0)
