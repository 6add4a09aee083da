"""The rollout controller's node index on its own: plain objects in, the planner's view out,
with the intents of requests in flight laid over the cache. No threads, no API server."""

from __future__ import annotations

from typing import Any

from reconciler.controller.hooks import NoObserver
from reconciler.controller.index import NodeIndex, NodeIntent
from reconciler.names import ANN_ATTEMPT, ANN_STATE, DRIVER_DAEMONSET, OPERATOR_NAMESPACE
from reconciler.rollout.actions import AnnotateNode, Cordon, DeleteDriverPod, Uncordon
from reconciler.timefmt import parse_time


def node(name: str = "node-0001", version: str = "10", *,
         annotations: dict[str, str] | None = None, unschedulable: bool = False,
         ready: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "resourceVersion": version,
                     "annotations": dict(annotations or {})},
        "spec": {"unschedulable": unschedulable},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def driver_pod(name: str = "metax-driver-a", node_name: str = "node-0001", version: str = "20",
               *, ready: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": OPERATOR_NAMESPACE, "resourceVersion": version,
                     "labels": {"controller-revision-hash": "rev-1"},
                     "ownerReferences": [{"kind": "DaemonSet", "name": DRIVER_DAEMONSET}],
                     "creationTimestamp": "2026-11-30T10:00:00Z"},
        "spec": {"nodeName": node_name},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def gpu_workload(name: str, node_name: str = "node-0001", version: str = "30") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "jobs", "resourceVersion": version},
        "spec": {"nodeName": node_name, "containers": [
            {"name": "train", "resources": {"limits": {"metax-tech.com/gpu": "1"}}}]},
        "status": {"phase": "Running"},
    }


class ReadyLog(NoObserver):
    def __init__(self) -> None:
        self.seen: list[str] = []

    def driver_ready_seen(self, node: str) -> None:
        self.seen.append(node)


def test_an_intent_shows_what_the_requests_in_flight_will_write_until_it_is_dropped() -> None:
    index = NodeIndex()
    assert index.on_node("ADDED", node(annotations={ANN_ATTEMPT: "1"}))
    assert index.on_pod("ADDED", driver_pod())
    intent = NodeIntent.of([AnnotateNode("node-0001", {ANN_STATE: "upgrading",
                                                       ANN_ATTEMPT: None}),
                            Cordon("node-0001"),
                            DeleteDriverPod("node-0001", "metax-driver-a")])
    index.add_intent("node-0001", intent)
    view = index.views["node-0001"]
    assert view.unschedulable
    assert dict(view.annotations) == {ANN_STATE: "upgrading"}, "None removes an annotation"
    assert view.pod is not None and view.pod.deleting
    # the cache itself is untouched: only the view carries the intent
    assert index.nodes["node-0001"]["metadata"]["annotations"] == {ANN_ATTEMPT: "1"}

    index.drop_intent("node-0001", intent)
    view = index.views["node-0001"]
    assert not view.unschedulable and dict(view.annotations) == {ANN_ATTEMPT: "1"}
    assert view.pod is not None and not view.pod.deleting
    assert "node-0001" not in index.intents


def test_later_intents_of_a_node_win_and_each_is_dropped_on_its_own() -> None:
    index = NodeIndex()
    index.on_node("ADDED", node())
    cordon = NodeIntent.of([Cordon("node-0001")])
    uncordon = NodeIntent.of([Uncordon("node-0001"), AnnotateNode("node-0001", {ANN_STATE: "x"})])
    index.add_intent("node-0001", cordon)
    index.add_intent("node-0001", uncordon)
    assert not index.views["node-0001"].unschedulable
    index.drop_intent("node-0001", uncordon)
    assert index.views["node-0001"].unschedulable, "the cordon still in flight"
    assert ANN_STATE not in index.views["node-0001"].annotations
    index.drop_intent("node-0001", cordon)
    assert index.intents == {}


