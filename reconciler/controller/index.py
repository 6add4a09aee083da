"""The rollout controller's node index: the list+watch caches, keyed as the planner reads them,
with the intents of requests in flight laid over them.

What requests in flight will have written (a node's annotations and cordon, a pod being
deleted) is laid over the cached objects until the server's answer replaces them, so a pass
never sees a node it already started as free: in-flight counts stay exact, erring only towards
counting a node whose request failed for a moment longer.

No threads and no locks here: the controller calls it under its own lock. Each handler says
whether the planner's view changed (a pass is due); events that change nothing it reads
(heartbeats, labels it does not read, the DaemonSet's status) say no.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from reconciler.controller.hooks import NoObserver, RolloutObserver
from reconciler.kube.api import JSON
from reconciler.kube.observe import (
    budget_view,
    deletion_requested_at,
    driver_pod_view,
    finished,
    is_driver_pod,
    node_view,
    pick_driver_pod,
    requests_gpu,
    workload_pod_view,
)
from reconciler.kube.watch import object_key
from reconciler.names import DRIVER_DAEMONSET, OPERATOR_NAMESPACE
from reconciler.planning import NodeAction
from reconciler.rollout.model import (
    PLANNER_LABELS,
    DisruptionBudget,
    DriverPod,
    RolloutNode,
    WorkloadPod,
)
from reconciler.rollout.node_view import NodeWorld, apply_node_actions
from reconciler.runtime.watched import generation, newer, same_version


@dataclass(frozen=True, slots=True)
class NodeIntent:
    """What one node's requests in flight will have written once they land: their node
    actions, laid over the node's view by the one reading of the vocabulary
    (``reconciler.rollout.node_view.apply_node_actions``)."""

    actions: tuple[NodeAction, ...]

    @classmethod
    def of(cls, actions: Sequence[NodeAction]) -> NodeIntent:
        return cls(tuple(actions))


class _InFlight(NodeWorld):
    """The world of requests in flight: a driver pod's deletion leaves it deleting (the
    DaemonSet's new pod comes by its watch); a workload pod's eviction or deletion is left to
    that pod's watch event, which says when it terminates (a budget may refuse an eviction)."""

    def evicts(self, node: RolloutNode, pod: WorkloadPod) -> bool:
        return False

    def deletes(self, node: RolloutNode, pod: WorkloadPod) -> bool:
        return False


_IN_FLIGHT = _InFlight()


def with_intents(view: RolloutNode, intents: Sequence[NodeIntent]) -> RolloutNode:
    """The node's view as it will be once ``intents`` have landed, in the order handed out."""
    for intent in intents:
        view = apply_node_actions(view, intent.actions, _IN_FLIGHT)
    return view


