"""The node state machine of docs/rollout.md#upgrading-one-node, NVIDIA ``pkg/upgrade``'s shape: the
scan sorts every node into one state (``NodeScan``'s lists), and one small function per state says
what moves a node out of it. ``SETTLE`` is the table of the states that settle by themselves in
every pass, in rollout and rollback alike; the states that wait for a free slot (untouched, cordoned
ahead, failed after its back-off) are left by ``selection``'s starts.

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
    ANN_DELETED_POD,
    ANN_DRAIN_BLOCKED_BY,
    ANN_DRAIN_SETTINGS,
    ANN_DRAIN_STARTED,
    ANN_FAILED_AT,
    ANN_FAILURE_REASON,
    ANN_FAILURE_TOLERATED,
    ANN_FAILURES,
    ANN_HEALTH,
    ANN_HEALTH_FAILURE,
    ANN_HEALTH_STEP,
    ANN_SCALE_DOWN_DISABLED,
    ANN_STATE,
    ANN_TARGET,
    ANN_WAS_UNSCHEDULABLE,
    STATE_CORDONED,
    STATE_DONE,
    STATE_DRAINING,
    STATE_FAILED,
    STATE_UPGRADING,
)
from reconciler.rollout import drain, tolerated
from reconciler.rollout import status as st
from reconciler.rollout.actions import (
    AnnotateNode,
    Cordon,
    DeleteDriverPod,
    DeletePod,
    EvictPod,
    Uncordon,
)
from reconciler.rollout.model import RolloutNode
from reconciler.rollout.node_class import MOVE_STATES
from reconciler.rollout.pass_state import Pass
from reconciler.rollout.scan import CLOCK_SLACK, NodeScan
from reconciler.timefmt import parse_time_or

#: the failure reason of a node whose drain timed out with ``onTimeout: fail``
DRAIN_TIMEOUT = "DrainTimeout"

# ----------------------------------------------------------------------------- the moves


def was_unschedulable(node: RolloutNode) -> str:
    """What the node's schedulability was before our cordon (kept from our own record)."""
    ann = node.annotations
    if ann.get(ANN_STATE) in MOVE_STATES and ann.get(ANN_WAS_UNSCHEDULABLE) in ("true", "false"):
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
    delete_driver_pod(p, node, tolerated.dropped(node, update), p.settings.ready_timeout)


def delete_driver_pod(p: Pass, node: RolloutNode, update: dict[str, str | None],
                      ready_timeout: float) -> None:
    """A node's start itself: its record (``update``), the cordon (unless it is cordoned
    already), the old driver pod's deletion, and a look again when ``ready_timeout`` (the one
    the node starts with) runs out."""
    assert node.pod is not None
    # the pod named: a retry's old pod is on the target revision too, and a deletion recorded
    # but never done must not be judged as that pod's failure again (scan: redo)
    p.actions.append(AnnotateNode(node.name, {**update, ANN_DELETED_POD: node.pod.name}))
    if not node.unschedulable:
        p.actions.append(Cordon(node.name))
    p.actions.append(DeleteDriverPod(node.name, node.pod.name, at=p.now))
    p.requeue.append(p.now + ready_timeout)


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
                ANN_DELETED_POD: None,
                ANN_FAILED_AT: None,
                ANN_FAILURE_REASON: None,
            },
        )
    )
    if not node.unschedulable:
        p.actions.append(Cordon(node.name))


def start(p: Pass, node: RolloutNode, target: str, attempt: int) -> None:
    """A node's start: drained first when ``rollout.drain`` is on (docs/live-clusters.md#the-drain;
    rollback moves too), else ``move``."""
    if p.settings.drain is None:
        move(p, node, target, attempt)
    else:
        drain_start(p, node, target, attempt)


def start_cordoned(p: Pass, node: RolloutNode, target: str) -> None:
    """Start a node cordoned ahead: the deletion alone. The record of the cordon already names
    the node and the target, so whoever finds the old pod deleting or gone knows the deletion
    was ours, and the pods say when it was (scan: ``deletion_time``): no record after it, one
    node write less per node in a wave's burst."""
    if p.settings.drain is not None:
        drain_start(p, node, target, 1)
        return
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
                 ANN_ATTEMPT: None, **drain_cleanup(node)},
            )
        )


def drain_cleanup(node: RolloutNode) -> dict[str, str | None]:
    """The drain's annotations to remove at the end of a move (completed, or released): its
    record, timer and blocked-by mark, and the autoscaler's annotation when the rollout set it.
    Empty for a node that never drained (nothing changes with drain off)."""
    ann = node.annotations
    update: dict[str, str | None] = {
        key: None for key in (ANN_DRAIN_STARTED, ANN_DRAIN_SETTINGS, ANN_DRAIN_BLOCKED_BY)
        if key in ann
    }
    record = drain.recorded(node)
    if record is not None and record.scale_down_set and ANN_SCALE_DOWN_DISABLED in ann:
        update[ANN_SCALE_DOWN_DISABLED] = None
    return update


