"""Driving and observing the rollout controller on the real control plane."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from reconciler.controller.act import Target
from reconciler.controller.loop import RolloutController
from reconciler.kube.api import JSON, KubeApi, resource_path
from reconciler.kube.objects import cluster_operator_path
from reconciler.kube.observe import driver_pod_view, is_driver_pod
from reconciler.kube.watch import ListWatch
from reconciler.names import CLUSTER_OPERATOR_NAME, GPU_NODE_LABEL
from reconciler.rollout.model import PlannerSettings
from reconciler.sim.operator_install import install_crd
from reconciler.sim.waiting import wait_for
from reconciler.stored_status import upgrade_status_of

SEED_10 = {
    "enableRollout": True,
    "upgradeSteps": [
        {"replicas": 2},
        {"replicas": 5, "pauseDuration": 1000},
        {"replicas": 8, "pauseDuration": 1000},
        {"replicas": "100%", "pauseDuration": 1000},
    ],
    "pause": False,
    "maxParallel": "100%",
    "maxUnavailable": 0,
    "maxFailureThreshold": 3,
    "fallback": "pause",
}

SEED_100 = {
    "enableRollout": True,
    "upgradeSteps": [
        {"replicas": "5%"},
        {"replicas": 30, "pauseDuration": 1000},
        {"replicas": 60, "pauseDuration": 1000},
        {"replicas": "100%"},
    ],
    "pause": False,
    "maxParallel": "50%",
    "maxUnavailable": "10%",
    "maxFailureThreshold": 5,
    "fallback": "pause",
}


def running_controller(kube: KubeApi, settings: PlannerSettings,
                       **options: Any) -> Iterator[RolloutController]:
    """A fixture's body: the CRD installed (the controller waits for the resource to be served
    before it is synced), a synced controller for cluster-operator, stopped after the test."""
    install_crd(kube)
    ctl = RolloutController(kube, Target(cluster_operator=CLUSTER_OPERATOR_NAME),
                            settings=settings, **options).start()
    try:
        assert ctl.wait_synced(30)
        yield ctl
    finally:
        ctl.stop()


def person_patch(kube: KubeApi, driver: Mapping[str, Any]) -> JSON:
    """A person's `kubectl patch --type merge` of spec.driver."""
    return kube.patch(cluster_operator_path(CLUSTER_OPERATOR_NAME), {"spec": {"driver": driver}})


def start_rollout(kube: KubeApi, version: str, policy: Mapping[str, Any]) -> JSON:
    """Waits until the controller has recorded the running spec (its first pass), then changes
    the version and the policy in one patch, as a merged pull request would."""
    wait_for(lambda: upgrade_status(kube).get("phase"), timeout=30,
             what="the controller's first status", observe=lambda: upgrade_status(kube))
    return person_patch(kube, {"payload": {"version": version}, "upgradePolicy": dict(policy)})


def passes_after_it_saw(controller: RolloutController, version: str, *, count: int = 2,
                        timeout: float = 30) -> None:
    """Waits until the controller's cache holds the ClusterOperator with ``version`` (the
    change a test made), then for ``count`` passes begun after that: what they would do with
    the change, they did."""
    wait_for(lambda: (((controller.index.cluster_operator or {}).get("spec") or {})
                      .get("driver") or {}).get("payload", {}).get("version") == version,
             timeout=timeout, what=f"the controller's cache at version {version}")
    assert controller.wait_passes(count, timeout=timeout), f"{count} passes after the change"


def cluster_operator(kube: KubeApi) -> JSON:
    return kube.get(cluster_operator_path(CLUSTER_OPERATOR_NAME))


def upgrade_status(kube: KubeApi) -> JSON:
    """``upgradeStatus`` as the program reads it: the CRD's fields and our annotation
    (``reconciler.stored_status``)."""
    return upgrade_status_of(cluster_operator(kube))


def inner(kube: KubeApi) -> JSON:
    return dict(upgrade_status(kube).get("status") or {})


@dataclass
class InvariantObserver:
    """Watches the API on its own (no access to the controller) and checks
    docs/rollout.md#upgrading-one-node throughout: in-flight nodes never exceed ``max_parallel``; a
    node's driver pod is never deleted twice for the same target revision unless the earlier attempt
    failed."""

    kube: KubeApi
    max_parallel: int
    violations: list[str] = field(default_factory=list)
    deletions: dict[str, list[str]] = field(default_factory=dict)  # node -> revisions deleted
    max_in_flight: int = 0
    _in_flight: dict[str, str] = field(default_factory=dict)  # node -> deleted pod's revision
    _failed_nodes: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _watch: ListWatch | None = None
    _seen_deleting: set[str] = field(default_factory=set)
    #: maxUnavailable resolved; None disables that check (rollback or fault tests)
    max_unavailable: int | None = None
    _pod_ready: dict[str, bool] = field(default_factory=dict)  # node -> live driver pod Ready
    _touched: set[str] = field(default_factory=set)

    def start(self) -> InvariantObserver:
        self._watch = ListWatch(self.kube, resource_path("v1", "pods"), on_event=self._on_pod,
                                name="observer pods").start()
        self._watch.wait_synced(30)
        return self

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.stop()

    def _on_pod(self, event: str, obj: JSON) -> None:
        if not is_driver_pod(obj):
            return
        node = str((obj.get("spec") or {}).get("nodeName") or "")
        if not node:
            return
        view = driver_pod_view(obj)
        with self._lock:
            if not view.deleting and event != "DELETED":
                self._pod_ready[node] = view.ready
            if view.deleting and view.name not in self._seen_deleting:
                self._seen_deleting.add(view.name)
                self._pod_ready[node] = False
                if node not in self._touched and self.max_unavailable is not None:
                    # a fresh start: only while unavailable <= maxUnavailable
                    # (docs/rollout.md#upgrading-one-node)
                    unavailable = [n for n, ready in self._pod_ready.items()
                                   if not ready and n not in self._in_flight and n != node]
                    if len(unavailable) > self.max_unavailable:
                        self.violations.append(
                            f"{node} started while {sorted(unavailable)} were unavailable "
                            f"(maxUnavailable {self.max_unavailable})")
                self._touched.add(node)
                if node in self._in_flight and node not in self._failed_nodes:
                    self.violations.append(f"{node}: pod {view.name} deleted while in flight")
                self.deletions.setdefault(node, []).append(view.revision)
                self._in_flight[node] = view.revision
                self._failed_nodes.discard(node)
            elif not view.deleting and node in self._in_flight:
                if view.ready:
                    del self._in_flight[node]
                elif view.waiting_reason in ("ErrImagePull", "ImagePullBackOff",
                                             "CrashLoopBackOff"):
                    del self._in_flight[node]
                    self._failed_nodes.add(node)
            self.max_in_flight = max(self.max_in_flight, len(self._in_flight))
            if len(self._in_flight) > self.max_parallel:
                self.violations.append(
                    f"{len(self._in_flight)} nodes in flight > maxParallel {self.max_parallel}: "
                    f"{sorted(self._in_flight)}"
                )


