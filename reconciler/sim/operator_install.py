"""What the vendor's GPU operator installs, as the simulator plays it: the ``ClusterOperator``
CRD, the ``cluster-operator`` object, the ``metax-operator`` namespace and the ``metax-driver``
DaemonSet (OnDelete) running the payload's image.

The ``cluster-operator`` object is the one a Helm install of the vendor operator 0.9.2 carries
(docs/gitops.md#metadata-what-the-sync-applies-and-what-it-leaves-alone): the vendor's finalizer,
Helm's labels and annotations, and the full ``spec`` (every component section, ``upgradePolicy`` as
installed), with the simulator's registry and starting version. ``release_finalizer`` is the vendor
operator's part of a deletion.

Objects that exist already are left alone: once installed, the DaemonSet template belongs to the
rollout controller and the ``ClusterOperator`` spec to Git.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Mapping
from typing import Any

from reconciler.kube.api import JSON, Conflict, KubeApi, NotFound, resource_path
from reconciler.names import (
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
from reconciler.sim.crd import CEL_MINOR, CRD_NAME, cluster_operator_crd

INSTALLER = "metax-operator-sim"
DEFAULT_PAYLOAD = Payload(registry="cr.metax-tech.com/public-library", name="driver-image",
                          version="2.31.0.6")

#: the vendor operator's finalizer on ``cluster-operator`` (it removes it once it has cleaned up)
FINALIZER = "gpu.metax-tech.com"
#: the DaemonSet's second node-selector label on real installs, and a label real nodes carry
RUNTIME_READY_LABEL = "metax-tech.com/runtime.ready"
DRIVER_MODE_LABEL = "metax-tech.com/gpu.driver.mode"

# What Helm puts on the objects of the vendor's chart (release ``metax-operator``).
CHART_NAME = "metax-operator"
CHART_VERSION = "0.9.2"
HELM_RELEASE = "metax-operator"
HELM_LABELS = {
    "app.kubernetes.io/managed-by": "Helm",
    "app.kubernetes.io/instance": HELM_RELEASE,
    "app.kubernetes.io/name": CHART_NAME,
    "app.kubernetes.io/version": CHART_VERSION,
    "helm.sh/chart": f"{CHART_NAME}-{CHART_VERSION}",
}
HELM_ANNOTATIONS = {
    "meta.helm.sh/release-name": HELM_RELEASE,
    "meta.helm.sh/release-namespace": OPERATOR_NAMESPACE,
}

#: ``spec.driver.upgradePolicy`` as the vendor's chart installs it
#: (docs/gitops.md#metadata-what-the-sync-applies-and-what-it-leaves-alone)
INSTALLED_UPGRADE_POLICY: JSON = {
    "enableRollout": False,
    "fallback": "pause",
    "maxFailureThreshold": 5,
    "maxParallel": "100%",
    "maxUnavailable": "0%",
    "pause": False,
    "upgradeSteps": [
        {"replicas": 1, "pauseDuration": 30000},
        {"replicas": "100%", "pauseDuration": 0},
    ],
}

# The other components' images (name per section) and the chart's log settings.
_COMPONENT_IMAGES = {
    "dataExporter": "mx-exporter",
    "devicePlugin": "gpu-device",
    "labelgen": "gpu-label",
    "maca": "maca-native",
    "runtime": "container-runtime",
    "vfioManager": "vfio-manager",
}
_LOG: JSON = {"dir": "/var/log/metax", "format": "text", "level": "info", "maxAge": 7,
              "rotationTime": 24}

CRD_PATH = resource_path("apiextensions.k8s.io/v1", "customresourcedefinitions")
CO_PATH = resource_path(API_VERSION, PLURAL)
DAEMONSET_PATH = resource_path("apps/v1", "daemonsets", namespace=OPERATOR_NAMESPACE)


def _component(name: str, registry: str) -> JSON:
    return {
        "image": {"name": name, "pullPolicy": "IfNotPresent", "registry": registry,
                  "version": CHART_VERSION},
        "log": copy.deepcopy(_LOG),
    }


def cluster_operator(payload: Payload, *, spec: Mapping[str, Any] | None = None) -> JSON:
    """The ``cluster-operator`` object a fresh vendor install carries
    (docs/dev-cluster.md#what-the-vendor-operators-install-looks-like), running ``payload``;
    ``spec`` replaces the whole spec."""
    driver: JSON = {
        "deployPolicy": "PreferCloud",
        "fwEffectPolicy": "NextReboot",
        "fwEnableVirt": False,
        "fwUpgradePolicy": "Never",
        "image": {"name": "driver-manager", "pullPolicy": "IfNotPresent",
                  "registry": payload.registry, "version": CHART_VERSION},
        "log": copy.deepcopy(_LOG),
        "payload": {"name": payload.name, "pullPolicy": "IfNotPresent",
                    "registry": payload.registry, "version": payload.version},
        "upgradePolicy": copy.deepcopy(INSTALLED_UPGRADE_POLICY),
    }
    sections = {section: _component(image, payload.registry)
                for section, image in _COMPONENT_IMAGES.items()}
    body: JSON = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": CLUSTER_OPERATOR_NAME,
            "finalizers": [FINALIZER],
            "labels": dict(HELM_LABELS),
            "annotations": dict(HELM_ANNOTATIONS),
        },
        "spec": {"driver": driver, **sections},
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
                    "nodeSelector": {GPU_NODE_LABEL: "true", RUNTIME_READY_LABEL: "true"},
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


def server_version(api: KubeApi) -> str:
    """The API server's release, as its ``/version`` says (``v1.37.2``)."""
    return str(api.get("/version")["gitVersion"])


def release_minor(git_version: str) -> int:
    """The minor release of a ``gitVersion`` (``v1.37.2`` -> 37; 0 if it names none)."""
    match = re.match(r"v?1\.(\d+)\.", git_version)
    return int(match.group(1)) if match else 0


def install_crd(api: KubeApi, *, schema: Mapping[str, Any] | None = None,
                timeout: float = 30.0) -> None:
    """Creates or updates the ``ClusterOperator`` CRD and waits until it is served. Its CEL
    rules are left out on a server that predates them (1.20)."""
    crd = cluster_operator_crd(schema, cel_rules=release_minor(server_version(api)) >= CEL_MINOR)
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


def release_finalizer(api: KubeApi, *, name: str = CLUSTER_OPERATOR_NAME,
                      attempts: int = 10) -> bool:
    """The vendor operator's part of deleting ``name``: once the object is being deleted, take
    its finalizer off so the deletion completes. True when the finalizer was removed here."""
    path = f"{CO_PATH}/{name}"
    for _ in range(attempts):
        try:
            current = api.get(path)
        except NotFound:
            return False
        meta = current.get("metadata") or {}
        finalizers = list(meta.get("finalizers") or [])
        if meta.get("deletionTimestamp") is None or FINALIZER not in finalizers:
            return False
        finalizers.remove(FINALIZER)
        try:
            # resourceVersion makes it a compare-and-swap: another finalizer added or removed
            # meanwhile is a conflict, read again, never lost
            api.patch(path, {"metadata": {"finalizers": finalizers or None,
                                          "resourceVersion": meta.get("resourceVersion")}})
            return True
        except NotFound:
            return False
        except Conflict:
            continue
    raise TimeoutError(f"could not remove finalizer {FINALIZER} from {name} "
                       f"({attempts} conflicts in a row)")
