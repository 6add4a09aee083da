"""The rollout controller: list+watch caches, one planning pass per burst of events, actions,
and the status write through the status subresource with optimistic concurrency.

Its parts, each in a module of its own: the node index (``index``: the caches, with the intents
of requests in flight laid over them), the dispatcher (``dispatch``: the pipelined hand-out of a
plan's actions) and the status writer (``status_writer``: its thread). Passes are pipelined: a
pass hands its per-node requests to the dispatcher and its status to the writer, and the next
pass plans while they are in flight. This module wires them to the watches and runs the pass.
Figures for a benchmark go through ``hooks.RolloutObserver``; the controller reads no clock of
its own for them."""

from __future__ import annotations

import gc
import logging
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from reconciler.clock import Clock, wall
from reconciler.config.settings import ClusterSettings
from reconciler.controller.act import ActionExecutor, Target
from reconciler.controller.dispatch import Dispatcher
from reconciler.controller.health import HealthFeeder
from reconciler.controller.hooks import NoObserver, RolloutObserver
from reconciler.controller.index import NodeIndex
from reconciler.controller.status_writer import StatusWriter
from reconciler.fleet.windows import WindowCalendar
from reconciler.kube.api import JSON, KubeApi, resource_path
from reconciler.kube.objects import cluster_operator_path
from reconciler.kube.observe import daemonset_view
from reconciler.kube.watch import ListWatch, without_managed_fields
from reconciler.names import ACTIVE_PHASES, FIRMWARE_IDLE_PHASES, GPU_NODE_LABEL
from reconciler.policy.upgrade_policy import UpgradePolicy
from reconciler.rollout.actions import RecordEvent
from reconciler.rollout.model import PLANNER_LABELS, PlannerSettings, RolloutSnapshot
from reconciler.rollout.planner import Plan, plan
from reconciler.runtime.watched import (
    PLANNING_FAILED,
    PLANNING_RECOVERED,
    PassFailure,
    WatchDrivenWorker,
    shown_failure,
    with_failure_condition,
)
from reconciler.stored_status import firmware_status_of, upgrade_status_of

log = logging.getLogger(__name__)

#: The interpreter's thread switch interval for a process that runs the rollout controller.
#: Dozens of request threads compete for the GIL; at Python's default 5 ms the controller saw a
#: pod's Ready event p99 199 ms after the 2,000-node benchmark's observer did, at 1 ms 40 ms
#: (see docs/rollout.md).
SWITCH_INTERVAL_SECONDS = 0.001
#: The young generation's collection threshold in that process (Python's default: 700). A pass
#: over a big fleet allocates tens of thousands of short-lived objects (a Ready wave at 10,000
#: nodes: 8,000 actions); at 700, young collections run while the pass still holds them, promote
#: them, and the old generation fills with garbage that only a full collection, over every
#: cached node and pod, removes. At 10,000 nodes that doubled the mean pass, at 1,000 it did not
#: (bench/planner_scale.py, docs/rollout.md "Scale"): a cost that grew faster than the fleet.
YOUNG_GC_THRESHOLD = 50_000
#: Passes take at most this share of the time while events keep coming (``Worker``'s
#: ``pass_share``). A wave's burst of watch events at 10,000 nodes kept passes of 40-130 ms
#: back to back: most of one of the machine's 2 cores, taken from the API server whose
#: requests the wave waits on. At 1/3 a pass waits twice the last one's time first (at most
#: 0.5 s); at 2,000 nodes (passes of a few ms) that is about the 20 ms settle time already.
PASS_SHARE = 1 / 3


def prefer_responsiveness() -> None:
    """Hands the GIL around more often (see ``SWITCH_INTERVAL_SECONDS``) and lets a pass's
    short-lived objects die young (``YOUNG_GC_THRESHOLD``); process-wide, so the process's
    entry point calls it."""
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_GC_THRESHOLD, middle, old)


