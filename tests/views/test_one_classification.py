"""Node classification is written once (``reconciler.rollout.node_class``): the read model's
node state of a node (``reconciler status``, the dashboard) and where the planner's scan puts the
same node agree, case by case, on the rules both read: a start without a record, the skip label
before and after a start, whose cordon it is, and a failed driver pod."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.names import (
    ANN_STATE,
    ANN_TARGET,
    ANN_WAS_UNSCHEDULABLE,
    LABEL_UPGRADE_SKIP,
    STATE_CORDONED,
    STATE_UPGRADING,
)
from reconciler.rollout.model import DriverPod, RolloutNode
from reconciler.rollout.scan import NodeScan, scan_nodes
from reconciler.views.nodes import NodeFacts, PodFacts, classify

OLD, NEW = "rev-old", "rev-new"
EPOCH = 1_000_000.0


def _record(state: str) -> dict[str, str]:
    return {ANN_STATE: state, ANN_TARGET: NEW, ANN_WAS_UNSCHEDULABLE: "false"}


#: name -> (node fields, pod fields, the read model's state, the scan's bucket)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any], str, str]] = {
    "cordoned ahead, old pod still there": (
        {"unschedulable": True, "annotations": _record(STATE_CORDONED)},
        {"revision": OLD, "ready": True}, "cordoned", "cordoned"),
    "cordoned ahead, old pod deleting: started without a record": (
        {"unschedulable": True, "annotations": _record(STATE_CORDONED)},
        {"revision": OLD, "ready": True, "deleting": True}, "in-flight", "in_flight"),
    "cordoned ahead and labelled to skip: not started, skipped": (
        {"unschedulable": True, "annotations": _record(STATE_CORDONED),
         "labels": {LABEL_UPGRADE_SKIP: "true"}},
        {"revision": OLD, "ready": True}, "skipped", "skipped"),
    "labelled to skip after its start: it finishes": (
        {"unschedulable": True, "annotations": _record(STATE_CORDONED),
         "labels": {LABEL_UPGRADE_SKIP: "true"}},
        {"revision": OLD, "ready": True, "deleting": True}, "in-flight", "in_flight"),
    "cordoned by the rollout's own move": (
        {"unschedulable": True, "annotations": _record(STATE_UPGRADING)},
        {"revision": OLD, "ready": True, "deleting": True}, "in-flight", "in_flight"),
    "cordoned by someone else": (
        {"unschedulable": True}, {"revision": OLD, "ready": True}, "left-alone",
        "untouched+unavailable"),
    "untouched": ({}, {"revision": OLD, "ready": True}, "old", "untouched"),
    "its new pod cannot pull the image": (
        {"unschedulable": True, "annotations": _record(STATE_UPGRADING)},
        {"revision": NEW, "waiting_reason": "ErrImagePull"}, "failed",
        "new_failures+unavailable"),
}


def _bucket(scan: NodeScan) -> str:
    """Where the scan put its only node, and whether it counts it unavailable."""
    lists = [name for name in ("cordoned", "skipped", "untouched", "new_failures", "failed",
                               "completed") if getattr(scan, name)]
    if scan.in_flight:
        lists.append("in_flight")
    if scan.unavailable:
        lists.append("unavailable")
    return "+".join(lists)


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_the_read_model_and_the_scan_classify_a_node_alike(case: str) -> None:
    node, pod, state, bucket = CASES[case]
    facts = NodeFacts("a", pod=PodFacts("drv-a", **pod), **node)
    assert classify(facts, target=NEW, active=True) == state
    rollout_node = RolloutNode("a", pod=DriverPod("drv-a", created_at=EPOCH, **pod), **node)
    scan = scan_nodes([rollout_node], NEW, now=EPOCH + 1, epoch="e", ready_timeout=600,
                      skipped=frozenset())
    assert _bucket(scan) == bucket
