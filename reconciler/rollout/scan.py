"""One pass over the rollout nodes against a target revision (SPEC 4.3): what is Ready, in
flight, failed, untouched; which moves completed or failed since the last look.

This is the planner's only O(N) step; everything else works on its counts and short lists.
"""

from __future__ import annotations

from collections.abc import Iterable, Set
from dataclasses import dataclass, field

from reconciler.names import (
    ANN_DELETED_AT,
    ANN_FAILURE_REASON,
    ANN_FAILURES,
    ANN_STATE,
    ANN_TARGET,
    ANN_WAS_UNSCHEDULABLE,
    STATE_CORDONED,
    STATE_FAILED,
    STATE_UPGRADING,
    ConditionType,
)
from reconciler.rollout import status as st
from reconciler.rollout.model import FAILURE_REASONS, RolloutNode
from reconciler.timefmt import parse_time_or

#: stored timestamps carry milliseconds; instants closer than this count as reached, so a
#: deadline read back from text never lands a hair after the ``now`` that wrote it
CLOCK_SLACK = 0.0005


@dataclass(slots=True)
class NodeScan:
    """One pass over the nodes against a target revision."""

    ready: int = 0  # Ready on the target revision
    unavailable: int = 0
    in_flight: int = 0
    completed: list[RolloutNode] = field(default_factory=list)
    new_failures: list[tuple[RolloutNode, str]] = field(default_factory=list)
    failed: list[RolloutNode] = field(default_factory=list)  # failed moves to the target
    joiners_pending: int = 0  # untouched, on the target revision, not Ready yet
    #: of those, pods on Ready nodes younger than readyTimeout (still starting: a rollback
    #: waits for them); older ones or on NotReady nodes were broken before and do not block
    settling: int = 0
    untouched: list[RolloutNode] = field(default_factory=list)  # not on the target, not moved
    failed_other: list[RolloutNode] = field(default_factory=list)  # rollback: failed upgrades
    convert: list[RolloutNode] = field(default_factory=list)  # rollback: in-flight upgrades
    redo: list[RolloutNode] = field(default_factory=list)  # recorded move, pod not deleted yet
    #: cordoned ahead for the target, old pod still there: the first candidates to start
    cordoned: list[RolloutNode] = field(default_factory=list)
    #: cordoned ahead for another revision (or during a rollback), old pod still there
    stale_cordoned: list[RolloutNode] = field(default_factory=list)
    #: cordoned ahead and its old pod deleted, and neither the pods nor the controller's
    #: memory say when (it restarted meanwhile): in flight; the planner records it now
    unrecorded: list[RolloutNode] = field(default_factory=list)
    epoch_failures: int = 0
    ready_other: int = 0  # rollback: still Ready on the revision being rolled back
    deadlines: list[float] = field(default_factory=list)



def deletion_time(node: RolloutNode, revision: str | None) -> float:
    """When the old pod of a node cordoned ahead for ``revision`` was deleted, as its pods
    say: the old pod's deletion request; once it is gone, the time the controller saw asked
    for (``pod_deleted_at``), else the new pod's creation (a little later: readyTimeout runs
    a little late). 0: nothing says (the controller restarted between the two)."""
    pod = node.pod
    if pod is not None and pod.deleting:
        return pod.deletion_requested_at
    if node.pod_deleted_at:
        return node.pod_deleted_at
    if pod is not None and pod.revision == revision:
        return pod.created_at
    return 0.0


