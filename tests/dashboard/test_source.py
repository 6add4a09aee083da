"""From the API's objects to the read model's facts: pods grouped by node, GPU workloads, the
driver pod that speaks for a node, Events of this object only, and the memo that skips
unchanged objects."""

from __future__ import annotations

import copy
from typing import Any

from reconciler.dashboard.source import FactsMemo, facts_from_objects


def _node(name: str, rv: str = "1", **annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv, "annotations": annotations,
                         "labels": {"gpu.metax-tech.com/canary": "true"} if name == "b" else {}},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True",
                                       "lastTransitionTime": "2027-01-01T00:00:00Z"}]}}


def _driver(name: str, node: str, *, rv: str = "1", ready: bool = True, revision: str = "new",
            created: str = "2027-01-01T00:00:00Z", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "metax-operator", "resourceVersion": rv,
                            "creationTimestamp": created,
                            "labels": {"controller-revision-hash": revision},
                            "ownerReferences": [{"kind": "DaemonSet", "name": "metax-driver"}]}
    if deleting:
        meta["deletionTimestamp"] = "2027-01-01T00:01:00Z"
    return {"metadata": meta, "spec": {"nodeName": node},
            "status": {"conditions": [{"type": "Ready", "status": str(ready),
                                       "lastTransitionTime": "2027-01-01T00:02:00Z"}]}}


def _job(name: str, node: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ml", "resourceVersion": "1"},
            "spec": {"nodeName": node, "containers": [
                {"resources": {"limits": {"metax-tech.com/gpu": 1}}}]},
            "status": {"phase": "Running"}}


def test_objects_become_facts_and_the_memo_changes_nothing_but_the_work() -> None:
    nodes = [_node("a", **{"gpu.metax-tech.com/upgrade-state": "done", "other/x": "y"}),
             _node("b")]
    pods = [_driver("d-a-old", "a", revision="old", created="2026-12-01T00:00:00Z",
                    deleting=True),
            _driver("d-a", "a"), _driver("d-b", "b", ready=False), _job("train", "b"),
            {"metadata": {"name": "pending"}, "spec": {}}]
    events = [{"reason": "StepStarted", "message": "step 2 of 3", "involvedObject": {"uid": "u"},
               "lastTimestamp": "2027-01-01T00:03:00Z"},
              {"reason": "RolloutStarted", "message": "old object",
               "involvedObject": {"uid": "other"}, "lastTimestamp": "2027-01-01T00:00:00Z"}]
    co = {"metadata": {"uid": "u"}}
    memo = FactsMemo()
    first = facts_from_objects("lab", co, nodes, pods, None, [], events, memo=memo)
    a, b = first.nodes
    assert a.pod is not None and a.pod.name == "d-a" and a.pod.ready
    assert a.pod.ready_since == 1798761720.0  # the Ready transition
    assert a.annotations == {"gpu.metax-tech.com/upgrade-state": "done"}
    assert b.canary and b.workloads == ("ml/train",) and b.pod is not None and not b.pod.ready
    assert b.pod.ready_since is None
    assert [(e.reason, e.message) for e in first.events] == [("StepStarted", "step 2 of 3")]
    # b's pod turns Ready (a new resourceVersion); a is unchanged and reused as it was
    later = copy.deepcopy(pods)
    later[2] = _driver("d-b", "b", rv="2", ready=True)
    second = facts_from_objects("lab", co, nodes, later, None, [], events, memo=memo)
    assert second.nodes[0] is a
    assert second.nodes[1].pod is not None and second.nodes[1].pod.ready
    assert second.nodes == facts_from_objects("lab", co, nodes, later, None, [], events).nodes
    # the workload leaves: the node's facts change although the node object did not
    third = facts_from_objects("lab", co, nodes, later[:3], None, [], events, memo=memo)
    assert third.nodes[1].workloads == ()


def test_a_node_keeps_the_skip_label_and_the_rollout_s_topology_key_only() -> None:
    def labelled(name: str, **labels: str) -> dict[str, Any]:
        node = _node(name)
        node["metadata"]["labels"] = labels
        return node

    nodes = [labelled("a", **{"example.com/rack": "r1", "gpu.metax-tech.com/upgrade.skip": "true",
                              "kubernetes.io/hostname": "a"}),
             labelled("b", **{"example.com/rack": "r2"})]
    pods = [_driver("d-a", "a"), _driver("d-b", "b")]
    memo = FactsMemo()
    plain = facts_from_objects("lab", {"metadata": {"uid": "u"}}, nodes, pods, None, [], [],
                               memo=memo)
    assert [dict(n.labels) for n in plain.nodes] == [
        {"gpu.metax-tech.com/upgrade.skip": "true"}, {}]
    # the rollout froze a topology key: the same unchanged node objects now keep it (the memo
    # knows the key changed)
    co = {"metadata": {"uid": "u"}, "status": {"upgradeStatus": {
        "topology": {"key": "example.com/rack", "order": "sequential"}}}}
    keyed = facts_from_objects("lab", co, nodes, pods, None, [], [], memo=memo)
    assert [dict(n.labels) for n in keyed.nodes] == [
        {"gpu.metax-tech.com/upgrade.skip": "true", "example.com/rack": "r1"},
        {"example.com/rack": "r2"}]
