"""Workload objects of the drain's tests: a serving Deployment behind a budget, a Job."""

from __future__ import annotations

import threading
from typing import Any

from reconciler.kube.api import JSON, KubeApi, resource_path
from reconciler.kube.watch import ListWatch
from reconciler.names import ANN_MIRROR_POD, GPU_RESOURCE
from reconciler.sim.fleet import FLEET_LABEL
from reconciler.sim.workloads import RUN_SECONDS_ANNOTATION
from tests.controller.helpers import WatchRecorder

GRACE = 1


def deployment(name: str, namespace: str, replicas: int, *, gpus: int = 1,
               labels: dict[str, str] | None = None) -> JSON:
    pod_labels = {"app": name, **(labels or {})}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": {
            "metadata": {"labels": pod_labels},
            "spec": {"terminationGracePeriodSeconds": GRACE, "containers": [{
                "name": "serve", "image": "registry.local/serve:1",
                "resources": {"limits": {GPU_RESOURCE: str(gpus)}}}]},
        }},
    }


def budget(name: str, namespace: str, *, min_available: int) -> JSON:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": name}}}}


def job(name: str, namespace: str, *, run_seconds: float, node: str,
        labels: dict[str, str] | None = None) -> JSON:
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"backoffLimit": 0, "template": {
            "metadata": {"annotations": {RUN_SECONDS_ANNOTATION: str(run_seconds)},
                         "labels": dict(labels or {})},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": GRACE,
                     "nodeSelector": {"kubernetes.io/hostname": node},
                     "containers": [{
                         "name": "train", "image": "registry.local/train:1",
                         "resources": {"limits": {GPU_RESOURCE: "8"}}}]},
        }},
    }


def agent_daemonset(name: str, namespace: str, fleet_id: str) -> JSON:
    """A DaemonSet with a pod on each node of the fleet ``fleet_id`` (the drain leaves them)."""
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"matchLabels": {"app": name}}, "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"nodeSelector": {FLEET_LABEL: fleet_id},
                     "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": name, "image": f"registry.local/{name}:1"}]}}}}


def bare_pod(name: str, namespace: str, node: str, *, annotations: dict[str, str] | None = None,
             owner: JSON | None = None, empty_dir: bool = False) -> JSON:
    """A pod bound to ``node`` with no controller to recreate it (unless ``owner`` says)."""
    meta: JSON = {"name": name, "namespace": namespace, "annotations": dict(annotations or {})}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    spec: JSON = {"nodeName": node, "terminationGracePeriodSeconds": 0,
                  "containers": [{"name": "c", "image": "registry.local/c:1"}]}
    if empty_dir:
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def mirror_pod(kube: KubeApi, name: str, namespace: str, node: str) -> JSON:
    """A static pod's mirror on ``node``, as the kubelet makes it: the mirror annotation, the
    Node its controller."""
    node_uid = kube.get(resource_path("v1", "nodes", node))["metadata"]["uid"]
    return bare_pod(name, namespace, node, annotations={ANN_MIRROR_POD: "hash"},
                    owner={"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid,
                           "controller": True})


def create(kube: KubeApi, obj: JSON) -> JSON:
    api_version, kind = obj["apiVersion"], obj["kind"]
    plural = {"Deployment": "deployments", "PodDisruptionBudget": "poddisruptionbudgets",
              "Job": "jobs", "DaemonSet": "daemonsets", "Pod": "pods"}[kind]
    return kube.create(resource_path(api_version, plural,
                                     namespace=obj["metadata"]["namespace"]), obj)


def pods(kube: KubeApi, namespace: str) -> list[JSON]:
    return list(kube.list(resource_path("v1", "pods", namespace=namespace))["items"])


def ready(pod: JSON) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def budget_status(kube: KubeApi, name: str, namespace: str) -> dict[str, Any]:
    path = resource_path("policy/v1", "poddisruptionbudgets", name, namespace=namespace)
    return dict(kube.get(path).get("status") or {})


class PodRecorder(WatchRecorder):
    """Every pod event of the cluster from one watch, in the API server's order: who was
    evicted (a deletion asked for), when a pod finished, and, for a Deployment behind a budget,
    the most of its pods down at once (not Ready, terminating or not there)."""

    def __init__(self, kube: KubeApi, *, app: str | None = None, replicas: int = 0) -> None:
        self.app = app
        self.replicas = replicas
        self.events: list[tuple[str, str, JSON]] = []  # (event, "ns/name", pod)
        self.deleting: dict[str, int] = {}  # "ns/name" -> position of its first deletion
        self.finished: dict[str, int] = {}  # "ns/name" -> position it turned Succeeded
        self.max_down = 0
        self._up: set[str] = set()
        self._full = False
        self._lock = threading.Lock()
        self.watch = ListWatch(kube, resource_path("v1", "pods"), on_event=self._on,
                               name="drain pod recorder")

    def _on(self, event: str, obj: JSON) -> None:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        with self._lock:
            position = len(self.events)
            self.events.append((event, key, obj))
            if meta.get("deletionTimestamp") and key not in self.deleting:
                self.deleting[key] = position
            if (obj.get("status") or {}).get("phase") == "Succeeded":
                self.finished.setdefault(key, position)
            if self.app is None or (meta.get("labels") or {}).get("app") != self.app:
                return
            if event != "DELETED" and ready(obj) and not meta.get("deletionTimestamp"):
                self._up.add(key)
            else:
                self._up.discard(key)
            self._full = self._full or len(self._up) >= self.replicas
            if self._full:
                self.max_down = max(self.max_down, self.replicas - len(self._up))

    def evicted(self, prefix: str) -> list[str]:
        with self._lock:
            return sorted(k for k in self.deleting if k.startswith(prefix))