def scan_nodes(
    nodes: Iterable[RolloutNode],
    target: str,
    *,
    now: float,
    epoch: str,
    ready_timeout: float,
    rollback_from: str = "",
    verifying: Set[str] = frozenset(),
    health_failed: Set[str] = frozenset(),
) -> NodeScan:
    """Classify every node against ``target``; detect completions and failures.

    ``rollback_from`` is the revision being rolled back (empty while progressing).
    ``verifying``: moved nodes Ready on the target whose health checks have not passed yet
    (in flight, not upgraded); ``health_failed``: those whose check failed just now (SPEC 9).
    A node that failed a health check stays failed with its pod Ready until it is retried.
    """
    scan = NodeScan()
    epoch = epoch + "|"
    timeout = ready_timeout
    for node in nodes:
        ann = node.annotations
        recorded = ann.get(ANN_STATE)
        pod = node.pod
        waiting = unrecorded = False
        started = 0.0  # a move's start its pods tell (no ``deleted-at`` written)
        if recorded == STATE_CORDONED:
            ahead_of = ann.get(ANN_TARGET)
            if pod is not None and not pod.deleting and pod.revision != ahead_of:
                if ahead_of == target and not rollback_from:
                    scan.cordoned.append(node)
                    waiting = True
                else:
                    scan.stale_cordoned.append(node)
            else:
                # only we delete the pod of a node cordoned ahead, and its start is that
                # deletion alone (no record: one write less per node in a wave's burst)
                recorded = STATE_UPGRADING
                started = deletion_time(node, ahead_of)
                unrecorded = not started
        state = recorded if ann.get(ANN_TARGET) == target else None
        on_target = pod is not None and pod.revision == target and not pod.deleting
        ready_target = on_target and pod is not None and pod.ready
        failures = ann.get(ANN_FAILURES)
        if failures and failures.startswith(epoch):
            scan.epoch_failures += st.int_or(failures[len(epoch) :], 1)
        in_flight = False
        #: Ready on the target but not upgraded: its health checks have not passed
        held = ready_target and (
            node.name in verifying or node.name in health_failed
            or (state == STATE_FAILED
                and ann.get(ANN_FAILURE_REASON) == ConditionType.HEALTH_CHECK_FAILED)
        )
        if waiting:
            pass
        elif state == STATE_UPGRADING:
            if ready_target and node.name in health_failed:
                scan.new_failures.append((node, ConditionType.HEALTH_CHECK_FAILED.value))
            elif ready_target and node.name in verifying:
                in_flight = True
            elif ready_target:
                scan.completed.append(node)
            elif on_target and pod is not None and pod.waiting_reason in FAILURE_REASONS:
                scan.new_failures.append((node, str(pod.waiting_reason)))
            else:
                deleted_at = started or parse_time_or(ann.get(ANN_DELETED_AT), now)
                if now + CLOCK_SLACK >= deleted_at + timeout:
                    scan.new_failures.append((node, "ReadyTimeout"))
                else:
                    in_flight = True
                    scan.deadlines.append(deleted_at + timeout)
                    if unrecorded:
                        scan.unrecorded.append(node)
                    if (
                        pod is not None
                        and pod.revision != target
                        and not pod.deleting
                        and pod.created_at < deleted_at
                    ):
                        scan.redo.append(node)  # the recorded delete never happened
        elif state == STATE_FAILED:
            if ready_target and not held:
                scan.completed.append(node)
            else:
                scan.failed.append(node)
        elif state is None:
            other = recorded if rollback_from and ann.get(ANN_TARGET) == rollback_from else None
            if ready_target:
                if other in (STATE_UPGRADING, STATE_FAILED):
                    scan.completed.append(node)
            elif on_target:
                if other == STATE_UPGRADING:
                    in_flight = True  # the DaemonSet recreated it on the target already
                else:
                    scan.joiners_pending += 1
                    assert pod is not None
                    if node.ready and now + CLOCK_SLACK < pod.created_at + timeout:
                        scan.settling += 1
                        scan.deadlines.append(pod.created_at + timeout)
            elif pod is not None and not pod.deleting:
                if other == STATE_UPGRADING:
                    in_flight = True
                    scan.convert.append(node)
                elif other == STATE_FAILED:
                    scan.failed_other.append(node)
                else:
                    scan.untouched.append(node)
            elif other == STATE_UPGRADING:
                in_flight = True  # waiting for the DaemonSet to recreate the pod
        if ready_target and not held:
            scan.ready += 1
        elif rollback_from and pod is not None and pod.ready and pod.revision == rollback_from:
            scan.ready_other += 1
        if in_flight:
            scan.in_flight += 1
        else:
            by_us = (
                recorded in (STATE_UPGRADING, STATE_FAILED, STATE_CORDONED)
                and ann.get(ANN_WAS_UNSCHEDULABLE) == "false"
            )
            if (
                held
                or not node.ready
                or pod is None
                or not pod.ready
                or pod.deleting
                or (node.unschedulable and not by_us)
            ):
                scan.unavailable += 1
    return scan
