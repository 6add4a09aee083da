"""The node state machine of SPEC 4.3, NVIDIA ``pkg/upgrade``'s shape: the scan sorts every node
into one state (``NodeScan``'s lists), and one small function per state says what moves a node
out of it. ``SETTLE`` is the table of the states that settle by themselves in every pass, in
rollout and rollback alike; the states that wait for a free slot (untouched, cordoned ahead,
failed after its back-off) are left by ``selection``'s starts.

The moves themselves (``move``, ``cordon_ahead``, ``start_cordoned``, ``release``) keep one
order: record on the node first, then cordon, then delete, so a crash in between leaves a
record the next pass completes, never a deletion or a cordon nobody owns.

A new state is one entry here (its function) and one branch in ``scan``'s classification.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from reconciler.names import (
    ANN_ATTEMPT,
    ANN_DELETED_AT,
    ANN_FAILED_AT,
    ANN_FAILURE_REASON,
    ANN_FAILURES,
    ANN_HEALTH,
    ANN_HEALTH_FAILURE,
    ANN_HEALTH_STEP,
    ANN_STATE,
    ANN_TARGET,
    ANN_WAS_UNSCHEDULABLE,
    STATE_CORDONED,
    STATE_DONE,
    STATE_FAILED,
    STATE_UPGRADING,
)
from reconciler.rollout import status as st
from reconciler.rollout.actions import AnnotateNode, Cordon, DeleteDriverPod, Uncordon
from reconciler.rollout.model import RolloutNode
from reconciler.rollout.pass_state import Pass
from reconciler.rollout.scan import NodeScan

# ----------------------------------------------------------------------------- the moves


def was_unschedulable(node: RolloutNode) -> str:
    """What the node's schedulability was before our cordon (kept from our own record)."""
    ann = node.annotations
    if ann.get(ANN_STATE) in (STATE_UPGRADING, STATE_FAILED, STATE_CORDONED) and ann.get(
        ANN_WAS_UNSCHEDULABLE
    ) in ("true", "false"):
        return str(ann[ANN_WAS_UNSCHEDULABLE])  # the cordon is ours already
    return "true" if node.unschedulable else "false"


def move(p: Pass, node: RolloutNode, target: str, attempt: int) -> None:
    """Record the move, cordon, delete the old pod, in that order."""
    assert node.pod is not None
    update: dict[str, str | None] = {
        ANN_STATE: STATE_UPGRADING,
        ANN_TARGET: target,
        ANN_WAS_UNSCHEDULABLE: was_unschedulable(node),
        ANN_ATTEMPT: str(attempt),
        ANN_DELETED_AT: p.now_text,
        ANN_FAILED_AT: None,
        ANN_FAILURE_REASON: None,
    }
    for key in (ANN_HEALTH, ANN_HEALTH_FAILURE, ANN_HEALTH_STEP):
        if key in node.annotations:  # a new attempt: its checks start afresh
            update[key] = None
    p.actions.append(AnnotateNode(node.name, update))
    if not node.unschedulable:
        p.actions.append(Cordon(node.name))
    p.actions.append(DeleteDriverPod(node.name, node.pod.name, at=p.now))
    p.requeue.append(p.now + p.settings.ready_timeout)


def adopt(p: Pass, node: RolloutNode, revision: str) -> tuple[dict[str, str | None], RolloutNode]:
    """The record of a move a node made by itself (it joined mid-rollout and got the target
    from the DaemonSet), and the node as seen with it: from here it is checked, counted and
    retried like a node the rollout moved (it holds a slot while it verifies)."""
    update: dict[str, str | None] = {
        ANN_STATE: STATE_UPGRADING, ANN_TARGET: revision,
        ANN_WAS_UNSCHEDULABLE: was_unschedulable(node),
        ANN_ATTEMPT: "1", ANN_DELETED_AT: p.now_text,
        ANN_FAILED_AT: None, ANN_FAILURE_REASON: None,
        ANN_HEALTH: None, ANN_HEALTH_FAILURE: None, ANN_HEALTH_STEP: None,
    }
    ann = {k: v for k, v in {**node.annotations, **update}.items() if v is not None}
    return update, dataclasses.replace(node, annotations=ann)


def cordon_ahead(p: Pass, node: RolloutNode, target: str) -> None:
    """Record and cordon a node next in line; its start is then the pod deletion alone."""
    p.actions.append(
        AnnotateNode(
            node.name,
            {
                ANN_STATE: STATE_CORDONED,
                ANN_TARGET: target,
                ANN_WAS_UNSCHEDULABLE: was_unschedulable(node),
                ANN_ATTEMPT: "1",
                ANN_DELETED_AT: None,
                ANN_FAILED_AT: None,
                ANN_FAILURE_REASON: None,
            },
        )
    )
    if not node.unschedulable:
        p.actions.append(Cordon(node.name))