class NodeIndex:
    """GPU nodes, their driver pods and GPU workloads, the driver DaemonSet and its revisions,
    and the ClusterOperator; ``views`` is each node as the planner sees it, intents included.

    While ``track_pods`` (the pass's settings have ``drain`` or ``waitFor``), every other pod
    that has not finished is kept as a small ``WorkloadPod`` in its node's ``pods``, and the
    PodDisruptionBudgets as ``budgets``; otherwise neither is kept (``workloads`` alone
    decides, as before drain existed)."""

    def __init__(self, *, daemonset: str = DRIVER_DAEMONSET,
                 namespace: str = OPERATOR_NAMESPACE,
                 observer: RolloutObserver | None = None) -> None:
        self.daemonset_name = daemonset
        self.namespace = namespace
        self.observer: RolloutObserver = observer or NoObserver()
        self.nodes: dict[str, JSON] = {}
        self.views: dict[str, RolloutNode] = {}
        self.driver_pods: dict[str, dict[str, DriverPod]] = {}  # node -> pod name -> view
        self.workloads: dict[str, set[str]] = {}  # node -> "ns/name"
        self.pod_home: dict[str, tuple[str, str]] = {}  # pod key -> (node, kind)
        self.pods: dict[str, JSON] = {}
        self.daemonset: JSON | None = None
        self.revisions: dict[str, JSON] = {}
        self.cluster_operator: JSON | None = None
        #: requests in flight: node -> what they will have written
        self.intents: dict[str, list[NodeIntent]] = {}
        #: node -> when the deletion of its last driver pod that went away was asked for (a
        #: move's start when the deletion's record is not written: see ``scan_nodes``)
        self.pod_deleted_at: dict[str, float] = {}
        #: the node label keys a view keeps: the planner's, and a topology's key
        #: (docs/rollout.md#topology-aware-waves)
        self.labels: frozenset[str] = PLANNER_LABELS
        self.track_pods = False
        #: node -> pod key -> view, and pod key -> node (``track_pods`` only)
        self.node_pods: dict[str, dict[str, WorkloadPod]] = {}
        self.pod_node: dict[str, str] = {}
        #: "ns/name" -> budget (while the budgets' watch runs)
        self.budgets: dict[str, DisruptionBudget] = {}

    # -- what the watches (and the answers to our own writes) bring ----------------------------

    def on_node(self, event: str, obj: JSON) -> bool:
        name = str(obj["metadata"]["name"])
        if event == "DELETED":
            self.nodes.pop(name, None)
            self.views.pop(name, None)
            self.pod_deleted_at.pop(name, None)
            return True
        if same_version(self.nodes.get(name), obj) or not newer(self.nodes.get(name), obj):
            return False
        self.nodes[name] = obj
        return self.refresh(name)

    def on_pod(self, event: str, obj: JSON) -> bool:
        key = object_key(obj)
        if event != "DELETED" and (same_version(self.pods.get(key), obj)
                                   or not newer(self.pods.get(key), obj)):
            return False
        old_home = self.pod_home.pop(key, None)
        self.pods.pop(key, None)
        was_ready = False
        if old_home is not None:
            node, kind = old_home
            if kind == "driver":
                old = self.driver_pods.get(node, {}).pop(str(obj["metadata"]["name"]), None)
                was_ready = old is not None and old.ready
                if event == "DELETED":
                    asked = deletion_requested_at(obj.get("metadata") or {}) or (
                        old.deletion_requested_at if old is not None else 0.0)
                    if asked:
                        self.pod_deleted_at[node] = asked
                    else:  # an earlier removal's time would be wrong for this one
                        self.pod_deleted_at.pop(node, None)
            else:
                self.workloads.get(node, set()).discard(key)
        node = str((obj.get("spec") or {}).get("nodeName") or "")
        if event != "DELETED" and node:
            if is_driver_pod(obj, self.daemonset_name, self.namespace):
                view = driver_pod_view(obj)
                if view.ready and not was_ready:
                    self.observer.driver_ready_seen(node)
                self.driver_pods.setdefault(node, {})[str(obj["metadata"]["name"])] = view
                self.pod_home[key] = (node, "driver")
                self.pods[key] = obj
            elif requests_gpu(obj):
                self.workloads.setdefault(node, set()).add(key)
                self.pod_home[key] = (node, "workload")
                self.pods[key] = obj
        touched = {node} if node else set()
        if old_home is not None:
            touched.add(old_home[0])
        if self.track_pods:
            touched |= self._track(event, key, obj)
        if not any(n in self.nodes for n in touched):
            return False  # a pod of no interest
        changed = [self.refresh(n) for n in touched]
        return any(changed)

    def _track(self, event: str, key: str, obj: JSON) -> set[str]:
        """Keeps ``obj``'s view in its node's ``pods``; the nodes whose pods changed."""
        old = self.pod_node.pop(key, None)
        if old is not None:
            views = self.node_pods.get(old, {})
            views.pop(key, None)
            if not views:
                self.node_pods.pop(old, None)
        node = str((obj.get("spec") or {}).get("nodeName") or "")
        if (event != "DELETED" and node and not finished(obj)
                and not is_driver_pod(obj, self.daemonset_name, self.namespace)):
            self.node_pods.setdefault(node, {})[key] = workload_pod_view(obj)
            self.pod_node[key] = node
        return {n for n in (old, node) if n}

    def set_track_pods(self, on: bool, pods: Iterable[JSON] = ()) -> None:
        """Starts keeping every pod's view (from ``pods``, the pods' cache) or stops and forgets
        them; each node's view is rebuilt."""
        if on == self.track_pods:
            return
        self.track_pods = on
        self.node_pods, self.pod_node = {}, {}
        if on:
            for obj in pods:
                self._track("ADDED", object_key(obj), obj)
        for name in list(self.nodes):
            self.refresh(name)

    def on_budget(self, event: str, obj: JSON) -> bool:
        key = object_key(obj)
        if event == "DELETED":
            return self.budgets.pop(key, None) is not None
        view = budget_view(obj)
        if self.budgets.get(key) == view:
            return False  # its status's other counts: nothing the planner reads
        self.budgets[key] = view
        return True

    def on_daemonset(self, event: str, obj: JSON) -> bool:
        if event == "DELETED":
            self.daemonset = None
            return True
        if same_version(self.daemonset, obj) or not newer(self.daemonset, obj):
            return False
        before, self.daemonset = self.daemonset, obj
        # its status alone: the planner reads the template and its revisions
        return before is None or generation(before) != generation(obj)

    def on_revision(self, event: str, obj: JSON) -> bool:
        name = str(obj["metadata"]["name"])
        if event == "DELETED":
            self.revisions.pop(name, None)
        else:
            self.revisions[name] = obj
        return True

    def on_cluster_operator(self, event: str, obj: JSON) -> bool:
        if event == "DELETED":
            self.cluster_operator = None
            return True
        if same_version(self.cluster_operator, obj) or not newer(self.cluster_operator, obj):
            return False
        self.cluster_operator = obj
        return True

    # -- intents ------------------------------------------------------------------------------

    def add_intent(self, node: str, intent: NodeIntent) -> None:
        """Requests for ``node`` were handed out: the planner sees what they will write."""
        self.intents.setdefault(node, []).append(intent)
        self.refresh(node)

    def drop_intent(self, node: str, intent: NodeIntent) -> None:
        """Those requests finished: the node is what the cache holds again."""
        intents = self.intents.get(node, [])
        if intent in intents:
            intents.remove(intent)
        if not intents:
            self.intents.pop(node, None)
        self.refresh(node)

    def keep_labels(self, keys: frozenset[str]) -> bool:
        """Views keep these label keys from now on (every view rebuilt when they change);
        True when a view changed."""
        if keys == self.labels:
            return False
        self.labels = keys
        changed = [self.refresh(name) for name in list(self.nodes)]
        return any(changed)

    def refresh(self, name: str) -> bool:
        """Rebuilds a node's view; True when the planner's view of it changed (heartbeats,
        labels it does not read and such leave it as it was, and need no pass)."""
        node = self.nodes.get(name)
        if node is None:
            return False
        pods = self.driver_pods.get(name, {})
        view = node_view(node, pick_driver_pod(pods.values()), self.workloads.get(name, ()),
                         self.pod_deleted_at.get(name, 0.0), self.labels,
                         self.node_pods.get(name, {}).values())
        intents = self.intents.get(name)
        if intents:
            view = with_intents(view, intents)
        if self.views.get(name) == view:
            return False
        self.views[name] = view
        return True
