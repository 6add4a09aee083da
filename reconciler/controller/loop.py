"""The rollout controller: list+watch caches, one planning pass per burst of events, actions,
and the status write through the status subresource with optimistic concurrency.

Passes are pipelined: a pass hands its per-node requests to a pool and its status to a writer
thread, and the next pass plans while they are in flight. What those requests will have written
(a node's annotations and cordon, a pod being deleted, the new status) is laid over the caches
until the server's answer replaces it, so a pass never sees a node it already started as free:
in-flight counts stay exact, erring only towards counting a node whose request failed for a
moment longer. Cluster-wide actions (the DaemonSet template, the policy's pause, the payload)
wait for every request in flight first, as they did in a plan's order."""

from __future__ import annotations

import dataclasses
import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for_futures
from dataclasses import dataclass, field
from typing import Literal

from reconciler.controller.act import ActionExecutor, Target
from reconciler.controller.observe import (
    daemonset_view,
    driver_pod_view,
    is_driver_pod,
    node_view,
    pick_driver_pod,
    requests_gpu,
)
from reconciler.controller.worker import (
    PLANNING_FAILED,
    PLANNING_RECOVERED,
    PassFailure,
    WatchDrivenWorker,
    generation,
    newer,
    same_version,
    shown_failure,
    with_failure_condition,
)
from reconciler.kube.api import JSON, Conflict, KubeApi, KubeError, resource_path
from reconciler.kube.objects import cluster_operator_path
from reconciler.kube.watch import ListWatch, object_key, without_managed_fields
from reconciler.names import FIRMWARE_IDLE_PHASES, GPU_NODE_LABEL
from reconciler.policy.upgrade_policy import UpgradePolicy
from reconciler.rollout.actions import (
    Action,
    AnnotateNode,
    Cordon,
    DeleteDriverPod,
    RecordEvent,
    Uncordon,
)
from reconciler.rollout.model import DriverPod, PlannerSettings, RolloutNode, RolloutSnapshot
from reconciler.rollout.planner import Plan, plan

log = logging.getLogger(__name__)

#: The interpreter's thread switch interval for a process that runs the rollout controller.
#: Dozens of request threads compete for the GIL; at Python's default 5 ms the controller saw a
#: pod's Ready event p99 199 ms after the 2,000-node benchmark's observer did, at 1 ms 40 ms
#: (see docs/rollout.md).
SWITCH_INTERVAL_SECONDS = 0.001
#: the longest a finished node's bookkeeping waits for pod deletions in flight
BOOKKEEPING_WAIT = 1.0


def prefer_responsiveness() -> None:
    """Hands the GIL around more often (see ``SWITCH_INTERVAL_SECONDS``); process-wide, so
    the process's entry point calls it."""
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)


@dataclass(slots=True)
class ControllerStats:
    passes: int = 0
    actions: int = 0
    status_writes: int = 0
    conflicts: int = 0
    errors: int = 0
    max_in_flight: int = 0
    #: the last 1,000 passes: (planning, handing out actions, handing out status) seconds
    pass_seconds: list[tuple[float, float, float]] = field(default_factory=list)
    #: the last 5,000 nodes' requests: seconds from handing them out to their landing
    request_seconds: list[float] = field(default_factory=list)
    #: node -> wall-clock times of its last start: handed out, node written before the deletion
    #: (0: cordoned ahead, nothing written first), pod deleted (for the benchmark's breakdown
    #: of where a refill's time goes)
    start_times: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    #: node -> wall-clock time its driver pod was last seen turning Ready
    ready_seen: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NodeIntent:
    """What one node's requests in flight will have written once they land."""

    annotations: Mapping[str, str | None]
    unschedulable: bool | None
    deleting: frozenset[str]

    @classmethod
    def of(cls, actions: Sequence[Action]) -> NodeIntent:
        annotations: dict[str, str | None] = {}
        unschedulable: bool | None = None
        deleting: set[str] = set()
        for action in actions:
            if isinstance(action, AnnotateNode):
                annotations.update(action.annotations)
            elif isinstance(action, (Cordon, Uncordon)):
                unschedulable = isinstance(action, Cordon)
            elif isinstance(action, DeleteDriverPod):
                deleting.add(action.pod)
        return cls(annotations, unschedulable, frozenset(deleting))