def drain_start(p: Pass, node: RolloutNode, target: str, attempt: int) -> None:
    """A start with ``rollout.drain`` on: record the settings it starts with
    (docs/live-clusters.md#the-drain: they decide for it until it ends), keep the autoscaler away,
    cordon, then either delete the old pod at once (nothing to drain) or leave the node ``draining``
    and ask for its first evictions in this same pass."""
    assert node.pod is not None
    ann = node.annotations
    previous = drain.recorded(node) if ann.get(ANN_STATE) in MOVE_STATES else None
    set_now = ann.get(ANN_SCALE_DOWN_DISABLED) != "true"
    record = drain.NodeDrainSettings.of_pass(
        p.settings, scale_down_set=set_now or (previous is not None and previous.scale_down_set))
    update: dict[str, str | None] = {
        ANN_STATE: STATE_DRAINING,
        ANN_TARGET: target,
        ANN_WAS_UNSCHEDULABLE: was_unschedulable(node),
        ANN_ATTEMPT: str(attempt),
        ANN_DRAIN_STARTED: p.now_text,
        ANN_DRAIN_SETTINGS: record.to_text(),
        ANN_DELETED_AT: None,
        ANN_DELETED_POD: None,
        ANN_FAILED_AT: None,
        ANN_FAILURE_REASON: None,
    }
    if set_now:
        update[ANN_SCALE_DOWN_DISABLED] = "true"
    for key in (ANN_HEALTH, ANN_HEALTH_FAILURE, ANN_HEALTH_STEP, ANN_DRAIN_BLOCKED_BY):
        if key in ann:  # a new attempt: its checks and its drain start afresh
            update[key] = None
    tolerated.dropped(node, update)
    seen = dataclasses.replace(node, unschedulable=True, annotations={
        k: v for k, v in {**ann, **update}.items() if v is not None})
    found = drain.assess(seen, record, now=p.now, started=p.now, slack=CLOCK_SLACK)
    if found.idle:  # nothing to drain: the start of today, with the drain's record
        update.update({ANN_STATE: STATE_UPGRADING, ANN_DELETED_AT: p.now_text})
        del update[ANN_DRAIN_STARTED]  # no drain: no timer
        if ANN_DRAIN_STARTED in ann:
            update[ANN_DRAIN_STARTED] = None
        delete_driver_pod(p, node, update, record.ready_timeout)
        return
    p.actions.append(AnnotateNode(node.name, update))
    if not node.unschedulable:
        p.actions.append(Cordon(node.name))
    p.event("NodeDrainStarted",
            f"{node.name}: drain started ({len(found.evict)} pods to evict, "
            f"{len(found.waiting)} to wait for)",
            node=node.name, step=p.step_index())
    drain_node(p, seen, counted=p.s.phase == st.PHASE_PROGRESSING, found=found)


def drain_node(p: Pass, node: RolloutNode, *, counted: bool,
               found: drain.Assessment | None = None) -> bool:
    """One pass of a draining node: its driver pod goes once nothing holds it; else the
    evictions its budgets allow (each budget's allowance spent for the whole pass), the
    timeout's action, the status entry and the ``NodeDrainBlocked`` Event when the budgets
    holding it changed. False when its drain failed (``onTimeout: fail``, counted)."""
    ann = node.annotations
    record = drain.settings_of(node, p.settings)
    started = parse_time_or(ann.get(ANN_DRAIN_STARTED), p.now)
    if found is None:
        found = drain.assess(node, record, now=p.now, started=started, slack=CLOCK_SLACK)
    if found.idle:
        assert node.pod is not None
        update: dict[str, str | None] = {ANN_STATE: STATE_UPGRADING,
                                         ANN_DELETED_AT: p.now_text}
        if ANN_DRAIN_BLOCKED_BY in ann:
            update[ANN_DRAIN_BLOCKED_BY] = None
        delete_driver_pod(p, node, update, record.ready_timeout)
        return True
    settings = record.drain
    deadline = started + settings.timeout if settings is not None else None
    timed_out = (deadline is not None and found.drain_blocked
                 and p.now + CLOCK_SLACK >= deadline)
    on_timeout = settings.on_timeout if settings is not None else "wait"
    if timed_out and on_timeout == "fail" and counted:
        return False
    if not node.unschedulable:
        p.actions.append(Cordon(node.name))  # someone uncordoned it meanwhile
    held: dict[str, list[str]] = {}
    for pod in found.evict:
        if timed_out and on_timeout == "delete":
            p.actions.append(DeletePod(node.name, pod.namespace, pod.name))
            continue
        holding = p.budgets().take(pod)
        if holding:
            held[pod.key] = holding
        else:
            p.actions.append(EvictPod(node.name, pod.namespace, pod.name))
    if held:
        p.requeue.append(p.now + drain.EVICTION_RETRY)  # ask again once the budgets may allow
    if deadline is not None and not timed_out:
        p.requeue.append(deadline)
    if found.next_change is not None:
        p.requeue.append(found.next_change)
    budgets = sorted({b for keys in held.values() for b in keys})
    blocked = drain.blocked_text(budgets)
    if blocked != (ann.get(ANN_DRAIN_BLOCKED_BY) or ""):
        p.actions.append(AnnotateNode(node.name, {ANN_DRAIN_BLOCKED_BY: blocked or None}))
        if blocked:
            pods = p.named(sorted(held))
            p.event("NodeDrainBlocked",
                    f"{node.name}: eviction of {pods} refused for now: budget "
                    f"{', '.join(budgets)} allows no disruption",
                    warning=True, node=node.name, step=p.step_index(),
                    extra={"budgets": budgets})
    p.draining.append({
        "node": node.name,
        "since": ann.get(ANN_DRAIN_STARTED) or p.now_text,
        "pods": [pod.key for pod in found.evict],  # asked for in this pass, or held
        "budgets": budgets,
        "waitingFor": [f"{key} ({why})" for key, why in found.waiting],
    })
    note = ""
    if timed_out and settings is not None:
        note = (f" (drain timed out after {settings.timeout:g}s, onTimeout "
                f"{'wait' if on_timeout == 'fail' else on_timeout})")
    p.drain_notes[node.name] = _drain_note(node.name, held, found) + note
    return True


