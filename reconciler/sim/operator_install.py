"""What the vendor's GPU operator installs, as the simulator plays it: the ``ClusterOperator``
CRD, the ``cluster-operator`` object, the ``metax-operator`` namespace and the ``metax-driver``
DaemonSet (OnDelete) running the payload's image.

Objects that exist already are left alone: once installed, the DaemonSet template belongs to the
rollout controller and the ``ClusterOperator`` spec to Git.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from reconciler.kube.api import JSON, Conflict, KubeApi, NotFound, resource_path
from reconciler.kube.objects import (
    API_VERSION,
    CLUSTER_OPERATOR_NAME,
    DRIVER_CONTAINER,
    DRIVER_DAEMONSET,
    DRIVER_POD_LABEL,
    GPU_NODE_LABEL,
    KIND,
    OPERATOR_NAMESPACE,
    PLURAL,
)
from reconciler.policy.payload import Payload
from reconciler.sim.crd import CRD_NAME, cluster_operator_crd

INSTALLER = "metax-operator-sim"
DEFAULT_PAYLOAD = Payload(registry="cr.metax-tech.com/public-library", name="driver-image",
                          version="2.31.0.6")

CRD_PATH = resource_path("apiextensions.k8s.io/v1", "customresourcedefinitions")
CO_PATH = resource_path(API_VERSION, PLURAL)
DAEMONSET_PATH = resource_path("apps/v1", "daemonsets", namespace=OPERATOR_NAMESPACE)


def cluster_operator(payload: Payload, *, spec: Mapping[str, Any] | None = None) -> JSON:
    """The ``cluster-operator`` object a fresh vendor install carries."""
    driver: JSON = {
        "payload": {"name": payload.name, "registry": payload.registry,
                    "version": payload.version, "pullPolicy": "IfNotPresent"},
        "deployPolicy": "PreferCloud",
        "fwUpgradePolicy": "Never",
        "fwEnableVirt": False,
        "fwEffectPolicy": "NextReboot",
        "upgradePolicy": {"enableRollout": False},
    }
    body: JSON = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": CLUSTER_OPERATOR_NAME},
        "spec": {"driver": driver},
    }
    if spec is not None:
        body["spec"] = dict(spec)
    return body


def driver_daemonset(payload: Payload) -> JSON:
    labels = {DRIVER_POD_LABEL: DRIVER_DAEMONSET}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": DRIVER_DAEMONSET, "namespace": OPERATOR_NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "OnDelete"},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {GPU_NODE_LABEL: "true"},
                    "terminationGracePeriodSeconds": 30,
                    "containers": [{
                        "name": DRIVER_CONTAINER,
                        "image": payload.image,
                        "imagePullPolicy": "IfNotPresent",
                        "securityContext": {"privileged": True},
                    }],
                },
            },
        },
    }


def install_crd(api: KubeApi, *, schema: Mapping[str, Any] | None = None,
                timeout: float = 30.0) -> None:
    """Creates or updates the ``ClusterOperator`` CRD and waits until it is served."""
    crd = cluster_operator_crd(schema)
    api.apply(f"{CRD_PATH}/{CRD_NAME}", crd, field_manager=INSTALLER)
    deadline = time.monotonic() + timeout
    while True:
        current = api.get(f"{CRD_PATH}/{CRD_NAME}")
        conditions = (current.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"CRD {CRD_NAME} not Established after {timeout} s: {conditions}")
        time.sleep(0.05)
    # The new resource may take a moment to be served by the aggregated discovery handler.
    while True:
        try:
            api.get(CO_PATH, query={"limit": 1})
            return
        except NotFound:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _create_if_missing(api: KubeApi, collection: str, body: JSON) -> bool:
    try:
        api.request("POST", collection, body=body, query={"fieldManager": INSTALLER})
        return True
    except Conflict:
        return False


def install_operator(
    api: KubeApi,
    payload: Payload = DEFAULT_PAYLOAD,
    *,
    schema: Mapping[str, Any] | None = None,
    spec: Mapping[str, Any] | None = None,
    daemonset: bool = True,
) -> None:
    """Plays the vendor operator's install (idempotent; existing objects are left as they are)."""
    install_crd(api, schema=schema)
    _create_if_missing(api, resource_path("v1", "namespaces"),
                       {"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": OPERATOR_NAMESPACE}})
    _create_if_missing(api, CO_PATH, cluster_operator(payload, spec=spec))
    if daemonset:
        _create_if_missing(api, DAEMONSET_PATH, driver_daemonset(payload))
