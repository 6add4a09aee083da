"""Which watch events wake the rollout controller for a planning pass: only those that change
what the planner sees. Unit tests at our own seam: the controller is never started, events are
fed to its handlers and the worker's dirty flag is read."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest
from kubernetes import client as k8s_client

from reconciler.controller.act import Target
from reconciler.controller.loop import RolloutController
from reconciler.kube.api import KubeApi
from reconciler.kube.watch import without_managed_fields
from reconciler.names import ANN_STATE, CANARY_LABEL, DRIVER_DAEMONSET, OPERATOR_NAMESPACE

_versions = itertools.count(100)


@pytest.fixture
def controller() -> RolloutController:
    api = KubeApi(k8s_client.ApiClient(k8s_client.Configuration()))
    return RolloutController(api, Target(cluster_operator="unused"))


def woke(controller: RolloutController, handler: Any, obj: dict[str, Any]) -> bool:
    """Feeds one MODIFIED event (a new resourceVersion) and says whether a pass was asked for."""
    obj = copy.deepcopy(obj)
    obj["metadata"]["resourceVersion"] = str(next(_versions))
    controller._dirty = False
    handler("MODIFIED", obj)
    return controller._dirty


def node(**changes: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": "node-0001", "labels": {"metax-tech.com/gpu.driver.major": "2"},
                     "annotations": {}},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True",
                                   "lastHeartbeatTime": "2026-11-30T10:00:00Z"}]},
    }
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        target = obj
        for part in parents:
            target = target[part]
        target[leaf] = value
    return obj


def driver_pod(*, ready: bool = False, phase: str = "Pending",
               deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": "metax-driver-abcde", "namespace": OPERATOR_NAMESPACE, "uid": "u-1",
        "labels": {"controller-revision-hash": "rev-2"},
        "ownerReferences": [{"kind": "DaemonSet", "name": DRIVER_DAEMONSET}],
        "creationTimestamp": "2026-11-30T10:00:00Z",
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T10:05:00Z"
    return {
        "metadata": meta,
        "spec": {"nodeName": "node-0001", "containers": [{"name": "driver"}]},
        "status": {"phase": phase, "conditions": [
            {"type": "Ready", "status": "True" if ready else "False"}]},
    }


def test_node_events_wake_the_controller_only_when_the_planners_view_changes(
    controller: RolloutController,
) -> None:
    assert woke(controller, controller._on_node, node()), "a new node"
    assert not woke(controller, controller._on_node, node(
        status__conditions=[{"type": "Ready", "status": "True",
                             "lastHeartbeatTime": "2026-11-30T10:00:40Z"}])), "a heartbeat"
    relabelled = node(metadata__labels={"metax-tech.com/gpu.driver.major": "3",
                                        "metax-tech.com/driver.ready": "true"})
    assert not woke(controller, controller._on_node, relabelled), "the labeller's labels"
    assert woke(controller, controller._on_node, node(
        metadata__labels={CANARY_LABEL: "true"})), "the canary label"
    assert controller.index.views["node-0001"].canary
    assert woke(controller, controller._on_node, node(
        metadata__annotations={ANN_STATE: "cordoned"})), "a rollout annotation"
    assert woke(controller, controller._on_node, node(spec__unschedulable=True)), "a cordon"
    assert woke(controller, controller._on_node, node(
        status__conditions=[{"type": "Ready", "status": "False"}])), "the node NotReady"


def test_driver_pod_events_wake_the_controller_only_when_the_planners_view_changes(
    controller: RolloutController,
) -> None:
    woke(controller, controller._on_node, node())
    assert woke(controller, controller._on_pod, driver_pod()), "a new pod bound to the node"
    assert not woke(controller, controller._on_pod, driver_pod(phase="Running")), \
        "Running but not Ready: the planner sees the same pod"
    assert woke(controller, controller._on_pod, driver_pod(phase="Running", ready=True))
    assert controller.index.views["node-0001"].pod is not None
    assert controller.index.views["node-0001"].pod.ready
    assert woke(controller, controller._on_pod,
                driver_pod(phase="Running", ready=True, deleting=True)), "deletion started"
    controller._dirty = False
    controller._on_pod("DELETED", driver_pod(phase="Running", ready=True, deleting=True))
    assert controller._dirty, "the pod gone"
    assert controller.index.views["node-0001"].pod is None


def test_daemonset_status_writes_do_not_wake_the_controller(
    controller: RolloutController,
) -> None:
    daemonset: dict[str, Any] = {
        "metadata": {"name": DRIVER_DAEMONSET, "namespace": OPERATOR_NAMESPACE, "generation": 1},
        "spec": {"template": {"spec": {"containers": [{"name": "driver", "image": "a:1"}]}}},
        "status": {"numberReady": 10},
    }
    assert woke(controller, controller._on_daemonset, daemonset), "first seen"
    daemonset["status"] = {"numberReady": 9}
    assert not woke(controller, controller._on_daemonset, daemonset), "a status write"
    assert controller.index.daemonset is not None
    assert controller.index.daemonset["status"] == {"numberReady": 9}, "the cache still follows it"
    daemonset["metadata"]["generation"] = 2
    daemonset["spec"]["template"]["spec"]["containers"][0]["image"] = "a:2"
    assert woke(controller, controller._on_daemonset, daemonset), "a template change"


def test_cached_nodes_and_pods_carry_no_managed_fields(controller: RolloutController) -> None:
    """The controller never reads them, and a full garbage collection would scan them again and
    again (the watches strip them too, with the same transform)."""
    written = node()
    written["metadata"]["managedFields"] = [{"manager": "gpu-rollout-controller",
                                             "fieldsV1": {"f:spec": {"f:unschedulable": {}}}}]
    written["metadata"]["resourceVersion"] = str(next(_versions))
    controller._own_write("node", written)
    assert "managedFields" not in controller.index.nodes["node-0001"]["metadata"]
    assert all(w.transform is without_managed_fields
               for w in controller.watches if w.name in ("nodes", "pods"))
