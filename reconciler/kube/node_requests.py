"""The node actions both planners ask for (``reconciler.planning.NodeAction``) as API requests:
the one reading of the vocabulary on the API side, shared by the rollout controller's executor
and the firmware orchestrator (the view side's one reading is
``reconciler.rollout.node_view``).

One node's consecutive annotations and (un)cordons go out as one merge patch: recording a node's
state and cordoning it is one atomic write (a crash cannot leave a cordon without its record, or
the reverse), and it still goes before the pod deletion that follows. Each request is
idempotent: a node that left the cluster or a driver pod already gone is success. What the
rollout's drain adds around a workload pod's eviction or deletion (its back-off, its metric, the
Event naming a refusing budget) is its own, behind ``Drain``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal, Protocol, assert_never

from reconciler.kube.api import JSON, KubeApi, KubeError, NotFound, resource_path
from reconciler.names import OPERATOR_NAMESPACE
from reconciler.planning import (
    AnnotateNode,
    Cordon,
    DeleteDriverPod,
    DeletePod,
    EvictPod,
    NodeAction,
    Uncordon,
)

#: what a workload pod's eviction or deletion came to: evicted (201), refused (a budget's 429),
#: gone (the pod was gone already), error (any other answer), deleted (``onTimeout: delete``)
DrainResult = Literal["evicted", "refused", "gone", "error", "deleted"]


class Drain(Protocol):
    """What a drain adds around its workload pods' requests."""

    def may_evict(self, action: EvictPod) -> bool:
        """False: this eviction is not asked now (its back-off runs)."""
        ...

    def answered(self, action: EvictPod | DeletePod, result: DrainResult,
                 error: KubeError | None) -> None:
        """The request's result; ``error`` is the server's refusal (``refused``) or failure
        (``error``, raised after this)."""
        ...


class _NoDrain:
    def may_evict(self, action: EvictPod) -> bool:
        return True

    def answered(self, action: EvictPod | DeletePod, result: DrainResult,
                 error: KubeError | None) -> None:
        pass


def _ignore(_: object, __: object = None) -> None:
    pass


class NodeRequests:
    """Sends node actions in the order taken. A node's annotations and (un)cordons wait in one
    merge patch until anything else is taken, another node's action comes, or ``flush``.

    ``namespace`` is the driver pods'; ``on_object`` gets each object the server returns (a
    node, a deleted driver pod: the caller's cache sees its own writes); ``on_action`` is
    called with each action as it is sent (or joins the patch)."""

    def __init__(
        self,
        api: KubeApi,
        *,
        namespace: str = OPERATOR_NAMESPACE,
        on_object: Callable[[str, JSON], None] = _ignore,
        on_action: Callable[[NodeAction], None] = _ignore,
        drain: Drain | None = None,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.on_object = on_object
        self.on_action = on_action
        self.drain: Drain = drain or _NoDrain()
        self._node = ""
        self._patch: JSON = {}

    def send(self, actions: Iterable[NodeAction]) -> None:
        """``actions`` in order, then whatever patch is left."""
        for action in actions:
            self.take(action)
        self.flush()

    def take(self, action: NodeAction) -> None:
        match action:
            case AnnotateNode(node=node, annotations=annotations):
                self._join(node, action)
                self._patch.setdefault("metadata", {}).setdefault("annotations", {}).update(
                    annotations)
            case Cordon(node=node) | Uncordon(node=node):
                self._join(node, action)
                self._patch.setdefault("spec", {})["unschedulable"] = isinstance(action, Cordon)
            case DeleteDriverPod(pod=pod):
                self._alone(action)
                deleted = self.api.delete(
                    resource_path("v1", "pods", pod, namespace=self.namespace))
                if deleted is not None and deleted.get("kind") == "Pod":
                    self.on_object("pod", deleted)
            case EvictPod():
                self._alone(action)
                self._evict(action)
            case DeletePod():
                self._alone(action)
                self._delete_workload_pod(action)
            case _:
                assert_never(action)

    def flush(self) -> None:
        """Sends the waiting merge patch, if any."""
        if not self._patch:
            return
        patch, self._patch = self._patch, {}
        try:
            obj = self.api.patch(resource_path("v1", "nodes", self._node), patch)
        except NotFound:
            return  # the node left the cluster; the planner drops it
        self.on_object("node", obj)

    def _join(self, node: str, action: NodeAction) -> None:
        if self._patch and node != self._node:
            self.flush()
        self._node = node
        self.on_action(action)

    def _alone(self, action: NodeAction) -> None:
        self.flush()
        self.on_action(action)

    def _evict(self, action: EvictPod) -> None:
        """Asks the Eviction API (policy/v1); a budget's refusal (429) leaves the pod running
        and is the drain's to answer, not an error."""
        if not self.drain.may_evict(action):
            return
        namespace, pod = action.namespace, action.pod
        body = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": pod, "namespace": namespace}}
        try:
            self.api.create(
                resource_path("v1", "pods", pod, namespace=namespace, subresource="eviction"),
                body)
        except NotFound:
            self.drain.answered(action, "gone", None)
        except KubeError as exc:
            if exc.status != 429:
                self.drain.answered(action, "error", exc)
                raise
            self.drain.answered(action, "refused", exc)
        else:
            self.drain.answered(action, "evicted", None)

    def _delete_workload_pod(self, action: DeletePod) -> None:
        """``onTimeout: delete``: the pod is deleted, budgets or not (its grace period is its
        own). A pod already gone counts as deleted (the deletion's 404 is success)."""
        try:
            self.api.delete(resource_path("v1", "pods", action.pod, namespace=action.namespace))
        except KubeError as exc:
            self.drain.answered(action, "error", exc)
            raise
        self.drain.answered(action, "deleted", None)
