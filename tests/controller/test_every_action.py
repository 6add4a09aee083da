"""The one executor (``ActionExecutor``) carries out every action type of the rollout's
vocabulary against the real API server: the examples below cover the ``Action`` union member by
member (a new member without an example fails here, as an executor without its case fails mypy's
``assert_never``). Its node actions go out through ``NodeRequests``, which the firmware
orchestrator sends its own with: one node's marks as one merge patch."""

from __future__ import annotations

from typing import Any, get_args

import pytest

from reconciler.controller.act import ActionExecutor, Target
from reconciler.kube.api import KubeApi, resource_path
from reconciler.kube.node_requests import NodeRequests
from reconciler.names import CLUSTER_OPERATOR_NAME, DRIVER_DAEMONSET, OPERATOR_NAMESPACE
from reconciler.planning import NodeAction
from reconciler.rollout import actions as act
from reconciler.sim.fleet import WORKLOAD_NAMESPACE, Fleet
from reconciler.sim.waiting import wait_for
from tests.controller.helpers import cluster_operator, event_reasons

pytestmark = pytest.mark.cluster

NODE = "node-0001"


def _node(kube: KubeApi) -> dict[str, Any]:
    return dict(kube.get(resource_path("v1", "nodes", NODE)))


def _pod_gone(kube: KubeApi, name: str) -> bool:
    pods = kube.list(resource_path("v1", "pods", namespace=WORKLOAD_NAMESPACE))["items"]
    return all(p["metadata"]["name"] != name or p["metadata"].get("deletionTimestamp")
               for p in pods)


def _image(kube: KubeApi) -> str:
    ds = kube.get(resource_path("apps/v1", "daemonsets", DRIVER_DAEMONSET,
                                namespace=OPERATOR_NAMESPACE))
    return str(ds["spec"]["template"]["spec"]["containers"][0]["image"])


def test_the_executor_carries_out_every_action_type(fleet: Fleet, kube: KubeApi) -> None:
    executor = ActionExecutor(kube, Target(CLUSTER_OPERATOR_NAME))
    co = cluster_operator(kube)
    pod = fleet.driver_pods()[NODE].name
    payload = dict(co["spec"]["driver"]["payload"], version="7.7.7")
    image = _image(kube).rpartition(":")[0] + ":7.7.8"
    evicted = fleet.add_workload(NODE, name="every-action-evicted")
    deleted = fleet.add_workload(NODE, name="every-action-deleted")
    examples: list[act.Action] = [
        act.Cordon(NODE),
        act.AnnotateNode(NODE, {"example.com/every-action": "yes"}),
        act.Uncordon(NODE),
        act.DeleteDriverPod(NODE, pod),
        act.SetPolicyPause(True),
        act.RestorePayload(payload),
        act.SetDaemonSetImage(image),
        act.RecordEvent("Normal", "EveryActionExample", "an example event"),
        act.EvictPod(NODE, WORKLOAD_NAMESPACE, evicted),
        act.DeletePod(NODE, WORKLOAD_NAMESPACE, deleted),
    ]
    assert {type(a) for a in examples} == set(get_args(act.Action))

    executor.execute(examples[0], co)
    assert _node(kube)["spec"].get("unschedulable") is True
    executor.execute(examples[1], co)
    assert _node(kube)["metadata"]["annotations"]["example.com/every-action"] == "yes"
    executor.execute(examples[2], co)
    assert not _node(kube)["spec"].get("unschedulable")
    executor.execute(examples[3], co)
    wait_for(lambda: fleet.driver_pods().get(NODE) is None
             or fleet.driver_pods()[NODE].name != pod or fleet.driver_pods()[NODE].deleting,
             timeout=30, what=f"{pod} deleted")
    executor.execute(examples[4], co)
    executor.execute(examples[5], co)
    driver = cluster_operator(kube)["spec"]["driver"]
    assert driver["upgradePolicy"]["pause"] is True
    assert driver["payload"]["version"] == "7.7.7"
    executor.execute(examples[6], co)
    assert _image(kube) == image
    executor.execute(examples[7], co)
    wait_for(lambda: "EveryActionExample" in event_reasons(kube), timeout=30,
             what="the example event")
    executor.execute(examples[8], co)
    wait_for(lambda: _pod_gone(kube, evicted), timeout=30, what=f"{evicted} evicted")
    executor.execute(examples[9], co)
    wait_for(lambda: _pod_gone(kube, deleted), timeout=30, what=f"{deleted} deleted")
    assert executor.evictions == {"evicted": 1, "deleted": 1}
    assert executor.counts == {type(a).__name__: 1 for a in examples}


def test_a_nodes_marks_go_out_as_one_patch_and_a_node_gone_is_success(
        fleet: Fleet, kube: KubeApi) -> None:
    api = KubeApi(kube.api_client)  # its own request counts
    written: list[tuple[str, str]] = []
    taken: list[NodeAction] = []
    other = "node-0002"
    actions: list[NodeAction] = [
        act.AnnotateNode(NODE, {"example.com/record": "cordoned"}),
        act.Cordon(NODE),
        act.Cordon(other),  # another node: the first node's patch goes
        act.AnnotateNode(other, {"example.com/record": "done", "example.com/absent": None}),
        act.Uncordon(other),
        act.AnnotateNode("no-such-node", {"example.com/record": "x"}),  # the node left
    ]
    NodeRequests(api, on_object=lambda kind, obj: written.append(
        (kind, str(obj["metadata"]["name"]))), on_action=taken.append).send(actions)

    assert api.request_counts == {"PATCH": 3}
    assert taken == actions
    assert written == [("node", NODE), ("node", other)]
    first, second = _node(kube), dict(kube.get(resource_path("v1", "nodes", other)))
    assert first["spec"].get("unschedulable") is True
    assert first["metadata"]["annotations"]["example.com/record"] == "cordoned"
    assert not second["spec"].get("unschedulable")
    assert second["metadata"]["annotations"]["example.com/record"] == "done"
