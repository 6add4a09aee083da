"""Workload objects of the drain's tests: a serving Deployment behind a budget, a Job."""

from __future__ import annotations

from typing import Any

from reconciler.kube.api import JSON, KubeApi, resource_path
from reconciler.names import GPU_RESOURCE
from reconciler.sim.workloads import RUN_SECONDS_ANNOTATION

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


def create(kube: KubeApi, obj: JSON) -> JSON:
    api_version, kind = obj["apiVersion"], obj["kind"]
    plural = {"Deployment": "deployments", "PodDisruptionBudget": "poddisruptionbudgets",
              "Job": "jobs"}[kind]
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
