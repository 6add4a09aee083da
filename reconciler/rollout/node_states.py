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
from reconciler.rollout.pass_state import Decisions, Observed
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


def move(seen: Observed, out: Decisions, node: RolloutNode, target: str, attempt: int) -> None:
    """Record the move, cordon, delete the old pod, in that order."""
    assert node.pod is not None
    update: dict[str, str | None] = {
        ANN_STATE: STATE_UPGRADING,
        ANN_TARGET: target,
        ANN_WAS_UNSCHEDULABLE: was_unschedulable(node),
        ANN_ATTEMPT: str(attempt),
        ANN_DELETED_AT: seen.now_text,
        ANN_FAILED_AT: None,
        ANN_FAILURE_REASON: None,
    }
    for key in (ANN_HEALTH, ANN_HEALTH_FAILURE, ANN_HEALTH_STEP):
        if key in node.annotations:  # a new attempt: its checks start afresh
            update[key] = None
    delete_driver_pod(out, node, tolerated.dropped(node, update), seen.now,
                      seen.settings.ready_timeout)


def delete_driver_pod(out: Decisions, node: RolloutNode, update: dict[str, str | None],
                      now: float, ready_timeout: float) -> None:
    """A node's start itself at ``now``: its record (``update``), the cordon (unless it is
    cordoned already), the old driver pod's deletion, and a look again when ``ready_timeout``
    (the one the node starts with) runs out."""
    assert node.pod is not None
    # the pod named: a retry's old pod is on the target revision too, and a deletion recorded
    # but never done must not be judged as that pod's failure again (scan: redo)
    out.act(AnnotateNode(node.name, {**update, ANN_DELETED_POD: node.pod.name}))
    if not node.unschedulable:
        out.act(Cordon(node.name))
    out.act(DeleteDriverPod(node.name, node.pod.name, at=now))
    out.requeue_at(now + ready_timeout)


def adopt(now_text: str, node: RolloutNode,
          revision: str) -> tuple[dict[str, str | None], RolloutNode]:
    """The record of a move a node made by itself (it joined mid-rollout and got the target
    from the DaemonSet), made at ``now_text``, and the node as seen with it: from here it is
    checked, counted and retried like a node the rollout moved (it holds a slot while it
    verifies)."""
    update: dict[str, str | None] = {
        ANN_STATE: STATE_UPGRADING, ANN_TARGET: revision,
        ANN_WAS_UNSCHEDULABLE: was_unschedulable(node),
        ANN_ATTEMPT: "1", ANN_DELETED_AT: now_text,
        ANN_FAILED_AT: None, ANN_FAILURE_REASON: None,
        ANN_HEALTH: None, ANN_HEALTH_FAILURE: None, ANN_HEALTH_STEP: None,
    }
    ann = {k: v for k, v in {**node.annotations, **update}.items() if v is not None}
    return update, dataclasses.replace(node, annotations=ann)


