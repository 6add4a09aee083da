"""Objects and AdmissionReviews for the admission tests (shared with the cluster tests)."""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

from tests.policy.vendor_cases import as_stored

API_VERSION = "gpu.metax-tech.com/v1alpha1"
OLD_VERSION, NEW_VERSION = "2.31.0.6", "2.33.0.9"
REGISTRY = "registry.example.com/metax"


def policy(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "enableRollout": True,
        "upgradeSteps": [{"replicas": 1, "pauseDuration": 30000},
                         {"replicas": "100%", "pauseDuration": 0}],
        "pause": False,
        "maxParallel": "100%",
        "maxUnavailable": "0%",
        "maxFailureThreshold": 5,
        "fallback": "pause",
    }
    base.update(overrides)
    return base


def cluster_operator(name: str = "cluster-operator", *, version: str = NEW_VERSION,
                     upgrade_policy: dict[str, Any] | None = None,
                     phase: str | None = None, stored: bool = False,
                     **driver: Any) -> dict[str, Any]:
    """A whole ClusterOperator, as the webhook sees one: the vendor chart's object (every
    section the vendor's CRD requires) with this driver payload and policy; ``stored`` adds
    what the API server adds (uid, managedFields, ...)."""
    spec = as_stored()["spec"]
    spec["driver"].update({
        "payload": {"name": "driver-image", "registry": REGISTRY, "version": version,
                    "pullPolicy": "IfNotPresent"},
        "fwUpgradePolicy": "Never", "fwEnableVirt": False,
        "upgradePolicy": upgrade_policy if upgrade_policy is not None else policy(),
        **driver,
    })
    obj: dict[str, Any] = {
        "apiVersion": API_VERSION, "kind": "ClusterOperator",
        "metadata": {"name": name}, "spec": spec,
    }
    if stored:
        obj["metadata"].update({
            "uid": "6f1c2d4e-0000-4000-8000-000000000001", "resourceVersion": "1234",
            "generation": 3, "creationTimestamp": "2026-12-01T09:00:00Z",
            "finalizers": ["gpu.metax-tech.com"],
            "labels": {"app.kubernetes.io/managed-by": "Helm"},
            "annotations": {"meta.helm.sh/release-name": "metax-operator"},
            "managedFields": [{"manager": "helm", "operation": "Update",
                               "apiVersion": API_VERSION, "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:spec": {}}}],
        })
    if phase is not None:
        obj["status"] = {"upgradeStatus": {
            "phase": phase, "upgrading": phase in ("Progressing", "Terminating", "Disabling"),
            # strings in the vendor's CRD: the driver spec as JSON
            "lastCoDriverSpec": json.dumps({"payload": {
                "name": "driver-image", "registry": REGISTRY, "version": OLD_VERSION,
                "pullPolicy": "IfNotPresent"}}),
            "lastAppliedSpec": json.dumps({"payload": {
                "name": "driver-image", "registry": REGISTRY, "version": version,
                "pullPolicy": "IfNotPresent"}}),
        }}
    return obj


def changed(obj: dict[str, Any], *path_and_value: Any) -> dict[str, Any]:
    """A deep copy of ``obj`` with the value at ``path`` set (a value of ``...`` removes it)."""
    *path, value = path_and_value
    new = copy.deepcopy(obj)
    node = new
    for key in path[:-1]:
        node = node.setdefault(key, {})
    if value is ...:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value
    return new


def admission_review(operation: str, obj: Any, old: Any = None, *,
                     sub_resource: str | None = None, uid: str | None = None,
                     resource: str = "clusteroperators",
                     group: str = "gpu.metax-tech.com") -> dict[str, Any]:
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": "gpu.metax-tech.com", "version": "v1alpha1",
                 "kind": "ClusterOperator"},
        "resource": {"group": group, "version": "v1alpha1", "resource": resource},
        "name": "cluster-operator",
        "operation": operation,
        "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters"]},
        "dryRun": False,
    }
    if obj is not None:
        request["object"] = obj
    if old is not None:
        request["oldObject"] = old
    if sub_resource:
        request["subResource"] = sub_resource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
