"""The node-maintenance vocabulary (``reconciler.planning.NodeAction``) has one reading of what
each action does to the planner's view of a node, and every member of the union has its case:
``apply_node_actions`` (the simulator, the rollout's and the firmware's test worlds and, through
``NodeIntent``, the controller's index) is checked over the union's members, so a new member
without its case fails here as it fails mypy (``assert_never``). What the world does next (a
``NodeWorld``: the DaemonSet's new pod, a budget's answer) is asked of the world, once per
action that landed."""

from __future__ import annotations

import dataclasses
from typing import get_args

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler import planning
from reconciler.controller.index import NodeIntent, with_intents
from reconciler.planning import AnnotateNode, Cordon, DeleteDriverPod, DeletePod, EvictPod, Uncordon
from reconciler.rollout.actions import Action
from reconciler.rollout.model import DriverPod, RolloutNode, WorkloadPod, build_node, build_pod
from reconciler.rollout.node_view import (
    NodeWorld,
    apply_node_action,
    apply_node_actions,
    with_pod,
)
from reconciler.rollout.simulator import SimEvent, sim_event

POD = DriverPod("drv-a-0", "rev-old", ready=True, created_at=100.0)
WEB, JOB = WorkloadPod("serve", "web-1"), WorkloadPod("train", "job-1", controller_kind="Job")
NODE = RolloutNode("a", annotations={"keep": "1", "drop": "x"}, pod=POD, pod_deleted_at=5.0,
                   pods=(WEB, JOB))

#: one example of every node action, with the view once it landed
LANDED: dict[type, tuple[planning.NodeAction, RolloutNode]] = {
    Cordon: (Cordon("a"), RolloutNode("a", unschedulable=True,
                                      annotations={"keep": "1", "drop": "x"}, pod=POD,
                                      pod_deleted_at=5.0, pods=(WEB, JOB))),
    Uncordon: (Uncordon("a"), NODE),
    AnnotateNode: (AnnotateNode("a", {"drop": None, "new": "2", "absent": None}),
                   RolloutNode("a", annotations={"keep": "1", "new": "2"}, pod=POD,
                               pod_deleted_at=5.0, pods=(WEB, JOB))),
    DeleteDriverPod: (DeleteDriverPod("a", "drv-a-0", at=200.0),
                      RolloutNode("a", annotations={"keep": "1", "drop": "x"},
                                  pod=DriverPod("drv-a-0", "rev-old", ready=True,
                                                created_at=100.0, deleting=True,
                                                deletion_requested_at=200.0),
                                  pod_deleted_at=5.0, pods=(WEB, JOB))),
    # a workload pod evicted or deleted terminates on the view (its grace period is its own)
    EvictPod: (EvictPod("a", "serve", "web-1"),
               RolloutNode("a", annotations={"keep": "1", "drop": "x"}, pod=POD,
                           pod_deleted_at=5.0,
                           pods=(WorkloadPod("serve", "web-1", terminating=True), JOB))),
    DeletePod: (DeletePod("a", "train", "job-1"),
                RolloutNode("a", annotations={"keep": "1", "drop": "x"}, pod=POD,
                            pod_deleted_at=5.0,
                            pods=(WEB, WorkloadPod("train", "job-1", controller_kind="Job",
                                                   terminating=True)))),
}


def test_the_vocabulary_is_the_union_and_every_member_has_an_example() -> None:
    assert set(planning.NODE_ACTIONS) == set(get_args(planning.NodeAction)) == set(LANDED)
    # both planners' node actions are members of the rollout's Action union
    assert set(planning.NODE_ACTIONS) <= set(get_args(Action))


@pytest.mark.parametrize("kind", list(get_args(planning.NodeAction)), ids=lambda k: k.__name__)
def test_every_node_action_lands_on_the_view(kind: type) -> None:
    action, expected = LANDED[kind]
    assert isinstance(action, kind)
    assert apply_node_action(NODE, action) == expected


@pytest.mark.parametrize("kind", list(get_args(planning.NodeAction)), ids=lambda k: k.__name__)
def test_every_node_action_is_an_intent_of_the_index(kind: type) -> None:
    """The index lays its requests in flight over the view with the same reading; a workload
    pod's eviction or deletion waits for that pod's watch event instead."""
    action, expected = LANDED[kind]
    intent = NodeIntent.of([action])
    assert intent.actions == (action,)
    if isinstance(action, EvictPod | DeletePod):
        assert with_intents(NODE, [intent]) is NODE
    else:
        assert with_intents(NODE, [intent]) == expected