def with_intents(node: JSON, pods: Mapping[str, DriverPod],
                 intents: Sequence[NodeIntent]) -> tuple[JSON, dict[str, DriverPod]]:
    """The node and its driver pods as they will be once ``intents`` have landed."""
    meta = dict(node.get("metadata") or {})
    annotations = dict(meta.get("annotations") or {})
    spec = dict(node.get("spec") or {})
    deleting: set[str] = set()
    for intent in intents:
        for key, value in intent.annotations.items():
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value
        if intent.unschedulable is not None:
            spec["unschedulable"] = intent.unschedulable
        deleting |= intent.deleting
    meta["annotations"] = annotations
    views = {name: dataclasses.replace(pod, deleting=True) if name in deleting else pod
             for name, pod in pods.items()}
    return {**node, "metadata": meta, "spec": spec}, views


class RolloutController(WatchDrivenWorker):
    """Drives one ClusterOperator's driver rollout. Thread-based: informers feed an index, a
    single worker plans and acts, so actions never race each other."""

    role = "rollout-controller"
    stats: ControllerStats

    def __init__(
        self,
        api: KubeApi,
        target: Target,
        *,
        settings: PlannerSettings | None = None,
        clock: Callable[[], float] = time.time,
        settle_seconds: float = 0.02,
        is_leader: Callable[[], bool] = lambda: True,
        workers: int = 32,
    ) -> None:
        super().__init__(clock=clock, settle_seconds=settle_seconds, is_leader=is_leader)
        self.api = api
        self.target = target
        self.settings = settings or PlannerSettings()
        self.stats = ControllerStats()
        self.last_plan: Plan | None = None
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rollout-act")
        # the bookkeeping of finished nodes (uncordon, annotations) on a few threads of its own:
        # a freed slot's refill never queues behind it, and it does not crowd the API server
        # while slots are being refilled
        self._bookkeeping = ThreadPoolExecutor(max_workers=8,
                                               thread_name_prefix="rollout-bookkeeping")
        self._events = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollout-events")
        # index, kept by the informers' handlers and by our own writes
        self._nodes: dict[str, JSON] = {}
        self._node_views: dict[str, RolloutNode] = {}
        self._driver_pods: dict[str, dict[str, DriverPod]] = {}  # node -> pod name -> view
        self._workloads: dict[str, set[str]] = {}  # node -> "ns/name"
        self._pod_home: dict[str, tuple[str, str]] = {}  # pod key -> (node, kind)
        self._pods: dict[str, JSON] = {}
        self._daemonset: JSON | None = None
        self._revisions: dict[str, JSON] = {}
        self._cluster_operator: JSON | None = None
        # requests in flight: node -> what they will have written; their futures
        self._intents: dict[str, list[NodeIntent]] = {}
        self._in_flight: set[Future[None]] = set()
        self._starts_in_flight: set[Future[None]] = set()  # those that delete a pod
        self._starts_idle = threading.Condition(self._lock)
        self._failure_backoff: dict[str, float] = {}
        self._node_written: dict[str, float] = {}  # node -> when our last write to it landed
        self._pod_deleted: dict[str, float] = {}  # node -> when our last pod deletion landed
        # node -> its newest requests handed out: a node's later requests run after them
        self._node_requests: dict[str, Future[None]] = {}
        # nodes whose bookkeeping a start waits for: it goes without yielding
        self._awaited: set[str] = set()
        # the newest status planned and not yet written (None: the cache's is the newest), and
        # the written status that plan descends from (a conflict keeps the plan only if the
        # server still has that one: nobody else wrote the status meanwhile)
        self._planned_status: JSON | None = None
        self._status_base: JSON | None = None
        # the requests handed out up to the pass that planned it: a status is written only
        # after they landed, and not at all if one failed (the planner's contract)
        self._planned_after: frozenset[Future[None]] = frozenset()
        self._status_ready = threading.Condition(self._lock)
        self._status_writer: threading.Thread | None = None
        self.executor = ActionExecutor(api, target, on_object=self._own_write, clock=clock)
        ns = target.namespace
        self.watches = [
            ListWatch(api, "/api/v1/nodes", on_event=self._on_node,
                      query={"labelSelector": f"{GPU_NODE_LABEL}=true"}, name="nodes",
                      transform=without_managed_fields),
            ListWatch(api, "/api/v1/pods", on_event=self._on_pod, name="pods",
                      transform=without_managed_fields),
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

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> RolloutController:
        self._start_worker()
        self._status_writer = threading.Thread(target=self._write_statuses,
                                               name=f"{self.role}-status", daemon=True)
        self._status_writer.start()
        return self

    def stop(self) -> None:
        self._stop_worker(10)
        self._pool.shutdown(wait=True)
        self._bookkeeping.shutdown(wait=True)
        with self._status_ready:
            self._status_ready.notify_all()
        if self._status_writer is not None:
            self._status_writer.join(10)
        self._events.shutdown(wait=True)

    # -- index ------------------------------------------------------------------------------

    # Handlers: ``touch=False`` for the objects our own writes returned (the plan that made them
    # already counted them); a watch event with the resourceVersion we hold is their echo.

    def _on_node(self, event: str, obj: JSON, *, touch: bool = True) -> None:
        name = str(obj["metadata"]["name"])
        with self._wake:
            if event == "DELETED":
                self._nodes.pop(name, None)
                self._node_views.pop(name, None)
            elif same_version(self._nodes.get(name), obj) or not newer(
                    self._nodes.get(name), obj):
                return
            else:
                self._nodes[name] = obj
                if not self._refresh_node(name):
                    return
            if touch:
                self._touch()

    def _refresh_node(self, name: str) -> bool:
        """Rebuilds a node's view; True when the planner's view of it changed (heartbeats,
        labels it does not read and such leave it as it was, and need no pass)."""
        node = self._nodes.get(name)
        if node is None:
            return False
        pods = self._driver_pods.get(name, {})
        intents = self._intents.get(name)
        if intents:
            node, pods = with_intents(node, pods, intents)
        view = node_view(node, pick_driver_pod(pods.values()), self._workloads.get(name, ()))
        if self._node_views.get(name) == view:
            return False
        self._node_views[name] = view
        return True

    def _on_pod(self, event: str, obj: JSON, *, touch: bool = True) -> None:
        key = object_key(obj)
        with self._wake:
            if event != "DELETED" and (same_version(self._pods.get(key), obj)
                                       or not newer(self._pods.get(key), obj)):
                return
            old_home = self._pod_home.pop(key, None)
            self._pods.pop(key, None)
            was_ready = False
            if old_home is not None:
                node, kind = old_home
                if kind == "driver":
                    old = self._driver_pods.get(node, {}).pop(str(obj["metadata"]["name"]), None)
                    was_ready = old is not None and old.ready
                else:
                    self._workloads.get(node, set()).discard(key)
            node = str((obj.get("spec") or {}).get("nodeName") or "")
            if event != "DELETED" and node:
                if is_driver_pod(obj, self.target.daemonset, self.target.namespace):
                    view = driver_pod_view(obj)
                    if view.ready and not was_ready:
                        self.stats.ready_seen[node] = time.time()
                    self._driver_pods.setdefault(node, {})[str(obj["metadata"]["name"])] = view
                    self._pod_home[key] = (node, "driver")
                    self._pods[key] = obj
                elif requests_gpu(obj):
                    self._workloads.setdefault(node, set()).add(key)
                    self._pod_home[key] = (node, "workload")
                    self._pods[key] = obj
            touched = {node} if node else set()
            if old_home is not None:
                touched.add(old_home[0])
            if not any(n in self._nodes for n in touched):
                return  # a pod of no interest
            changed = [self._refresh_node(n) for n in touched]
            if touch and any(changed):
                self._touch()

    def _on_daemonset(self, event: str, obj: JSON, *, touch: bool = True) -> None:
        with self._wake:
            if event == "DELETED":
                self._daemonset = None
            elif same_version(self._daemonset, obj) or not newer(self._daemonset, obj):
                return
            else:
                before, self._daemonset = self._daemonset, obj
                if before is not None and generation(before) == generation(obj):
                    return  # its status: the planner reads the template and its revisions
            if touch:
                self._touch()

    def _on_revision(self, event: str, obj: JSON) -> None:
        name = str(obj["metadata"]["name"])
        with self._wake:
            if event == "DELETED":
                self._revisions.pop(name, None)
            else:
                self._revisions[name] = obj
            self._touch()

    def _on_cluster_operator(self, event: str, obj: JSON, *, touch: bool = True) -> None:
        with self._wake:
            if event == "DELETED":
                self._cluster_operator = None
            elif same_version(self._cluster_operator, obj) or not newer(
                    self._cluster_operator, obj):
                return
            else:
                self._cluster_operator = obj
            if touch:
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
            self._node_written[str(obj["metadata"]["name"])] = time.time()
        elif kind == "pod":
            node = str((obj.get("spec") or {}).get("nodeName") or "")
            self._pod_deleted[node] = time.time()

    def _index_own_write(self, cluster_operator: JSON) -> None:
        self._on_cluster_operator("MODIFIED", cluster_operator, touch=False)

    # -- snapshot ---------------------------------------------------------------------------

    def snapshot(self) -> tuple[RolloutSnapshot, JSON] | None:
        """The planner's view, or None while something it needs does not exist yet."""
        with self._lock:
            co = self._cluster_operator
            ds = self._daemonset
            if co is None or ds is None:
                return None
            view = daemonset_view(ds, self._revisions.values())
            if view is None:
                return None
            driver = (co.get("spec") or {}).get("driver") or {}
            policy = UpgradePolicy.from_spec(driver.get("upgradePolicy"))
            if self._planned_status is None:
                self._status_base = (co.get("status") or {}).get("upgradeStatus")
            snap = RolloutSnapshot(
                nodes=dict(self._node_views),
                daemonset=view,
                payload=dict(driver.get("payload") or {}),
                policy=policy,
                status=dict(self._planned_status if self._planned_status is not None
                            else (co.get("status") or {}).get("upgradeStatus") or {}),
            )
            return snap, co

    # -- worker -----------------------------------------------------------------------------

    def reconcile_once(self) -> float | None:
        """One observe-plan-act pass; returns when to plan again if nothing happens."""
        observed = self.snapshot()
        if observed is None:
            return None
        snap, co = observed
        firmware_phase = str(((co.get("status") or {}).get("firmwareUpgrade") or {}).get("phase")
                             or "")
        if firmware_phase not in FIRMWARE_IDLE_PHASES and snap.status.get("phase") not in (
            "Progressing", "Terminating", "Disabling"
        ):
            # SPEC 5: a driver rollout never starts while a firmware upgrade runs; the firmware
            # status changing wakes us again
            return None
        started = time.perf_counter()
        result = plan(snap, self.clock(), self.settings)
        planned = time.perf_counter()
        self.stats.passes += 1
        self.last_plan = result
        if not self._execute(result.actions, co):
            return self.clock() + 0.5
        acted = time.perf_counter()
        self.stats.max_in_flight = max(self.stats.max_in_flight, result.in_flight)
        if result.changed:
            with self._status_ready:
                self._planned_status = result.status
                self._planned_after = frozenset(self._in_flight)
                self._status_ready.notify_all()
                if result.again:
                    # a new step goes on record before any of its nodes starts
                    while (self._planned_status is result.status and not self._stop.is_set()
                           and self.is_leader()):
                        self._status_ready.wait(0.5)
        self.stats.pass_seconds.append(
            (planned - started, acted - planned, time.perf_counter() - acted))
        del self.stats.pass_seconds[:-1000]
        if result.actions or result.again:
            # our own writes changed the world, or the planner moved to a state it wants to
            # look at again (a new step recorded before its nodes start): plan again at once
            return self.clock()
        return result.requeue_at

    def _execute(self, actions: Sequence[Action], co: JSON) -> bool:
        """Hands out a plan's actions in order. Runs of per-node actions go to the pool, in
        order within each node and in parallel across nodes (a wave of 400 nodes is 400 x 3
        requests), without waiting: their intents are in the index at once. A cluster-wide
        action first waits for every request in flight. Events go to their own thread: they are
        information and must not delay the rollout. False when leadership was lost."""
        batch: dict[str, list[Action]] = {}

        def flush() -> None:
            # nodes that get a pod deleted go first: a freed slot is refilled before the
            # bookkeeping of nodes that just finished (their uncordon can wait a moment)
            groups = [(node, group, any(isinstance(a, DeleteDriverPod) for a in group))
                      for node, group in batch.items()]
            batch.clear()
            for node, group, starts in sorted(groups, key=lambda g: not g[2]):
                self._dispatch(node, group, co, starts=starts)

        for action in actions:
            if not self.is_leader():
                return False
            self.stats.actions += 1
            if isinstance(action, RecordEvent):
                self._events.submit(self.executor.execute, action, co)
            elif isinstance(action, (Cordon, Uncordon, AnnotateNode, DeleteDriverPod)):
                batch.setdefault(action.node, []).append(action)
            else:
                flush()
                self._drain()
                self.executor.execute(action, co)
        flush()
        return True

    def _dispatch(self, node: str, group: list[Action], co: JSON, *,
                  starts: bool) -> Future[None]:
        """Hands one node's actions to the pool; its intent is in the index before this
        returns. They run after the node's earlier requests (a start right after the node's
        cordon ahead waits for the cordon), and not at all if those failed."""
        intent = NodeIntent.of(group)
        with self._wake:
            self._intents.setdefault(node, []).append(intent)
            self._refresh_node(node)
            earlier = self._node_requests.get(node)
            if earlier is not None and earlier.done() and earlier.exception() is None:
                earlier = None  # landed; a failed one counts until it is forgotten
            if earlier is not None and starts:
                self._awaited.add(node)
                self._starts_idle.notify_all()
        handed_out = time.perf_counter()
        if starts:
            self._node_written.pop(node, None)
            self._pod_deleted.pop(node, None)
            wall = time.time()
            future = self._pool.submit(self._after, earlier, self.executor.execute_node_actions,
                                       group, co)
        else:
            future = self._bookkeeping.submit(self._after, earlier, self._bookkeep, node, group,
                                              co)
        with self._wake:
            self._in_flight.add(future)
            self._node_requests[node] = future
            if starts:
                self._starts_in_flight.add(future)
        future.add_done_callback(lambda done: self._landed(node, intent, done, handed_out))
        if starts:
            future.add_done_callback(lambda _: self._record_start(node, wall))
        return future

    @staticmethod
    def _after(earlier: Future[None] | None, run: Callable[..., None], *args: object) -> None:
        if earlier is not None:
            earlier.result()  # raises what it raised: this node is planned again instead
        run(*args)

    def _bookkeep(self, node: str, group: list[Action], co: JSON) -> None:
        """A finished node's bookkeeping (uncordon, annotations) and a cordon ahead wait, up to
        a second, while pod deletions are on their way: in a burst of freed slots the API server
        answers the refills first. The planner already counts what they write (their intent).
        A start waiting for this node's request ends the wait."""
        with self._starts_idle:
            self._starts_idle.wait_for(
                lambda: not self._starts_in_flight or node in self._awaited
                or self._stop.is_set(), BOOKKEEPING_WAIT)
            self._awaited.discard(node)
        self.executor.execute_node_actions(group, co)

    def _record_start(self, node: str, handed_out: float) -> None:
        with self._lock:
            deleted = self._pod_deleted.get(node, 0.0)
            written = self._node_written.get(node, 0.0)
            # a node cordoned ahead is written after its deletion (the record), not before
            self.stats.start_times[node] = (handed_out, written if written <= deleted else 0.0,
                                            deleted)

    def _landed(self, node: str, intent: NodeIntent, done: Future[None],
                handed_out: float) -> None:
        """A node's requests finished: the server's objects are in the index (``_own_write``),
        so the intent goes. After a failure it stays a little longer, so the next pass does not
        retry that node in a tight loop; then the node is planned from what the server has."""
        error = done.exception()
        with self._lock:
            self.stats.request_seconds.append(time.perf_counter() - handed_out)
            del self.stats.request_seconds[:-5000]
        if error is None:
            with self._lock:
                self._failure_backoff.pop(node, None)
            self._forget(node, intent, done, replan=False)
            return
        self.stats.errors += 1
        with self._lock:
            backoff = min(self._failure_backoff.get(node, 0.1) * 2, 10.0)
            self._failure_backoff[node] = backoff
        if isinstance(error, KubeError):
            log.warning("%s: node %s: %s; planned again in %.1f s", self.role, node, error,
                        backoff)
        else:
            log.error("%s: node %s: %r; planned again in %.1f s", self.role, node, error, backoff)
        timer = threading.Timer(backoff, self._forget, (node, intent, done))
        timer.daemon = True
        timer.start()

    def _forget(self, node: str, intent: NodeIntent, done: Future[None], *,
                replan: bool = True) -> None:
        """Drops a landed intent. After success the index already holds what it said, so
        nothing needs planning again; after a failure the node is planned from the server's
        objects."""
        with self._wake:
            self._in_flight.discard(done)
            if done in self._starts_in_flight:
                self._starts_in_flight.discard(done)
                if not self._starts_in_flight:
                    self._starts_idle.notify_all()
            if self._node_requests.get(node) is done:
                del self._node_requests[node]
            intents = self._intents.get(node, [])
            if intent in intents:
                intents.remove(intent)
            if not intents:
                self._intents.pop(node, None)
            self._refresh_node(node)
            if replan:
                self._touch()
            self._wake.notify_all()  # _drain waits on the same condition

    def _drain(self) -> None:
        """Waits until no per-node request is in flight (before a cluster-wide action)."""
        with self._wake:
            while self._in_flight and not self._stop.is_set():
                self._wake.wait(0.5)

    # -- the status writer ------------------------------------------------------------------

    def _write_statuses(self) -> None:
        """Writes the newest planned status, one write at a time, once the requests handed out
        before it landed: passes that follow each other quickly coalesce into one write. A
        status whose requests failed is not written (the next plan repairs). A conflict
        re-reads the object; the planned status is kept only if nobody else wrote the status
        meanwhile."""
        backoff = 0.2
        while True:
            with self._status_ready:
                while self._planned_status is None and not self._stop.is_set():
                    self._status_ready.wait(1.0)
                status, after = self._planned_status, self._planned_after
                if status is None:
                    return  # stopping, nothing left to write
            if not self.is_leader():
                if self._stop.wait(0.5):
                    return
                continue
            wait_for_futures(after)
            if any(f.exception() is not None for f in after):
                with self._status_ready:
                    if self._planned_status is status:
                        self._planned_status = None
                        self._status_ready.notify_all()
                        self._touch()
                continue
            try:
                self._write_status(status)
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
            with self._status_ready:
                self._status_base = status
                if self._planned_status is status:
                    self._planned_status = None
                    self._status_ready.notify_all()  # a pass may wait for this one
                stopping = self._stop.is_set() and self._planned_status is None
            if stopping:
                return

    def _after_conflict(self) -> None:
        fresh = self._refetch_cluster_operator()
        with self._wake:
            theirs = ((fresh or {}).get("status") or {}).get("upgradeStatus")
            if fresh is None or theirs != self._status_base:
                self._planned_status = None  # someone else wrote it: plan from theirs
                self._status_ready.notify_all()
            self._touch()

    def _write_status(self, upgrade_status: JSON) -> None:
        self._write_status_section("upgradeStatus", upgrade_status)

    # -- a planning pass that raised ----------------------------------------------------------

    def _report_failure(self, failure: PassFailure, *, event: bool) -> None:
        if event:  # first: the status may be what the planner could not read
            self._failure_event("Warning", PLANNING_FAILED,
                                f"planning pass failed ({failure.reason}): {failure.message}; "
                                "retrying with back-off")
        self._plan_failure_condition(failure, failed=True)

    def _shown_failure(self) -> PassFailure | None:
        with self._lock:
            if self._planned_status is not None:
                return shown_failure(self._planned_status)
            co = self._cluster_operator
            return shown_failure((co or {}).get("status", {}).get("upgradeStatus"))

    def _clear_failure(self, failure: PassFailure) -> None:
        if self._plan_failure_condition(failure, failed=False):
            self._failure_event("Normal", PLANNING_RECOVERED,
                                f"planning passes succeed again (the last failure: "
                                f"{failure.reason})")

    def _plan_failure_condition(self, failure: PassFailure, *, failed: bool) -> bool:
        """The condition goes into the newest planned status (or the stored one), through the
        status writer like any planned status."""
        with self._status_ready:
            co = self._cluster_operator
            if co is None:
                return False
            stored = (co.get("status") or {}).get("upgradeStatus")
            base = self._planned_status if self._planned_status is not None else stored
            status = with_failure_condition(base, failure, self.clock(), failed=failed)
            if status is None:
                return False
            if self._planned_status is None:
                self._status_base = stored
            self._planned_status = status
            self._planned_after = frozenset(self._in_flight)
            self._status_ready.notify_all()
            return True

    def _failure_event(self, kind: Literal["Normal", "Warning"], reason: str,
                       message: str) -> None:
        with self._lock:
            co = self._cluster_operator
        if co is not None:
            self._events.submit(self.executor.execute, RecordEvent(kind, reason, message), co)

    def _cluster_operator_name(self) -> str:
        return self.target.cluster_operator

    def _cached_cluster_operator(self) -> JSON | None:
        return self._cluster_operator