@dataclass(slots=True)
class ControllerStats:
    passes: int = 0
    actions: int = 0
    status_writes: int = 0
    conflicts: int = 0
    errors: int = 0
    max_in_flight: int = 0


class RolloutController(WatchDrivenWorker):
    """Drives one ClusterOperator's driver rollout. Thread-based: informers feed the index, a
    single worker plans and hands the actions to the dispatcher, so actions never race each
    other."""

    role = "rollout-controller"
    stats: ControllerStats

    def __init__(
        self,
        api: KubeApi,
        target: Target,
        *,
        settings: PlannerSettings | None = None,
        clock: Clock = wall,
        settle_seconds: float = 0.02,
        is_leader: Callable[[], bool] = lambda: True,
        workers: int = 32,
        observer: RolloutObserver | None = None,
        health: HealthFeeder | None = None,
        windows: Callable[[], WindowCalendar | None] = lambda: None,
        config: Callable[[], ClusterSettings] | None = None,
        on_eviction: Callable[[str], None] | None = None,
    ) -> None:
        """``config``: the repository config in force (the live view's ``current``), read at
        each pass: its ``rollout`` settings over ``settings``, its windows over ``windows``.
        ``on_eviction``: each drain eviction's result (the metric)."""
        super().__init__(clock=clock, settle_seconds=settle_seconds, is_leader=is_leader,
                         pass_share=PASS_SHARE)
        self.config = config
        #: the cluster's maintenance windows as of the latest commit
        #: (docs/configuration.md#maintenance-windows)
        self.windows = windows if config is None else (lambda: config().windows)
        self.api = api
        self.target = target
        #: the process's planner settings; a pass plans with ``pass_settings()``
        self.settings = settings or PlannerSettings()
        self.stats = ControllerStats()
        self.observer: RolloutObserver = observer or NoObserver()
        self.last_plan: Plan | None = None
        #: the health gates' readings before each plan (None: no ``health`` section)
        self.health = health
        self._health_error_reported: str | None = None
        self._windows_error_reported: str | None = None
        # kept by the informers' handlers and by our own writes, under ``_lock``
        self.index = NodeIndex(daemonset=target.daemonset, namespace=target.namespace,
                               observer=self.observer)
        self.dispatcher = Dispatcher(
            ActionExecutor(api, target, on_object=self._own_write, clock=clock,
                           on_eviction=on_eviction), self.index,
            lock=self._lock, wake=self._wake, touch=self._touch, stop=self._stop,
            is_leader=self.is_leader, stats=self.stats, observer=self.observer, role=self.role,
            workers=workers)
        self.status_writer = StatusWriter(
            lock=self._lock, write=lambda status: self._write_status(status),
            refetch=self._refetch_cluster_operator, touch=self._touch, stop=self._stop,
            is_leader=self.is_leader, stats=self.stats, role=self.role)
        ns = target.namespace
        self.pods_watch = ListWatch(api, "/api/v1/pods", on_event=self._on_pod, name="pods",
                                    transform=without_managed_fields)
        #: the PodDisruptionBudgets' watch, running while the pass's settings have ``drain``
        self.budgets_watch: ListWatch | None = None
        self._budgets_forbidden_reported = False
        self.watches = [
            ListWatch(api, "/api/v1/nodes", on_event=self._on_node,
                      query={"labelSelector": f"{GPU_NODE_LABEL}=true"}, name="nodes",
                      transform=without_managed_fields),
            self.pods_watch,
            ListWatch(api, resource_path("apps/v1", "daemonsets", namespace=ns),
                      on_event=self._on_daemonset,
                      query={"fieldSelector": f"metadata.name={target.daemonset}"},
                      name="daemonset"),
            ListWatch(api, resource_path("apps/v1", "controllerrevisions", namespace=ns),
                      on_event=self._on_revision, name="controllerrevisions"),
            ListWatch(api, cluster_operator_path(), on_event=self._on_cluster_operator,
                      query={"fieldSelector": f"metadata.name={target.cluster_operator}"},
                      name="clusteroperator"),
        ]

    @property
    def executor(self) -> ActionExecutor:
        return self.dispatcher.executor

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> RolloutController:
        self._start_worker()
        self.status_writer.start()
        return self

    def stop(self) -> None:
        self._stop_worker(10)
        if self.budgets_watch is not None:
            self.budgets_watch.stop()
        self.dispatcher.shutdown_requests()
        self.status_writer.join(10)
        self.dispatcher.shutdown_events()

    # -- the index's handlers -----------------------------------------------------------------

    # ``touch=False`` for the objects our own writes returned (the plan that made them already
    # counted them); a watch event with the resourceVersion we hold is their echo.

    def _on_node(self, event: str, obj: JSON, *, touch: bool = True) -> None:
        with self._wake:
            if self.index.on_node(event, obj) and touch:
                self._touch()

    def _on_pod(self, event: str, obj: JSON, *, touch: bool = True) -> None:
        with self._wake:
            if self.index.on_pod(event, obj) and touch:
                self._touch()

    def _on_daemonset(self, event: str, obj: JSON, *, touch: bool = True) -> None:
        with self._wake:
            if self.index.on_daemonset(event, obj) and touch:
                self._touch()

    def _on_revision(self, event: str, obj: JSON) -> None:
        with self._wake:
            if self.index.on_revision(event, obj):
                self._touch()

    def _on_budget(self, event: str, obj: JSON) -> None:
        with self._wake:
            if self.index.on_budget(event, obj):
                self._touch()

    def _on_cluster_operator(self, event: str, obj: JSON, *, touch: bool = True) -> None:
        with self._wake:
            if self.index.on_cluster_operator(event, obj) and touch:
                self._touch()

    def _own_write(self, kind: str, obj: JSON) -> None:
        """Objects the server returned to our writes go into the index at once."""
        handler = {
            "node": self._on_node,
            "pod": self._on_pod,
            "daemonset": self._on_daemonset,
            "clusteroperator": self._on_cluster_operator,
        }.get(kind)
        if handler is not None:
            handler("MODIFIED", without_managed_fields(obj) if kind in ("node", "pod") else obj,
                    touch=False)
        if kind == "node":
            self.observer.node_written(str(obj["metadata"]["name"]))
        elif kind == "pod":
            self.observer.pod_deleted(str((obj.get("spec") or {}).get("nodeName") or ""))

    def _index_own_write(self, cluster_operator: JSON) -> None:
        self._on_cluster_operator("MODIFIED", cluster_operator, touch=False)

    # -- snapshot ---------------------------------------------------------------------------

    def snapshot(self, settings: PlannerSettings | None = None
                 ) -> tuple[RolloutSnapshot, JSON] | None:
        """The planner's view, or None while something it needs does not exist yet. With
        ``settings`` that have ``drain`` or ``waitFor``, nodes carry their pods (and, with
        ``drain``, the snapshot the budgets); without, neither is kept."""
        if settings is not None:
            self._follow_drain_settings(settings)
        with self._lock:
            co = self.index.cluster_operator
            ds = self.index.daemonset
            if co is None or ds is None:
                return None
            view = daemonset_view(ds, self.index.revisions.values())
            if view is None:
                return None
            driver = (co.get("spec") or {}).get("driver") or {}
            policy = UpgradePolicy.from_spec(driver.get("upgradePolicy"))
            planned = self.status_writer.planned
            if planned is None:
                self.status_writer.base = upgrade_status_of(co) or None
            status = dict(planned if planned is not None else upgrade_status_of(co))
            self.index.keep_labels(self._planner_labels(status))
            snap = RolloutSnapshot(
                nodes=dict(self.index.views),
                daemonset=view,
                payload=dict(driver.get("payload") or {}),
                policy=policy,
                status=status,
                windows=self.windows(),
                budgets=dict(self.index.budgets) if self.budgets_watch is not None else {},
            )
            return snap, co

    def _follow_drain_settings(self, settings: PlannerSettings) -> None:
        """Pods are kept while drain or waitFor is set, budgets watched while drain is
        (docs/live-clusters.md#the-drain); nothing of either otherwise."""
        track = settings.drain is not None or settings.wait_for is not None
        if track != self.index.track_pods:
            with self._lock:
                # the pods' cache: events that land meanwhile are applied again, harmlessly
                self.index.set_track_pods(track, self.pods_watch.items() if track else ())
        if (settings.drain is not None) == (self.budgets_watch is not None):
            return
        if self.budgets_watch is None:
            self.budgets_watch = ListWatch(
                self.api, resource_path("policy/v1", "poddisruptionbudgets"),
                on_event=self._on_budget, name="poddisruptionbudgets",
                transform=without_managed_fields).start()
            return
        watch, self.budgets_watch = self.budgets_watch, None
        watch.stop()
        with self._lock:
            self.index.budgets.clear()

    def _budgets_pending(self, co: JSON) -> bool:
        """True while the budgets' first list has not come: a drain plans on no guess. A
        refusal (no RBAC for budgets: deploy/'s drain part) is reported once as an Event."""
        watch = self.budgets_watch
        if watch is None or watch.wait_synced(0):
            return False
        error = watch.last_error or ""
        if ("Forbidden" in error or "403" in error) and not self._budgets_forbidden_reported:
            self._budgets_forbidden_reported = True
            self.dispatcher.record_event(RecordEvent(
                "Warning", "DrainNotPermitted",
                "rollout.drain is set but PodDisruptionBudgets cannot be listed (grant "
                f"the drain RBAC of deploy/, drain.enabled in the Helm chart): {error}"), co)
        return True

    # -- worker -----------------------------------------------------------------------------

    def reconcile_once(self) -> float | None:
        """One observe-plan-act pass; returns when to plan again if nothing happens."""
        settings = self.pass_settings()
        observed = self.snapshot(settings)
        if observed is None:
            return None
        snap, co = observed
        if self._budgets_pending(co):
            return self.clock() + 0.5
        if self.health is not None:
            snap = self.health.feed(snap)  # outside the lock: it asks Prometheus
            error = self.health.section.error
            if error is not None and error != self._health_error_reported:
                self._health_error_reported = error
                self.dispatcher.record_event(RecordEvent(
                    "Warning", "HealthConfigInvalid",
                    f"health section invalid, no node starts: {error}"), co)
        self._report_windows_error(snap.windows, co)
        firmware_phase = str(firmware_status_of(co).get("phase") or "")
        if (firmware_phase not in FIRMWARE_IDLE_PHASES
                and snap.status.get("phase") not in ACTIVE_PHASES):
            # docs/firmware.md: a driver rollout never starts while a firmware upgrade runs; the
            # firmware status changing wakes us again
            return None
        self.observer.pass_started()
        result = plan(snap, self.clock(), settings)
        self.observer.pass_planned()
        self.stats.passes += 1
        self.last_plan = result
        actions, backoff_ends = self.executor.held_back(result.actions)
        if not self.dispatcher.execute(actions, co):
            return self.clock() + 0.5
        self.observer.pass_acted()
        self.stats.max_in_flight = max(self.stats.max_in_flight, result.in_flight)
        if result.changed:
            with self._lock:
                self.status_writer.publish(result.status, self.dispatcher.in_flight)
                if result.again:
                    # a new step goes on record before any of its nodes starts
                    self.status_writer.wait_written(result.status)
        self.observer.pass_ended()
        if actions or result.again:
            # our own writes changed the world, or the planner moved to a state it wants to
            # look at again (a new step recorded before its nodes start): plan again at once
            return self.clock()
        if backoff_ends is not None:  # an eviction held back: ask again when it may be
            return min(backoff_ends, result.requeue_at or backoff_ends)
        return result.requeue_at

    def _planner_labels(self, status: Mapping[str, Any]) -> frozenset[str]:
        """The node labels the planner reads: the canary label, and the topology key of the
        rollout in progress (``upgradeStatus.topology``) and of the settings in force (the next
        rollout's)."""
        keys = set(PLANNER_LABELS)
        frozen = status.get("topology")
        if isinstance(frozen, Mapping) and isinstance(frozen.get("key"), str):
            keys.add(frozen["key"])
        topology = (self.config().rollout.topology if self.config is not None
                    else self.settings.topology)
        if topology is not None:
            keys.add(topology.key)
        return frozenset(keys)

    def pass_settings(self) -> PlannerSettings:
        """The planner's settings for this pass: the repository's ``rollout`` settings as of
        the latest commit (docs/live-clusters.md: read at every commit) over the process's own."""
        if self.config is None:
            return self.settings
        return self.settings.for_pass(self.config().rollout)

    def _report_windows_error(self, windows: WindowCalendar | None, co: JSON) -> None:
        """A ``windows`` section that does not validate fails closed (docs/health.md and
        docs/configuration.md#maintenance-windows): the planner starts no node and its status
        message says why; a Warning Event carries the located error, once per error."""
        error = windows.error if windows is not None else None
        if error is not None and error != self._windows_error_reported:
            self.dispatcher.record_event(RecordEvent(
                "Warning", "WindowsConfigInvalid",
                f"windows section invalid, no node starts: {error}"), co)
        self._windows_error_reported = error

    def _write_status(self, upgrade_status: JSON) -> None:
        self._write_upgrade_status(upgrade_status)

    # -- a planning pass that raised ----------------------------------------------------------

    def _report_failure(self, failure: PassFailure, *, event: bool) -> None:
        if event:  # first: the status may be what the planner could not read
            self._failure_event("Warning", PLANNING_FAILED,
                                f"planning pass failed ({failure.reason}): {failure.message}; "
                                "retrying with back-off")
        self._plan_failure_condition(failure, failed=True)

    def _shown_failure(self) -> PassFailure | None:
        with self._lock:
            if self.status_writer.planned is not None:
                return shown_failure(self.status_writer.planned)
            co = self.index.cluster_operator
            return shown_failure(upgrade_status_of(co))

    def _clear_failure(self, failure: PassFailure) -> None:
        # the condition leaves the list; the pass that planned may have dropped it already
        if (self._plan_failure_condition(failure, failed=False)
                or self._shown_failure() is None):
            self._failure_event("Normal", PLANNING_RECOVERED,
                                f"planning passes succeed again (the last failure: "
                                f"{failure.reason})")

    def _plan_failure_condition(self, failure: PassFailure, *, failed: bool) -> bool:
        """The condition goes into the newest planned status (or the stored one), through the
        status writer like any planned status."""
        writer = self.status_writer
        with self._lock:
            co = self.index.cluster_operator
            if co is None:
                return False
            stored = upgrade_status_of(co) or None
            base = writer.planned if writer.planned is not None else stored
            status = with_failure_condition(base, failure, self.clock(), failed=failed)
            if status is None:
                return False
            if writer.planned is None:
                writer.base = stored
            writer.publish(status, self.dispatcher.in_flight)
            return True

    def _failure_event(self, kind: Literal["Normal", "Warning"], reason: str,
                       message: str) -> None:
        with self._lock:
            co = self.index.cluster_operator
        if co is not None:
            self.dispatcher.record_event(RecordEvent(kind, reason, message), co)

    def _cluster_operator_name(self) -> str:
        return self.target.cluster_operator

    def _cached_cluster_operator(self) -> JSON | None:
        return self.index.cluster_operator