def test_a_late_watch_event_does_not_overwrite_the_answer_to_our_own_write() -> None:
    index = NodeIndex()
    index.on_node("ADDED", node(version="10"))
    assert index.on_node("MODIFIED", node(version="12", unschedulable=True)), "our write"
    assert not index.on_node("MODIFIED", node(version="11")), "an older event"
    assert not index.on_node("MODIFIED", node(version="12", unschedulable=True)), "its echo"
    assert index.views["node-0001"].unschedulable
    assert index.on_node("DELETED", node(version="13"))
    assert "node-0001" not in index.views and "node-0001" not in index.nodes


def test_only_what_the_planner_reads_changes_the_view() -> None:
    index = NodeIndex()
    index.on_node("ADDED", node(version="1"))
    heartbeat = node(version="2")
    heartbeat["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-11-30T10:00:40Z"
    assert not index.on_node("MODIFIED", heartbeat)
    assert index.nodes["node-0001"]["metadata"]["resourceVersion"] == "2", "cached all the same"
    assert index.on_node("MODIFIED", node(version="3", ready=False))
    assert not index.views["node-0001"].ready


def test_gpu_workloads_and_driver_pods_are_filed_under_their_node() -> None:
    observer = ReadyLog()
    index = NodeIndex(observer=observer)
    index.on_node("ADDED", node())
    assert not index.on_pod("ADDED", gpu_workload("elsewhere", node_name="node-0099")), \
        "a pod on a node the index does not hold"
    assert index.on_pod("ADDED", gpu_workload("train-1"))
    assert index.views["node-0001"].workloads == ("jobs/train-1",)
    no_gpu = gpu_workload("web", version="31")
    no_gpu["spec"]["containers"][0]["resources"] = {}
    assert not index.on_pod("ADDED", no_gpu), "a pod that asks for no GPU"
    assert index.on_pod("DELETED", gpu_workload("train-1", version="32"))
    assert not index.views["node-0001"].workloads, "the workload gone"

    assert index.on_pod("ADDED", driver_pod(ready=False))
    assert observer.seen == []
    assert index.on_pod("MODIFIED", driver_pod(version="21", ready=True))
    assert not index.on_pod("MODIFIED", driver_pod(version="22", ready=True))
    assert observer.seen == ["node-0001"], "one Ready seen, once"
    assert index.on_pod("DELETED", driver_pod(version="23"))
    assert index.views["node-0001"].pod is None


def test_a_daemonset_status_write_changes_nothing_the_planner_reads() -> None:
    index = NodeIndex()
    daemonset: dict[str, Any] = {"metadata": {"name": DRIVER_DAEMONSET, "generation": 1,
                                              "resourceVersion": "5"},
                                 "status": {"numberReady": 3}}
    assert index.on_daemonset("ADDED", daemonset)
    moved = {**daemonset, "metadata": {**daemonset["metadata"], "resourceVersion": "6"},
             "status": {"numberReady": 2}}
    assert not index.on_daemonset("MODIFIED", moved)
    assert index.daemonset is moved, "the cache follows it"
    respec = {**moved, "metadata": {**moved["metadata"], "resourceVersion": "7",
                                    "generation": 2}}
    assert index.on_daemonset("MODIFIED", respec)
    assert index.on_revision("ADDED", {"metadata": {"name": "rev-1"}})
    assert set(index.revisions) == {"rev-1"}
    assert index.on_cluster_operator("ADDED", {"metadata": {"name": "co",
                                                            "resourceVersion": "9"}})
    assert not index.on_cluster_operator("MODIFIED", {"metadata": {"name": "co",
                                                                   "resourceVersion": "8"}})
    assert index.cluster_operator is not None
    assert index.cluster_operator["metadata"]["resourceVersion"] == "9"


def test_a_deletion_keeps_its_time_from_the_plan_to_the_pod_and_after_the_pod_went() -> None:
    """What tells a cordoned node's start without a record (``scan.deletion_time``)."""
    index = NodeIndex()
    index.on_node("ADDED", node())
    index.on_pod("ADDED", driver_pod())
    intent = NodeIntent.of([DeleteDriverPod("node-0001", "metax-driver-a", at=1800.5)])
    index.add_intent("node-0001", intent)
    pod = index.views["node-0001"].pod
    assert pod is not None and pod.deleting and pod.deletion_requested_at == 1800.5
    # the server's answer: deletionTimestamp is the request's time plus the grace period
    deleting = driver_pod(version="21")
    deleting["metadata"].update(deletionTimestamp="2026-11-30T10:00:31Z",
                                deletionGracePeriodSeconds=30)
    index.on_pod("MODIFIED", deleting)
    index.drop_intent("node-0001", intent)
    pod = index.views["node-0001"].pod
    asked = pod.deletion_requested_at if pod is not None else 0.0
    assert pod is not None and pod.deleting
    assert asked == parse_time("2026-11-30T10:00:01Z")
    index.on_pod("DELETED", deleting)
    view = index.views["node-0001"]
    assert view.pod is None and view.pod_deleted_at == asked, "remembered once the pod is gone"
    index.on_pod("ADDED", driver_pod("metax-driver-b", version="22", ready=False))
    assert index.views["node-0001"].pod_deleted_at == asked
    # a pod gone without a deletion time: no earlier removal's time is kept for it
    index.on_pod("DELETED", driver_pod("metax-driver-b", version="23"))
    assert index.views["node-0001"].pod_deleted_at == 0.0
    index.on_node("DELETED", node())
    assert "node-0001" not in index.pod_deleted_at


def test_a_deletion_time_from_hostile_pod_metadata_is_a_time_or_unknown() -> None:
    from reconciler.kube.observe import deletion_requested_at

    at = "2026-11-30T10:00:31Z"
    assert deletion_requested_at({}) == 0.0, "not deleting"
    assert deletion_requested_at({"deletionTimestamp": at}) == parse_time(at)
    for grace in ("soon", 1.5e400, [30], None):  # not a count: no grace taken off
        assert deletion_requested_at({"deletionTimestamp": at,
                                      "deletionGracePeriodSeconds": grace}) == parse_time(at)
    # past int64, or before the epoch: unknown (the planner records the deletion then)
    assert deletion_requested_at({"deletionTimestamp": at,
                                  "deletionGracePeriodSeconds": 2 ** 70}) == 0.0
    assert deletion_requested_at({"deletionTimestamp": "not a time"}) == 0.0


def other_pod(name: str, node_name: str = "node-0001", *, version: str = "40",
              labels: dict[str, str] | None = None, owner: str | None = "ReplicaSet",
              mirror: bool = False, empty_dir: bool = False, phase: str = "Running",
              deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "serve", "resourceVersion": version,
                            "labels": dict(labels or {})}
    if owner is not None:
        meta["ownerReferences"] = [{"kind": "Unrelated", "name": "x"},
                                   {"kind": owner, "name": "o", "controller": True}]
    if mirror:
        meta["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T10:00:05Z"
    return {"metadata": meta,
            "spec": {"nodeName": node_name, "containers": [{"name": "c"}],
                     "volumes": [{"name": "scratch", "emptyDir": {}}] if empty_dir else []},
            "status": {"phase": phase}}


def test_pods_are_kept_only_while_drain_or_wait_for_asks_for_them() -> None:
    index = NodeIndex()
    index.on_node("ADDED", node())
    index.on_pod("ADDED", driver_pod())
    assert not index.on_pod("ADDED", other_pod("web-1")), "not tracked: nothing the planner reads"
    index.on_pod("ADDED", gpu_workload("train-1"))
    assert index.views["node-0001"].pods == ()
    cache = [driver_pod(), other_pod("web-1"), gpu_workload("train-1"),
             other_pod("done-1", phase="Succeeded"), other_pod("elsewhere", "node-0002")]
    index.set_track_pods(True, cache)
    view = index.views["node-0001"]
    assert [p.key for p in view.pods] == ["jobs/train-1", "serve/web-1"], \
        "every pod but the driver's and finished ones, in name order"
    assert view.workloads == ("jobs/train-1",), "workloads as before"
    train, web = view.pods
    assert train.gpu and train.controller_kind is None and not web.gpu
    assert web.controller_kind == "ReplicaSet", "the controller owner, not the first owner"

    assert index.on_pod("ADDED", other_pod("ds-1", owner="DaemonSet", version="41"))
    assert index.on_pod("ADDED", other_pod("static-1", owner="Node", mirror=True, version="42"))
    assert index.on_pod("ADDED", other_pod("scratch-1", empty_dir=True, version="43",
                                           labels={"app": "scratch"}))
    pods = {p.name: p for p in index.views["node-0001"].pods}
    assert pods["ds-1"].controller_kind == "DaemonSet"
    assert pods["static-1"].mirror and not pods["ds-1"].mirror
    assert pods["scratch-1"].empty_dir and dict(pods["scratch-1"].labels) == {"app": "scratch"}

    assert index.on_pod("MODIFIED", other_pod("web-1", deleting=True, version="44"))
    assert {p.name: p for p in index.views["node-0001"].pods}["web-1"].terminating
    assert index.on_pod("MODIFIED", other_pod("scratch-1", phase="Succeeded", version="45"))
    assert index.on_pod("DELETED", other_pod("web-1", deleting=True, version="46"))
    assert sorted(p.name for p in index.views["node-0001"].pods) == ["ds-1", "static-1",
                                                                   "train-1"]
    assert index.on_pod("MODIFIED", other_pod("ds-1", "node-0002", version="47"))
    assert "serve/ds-1" not in [p.key for p in index.views["node-0001"].pods], \
        "a pod that moved leaves its old node"
    assert index.pod_node["serve/ds-1"] == "node-0002"

    index.set_track_pods(False)
    assert index.views["node-0001"].pods == () and not index.node_pods and not index.pod_node
    assert index.views["node-0001"].workloads == ("jobs/train-1",)


def budget(name: str, *, allowed: object = 1, selector: dict[str, Any] | None = None,
           version: str = "50") -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": name, "namespace": "serve",
                                        "resourceVersion": version},
                           "spec": {}, "status": {"disruptionsAllowed": allowed,
                                                  "currentHealthy": 3}}
    if selector is not None:
        obj["spec"]["selector"] = selector
    return obj


