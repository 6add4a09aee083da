"""What the rollout controller and the firmware orchestrator share: list+watch caches that mark
the world dirty, and one worker thread that runs observe-plan-act passes, so actions never race
each other. A pass returns when to look again; conflicts re-read the ClusterOperator, API errors
back off."""

from __future__ import annotations

import copy
import logging
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from reconciler import clock as clocks
from reconciler.clock import Clock
from reconciler.kube.api import JSON, Conflict, KubeApi, KubeError, NotFound
from reconciler.kube.objects import cluster_operator_path
from reconciler.kube.watch import ListWatch
from reconciler.rollout.status import find_condition, set_condition
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
#: the longest condition message / error text carried into the status and Events
_MESSAGE_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class PassFailure:
    """What a pass that raised reports: the exception's class and its text."""

    reason: str
    message: str

    @classmethod
    def of(cls, exc: BaseException) -> PassFailure:
        text = str(exc) or repr(exc)
        if len(text) > _MESSAGE_LIMIT:
            text = text[: _MESSAGE_LIMIT - 3] + "..."
        return cls(type(exc).__name__, text)


class PassFailures:
    """Passes that raise something other than an API error (a bug, data the planner cannot
    read): retried after a back-off that doubles (``first_retry`` to ``max_retry``), not in a hot
    loop, and reported (a Warning Event, a log line with the traceback) when the error is new
    and then at most once per ``report_every`` while it lasts. The next pass that does not
    raise clears it. Times come from ``clock``."""

    def __init__(self, clock: Clock, *, report_every: float = 600.0,
                 first_retry: float = 1.0, max_retry: float = 60.0) -> None:
        self.clock = clock
        self.report_every = report_every
        self.first_retry = first_retry
        self.max_retry = max_retry
        #: the current failure (None: the last pass did not raise)
        self.current: PassFailure | None = None
        #: failed passes in a row
        self.count = 0
        #: no pass before this (while failing)
        self.retry_at: float | None = None
        self._reported: PassFailure | None = None
        self._reported_at = -math.inf

    def failed(self, exc: BaseException) -> bool:
        """Records a failed pass; True when it is to be reported now."""
        now = self.clock()
        failure = PassFailure.of(exc)
        self.count += 1
        self.current = failure
        self.retry_at = now + min(self.first_retry * 2.0 ** min(self.count - 1, 32),
                                  self.max_retry)
        if failure != self._reported or now - self._reported_at >= self.report_every:
            self._reported, self._reported_at = failure, now
            return True
        return False

    def succeeded(self) -> PassFailure | None:
        """Records a pass that did not raise; returns the failure it clears, if any."""
        cleared = self.current
        self.current = None
        self.count = 0
        self.retry_at = None
        self._reported, self._reported_at = None, -math.inf
        return cleared

    def held(self) -> bool:
        """Whether the next pass must wait for the back-off (events do not cut it short)."""
        return self.retry_at is not None and self.clock() < self.retry_at


def shown_failure(section: Mapping[str, Any] | None) -> PassFailure | None:
    """The failure a status section shows as a True ``PlanningFailed`` condition, if any."""
    current = find_condition(section or {}, PLANNING_FAILED)
    if current is None or current.get("status") != "True":
        return None
    return PassFailure(str(current.get("reason") or ""), str(current.get("message") or ""))


def with_failure_condition(section: Mapping[str, Any] | None, failure: PassFailure, now: float,
                           *, failed: bool) -> dict[str, Any] | None:
    """A status section (``upgradeStatus``, ``firmwareUpgrade``) with the ``PlanningFailed``
    condition set (``failed``) or cleared (False; also when the pass that planned dropped it,
    as a rollout's start drops old conditions); None when that changes nothing (nothing to
    write: a failure that lasts writes its condition once)."""
    current = find_condition(section or {}, PLANNING_FAILED)
    if failed:
        value, reason = "True", failure.reason
        message = f"planning pass failed: {failure.message}"
    else:
        if current is not None and current.get("status") != "True":
            return None
        value, reason = "False", PLANNING_RECOVERED
        message = f"passes plan again (the last failure: {failure.reason})"
    if current is not None and (current.get("status"), current.get("reason"),
                                current.get("message")) == (value, reason, message):
        return None
    result = copy.deepcopy(dict(section or {}))
    result["condition"] = list(result.get("condition") or [])
    set_condition(result, PLANNING_FAILED, value, reason, message, format_time(now))
    return result


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
        clock: Clock,
        settle_seconds: float,
        is_leader: Callable[[], bool],
        monotonic: Clock = clocks.monotonic,
    ) -> None:
        self.clock = clock
        #: for timeouts of our own (``clock`` may be a test's, or wall time)
        self.monotonic = monotonic
        self.settle_seconds = settle_seconds
        self.is_leader = is_leader
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._dirty = True
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None
        self.failures = PassFailures(clock)
        self._api_backoff = 0.2

    def reconcile_once(self) -> float | None:
        raise NotImplementedError

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
        deadline = self.monotonic() + timeout
        return all(w.wait_synced(max(0.0, deadline - self.monotonic())) for w in self.watches)

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
        while not self._stop.is_set():
            with self._wake:
                while not self._stop.is_set():
                    if self.failures.held():
                        # a failing pass waits for its back-off, whatever happens meanwhile
                        assert self.failures.retry_at is not None
                        timeout: float | None = self.failures.retry_at - self.clock()
                    elif self._dirty:
                        break
                    else:
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
            requeue_at = self.run_pass()

    def run_pass(self) -> float | None:
        """One guarded pass; returns when to look again. API errors back off (0.2 s doubling to
        10 s) and say so in the log; any other exception (a planning pass that raises) is a
        ``PlanningFailed`` condition and a rate-limited Warning Event, retried after a back-off
        (``self.failures``), until a pass plans again."""
        try:
            requeue_at = self.reconcile_once()
        except Conflict:
            self.stats.conflicts += 1
            self._refetch_cluster_operator()
            return self.clock()
        except KubeError as exc:
            self.stats.errors += 1
            backoff = self._api_backoff
            log.warning("%s pass failed: %s; retrying in %.1f s", self.role, exc, backoff)
            self._api_backoff = min(backoff * 2, 10.0)
            return self.clock() + backoff
        except Exception as exc:
            self.stats.errors += 1
            report = self.failures.failed(exc)
            failure = self.failures.current
            assert failure is not None and self.failures.retry_at is not None
            if report:
                log.error("%s planning pass failed (%s); retrying with back-off, reported again "
                          "at most every %.0f s", self.role, failure.reason,
                          self.failures.report_every, exc_info=exc)
            else:
                log.debug("%s planning pass failed again: %s", self.role, failure.message)
            try:
                self._report_failure(failure, event=report)
            except Exception:  # e.g. a status section too garbled to carry a condition
                log.exception("%s could not report the failed pass", self.role)
            return self.failures.retry_at
        self._api_backoff = 0.2
        cleared = self.failures.succeeded()
        if cleared is not None:
            log.info("%s plans again after %s", self.role, cleared.reason)
        # also a condition whose clearing was lost (a failed or overtaken status write), or one
        # a previous leader left
        try:
            shown = self._shown_failure() or cleared
            if shown is not None:
                self._clear_failure(shown)
        except Exception:
            log.exception("%s could not clear the %s condition", self.role, PLANNING_FAILED)
        return requeue_at
