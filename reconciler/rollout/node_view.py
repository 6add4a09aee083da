"""A node action applied to the planner's view of the node: what the node looks like once the
action has landed. The one reading of the node vocabulary (``reconciler.planning.NodeAction``)
the simulator and the test worlds share; the controller's executor sends the same actions to the
API server.

A pod's deletion leaves it deleting (asked for at the plan's time); what comes after, the
DaemonSet's new pod, is the caller's world to model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import assert_never

from reconciler import planning as vocabulary
from reconciler.rollout.model import DriverPod, RolloutNode, build_node, build_pod


def apply_node_action(node: RolloutNode, action: vocabulary.NodeAction) -> RolloutNode:
    """``node`` with ``action`` landed (built field by field: a wave of 50,000 nodes is a hot
    path of the simulator)."""
    match action:
        case vocabulary.AnnotateNode(annotations=changes):
            annotations = dict(node.annotations)
            for key, value in changes.items():
                if value is None:
                    annotations.pop(key, None)
                else:
                    annotations[key] = value
            return build_node(node.name, node.ready, node.unschedulable, node.labels,
                              annotations, node.pod, node.workloads,
                              node.pod_deleted_at, node.pods)
        case vocabulary.Cordon() | vocabulary.Uncordon():
            cordoned = isinstance(action, vocabulary.Cordon)
            return build_node(node.name, node.ready, cordoned, node.labels, node.annotations,
                              node.pod, node.workloads, node.pod_deleted_at, node.pods)
        case vocabulary.DeleteDriverPod(pod=name, at=at):
            pod = node.pod
            if pod is None or pod.name != name:
                return node  # gone already: a deletion is idempotent
            deleting = build_pod(pod.name, pod.revision, pod.ready, pod.waiting_reason,
                                 pod.restart_count, pod.created_at, True,
                                 pod.deletion_requested_at or at)
            return build_node(node.name, node.ready, node.unschedulable, node.labels,
                              node.annotations, deleting, node.workloads,
                              node.pod_deleted_at, node.pods)
        case vocabulary.EvictPod() | vocabulary.DeletePod():
            # the pod terminates (its grace period is the world's to model)
            key = f"{action.namespace}/{action.pod}"
            pods = tuple(dataclasses.replace(p, terminating=True) if p.key == key else p
                         for p in node.pods)
            return build_node(node.name, node.ready, node.unschedulable, node.labels,
                              node.annotations, node.pod, node.workloads, node.pod_deleted_at,
                              pods)
        case _:
            assert_never(action)


#: the actions ``apply_node_actions`` folds into one view
Marking = vocabulary.AnnotateNode | vocabulary.Cordon | vocabulary.Uncordon


def apply_node_actions(node: RolloutNode, actions: Sequence[Marking]) -> RolloutNode:
    """``node`` with one node's consecutive annotations and (un)cordons landed, as
    ``apply_node_action`` one after the other would leave it, built once (a wave's start and
    its end are two or three such actions per node)."""
    if len(actions) == 1:
        return apply_node_action(node, actions[0])
    annotations: dict[str, str] | None = None
    unschedulable = node.unschedulable
    for action in actions:
        if type(action) is vocabulary.AnnotateNode:
            if annotations is None:
                annotations = dict(node.annotations)
            for key, value in action.annotations.items():
                if value is None:
                    annotations.pop(key, None)
                else:
                    annotations[key] = value
        else:
            unschedulable = type(action) is vocabulary.Cordon
    return build_node(node.name, node.ready, unschedulable, node.labels,
                      node.annotations if annotations is None else annotations, node.pod,
                      node.workloads, node.pod_deleted_at, node.pods)


def with_pod(node: RolloutNode, pod: DriverPod | None,
             pod_deleted_at: float | None = None) -> RolloutNode:
    """The world's part after a deletion or a pod's change: ``node`` running ``pod`` (and, when
    given, when its previous pod's deletion was asked for)."""
    return build_node(node.name, node.ready, node.unschedulable, node.labels, node.annotations,
                      pod, node.workloads,
                      node.pod_deleted_at if pod_deleted_at is None else pod_deleted_at,
                      node.pods)