class Recording(NodeWorld):
    """A world that records what it is asked and refuses evictions (a budget's 429)."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def annotated(self, node: RolloutNode, changes: object) -> None:
        self.asked.append(("annotated", node.name))

    def driver_pod_deleted(self, node: RolloutNode, at: float) -> RolloutNode:
        assert node.pod is not None and node.pod.deleting
        self.asked.append(("driver_pod_deleted", f"{node.pod.name}@{at}"))
        return with_pod(node, DriverPod("drv-a-1", "rev-new"), at)

    def evicts(self, node: RolloutNode, pod: WorkloadPod) -> bool:
        self.asked.append(("evicts", pod.key))
        return False

    def deletes(self, node: RolloutNode, pod: WorkloadPod) -> bool:
        self.asked.append(("deletes", pod.key))
        return True


def test_the_world_is_asked_its_part_of_each_action_in_order() -> None:
    world = Recording()
    landed = apply_node_actions(NODE, [
        AnnotateNode("a", {"state": "upgrading"}), Cordon("a"),
        DeleteDriverPod("a", "drv-a-0", at=200.0), EvictPod("a", "serve", "web-1"),
        DeletePod("a", "train", "job-1"), DeletePod("a", "train", "job-1"),
        EvictPod("a", "serve", "gone"), DeleteDriverPod("a", "drv-a-0", at=300.0),
    ], world)
    # a pod gone or going already is not asked about again: each action is idempotent
    assert world.asked == [("annotated", "a"), ("driver_pod_deleted", "drv-a-0@200.0"),
                           ("evicts", "serve/web-1"), ("deletes", "train/job-1")]
    assert landed == RolloutNode(
        "a", unschedulable=True, annotations={"keep": "1", "drop": "x", "state": "upgrading"},
        pod=DriverPod("drv-a-1", "rev-new"), pod_deleted_at=200.0,
        pods=(WEB, WorkloadPod("train", "job-1", controller_kind="Job", terminating=True)))


def test_deleting_a_pod_that_is_gone_changes_nothing() -> None:
    gone = DeleteDriverPod("a", "drv-a-9", at=300.0)
    assert apply_node_action(NODE, gone) is NODE
    assert apply_node_action(RolloutNode("b"), DeleteDriverPod("b", "x")) == RolloutNode("b")


def test_a_deletion_asked_for_before_keeps_its_first_time() -> None:
    asked = with_pod(NODE, DriverPod("drv-a-0", "rev-old", deleting=True,
                                     deletion_requested_at=150.0))
    landed = apply_node_action(asked, DeleteDriverPod("a", "drv-a-0", at=200.0))
    assert landed.pod is not None and landed.pod.deletion_requested_at == 150.0


def test_the_new_pod_replaces_the_deleted_one_with_the_deletion_time() -> None:
    deleted = apply_node_action(NODE, DeleteDriverPod("a", "drv-a-0", at=200.0))
    new = DriverPod("drv-a-1", "rev-new", created_at=201.0)
    assert with_pod(deleted, new, 200.0) == RolloutNode(
        "a", annotations={"keep": "1", "drop": "x"}, pod=new, pod_deleted_at=200.0,
        pods=(WEB, JOB))
    assert with_pod(deleted, new).pod_deleted_at == 5.0


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(
    st.builds(AnnotateNode, st.just("a"), st.dictionaries(
        st.sampled_from(["keep", "drop", "new", "x"]), st.one_of(st.none(), st.text(max_size=3)),
        max_size=3)),
    st.builds(Cordon, st.just("a")),
    st.builds(Uncordon, st.just("a")),
    st.builds(DeleteDriverPod, st.just("a"), st.sampled_from(["drv-a-0", "drv-a-9"]),
              st.floats(0.0, 1000.0)),
    st.builds(EvictPod, st.just("a"), st.just("serve"), st.sampled_from(["web-1", "web-9"])),
    st.builds(DeletePod, st.just("a"), st.just("train"), st.sampled_from(["job-1", "job-9"])),
), min_size=1, max_size=6))
def test_one_nodes_actions_land_together_as_one_by_one(
        actions: list[planning.NodeAction]) -> None:
    one_by_one = NODE
    for action in actions:
        one_by_one = apply_node_action(one_by_one, action)
    assert apply_node_actions(NODE, actions) == one_by_one


def test_the_fast_builders_build_what_the_constructors_build() -> None:
    """``build_pod``, ``build_node`` and ``sim_event`` set the slots of frozen objects directly
    (the simulator's hot path); each takes every field, so a new field must join them here."""
    values = ("drv", "rev", True, "CrashLoopBackOff", 3, 1.5, True, 2.5)
    assert len(dataclasses.fields(DriverPod)) == len(values)
    pod = build_pod(*values)
    assert pod == DriverPod(*values) and hash(pod) == hash(DriverPod(*values))
    node_values = ("a", False, True, {"l": "1"}, {"k": "v"}, pod, ("ns/job",), 7.0, (WEB,))
    assert len(dataclasses.fields(RolloutNode)) == len(node_values)
    assert build_node(*node_values) == RolloutNode(*node_values)
    event_values = (1.0, "NodeReady", "a: Ready", "a", 2)
    assert len(dataclasses.fields(SimEvent)) == len(event_values)
    assert sim_event(*event_values) == SimEvent(*event_values)
    with pytest.raises(dataclasses.FrozenInstanceError):
        pod.ready = False  # type: ignore[misc]