def _drain_note(name: str, held: dict[str, list[str]], found: drain.Assessment) -> str:
    """What holds one draining node, for the step message."""
    if held:
        key = min(held)
        more = f" (and {len(held) - 1} more pods)" if len(held) > 1 else ""
        return f"{name}: {key} held by budget {', '.join(held[key])}{more}"
    if found.waiting:
        key, why = found.waiting[0]
        more = f" (and {len(found.waiting) - 1} more pods)" if len(found.waiting) > 1 else ""
        return f"{name}: waiting for {key} ({why}){more}"
    return f"{name}: evicting {len(found.evict)} pods"


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
                    ANN_DELETED_POD: None,
                    ANN_FAILED_AT: None,
                    ANN_FAILURE_REASON: None,
                    **drain_cleanup(node),
                    **tolerated.dropped(node, {}),
                },
            )
        )


def new_failures(p: Pass, scan: NodeScan, target: str, counted: bool) -> None:
    """Failed just now: record (counted in the epoch unless rolling back, or tolerated by the
    step: docs/rollout.md#failures-tolerated-in-a-step), cordon, back off (a tolerated node is not
    retried)."""
    epoch = p.s.epoch()
    failures = scan.new_failures
    taken = tolerated.take(p, scan) if counted else set()
    for node, reason in failures:
        ann = node.annotations
        update: dict[str, str | None] = {
            ANN_STATE: STATE_FAILED,
            ANN_FAILED_AT: p.now_text,
            ANN_FAILURE_REASON: reason,
        }
        left = node.name in taken
        if left:
            update[ANN_FAILURE_TOLERATED] = tolerated.record(tolerated.step_index(p), target)
        elif counted:
            previous = ann.get(ANN_FAILURES) or ""
            prior = 0
            if previous.startswith(epoch + "|"):
                prior = st.int_or(previous.rpartition("|")[2], 0)
            update[ANN_FAILURES] = f"{epoch}|{prior + 1}"
        p.actions.append(AnnotateNode(node.name, update))
        if not node.unschedulable:
            p.actions.append(Cordon(node.name))
        if left:
            index = tolerated.step_index(p)
            p.event(
                tolerated.EVENT_TOLERATED,
                f"{node.name}: driver pod failed ({reason}), tolerated by step {index} "
                f"(toleration {tolerated.allowed(p, index)}); left cordoned on the failed "
                "driver, not retried",
                warning=True,
                node=node.name,
                step=index,
                extra={"reason": reason},
            )
            continue
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
    """A failed node stays cordoned until it is retried (someone may have uncordoned it); a
    tolerated one until its driver is Ready again (one tolerated in this pass was cordoned with
    its record)."""
    left = (n for _, n in scan.tolerated if ANN_FAILURE_TOLERATED in n.annotations)
    for node in (*scan.failed, *left):
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


def draining(p: Pass, scan: NodeScan, target: str, counted: bool) -> None:
    """Draining for the target (docs/live-clusters.md#the-drain): evictions within the budgets, or
    the driver pod once the node is idle; a drain that timed out with ``onTimeout: fail`` fails the
    node (one failure; a rollback counts none and keeps waiting)."""
    for node in scan.draining:
        if not drain_node(p, node, counted=counted):
            scan.new_failures.append((node, DRAIN_TIMEOUT))
            scan.in_flight -= 1


Settle = Callable[[Pass, NodeScan, str, bool], None]

#: the states that settle in every pass, in this order (the steps only start new moves)
SETTLE: tuple[Settle, ...] = (draining, completed, new_failures, failed, redo)


def settle(p: Pass, scan: NodeScan, target: str, *, counted: bool) -> None:
    """What the scan found settles first, one function per node state: the same in a rollout
    and in a rollback, which counts no failures (``counted``)."""
    for state in SETTLE:
        state(p, scan, target, counted)
    p.requeue.extend(scan.deadlines)
    p.unavailable = scan.unavailable
