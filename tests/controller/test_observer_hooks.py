"""The rollout controller reports what a benchmark times through its observer hooks, in the
order it happens. Unit tests at our own seam: the controller is never started, its API client
answers without a server."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client as k8s_client

from reconciler.controller.act import Target
from reconciler.controller.hooks import NoObserver
from reconciler.controller.loop import RolloutController
from reconciler.kube.api import JSON, KubeApi
from reconciler.names import ANN_STATE, DRIVER_DAEMONSET, OPERATOR_NAMESPACE
from reconciler.rollout.actions import Action, AnnotateNode, DeleteDriverPod

IMAGE = "reg.local/metax/driver-image:2.32.0.6-amd64"


class Recorder(NoObserver):
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def pass_started(self) -> None:
        self.calls.append(("pass_started",))

    def pass_planned(self) -> None:
        self.calls.append(("pass_planned",))

    def pass_acted(self) -> None:
        self.calls.append(("pass_acted",))

    def pass_ended(self) -> None:
        self.calls.append(("pass_ended",))

    def requests_handed_out(self, node: str, *, starts: bool) -> object:
        token = object()
        self.calls.append(("handed_out", node, starts, token))
        return token

    def requests_landed(self, node: str, handed_out: object, *, starts: bool) -> None:
        self.calls.append(("landed", node, starts, handed_out))

    def node_written(self, node: str) -> None:
        self.calls.append(("node_written", node))

    def pod_deleted(self, node: str) -> None:
        self.calls.append(("pod_deleted", node))

    def driver_ready_seen(self, node: str) -> None:
        self.calls.append(("ready_seen", node))


class AnsweringApi(KubeApi):
    """Answers each request as the API server would: the node patched, the pod deleted (the
    executor and its requests are the controller's own)."""

    def __init__(self, pods: dict[str, str]) -> None:
        super().__init__(k8s_client.ApiClient(k8s_client.Configuration()))
        self.pods = pods  # pod -> its node

    def patch(self, path: str, body: Any, **options: Any) -> JSON:
        return {"metadata": {"name": path.rpartition("/")[2], "resourceVersion": "8"}}

    def delete(self, path: str, **options: Any) -> JSON | None:
        name = path.rpartition("/")[2]
        return {"kind": "Pod", "metadata": {"name": name, "namespace": "x",
                                            "resourceVersion": "7"},
                "spec": {"nodeName": self.pods[name]}}


def controller_with(observer: Recorder, api: KubeApi | None = None) -> RolloutController:
    api = api or KubeApi(k8s_client.ApiClient(k8s_client.Configuration()))
    return RolloutController(api, Target(cluster_operator="cluster-operator"), observer=observer)


def test_a_start_reports_its_hand_out_the_servers_answers_and_its_landing() -> None:
    observer = Recorder()
    controller = controller_with(observer, AnsweringApi({"driver-a": "node-0001"}))
    try:
        start: list[Action] = [DeleteDriverPod("node-0001", "driver-a"),
                               AnnotateNode("node-0001", {ANN_STATE: "upgrading"})]
        controller.dispatcher.dispatch("node-0001", start, {}, starts=True).result(timeout=10)
        controller.dispatcher.drain()
    finally:
        controller._stop.set()
        controller.stop()
    handed_out = observer.calls[0]
    assert handed_out[:3] == ("handed_out", "node-0001", True)
    assert observer.calls[1:] == [("pod_deleted", "node-0001"), ("node_written", "node-0001"),
                                  ("landed", "node-0001", True, handed_out[3])]


def test_the_index_reports_a_driver_pod_turning_ready_once() -> None:
    observer = Recorder()
    controller = controller_with(observer)
    controller._on_node("ADDED", {"metadata": {"name": "node-0001", "resourceVersion": "1"}})
    pod: dict[str, Any] = {
        "metadata": {"name": "driver-a", "namespace": OPERATOR_NAMESPACE,
                     "resourceVersion": "2",
                     "ownerReferences": [{"kind": "DaemonSet", "name": DRIVER_DAEMONSET}]},
        "spec": {"nodeName": "node-0001"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    controller._on_pod("ADDED", pod)
    controller._on_pod("MODIFIED", {**pod, "metadata": {**pod["metadata"],
                                                        "resourceVersion": "3"}})
    assert observer.calls == [("ready_seen", "node-0001")]


def test_a_planning_pass_reports_its_stages_in_order() -> None:
    observer = Recorder()
    controller = controller_with(observer)
    controller.dispatcher.events = ThreadPoolExecutor(max_workers=1)
    controller.executor.execute = lambda action, cluster_operator: None  # type: ignore[method-assign]
    controller._on_daemonset("ADDED", {
        "metadata": {"name": DRIVER_DAEMONSET, "namespace": OPERATOR_NAMESPACE,
                     "generation": 1, "resourceVersion": "1"},
        "spec": {"template": {"spec": {"containers": [{"name": "driver", "image": IMAGE}]}}},
    })
    controller._on_revision("ADDED", {
        "metadata": {"name": "metax-driver-rev1", "namespace": OPERATOR_NAMESPACE,
                     "labels": {"controller-revision-hash": "rev1"},
                     "ownerReferences": [{"kind": "DaemonSet", "name": DRIVER_DAEMONSET}]},
        "revision": 1,
        "data": {"spec": {"template": {"spec": {"containers": [
            {"name": "driver", "image": IMAGE}]}}}},
    })
    controller._on_cluster_operator("ADDED", {
        "metadata": {"name": "cluster-operator", "resourceVersion": "5"},
        "spec": {"driver": {"payload": {"registry": "reg.local/metax", "name": "driver-image",
                                        "version": "2.32.0.6"},
                            "upgradePolicy": {"enableRollout": True, "upgradeSteps": [
                                {"replicas": "100%", "pauseDuration": 0}]}}},
        "status": {"upgradeStatus": {"phase": "Idling", "condition": []}},
    })
    controller.run_pass()
    controller.dispatcher.shutdown_events()
    assert observer.calls == [("pass_started",), ("pass_planned",), ("pass_acted",),
                              ("pass_ended",)]
    assert controller.stats.passes == 1