def start_cordoned(p: Pass, node: RolloutNode, target: str) -> None:
    """Start a node cordoned ahead: the deletion alone. The record of the cordon already names
    the node and the target, so whoever finds the old pod deleting or gone knows the deletion
    was ours, and the pods say when it was (scan: ``deletion_time``): no record after it, one
    node write less per node in a wave's burst."""
    if not node.unschedulable:  # someone uncordoned it meanwhile: the full sequence
        move(p, node, target, 1)
        return
    assert node.pod is not None
    p.actions.append(DeleteDriverPod(node.name, node.pod.name, at=p.now))
    p.requeue.append(p.now + p.settings.ready_timeout)


def release(p: Pass, nodes: list[RolloutNode], keep: frozenset[str] = frozenset()) -> None:
    """Nodes cordoned ahead that will not start now (paused, the step changed, a rollback):
    give back our cordon first, then drop the record (a crash in between leaves a record the
    next plan releases again, never a cordon nobody owns)."""
    for node in nodes:
        if node.name in keep:
            continue
        if node.unschedulable and node.annotations.get(ANN_WAS_UNSCHEDULABLE) == "false":
            p.actions.append(Uncordon(node.name))
        p.actions.append(
            AnnotateNode(
                node.name,
                {ANN_STATE: None, ANN_TARGET: None, ANN_WAS_UNSCHEDULABLE: None,
                 ANN_ATTEMPT: None},
            )
        )


# ----------------------------------------------------------------------------- the states


def completed(p: Pass, scan: NodeScan, target: str, counted: bool) -> None:
    """Ready on the target: restore schedulability, then clear the move record."""
    actions = p.actions
    for node in scan.completed:
        if node.unschedulable and node.annotations.get(ANN_WAS_UNSCHEDULABLE) == "false":
            actions.append(Uncordon(node.name))
        actions.append(
            AnnotateNode(
                node.name,
                {
                    ANN_STATE: STATE_DONE,
                    ANN_TARGET: target,
                    ANN_WAS_UNSCHEDULABLE: None,
                    ANN_DELETED_AT: None,
                    ANN_FAILED_AT: None,
                    ANN_FAILURE_REASON: None,
                },
            )
        )


def new_failures(p: Pass, scan: NodeScan, target: str, counted: bool) -> None:
    """Failed just now: record (counted in the epoch unless rolling back), cordon, back off."""
    epoch = p.s.epoch()
    for node, reason in scan.new_failures:
        ann = node.annotations
        update: dict[str, str | None] = {
            ANN_STATE: STATE_FAILED,
            ANN_FAILED_AT: p.now_text,
            ANN_FAILURE_REASON: reason,
        }
        if counted:
            previous = ann.get(ANN_FAILURES) or ""
            prior = 0
            if previous.startswith(epoch + "|"):
                prior = st.int_or(previous.rpartition("|")[2], 0)
            update[ANN_FAILURES] = f"{epoch}|{prior + 1}"
        p.actions.append(AnnotateNode(node.name, update))
        if not node.unschedulable:
            p.actions.append(Cordon(node.name))
        attempt = st.int_or(ann.get(ANN_ATTEMPT), 1)
        p.requeue.append(p.now + p.settings.backoff(attempt))
        p.event(
            "NodeFailed",
            f"{node.name}: driver pod failed ({reason}), attempt {ann.get(ANN_ATTEMPT, '1')}",
            warning=True,
            node=node.name,
            step=p.step_index(),
            extra={"reason": reason},
        )


def failed(p: Pass, scan: NodeScan, target: str, counted: bool) -> None:
    """A failed node stays cordoned until it is retried (someone may have uncordoned it)."""
    for node in scan.failed:
        if not node.unschedulable:
            p.actions.append(Cordon(node.name))


def redo(p: Pass, scan: NodeScan, target: str, counted: bool) -> None:
    """A recorded move whose cordon or delete never happened (crash after annotating)."""
    for node in scan.redo:
        assert node.pod is not None
        if not node.unschedulable:
            p.actions.append(Cordon(node.name))
        p.actions.append(DeleteDriverPod(node.name, node.pod.name, at=p.now))


def unrecorded(p: Pass, scan: NodeScan, target: str, counted: bool) -> None:
    """The record of a deletion of a node cordoned ahead whose time nothing tells (the
    controller restarted after the old pod went): from now (readyTimeout runs late by the time
    the controller was away). The rollout writes it after settling; a rollback does not."""
    for node in scan.unrecorded:
        p.actions.append(
            AnnotateNode(node.name, {ANN_STATE: STATE_UPGRADING, ANN_DELETED_AT: p.now_text})
        )


Settle = Callable[[Pass, NodeScan, str, bool], None]

#: the states that settle in every pass, in this order (the steps only start new moves)
SETTLE: tuple[Settle, ...] = (completed, new_failures, failed, redo)


def settle(p: Pass, scan: NodeScan, target: str, *, counted: bool) -> None:
    """What the scan found settles first, one function per node state: the same in a rollout
    and in a rollback, which counts no failures (``counted``)."""
    for state in SETTLE:
        state(p, scan, target, counted)
    p.requeue.extend(scan.deadlines)
    p.unavailable = scan.unavailable
