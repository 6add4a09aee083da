"""Node actions landed on the planner's view of a node: the one reading of the node vocabulary
(``reconciler.planning.NodeAction``) on the view side, shared by the simulator, the test worlds
(the rollout's and the firmware's) and the controller's index (its requests in flight). The API
side's one reading is ``reconciler.kube.node_requests``.

What the cluster does after an action is each world's own, and a ``NodeWorld`` answers for it:
the DaemonSet's new pod after a driver pod's deletion, a disruption budget's answer to an
eviction. The base models none of it (``VIEW_ONLY``): a deleted driver pod stays deleting, an
evicted or deleted workload pod terminates.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import assert_never

from reconciler import planning as vocabulary
from reconciler.rollout.model import (
    DriverPod,
    RolloutNode,
    WorkloadPod,
    build_node,
    build_pod,
)


class NodeWorld:
    """The world's part of the node actions, asked as each lands; a world overrides what it
    models. Every method sees the node as the action found it."""

    def annotated(self, node: RolloutNode, changes: Mapping[str, str | None]) -> None:
        """``changes`` are written on ``node`` (a world that reads the planner's records)."""

    def driver_pod_deleted(self, node: RolloutNode, at: float) -> RolloutNode:
        """``node`` with its driver pod deleting (its deletion asked for at ``at``, the plan's
        time, unless asked before): the node once the world did its part (a DaemonSet's new
        pod: ``with_pod``)."""
        return node

    def evicts(self, node: RolloutNode, pod: WorkloadPod) -> bool:
        """The Eviction API's answer for ``pod``: True, it terminates (its grace period is the
        world's to model); False, it keeps running (a disruption budget refused, or the world
        waits for the pod's own watch event)."""
        return True

    def deletes(self, node: RolloutNode, pod: WorkloadPod) -> bool:
        """A workload pod's deletion (``drain.onTimeout: delete``): True, it terminates; False,
        the world waits for the pod's own watch event."""
        return True


#: the actions' own part and nothing more
VIEW_ONLY = NodeWorld()


def apply_node_actions(node: RolloutNode, actions: Sequence[vocabulary.NodeAction],
                       world: NodeWorld = VIEW_ONLY) -> RolloutNode:
    """``node`` with one node's ``actions`` landed in order, each with the world's part. Its
    consecutive annotations and (un)cordons are built into one view (a wave's start and its end
    are two or three of them per node: a hot path of the simulator at 100,000 nodes); an action
    with nothing left to do (a pod gone already: each is idempotent) leaves the node as it is."""
    annotations: dict[str, str] | None = None  # the pending marks' annotations, if any
    unschedulable = node.unschedulable
    for action in actions:
        match action:
            case vocabulary.AnnotateNode(annotations=changes):
                world.annotated(node, changes)
                if annotations is None:
                    annotations = dict(node.annotations)
                for key, value in changes.items():
                    if value is None:
                        annotations.pop(key, None)
                    else:
                        annotations[key] = value
            case vocabulary.Cordon():
                unschedulable = True
            case vocabulary.Uncordon():
                unschedulable = False
            case vocabulary.DeleteDriverPod(pod=name, at=at):
                node = _driver_pod_deleted(_marked(node, unschedulable, annotations), name, at,
                                           world)
                annotations, unschedulable = None, node.unschedulable
            case vocabulary.EvictPod(namespace=namespace, pod=name):
                node = _workload_pod_goes(_marked(node, unschedulable, annotations),
                                          f"{namespace}/{name}", world.evicts)
                annotations, unschedulable = None, node.unschedulable
            case vocabulary.DeletePod(namespace=namespace, pod=name):
                node = _workload_pod_goes(_marked(node, unschedulable, annotations),
                                          f"{namespace}/{name}", world.deletes)
                annotations, unschedulable = None, node.unschedulable
            case _:
                assert_never(action)
    return _marked(node, unschedulable, annotations)


def apply_node_action(node: RolloutNode, action: vocabulary.NodeAction,
                      world: NodeWorld = VIEW_ONLY) -> RolloutNode:
    """``apply_node_actions`` of one action."""
    return apply_node_actions(node, (action,), world)


def _marked(node: RolloutNode, unschedulable: bool,
            annotations: dict[str, str] | None) -> RolloutNode:
    """``node`` with the pending marks (built field by field: the simulator's hot path)."""
    if annotations is None and unschedulable == node.unschedulable:
        return node
    return build_node(node.name, node.ready, unschedulable, node.labels,
                      node.annotations if annotations is None else annotations, node.pod,
                      node.workloads, node.pod_deleted_at, node.pods)


def _driver_pod_deleted(node: RolloutNode, name: str, at: float,
                        world: NodeWorld) -> RolloutNode:
    pod = node.pod
    if pod is None or pod.name != name:
        return node  # gone already: a deletion is idempotent
    deleting = build_pod(pod.name, pod.revision, pod.ready, pod.waiting_reason,
                         pod.restart_count, pod.created_at, True,
                         pod.deletion_requested_at or at)
    return world.driver_pod_deleted(
        build_node(node.name, node.ready, node.unschedulable, node.labels, node.annotations,
                   deleting, node.workloads, node.pod_deleted_at, node.pods), at)


def _workload_pod_goes(node: RolloutNode, key: str,
                       answer: Callable[[RolloutNode, WorkloadPod], bool]) -> RolloutNode:
    """``node`` with its workload pod ``key`` terminating, if it runs, is not terminating
    already, and the world's ``answer`` lets it go."""
    pod = next((p for p in node.pods if p.key == key), None)
    if pod is None or pod.terminating or not answer(node, pod):
        return node
    pods = tuple(dataclasses.replace(p, terminating=True) if p.key == key else p
                 for p in node.pods)
    return build_node(node.name, node.ready, node.unschedulable, node.labels, node.annotations,
                      node.pod, node.workloads, node.pod_deleted_at, pods)


def with_pod(node: RolloutNode, pod: DriverPod | None,
             pod_deleted_at: float | None = None) -> RolloutNode:
    """The world's part after a deletion or a pod's change: ``node`` running ``pod`` (and, when
    given, when its previous pod's deletion was asked for)."""
    return build_node(node.name, node.ready, node.unschedulable, node.labels, node.annotations,
                      pod, node.workloads,
                      node.pod_deleted_at if pod_deleted_at is None else pod_deleted_at,
                      node.pods)