def test_budgets_are_kept_as_the_planner_reads_them() -> None:
    index = NodeIndex()
    assert index.on_budget("ADDED", budget("web", selector={"matchLabels": {"app": "web"}}))
    web = index.budgets["serve/web"]
    assert web.disruptions_allowed == 1
    index.set_track_pods(True, [other_pod("web-1", labels={"app": "web"}),
                                other_pod("db-1", labels={"app": "db"})])
    pods = {p.name: p for p in index.node_pods["node-0001"].values()}
    assert web.covers(pods["web-1"]) and not web.covers(pods["db-1"])
    changed = budget("web", selector={"matchLabels": {"app": "web"}}, version="51")
    changed["status"]["currentHealthy"] = 4
    assert not index.on_budget("MODIFIED", changed), "counts the planner does not read"
    assert index.on_budget("MODIFIED", budget("web", allowed=0, version="52",
                                              selector={"matchLabels": {"app": "web"}}))
    assert index.budgets["serve/web"].disruptions_allowed == 0
    assert index.on_budget("ADDED", budget("fresh", allowed=None))
    assert index.budgets["serve/fresh"].disruptions_allowed == 0, "not computed yet: none"
    assert index.budgets["serve/fresh"].selector is None, "no selector: selects no pod"
    assert index.on_budget("DELETED", budget("web"))
    assert not index.on_budget("DELETED", budget("web"))
    assert sorted(index.budgets) == ["serve/fresh"]
