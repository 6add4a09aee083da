"""What the vendor's GPU operator installs, as the simulator plays it: the ``ClusterOperator``
CRD, the ``cluster-operator`` object, the ``metax-operator`` namespace and the ``metax-driver``
DaemonSet (OnDelete) running the payload's image.

The ``cluster-operator`` object is the one a Helm install of the vendor's chart 0.15.2 carries
(docs/dev-cluster.md#what-the-vendor-operators-install-looks-like): the object the chart renders
with its default values (the project's copy, ``reconciler/data/metax-operator-0.15.2/
cluster-operator.yaml``: every spec section the vendor's CRD requires), the chart's finalizer,
labels and Helm's annotations, with the simulator's payload (registry, name, version).
``release_finalizer`` is the vendor operator's part of a deletion.

Objects that exist already are left alone: once installed, the DaemonSet template belongs to the
rollout controller and the ``ClusterOperator`` spec to Git.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Mapping
from functools import cache
from typing import Any

from reconciler import data
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

#: the vendor's chart and the object it renders with its default values (the project's copy)
CHART_NAME = "metax-operator"
CHART_VERSION = "0.15.2"
VENDOR_DATA = data.VENDOR_DIR
RENDERED_OBJECT = data.RENDERED_OBJECT_FILE
VENDOR_CRD = data.VENDOR_CRD_FILE

#: the DaemonSet's second node-selector label on real installs, and a label real nodes carry
RUNTIME_READY_LABEL = "metax-tech.com/runtime.ready"
DRIVER_MODE_LABEL = "metax-tech.com/gpu.driver.mode"

#: the Helm release the simulator plays (``helm install metax-operator ... -n metax-operator``)
HELM_RELEASE = "metax-operator"
HELM_ANNOTATIONS = {
    "meta.helm.sh/release-name": HELM_RELEASE,
    "meta.helm.sh/release-namespace": OPERATOR_NAMESPACE,
}


@cache
def _rendered() -> JSON:
    """The rendered object as the API server stores it (``reconciler.data``: nulls dropped, as
    none of those fields is nullable; no namespace, as the object is cluster-scoped)."""
    stored: JSON = data.stored_cluster_operator()
    if stored.get("kind") != KIND:
        raise ValueError(f"{RENDERED_OBJECT}: expected a {KIND}")
    return stored


#: what an install sets beside the chart's defaults: with those alone the chart renders
#: ``openshift:`` empty (null), which the API server drops, and then refuses the object
#: (``spec.openshift: Required value``); DaoCloud's packaging of the chart sets
#: ``openshift.deploy: false``, and so does the simulator
INSTALL_VALUES: JSON = {"openshift": {"deploy": False}}


def rendered_object() -> JSON:
    """The ``ClusterOperator`` the vendor's chart 0.15.2 renders with its default values, as
    the API server stores it (a copy: change it at will)."""
    return copy.deepcopy(_rendered())


#: the vendor operator's finalizer on ``cluster-operator`` (it removes it once it has cleaned up)
FINALIZER: str = _rendered()["metadata"]["finalizers"][0]
#: what the chart puts on the object (``helm.sh/chart``, ``app.kubernetes.io/*``, managed-by
#: Helm), with the simulator's release as ``app.kubernetes.io/instance``
HELM_LABELS: dict[str, str] = {
    **{str(k): str(v) for k, v in _rendered()["metadata"]["labels"].items()},
    "app.kubernetes.io/instance": HELM_RELEASE,
}

#: ``spec.driver.upgradePolicy`` as the vendor's chart installs it
#: (docs/dev-cluster.md#what-the-vendor-operators-install-looks-like)
INSTALLED_UPGRADE_POLICY: JSON = copy.deepcopy(_rendered()["spec"]["driver"]["upgradePolicy"])

CRD_PATH = resource_path("apiextensions.k8s.io/v1", "customresourcedefinitions")
CO_PATH = resource_path(API_VERSION, PLURAL)
DAEMONSET_PATH = resource_path("apps/v1", "daemonsets", namespace=OPERATOR_NAMESPACE)


def merge_patch(target: Any, patch: Any) -> Any:
    """``patch`` applied to ``target`` as a JSON merge patch (RFC 7386): mappings merge key by
    key, a null removes the key, anything else (lists too) replaces. Neither is changed."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result: dict[str, Any] = (
        copy.deepcopy(dict(target)) if isinstance(target, Mapping) else {})
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def cluster_operator(payload: Payload, *, spec: Mapping[str, Any] | None = None,
                     name: str = CLUSTER_OPERATOR_NAME, release: bool = True) -> JSON:
    """The ``cluster-operator`` object a fresh install of the vendor's chart carries
    (docs/dev-cluster.md#what-the-vendor-operators-install-looks-like), running ``payload``.

    ``spec`` is a merge patch onto the installed spec (``{"driver": {"upgradePolicy": ...}}``
    changes that section and keeps the others the vendor's CRD requires; a null removes a
    field): a whole object, which is all the vendor's CRD admits. ``release=False``: an object
    of that spec that no Helm release made (metadata ``name`` only: no finalizer that would hold
    its deletion, no chart labels)."""
    rendered = rendered_object()
    installed = merge_patch(INSTALL_VALUES, rendered["spec"])
    installed["driver"]["payload"].update(
        {"registry": payload.registry, "name": payload.name, "version": payload.version})
    body: JSON = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            # cluster-scoped: the namespace the chart renders is dropped by the API server
            "name": name,
            "finalizers": list(rendered["metadata"]["finalizers"]),
            "labels": dict(HELM_LABELS),
            "annotations": dict(HELM_ANNOTATIONS),
        },
        "spec": installed if spec is None else merge_patch(installed, spec),
    }
    if not release:
        body["metadata"] = {"name": name}
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


def vendor_crd() -> JSON:
    """The vendor's own ``ClusterOperator`` CRD, unchanged (the project's data copy of the
    chart's ``crds/``), for a test that must run on exactly what the vendor installs."""
    return data.vendor_crd()


def install_crd(api: KubeApi, *, schema: Mapping[str, Any] | None = None,
                crd: Mapping[str, Any] | None = None, timeout: float = 30.0) -> None:
    """Creates or updates the ``ClusterOperator`` CRD (ours, generated, unless ``crd`` is
    given) and waits until it is served. Its CEL rules are left out on a server that predates
    them (1.20)."""
    if crd is None:
        crd = cluster_operator_crd(schema,
                                   cel_rules=release_minor(server_version(api)) >= CEL_MINOR)
    api.apply(f"{CRD_PATH}/{CRD_NAME}", dict(crd), field_manager=INSTALLER)
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


def for_server(api: KubeApi, body: JSON) -> JSON:
    """``body`` as the server can take it: a server older than CEL_MINOR (1.20) reads ``""``
    in a custom resource as null, so the empty strings the chart renders are left out there."""
    if release_minor(server_version(api)) >= CEL_MINOR:
        return body
    stripped: JSON = data.without_empty_strings(body)
    return stripped


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
    _create_if_missing(api, CO_PATH, for_server(api, cluster_operator(payload, spec=spec)))
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
