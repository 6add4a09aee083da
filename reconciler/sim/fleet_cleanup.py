"""What ``Fleet.stop(cleanup=True)`` removes, so the next fleet starts from a clean cluster: the
fleet's nodes and their pods, the driver DaemonSet, the ``cluster-operator`` object, workload
pods, Leases and NodeNeedReboot events."""

from __future__ import annotations

import time
from collections.abc import Collection

from reconciler.kube.api import KubeApi, NotFound, resource_path
from reconciler.names import (
    API_VERSION,
    CLUSTER_OPERATOR_NAME,
    DRIVER_DAEMONSET,
    NODE_NEED_REBOOT_REASON,
    OPERATOR_NAMESPACE,
    PLURAL,
)
from reconciler.sim.firmware_host import EVENT_NAMESPACE
from reconciler.sim.fleet_state import FLEET_LABEL, WORKLOAD_NAMESPACE
from reconciler.sim.leases import LEASE_NAMESPACE
from reconciler.sim.operator_install import release_finalizer


def clean_away(api: KubeApi, *, fleet_id: str, nodes: Collection[str], leases: bool,
               operator: bool, timeout: float) -> None:
    """Deletes what the fleet ``fleet_id`` of ``nodes`` created (with ``leases`` its Leases,
    with ``operator`` the ``cluster-operator`` object) and waits until it is gone."""
    # Orphan the DaemonSet's pods so that nothing recreates them, then remove everything
    # at once with a zero grace period (no kubelet is left to finish graceful deletions).
    api.delete(resource_path("apps/v1", "daemonsets", DRIVER_DAEMONSET,
                             namespace=OPERATOR_NAMESPACE), propagation="Orphan")
    pods = api.list(resource_path("v1", "pods"), query={"fieldSelector": "spec.nodeName!="})
    for pod in pods.get("items") or []:
        if pod["spec"].get("nodeName") in nodes:
            meta = pod["metadata"]
            api.delete(resource_path("v1", "pods", meta["name"], namespace=meta["namespace"]),
                       grace_period_seconds=0)
    api.request("DELETE", resource_path("v1", "pods", namespace=WORKLOAD_NAMESPACE),
                query={"gracePeriodSeconds": 0})
    api.request("DELETE", resource_path("v1", "nodes"),
                query={"labelSelector": f"{FLEET_LABEL}={fleet_id}"})
    if leases:
        api.request("DELETE", resource_path("coordination.k8s.io/v1", "leases",
                                            namespace=LEASE_NAMESPACE),
                    query={"labelSelector": f"{FLEET_LABEL}={fleet_id}"})
    api.request("DELETE", resource_path("apps/v1", "controllerrevisions",
                                        namespace=OPERATOR_NAMESPACE))
    api.request("DELETE", resource_path("v1", "events", namespace=EVENT_NAMESPACE),
                query={"fieldSelector": f"reason={NODE_NEED_REBOOT_REASON}"})
    co_path = resource_path(API_VERSION, PLURAL, CLUSTER_OPERATOR_NAME)
    if operator:
        api.delete(co_path)
        # the operator stand-in's watch is stopped: do its part of the deletion here
        release_finalizer(api)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left_nodes = api.get(resource_path("v1", "nodes"),
                             query={"labelSelector": f"{FLEET_LABEL}={fleet_id}"})
        try:
            api.get(resource_path("apps/v1", "daemonsets", DRIVER_DAEMONSET,
                                  namespace=OPERATOR_NAMESPACE))
            daemonset_left = True
        except NotFound:
            daemonset_left = False
        driver_pods = api.get(resource_path("v1", "pods", namespace=OPERATOR_NAMESPACE))
        co_left = False
        if operator:
            try:
                co = api.get(co_path)
                co_left = True
                # a component still running (a sync role) may have created it again
                if co["metadata"].get("deletionTimestamp") is None:
                    api.delete(co_path)
                release_finalizer(api)
            except NotFound:
                pass
        if (not left_nodes.get("items") and not daemonset_left
                and not driver_pods.get("items") and not co_left):
            return
        time.sleep(0.1)
    raise TimeoutError("fleet cleanup did not finish")