def gpu_nodes(kube: KubeApi) -> list[JSON]:
    return list(kube.list(resource_path("v1", "nodes"),
                          query={"labelSelector": f"{GPU_NODE_LABEL}=true"})["items"])


def event_reasons(kube: KubeApi) -> list[str]:
    """Reasons of the Events recorded on this ClusterOperator (by uid: earlier tests' objects had
    the same name), oldest first."""
    uid = cluster_operator(kube)["metadata"]["uid"]
    events = kube.list(resource_path("v1", "events", namespace="default"),
                       query={"fieldSelector": f"involvedObject.uid={uid}"})
    items = sorted(events["items"], key=lambda e: (e.get("firstTimestamp") or "",
                                                    e["metadata"]["creationTimestamp"]))
    return [str(e.get("reason")) for e in items]


UPGRADE_STATUS_KEYS = {"lastAppliedSpec", "lastCoDriverSpec", "upgrading", "conditions", "phase",
                       "message", "status"}
#: the step fields the CRD requires, and those written only while they have a value (times)
INNER_KEYS = {"lastPodSpecRevision", "upgradingPodSpecRevision", "currentStepIndex",
              "currentUpgradeReplicas", "CurrentUpgradeReadyReplicas", "currentFailureRetry",
              "currentStepState", "totalUpgradeReplicas", "totalUpgradeReadyReplicas",
              "message"}
OPTIONAL_INNER_KEYS = {"lastUpdateTime", "recheckTime"}
PHASES = {"Idling", "Progressing", "Terminating", "Disabling", "Disabled"}
STEP_STATES = {"", "StepUpgradeInit", "StepUpgrade", "StepPaused", "StepReady", "Completed"}


def spec_41_problems(status: Mapping[str, Any]) -> list[str]:
    """What in one stored ``status.upgradeStatus`` departs from the vendor CRD's fields
    (docs/rollout.md#status-fields): exactly its names, the spec copies as text, conditions
    without a status."""
    problems = []
    if set(status) != UPGRADE_STATUS_KEYS:
        problems.append(f"upgradeStatus keys {sorted(status)}")
    inner = status.get("status") or {}
    if not INNER_KEYS <= set(inner) <= INNER_KEYS | OPTIONAL_INNER_KEYS:
        problems.append(f"status keys {sorted(inner)}")
    if status.get("phase") not in PHASES:
        problems.append(f"phase {status.get('phase')!r}")
    if inner.get("currentStepState") not in STEP_STATES:
        problems.append(f"currentStepState {inner.get('currentStepState')!r}")
    active = status.get("phase") in {"Progressing", "Terminating", "Disabling"}
    if status.get("upgrading") is not active:
        problems.append(f"upgrading {status.get('upgrading')!r} in phase {status.get('phase')}")
    for key in ("lastAppliedSpec", "lastCoDriverSpec"):
        if not isinstance(status.get(key), str):
            problems.append(f"{key} is not text: {status.get(key)!r}")
    for condition in status.get("conditions") or []:
        if not {"type", "reason", "message"} <= set(condition) <= {
                "type", "lastTransitionTime", "lastUpdateTime", "reason", "message"}:
            problems.append(f"condition keys {sorted(condition)}")
    return problems


class WatchRecorder:
    """What a test records from one watch (``watch``, set by the subclass): listed before the
    ``with`` block runs, stopped after it."""

    watch: ListWatch

    def __enter__(self) -> Self:
        self.watch.start()
        self.watch.wait_synced(30)
        return self

    def __exit__(self, *exc: object) -> None:
        self.watch.stop()


class StatusRecorder(WatchRecorder):
    """Every distinct ``upgradeStatus`` the ClusterOperator shows, from a watch: ``seen`` as
    the program reads it (the CRD's fields and our annotation), ``stored`` exactly as the
    object carries ``status.upgradeStatus``."""

    def __init__(self, kube: KubeApi) -> None:
        self.seen: list[JSON] = []
        self.stored: list[JSON] = []
        self.watch = ListWatch(kube, cluster_operator_path(), on_event=self._on,
                               name="status recorder")

    def _on(self, event: str, obj: JSON) -> None:
        stored = (obj.get("status") or {}).get("upgradeStatus")
        if stored and (not self.stored or self.stored[-1] != stored):
            self.stored.append(stored)
        status = upgrade_status_of(obj)
        if status and (not self.seen or self.seen[-1] != status):
            self.seen.append(status)