def cordon_ahead(out: Decisions, node: RolloutNode, target: str) -> None:
    """Record and cordon a node next in line; its start is then the pod deletion alone."""
    out.act(
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
        out.act(Cordon(node.name))


def start(seen: Observed, out: Decisions, node: RolloutNode, target: str, attempt: int) -> None:
    """A node's start: drained first when ``rollout.drain`` is on (docs/live-clusters.md#the-drain;
    rollback moves too), else ``move``."""
    if seen.settings.drain is None:
        move(seen, out, node, target, attempt)
    else:
        drain_start(seen, out, node, target, attempt)


def start_cordoned(seen: Observed, out: Decisions, node: RolloutNode, target: str) -> None:
    """Start a node cordoned ahead: the deletion alone. The record of the cordon already names
    the node and the target, so whoever finds the old pod deleting or gone knows the deletion
    was ours, and the pods say when it was (scan: ``deletion_time``): no record after it, one
    node write less per node in a wave's burst."""
    if seen.settings.drain is not None:
        drain_start(seen, out, node, target, 1)
        return
    if not node.unschedulable:  # someone uncordoned it meanwhile: the full sequence
        move(seen, out, node, target, 1)
        return
    assert node.pod is not None
    out.act(DeleteDriverPod(node.name, node.pod.name, at=seen.now))
    out.requeue_at(seen.now + seen.settings.ready_timeout)


def release(out: Decisions, nodes: list[RolloutNode], keep: frozenset[str] = frozenset()) -> None:
    """Nodes cordoned ahead that will not start now (paused, the step changed, a rollback):
    give back our cordon first, then drop the record (a crash in between leaves a record the
    next plan releases again, never a cordon nobody owns)."""
    for node in nodes:
        if node.name in keep:
            continue
        if node.unschedulable and node.annotations.get(ANN_WAS_UNSCHEDULABLE) == "false":
            out.act(Uncordon(node.name))
        out.act(
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


def drain_start(seen: Observed, out: Decisions, node: RolloutNode, target: str,
                attempt: int) -> None:
    """A start with ``rollout.drain`` on: record the settings it starts with
    (docs/live-clusters.md#the-drain: they decide for it until it ends), keep the autoscaler away,
    cordon, then either delete the old pod at once (nothing to drain) or leave the node ``draining``
    and ask for its first evictions in this same pass."""
    assert node.pod is not None
    ann = node.annotations
    previous = drain.recorded(node) if ann.get(ANN_STATE) in MOVE_STATES else None
    set_now = ann.get(ANN_SCALE_DOWN_DISABLED) != "true"
    record = drain.NodeDrainSettings.of_pass(
        seen.settings,
        scale_down_set=set_now or (previous is not None and previous.scale_down_set))
    update: dict[str, str | None] = {
        ANN_STATE: STATE_DRAINING,
        ANN_TARGET: target,
        ANN_WAS_UNSCHEDULABLE: was_unschedulable(node),
        ANN_ATTEMPT: str(attempt),
        ANN_DRAIN_STARTED: seen.now_text,
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
    draining = dataclasses.replace(node, unschedulable=True, annotations={
        k: v for k, v in {**ann, **update}.items() if v is not None})
    found = drain.assess(draining, record, now=seen.now, started=seen.now, slack=CLOCK_SLACK)
    if found.idle:  # nothing to drain: the start of today, with the drain's record
        update.update({ANN_STATE: STATE_UPGRADING, ANN_DELETED_AT: seen.now_text})
        del update[ANN_DRAIN_STARTED]  # no drain: no timer
        if ANN_DRAIN_STARTED in ann:
            update[ANN_DRAIN_STARTED] = None
        delete_driver_pod(out, node, update, seen.now, record.ready_timeout)
        return
    out.act(AnnotateNode(node.name, update))
    if not node.unschedulable:
        out.act(Cordon(node.name))
    out.event("NodeDrainStarted",
              f"{node.name}: drain started ({len(found.evict)} pods to evict, "
              f"{len(found.waiting)} to wait for)",
              node=node.name, step=out.step_index())
    drain_node(seen, out, draining, counted=out.status.phase == st.PHASE_PROGRESSING,
               found=found)


def drain_node(seen: Observed, out: Decisions, node: RolloutNode, *, counted: bool,
               found: drain.Assessment | None = None) -> bool:
    """One pass of a draining node: its driver pod goes once nothing holds it; else the
    evictions its budgets allow (each budget's allowance spent for the whole pass), the
    timeout's action, the status entry and the ``NodeDrainBlocked`` Event when the budgets
    holding it changed. False when its drain failed (``onTimeout: fail``, counted)."""
    ann = node.annotations
    now = seen.now
    record = drain.settings_of(node, seen.settings)
    started = parse_time_or(ann.get(ANN_DRAIN_STARTED), now)
    if found is None:
        found = drain.assess(node, record, now=now, started=started, slack=CLOCK_SLACK)
    if found.idle:
        assert node.pod is not None
        update: dict[str, str | None] = {ANN_STATE: STATE_UPGRADING,
                                         ANN_DELETED_AT: seen.now_text}
        if ANN_DRAIN_BLOCKED_BY in ann:
            update[ANN_DRAIN_BLOCKED_BY] = None
        delete_driver_pod(out, node, update, now, record.ready_timeout)
        return True
    settings = record.drain
    deadline = started + settings.timeout if settings is not None else None
    timed_out = (deadline is not None and found.drain_blocked
                 and now + CLOCK_SLACK >= deadline)
    on_timeout = settings.on_timeout if settings is not None else "wait"
    if timed_out and on_timeout == "fail" and counted:
        return False
    if not node.unschedulable:
        out.act(Cordon(node.name))  # someone uncordoned it meanwhile
    held: dict[str, list[str]] = {}
    for pod in found.evict:
        if timed_out and on_timeout == "delete":
            out.act(DeletePod(node.name, pod.namespace, pod.name))
            continue
        holding = out.drain.spend(seen.snap.budgets, pod)
        if holding:
            held[pod.key] = holding
        else:
            out.act(EvictPod(node.name, pod.namespace, pod.name))
    if held:
        out.requeue_at(now + drain.EVICTION_RETRY)  # ask again once the budgets may allow
    if deadline is not None and not timed_out:
        out.requeue_at(deadline)
    if found.next_change is not None:
        out.requeue_at(found.next_change)
    budgets = sorted({b for keys in held.values() for b in keys})
    blocked = drain.blocked_text(budgets)
    if blocked != (ann.get(ANN_DRAIN_BLOCKED_BY) or ""):
        out.act(AnnotateNode(node.name, {ANN_DRAIN_BLOCKED_BY: blocked or None}))
        if blocked:
            pods = seen.named(sorted(held))
            out.event("NodeDrainBlocked",
                      f"{node.name}: eviction of {pods} refused for now: budget "
                      f"{', '.join(budgets)} allows no disruption",
                      warning=True, node=node.name, step=out.step_index(),
                      extra={"budgets": budgets})
    note = ""
    if timed_out and settings is not None:
        note = (f" (drain timed out after {settings.timeout:g}s, onTimeout "
                f"{'wait' if on_timeout == 'fail' else on_timeout})")
    out.drain.record({
        "node": node.name,
        "since": ann.get(ANN_DRAIN_STARTED) or seen.now_text,
        "pods": [pod.key for pod in found.evict],  # asked for in this pass, or held
        "budgets": budgets,
        "waitingFor": [f"{key} ({why})" for key, why in found.waiting],
    }, _drain_note(node.name, held, found) + note)
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


def completed(seen: Observed, out: Decisions, scan: NodeScan, target: str,
              counted: bool) -> None:
    """Ready on the target: restore schedulability, then clear the move record."""
    act = out.act
    for node in scan.completed:
        if node.unschedulable and node.annotations.get(ANN_WAS_UNSCHEDULABLE) == "false":
            act(Uncordon(node.name))
        act(
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


def new_failures(seen: Observed, out: Decisions, scan: NodeScan, target: str,
                 counted: bool) -> None:
    """Failed just now: record (counted in the epoch unless rolling back, or tolerated by the
    step: docs/rollout.md#failures-tolerated-in-a-step), cordon, back off (a tolerated node is not
    retried)."""
    status = out.status
    epoch = status.epoch()
    failures = scan.new_failures
    taken = tolerated.take(seen.policy, status, out.total, scan) if counted else set()
    index = tolerated.step_index(seen.policy, status)
    for node, reason in failures:
        ann = node.annotations
        update: dict[str, str | None] = {
            ANN_STATE: STATE_FAILED,
            ANN_FAILED_AT: seen.now_text,
            ANN_FAILURE_REASON: reason,
        }
        left = node.name in taken
        if left:
            update[ANN_FAILURE_TOLERATED] = tolerated.record(index, target)
        elif counted:
            previous = ann.get(ANN_FAILURES) or ""
            prior = 0
            if previous.startswith(epoch + "|"):
                prior = st.int_or(previous.rpartition("|")[2], 0)
            update[ANN_FAILURES] = f"{epoch}|{prior + 1}"
        out.act(AnnotateNode(node.name, update))
        if not node.unschedulable:
            out.act(Cordon(node.name))
        if left:
            out.event(
                tolerated.EVENT_TOLERATED,
                f"{node.name}: driver pod failed ({reason}), tolerated by step {index} "
                f"(toleration {tolerated.allowed(seen.policy, out.total, index)}); left "
                "cordoned on the failed driver, not retried",
                warning=True,
                node=node.name,
                step=index,
                extra={"reason": reason},
            )
            continue
        attempt = st.int_or(ann.get(ANN_ATTEMPT), 1)
        out.requeue_at(seen.now + seen.settings.backoff(attempt))
        out.event(
            "NodeFailed",
            f"{node.name}: driver pod failed ({reason}), attempt {ann.get(ANN_ATTEMPT, '1')}",
            warning=True,
            node=node.name,
            step=out.step_index(),
            extra={"reason": reason},
        )


def failed(seen: Observed, out: Decisions, scan: NodeScan, target: str, counted: bool) -> None:
    """A failed node stays cordoned until it is retried (someone may have uncordoned it); a
    tolerated one until its driver is Ready again (one tolerated in this pass was cordoned with
    its record)."""
    left = (n for _, n in scan.tolerated if ANN_FAILURE_TOLERATED in n.annotations)
    out.act_all(Cordon(node.name) for node in (*scan.failed, *left) if not node.unschedulable)


def redo(seen: Observed, out: Decisions, scan: NodeScan, target: str, counted: bool) -> None:
    """A recorded move whose cordon or delete never happened (crash after annotating)."""
    for node in scan.redo:
        assert node.pod is not None
        if not node.unschedulable:
            out.act(Cordon(node.name))
        out.act(DeleteDriverPod(node.name, node.pod.name, at=seen.now))


def unrecorded(seen: Observed, out: Decisions, scan: NodeScan, target: str,
               counted: bool) -> None:
    """The record of a deletion of a node cordoned ahead whose time nothing tells (the
    controller restarted after the old pod went): from now (readyTimeout runs late by the time
    the controller was away). The rollout writes it after settling; a rollback does not."""
    out.act_all(
        AnnotateNode(node.name, {ANN_STATE: STATE_UPGRADING, ANN_DELETED_AT: seen.now_text})
        for node in scan.unrecorded
    )


def draining(seen: Observed, out: Decisions, scan: NodeScan, target: str,
             counted: bool) -> None:
    """Draining for the target (docs/live-clusters.md#the-drain): evictions within the budgets, or
    the driver pod once the node is idle; a drain that timed out with ``onTimeout: fail`` fails the
    node (one failure; a rollback counts none and keeps waiting)."""
    for node in scan.draining:
        if not drain_node(seen, out, node, counted=counted):
            scan.new_failures.append((node, DRAIN_TIMEOUT))
            scan.in_flight -= 1


Settle = Callable[[Observed, Decisions, NodeScan, str, bool], None]

#: the states that settle in every pass, in this order (the steps only start new moves)
SETTLE: tuple[Settle, ...] = (draining, completed, new_failures, failed, redo)


def settle(seen: Observed, out: Decisions, scan: NodeScan, target: str, *,
           counted: bool) -> None:
    """What the scan found settles first, one function per node state: the same in a rollout
    and in a rollback, which counts no failures (``counted``)."""
    for state in SETTLE:
        state(seen, out, scan, target, counted)
    out.requeue_all(scan.deadlines)
    out.count(unavailable=scan.unavailable)
