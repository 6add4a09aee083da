"""The rollout controller: list+watch caches, one planning pass per burst of events, actions,
and the status write through the status subresource with optimistic concurrency."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from reconciler.controller.act import ActionExecutor, Target
from reconciler.controller.observe import (
    daemonset_view,
    driver_pod_view,
    is_driver_pod,
    node_view,
    pick_driver_pod,
    requests_gpu,
)
from reconciler.controller.worker import WatchDrivenWorker, newer
from reconciler.kube.api import JSON, KubeApi, resource_path
from reconciler.kube.objects import GPU_NODE_LABEL, cluster_operator_path
from reconciler.kube.watch import ListWatch, object_key
from reconciler.policy.transitions import FIRMWARE_IDLE_PHASES
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


@dataclass(slots=True)
class ControllerStats:
    passes: int = 0
    actions: int = 0
    status_writes: int = 0
    conflicts: int = 0
    errors: int = 0
    max_in_flight: int = 0
    #: the last 1,000 passes: (planning, acting, status write) seconds, for benchmarks
    pass_seconds: list[tuple[float, float, float]] = field(default_factory=list)


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
        self.executor = ActionExecutor(api, target, on_object=self._own_write, clock=clock)
        ns = target.namespace
        self.watches = [
            ListWatch(api, "/api/v1/nodes", on_event=self._on_node,
                      query={"labelSelector": f"{GPU_NODE_LABEL}=true"}, name="nodes"),
            ListWatch(api, "/api/v1/pods", on_event=self._on_pod, name="pods"),
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
        return self

    def stop(self) -> None:
        self._stop_worker(10)
        self._pool.shutdown(wait=True)
        self._events.shutdown(wait=True)

    # -- index ------------------------------------------------------------------------------

    def _on_node(self, event: str, obj: JSON) -> None:
        name = str(obj["metadata"]["name"])
        with self._wake:
            if event == "DELETED":
                self._nodes.pop(name, None)
                self._node_views.pop(name, None)
            elif newer(self._nodes.get(name), obj):
                self._nodes[name] = obj
                self._refresh_node(name)
            self._touch()

    def _refresh_node(self, name: str) -> None:
        node = self._nodes.get(name)
        if node is None:
            return
        pods = self._driver_pods.get(name, {})
        self._node_views[name] = node_view(
            node, pick_driver_pod(pods.values()), self._workloads.get(name, ())
        )

    def _on_pod(self, event: str, obj: JSON) -> None:
        key = object_key(obj)
        with self._wake:
            if event != "DELETED" and not newer(self._pods.get(key), obj):
                return
            old_home = self._pod_home.pop(key, None)
            self._pods.pop(key, None)
            if old_home is not None:
                node, kind = old_home
                if kind == "driver":
                    self._driver_pods.get(node, {}).pop(str(obj["metadata"]["name"]), None)
                else:
                    self._workloads.get(node, set()).discard(key)
            node = str((obj.get("spec") or {}).get("nodeName") or "")
            if event != "DELETED" and node:
                if is_driver_pod(obj, self.target.daemonset, self.target.namespace):
                    self._driver_pods.setdefault(node, {})[str(obj["metadata"]["name"])] = (
                        driver_pod_view(obj)
                    )
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
            for n in touched:
                self._refresh_node(n)
            self._touch()

    def _on_daemonset(self, event: str, obj: JSON) -> None:
        with self._wake:
            if event == "DELETED":
                self._daemonset = None
            elif newer(self._daemonset, obj):
                self._daemonset = obj
            self._touch()

    def _on_revision(self, event: str, obj: JSON) -> None:
        name = str(obj["metadata"]["name"])
        with self._wake:
            if event == "DELETED":
                self._revisions.pop(name, None)
            else:
                self._revisions[name] = obj
            self._touch()

    def _on_cluster_operator(self, event: str, obj: JSON) -> None:
        with self._wake:
            if event == "DELETED":
                self._cluster_operator = None
            elif newer(self._cluster_operator, obj):
                self._cluster_operator = obj
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
            handler("MODIFIED", obj)

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
            snap = RolloutSnapshot(
                nodes=dict(self._node_views),
                daemonset=view,
                payload=dict(driver.get("payload") or {}),
                policy=policy,
                status=dict((co.get("status") or {}).get("upgradeStatus") or {}),
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
            self._write_status(result.status)
        self.stats.pass_seconds.append(
            (planned - started, acted - planned, time.perf_counter() - acted))
        del self.stats.pass_seconds[:-1000]
        if result.actions or result.again:
            # our own writes changed the world, or the planner moved to a state it wants to
            # look at again (a new step recorded before its nodes start): plan again at once
            return self.clock()
        return result.requeue_at

    def _execute(self, actions: Sequence[Action], co: JSON) -> bool:
        """Carries out a plan's actions in order, except that runs of per-node actions go out in
        parallel across nodes (in order within each node): a wave of 400 nodes is 400 x 3 requests
        and must not wait for each other. Cluster-wide actions are barriers. Events go to their
        own thread: they are information and must not delay the rollout. False when leadership
        was lost."""
        batch: dict[str, list[Action]] = {}

        def flush() -> None:
            if not batch:
                return
            # nodes that get a pod deleted go first: a freed slot is refilled before the
            # bookkeeping of nodes that just finished (their uncordon can wait a moment)
            groups = sorted(batch.values(),
                            key=lambda g: not any(isinstance(a, DeleteDriverPod) for a in g))
            batch.clear()
            if len(groups) == 1:
                self.executor.execute_node_actions(groups[0], co)
                return
            futures = [self._pool.submit(self._execute_node, group, co) for group in groups]
            errors = [f.exception() for f in futures]
            for error in errors:
                if error is not None:
                    raise error

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
                self.executor.execute(action, co)
        flush()
        return True

    def _execute_node(self, actions: list[Action], co: JSON) -> None:
        self.executor.execute_node_actions(actions, co)

    def _write_status(self, upgrade_status: JSON) -> None:
        self._write_status_section("upgradeStatus", upgrade_status)

    def _cluster_operator_name(self) -> str:
        return self.target.cluster_operator

    def _cached_cluster_operator(self) -> JSON | None:
        return self._cluster_operator
