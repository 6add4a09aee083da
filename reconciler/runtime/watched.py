"""What the rollout controller and the firmware orchestrator share: list+watch caches that mark
the world dirty, and the worker's thread (``worker.Worker``) that runs observe-plan-act passes,
so actions never race each other. A pass returns when to look again; what a failed one means is
the one taxonomy (``failures.py``): a conflict re-reads the ClusterOperator, an API error is
retried after a delay, and a stalled pass is a ``PlanningFailed`` condition
(``PlanningCondition``)."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from reconciler import clock as clocks
from reconciler.clock import Clock
from reconciler.kube.api import JSON, Conflict, KubeApi, KubeError, NotFound
from reconciler.kube.objects import cluster_operator_path
from reconciler.kube.watch import ListWatch
from reconciler.rollout.status import find_condition, set_condition
from reconciler.runtime.failures import FailureKind, LoopFailures, PassFailures
from reconciler.runtime.failures import PassFailure as PassFailure  # the controllers' import
from reconciler.runtime.worker import Worker
from reconciler.stored_status import (
    ROLLOUT_STATE_ANNOTATION,
    annotation_text,
    annotation_value,
    split_upgrade_status,
    status_with_upgrade,
)
from reconciler.timefmt import format_time

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


#: condition type (in the controller's status section) while its planning passes fail
PLANNING_FAILED = "PlanningFailed"
#: Event reason and condition reason once passes plan again
PLANNING_RECOVERED = "PlanningRecovered"


def shown_failure(section: Mapping[str, Any] | None) -> PassFailure | None:
    """The failure a status section shows as a True ``PlanningFailed`` condition, if any."""
    current = find_condition(section or {}, PLANNING_FAILED)
    if current is None:
        return None
    return PassFailure(str(current.get("reason") or ""), str(current.get("message") or ""))


def with_failure_condition(section: Mapping[str, Any] | None, failure: PassFailure, now: float,
                           *, failed: bool) -> dict[str, Any] | None:
    """A status section (``upgradeStatus``, ``firmwareUpgrade``) with the ``PlanningFailed``
    condition in force (``failed``) or taken off the list (also when the pass that planned
    dropped it, as a rollout's start drops old conditions); None when that changes nothing
    (nothing to write: a failure that lasts writes its condition once)."""
    current = find_condition(section or {}, PLANNING_FAILED)
    if failed:
        value, reason = "True", failure.reason
        message = f"planning pass failed: {failure.message}"
        if current is not None and (current.get("reason"), current.get("message")) == (
                reason, message):
            return None
    else:
        if current is None:
            return None
        value, reason = "False", PLANNING_RECOVERED
        message = f"passes plan again (the last failure: {failure.reason})"
    result = copy.deepcopy(dict(section or {}))
    set_condition(result, PLANNING_FAILED, value, reason, message, format_time(now))
    return result


class PassStats(Protocol):
    conflicts: int
    errors: int
    status_writes: int


class PlanningCondition:
    """Where a controller shows a stalled pass (``failures.StalledDisplay``): the
    ``PlanningFailed`` condition in its status section and a rate-limited Warning Event."""

    def __init__(self, *, report: Callable[[PassFailure, bool], None],
                 shown: Callable[[], PassFailure | None],
                 clear: Callable[[PassFailure], None]) -> None:
        self._report = report
        self._shown = shown
        self._clear = clear

    def show(self, failure: PassFailure, *, event: bool) -> None:
        self._report(failure, event)

    def shown(self) -> PassFailure | None:
        return self._shown()

    def clear(self, failure: PassFailure) -> None:
        self._clear(failure)


class WatchDrivenWorker(Worker):
    """Subclasses fill ``watches`` and ``stats`` and implement ``reconcile_once`` and
    ``_refetch_cluster_operator``; their informer handlers call ``_touch`` under ``_wake``.
    A pass waits for every watch to be synced and for the leadership (else it looks again
    0.5 s later); ``run_pass()`` is one guarded pass."""

    #: thread name and log prefix
    role = "worker"
    api: KubeApi
    watches: list[ListWatch]
    stats: PassStats

    def __init__(
        self,
        *,
        clock: Clock,
        settle_seconds: float,
        is_leader: Callable[[], bool],
        monotonic: Clock = clocks.monotonic,
        pass_share: float = 1.0,
    ) -> None:
        #: stalled passes: 1 s doubling to 60 s, which kicks do not cut short
        self.failures = PassFailures(clock)
        policy = LoopFailures(
            clock, what=f"{self.role} pass", logger=log,
            retry=PassFailures(clock, first_retry=0.2, max_retry=10.0, kicks_wait=False),
            stalled=self.failures, reread=self._refetch_cluster_operator,
            display=PlanningCondition(
                report=lambda failure, event: self._report_failure(failure, event=event),
                shown=self._shown_failure, clear=self._clear_failure),
            counted=self._count_failure)
        super().__init__(
            lambda: self.reconcile_once(), name=self.role, clock=clock, is_leader=is_leader,
            ready=self.synced, failures=policy, not_leader_requeue=0.5,
            settle_seconds=settle_seconds, idle_wait=5.0, pass_share=pass_share,
            timer=monotonic)
        #: for timeouts of our own (``clock`` may be a test's, or wall time)
        self.monotonic = monotonic

    def reconcile_once(self) -> float | None:
        raise NotImplementedError

    def _count_failure(self, kind: FailureKind, exc: Exception) -> None:
        if kind is FailureKind.CONFLICT:
            self.stats.conflicts += 1
        else:
            self.stats.errors += 1

    def _report_failure(self, failure: PassFailure, *, event: bool) -> None:
        """Shows a failing pass on the ClusterOperator: the ``PlanningFailed`` condition in the
        controller's status section and, when ``event``, a Warning Event."""

    def _shown_failure(self) -> PassFailure | None:
        """The failure the status (planned or stored) shows as a True ``PlanningFailed``."""
        return None

    def _clear_failure(self, failure: PassFailure) -> None:
        """A pass planned again after ``failure``: the condition goes to False, and a Normal
        Event says so."""

    def _cluster_operator_name(self) -> str:
        raise NotImplementedError

    def _cached_cluster_operator(self) -> JSON | None:
        raise NotImplementedError

    def _on_cluster_operator(self, event: str, obj: JSON) -> None:
        raise NotImplementedError

    # -- the ClusterOperator's status -------------------------------------------------------

    def _write_upgrade_status(self, merged: JSON) -> None:
        """Writes the merged ``upgradeStatus`` where the ClusterOperator keeps it
        (``reconciler.stored_status``): our fields in ``ROLLOUT_STATE_ANNOTATION`` first, then
        the CRD's fields through the status subresource, each only when it changed and only if
        nobody wrote the object since we read it (a JSON patch "test" of the resourceVersion).
        Ours go first: a process killed between the two writes finds the frozen decisions
        (topology, skips) with the status it had, and plans the rest again."""
        crd_part, own = split_upgrade_status(merged)
        co = self._write_own_record(ROLLOUT_STATE_ANNOTATION, annotation_text(own))
        if co is None:
            return
        status = status_with_upgrade(co, crd_part)
        if status == co.get("status"):
            return
        patch = [
            {"op": "test", "path": "/metadata/resourceVersion",
             "value": co["metadata"]["resourceVersion"]},
            {"op": "add", "path": "/status", "value": status},
        ]
        obj = self._patch(patch, subresource="status")
        self.stats.status_writes += 1
        self._index_own_write(obj)

    def _write_own_record(self, key: str, text: str | None) -> JSON | None:
        """Sets (or, with None, removes) our annotation ``key`` on the ClusterOperator when it
        differs; returns the object as it now is (None: not cached)."""
        with self._lock:
            co = self._cached_cluster_operator()
        if co is None or annotation_value(co, key) == text:
            return co
        annotations = (co.get("metadata") or {}).get("annotations")
        pointer = "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")
        patch: list[JSON] = [{"op": "test", "path": "/metadata/resourceVersion",
                              "value": co["metadata"]["resourceVersion"]}]
        if text is None:
            patch.append({"op": "remove", "path": pointer})
        elif isinstance(annotations, Mapping):
            patch.append({"op": "add", "path": pointer, "value": text})
        else:
            patch.append({"op": "add", "path": "/metadata/annotations", "value": {key: text}})
        obj = self._patch(patch)
        self.stats.status_writes += 1
        self._index_own_write(obj)
        return obj

    def _patch(self, patch: list[JSON], *, subresource: str | None = None) -> JSON:
        try:
            return self.api.patch(
                cluster_operator_path(self._cluster_operator_name(), subresource=subresource),
                patch, patch_type="json")
        except KubeError as exc:
            if exc.status in (409, 422):  # a failed "test": someone wrote in between
                raise Conflict(409, "Conflict", str(exc), method="PATCH", path=exc.path) from exc
            raise

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
        self.start_thread()

    def _stop_worker(self, timeout: float) -> None:
        self.request_stop()
        for watch in self.watches:
            watch.stop()
        self.join_thread(timeout)

    def synced(self) -> bool:
        return all(w.wait_synced(0) for w in self.watches)

    def wait_synced(self, timeout: float = 30.0) -> bool:
        deadline = self.monotonic() + timeout
        return all(w.wait_synced(max(0.0, deadline - self.monotonic())) for w in self.watches)
