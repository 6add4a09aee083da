"""Carries out the planner's actions against the API server: the one executor, every action type
handled (``assert_never``: a new one is a type error until it is).

Each action is idempotent: a node already cordoned, a pod already gone or an annotation already
set is success. The objects the server returns are handed back so the caller can update its cache
before planning again (a plan made on a cache that has not yet seen the controller's own writes
could start a node twice).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, assert_never

from reconciler.clock import Clock, wall
from reconciler.kube.api import JSON, KubeApi, KubeError, NotFound, resource_path
from reconciler.kube.events import cluster_operator_event, record_event
from reconciler.kube.objects import cluster_operator_path
from reconciler.kube.owned_apply import apply_keeping_owned
from reconciler.names import (
    API_VERSION,
    CONTROLLER_FIELD_MANAGER,
    DRIVER_DAEMONSET,
    KIND,
    OPERATOR_NAMESPACE,
)
from reconciler.rollout.actions import (
    Action,
    AnnotateNode,
    Cordon,
    DeleteDriverPod,
    DeletePod,
    EvictPod,
    NodeAction,
    RecordEvent,
    RestorePayload,
    SetDaemonSetImage,
    SetPolicyPause,
    Uncordon,
)

log = logging.getLogger(__name__)

COMPONENT = "gpu-rollout-controller"


@dataclass(frozen=True, slots=True)
class Target:
    """Where the controller acts."""

    cluster_operator: str
    namespace: str = OPERATOR_NAMESPACE
    daemonset: str = DRIVER_DAEMONSET


class ActionExecutor:
    def __init__(
        self,
        api: KubeApi,
        target: Target,
        *,
        on_object: Callable[[str, JSON], None] | None = None,
        clock: Clock = wall,
    ) -> None:
        self.api = api
        self.target = target
        self.on_object = on_object or (lambda kind, obj: None)
        self.clock = clock
        self.counts: dict[str, int] = {}

    def execute(self, action: Action, cluster_operator: Mapping[str, Any]) -> None:
        name = type(action).__name__
        self.counts[name] = self.counts.get(name, 0) + 1
        match action:
            case SetDaemonSetImage(image=image):
                self._set_image(image)
            case Cordon(node=node):
                self._schedulable(node, unschedulable=True)
            case Uncordon(node=node):
                self._schedulable(node, unschedulable=False)
            case AnnotateNode(node=node, annotations=annotations):
                obj = self.api.patch(
                    resource_path("v1", "nodes", node),
                    {"metadata": {"annotations": dict(annotations)}},
                )
                self.on_object("node", obj)
            case DeleteDriverPod(pod=pod):
                path = resource_path("v1", "pods", pod, namespace=self.target.namespace)
                deleted = self.api.delete(path)
                if deleted is not None and deleted.get("kind") == "Pod":
                    self.on_object("pod", deleted)
            case EvictPod(namespace=namespace, pod=pod):
                self._evict(namespace, pod)
            case DeletePod(namespace=namespace, pod=pod):
                with contextlib.suppress(NotFound):  # gone already
                    self.api.delete(resource_path("v1", "pods", pod, namespace=namespace))
            case SetPolicyPause(pause=pause):
                self._apply_spec({"upgradePolicy": {"pause": pause}})
            case RestorePayload(payload=payload):
                self._apply_spec({"payload": dict(payload)})
            case RecordEvent():
                self._record_event(action, cluster_operator)
            case _:
                assert_never(action)

    def execute_node_actions(
        self, actions: Sequence[NodeAction], cluster_operator: Mapping[str, Any]
    ) -> None:
        """One node's actions in order; consecutive annotation and (un)cordon changes go out as
        one merge patch, so recording a node's state and cordoning it is one atomic write that
        still comes before the pod deletion."""
        patch: JSON = {}
        node = ""

        def flush() -> None:
            nonlocal patch
            if not patch:
                return
            try:
                obj = self.api.patch(resource_path("v1", "nodes", node), patch)
            except NotFound:
                patch = {}
                return  # the node left the cluster; the planner drops it
            patch = {}
            self.on_object("node", obj)

        for action in actions:
            match action:
                case AnnotateNode(node=name, annotations=annotations):
                    node = name
                    patch.setdefault("metadata", {}).setdefault("annotations", {}).update(
                        annotations)
                    self.counts["AnnotateNode"] = self.counts.get("AnnotateNode", 0) + 1
                case Cordon(node=name) | Uncordon(node=name):
                    node = name
                    patch.setdefault("spec", {})["unschedulable"] = isinstance(action, Cordon)
                    kind = type(action).__name__
                    self.counts[kind] = self.counts.get(kind, 0) + 1
                case DeleteDriverPod() | EvictPod() | DeletePod():
                    flush()
                    self.execute(action, cluster_operator)
                case _:
                    assert_never(action)
        flush()

    def _evict(self, namespace: str, pod: str) -> None:
        """Ask the Eviction API; a PodDisruptionBudget's refusal (429) leaves the pod running
        and the planner asks again in a later pass."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": pod, "namespace": namespace}}
        try:
            self.api.create(
                resource_path("v1", "pods", pod, namespace=namespace) + "/eviction", body)
        except NotFound:
            pass  # gone already
        except KubeError as exc:
            if exc.status != 429:
                raise
            log.info("eviction of %s/%s refused: %s", namespace, pod, exc)

    def _set_image(self, image: str) -> None:
        path = resource_path(
            "apps/v1", "daemonsets", self.target.daemonset, namespace=self.target.namespace
        )
        daemonset = self.api.get(path)
        containers = daemonset["spec"]["template"]["spec"]["containers"]
        if containers[0].get("image") == image:
            return
        obj = self.api.patch(
            path,
            [
                {"op": "test", "path": "/spec/template/spec/containers/0/name",
                 "value": containers[0]["name"]},
                {"op": "replace", "path": "/spec/template/spec/containers/0/image",
                 "value": image},
            ],
            patch_type="json",
        )
        self.on_object("daemonset", obj)

    def _schedulable(self, node: str, *, unschedulable: bool) -> None:
        try:
            obj = self.api.patch(
                resource_path("v1", "nodes", node), {"spec": {"unschedulable": unschedulable}}
            )
        except NotFound:
            return  # the node left the cluster; the planner drops it
        self.on_object("node", obj)

    def _apply_spec(self, driver_fields: JSON) -> None:
        """Server-side apply under the controller's own field manager (SPEC 4.6): the sync role
        sees these fields owned by ``gpu-rollout-controller`` and writes them back to Git. The
        manager's other fields (a restored version, the firmware's result) are kept."""
        body = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": self.target.cluster_operator},
            "spec": {"driver": driver_fields},
        }
        obj = apply_keeping_owned(self.api, cluster_operator_path(self.target.cluster_operator),
                                  body, manager=CONTROLLER_FIELD_MANAGER)
        self.on_object("clusteroperator", obj)

    def _record_event(self, action: RecordEvent, cluster_operator: Mapping[str, Any]) -> None:
        co = dict(cluster_operator)
        co.setdefault("metadata", {}).setdefault("name", self.target.cluster_operator)
        record_event(self.api, cluster_operator_event(
            co, reason=action.reason, message=action.message, type=action.type,
            component=COMPONENT, now=self.clock(),
        ))
