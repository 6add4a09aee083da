"""The steps of docs/rollout.md#upgrading-one-node: each step's counters, its end (the gate a person
confirms, or the pause timer), the fallback when failures reach the threshold, a person resuming,
and the next step; while a step runs, ``selection`` starts its nodes.
"""

from __future__ import annotations

from reconciler.health.checks import HealthFailure, HealthState
from reconciler.names import ConditionType
from reconciler.rollout import health_judgement, rollback, selection, skipped, tolerated
from reconciler.rollout import status as st
from reconciler.rollout.actions import SetPolicyPause
from reconciler.rollout.pass_state import Pass
from reconciler.rollout.scan import CLOCK_SLACK, NodeScan
from reconciler.timefmt import after_ms, format_time, parse_time_or

#: ManualGate reason: confirmed, but a node that joined meanwhile is not Ready yet
GATE_CONFIRMED_PENDING = "ConfirmedPendingNodes"


def run(p: Pass, scan: NodeScan, revision: str) -> None:
    """Decide the current step; a step begun in this pass whose target is already reached
    (targets capped at N, a node that joined) and that is no gate is decided in this same pass
    too, and so on: no node of it starts, so it need not go on record first (decision 9), and a
    step that is done waits for nothing but its pause."""
    targets = p.policy.step_targets(p.total)
    fresh_epoch = False
    while step(p, scan, revision, targets, fresh_epoch=fresh_epoch):
        index = p.s.current_step_index
        if targets[index - 1] > done(scan) or p.policy.steps[index - 1].pause_ms is None:
            # its nodes start, or its gate opens (pause: true written back to Git), in the
            # next pass, once the step is on record: a restart finds the gate it set
            return
        p.again = False
        fresh_epoch = True


def done(scan: NodeScan) -> int:
    """The nodes that count toward a step's target: Ready on the new revision, and those a
    step's toleration left behind (docs/rollout.md#failures-tolerated-in-a-step)."""
    return scan.ready + len(scan.tolerated)


def step(p: Pass, scan: NodeScan, revision: str, targets: list[int], *,
         fresh_epoch: bool) -> bool:
    """The current step; True when it advanced to the next one (which is StepUpgradeInit).
    ``fresh_epoch``: the step began in this pass, so no failure counts against it yet."""
    policy = p.policy
    index, target = tally(p, scan, targets, fresh_epoch=fresh_epoch)
    if p.s.condition_true(st.COND_BATCH_FAILED):
        if policy.pause:
            return hold(p)
        resume(p, index)
    if p.s.condition_true(st.COND_MANUAL_GATE):
        if policy.pause:
            return hold(p)
        if confirm_gate(p, index, done=done(scan) >= target):
            return advance(p, index, revision)
    if p.s.current_failure_retry >= policy.max_failure_threshold:
        fallback(p, scan, index)
        return False
    if done(scan) >= target:
        checked = health_judgement.step_checks(p, index, revision)
        if isinstance(checked, HealthFailure):
            step_check_failed(p, checked, index)
            return False
        if not checked:
            return False
        return step_done(p, scan, index, revision)
    if policy.pause:
        p.set(step_message=p.s.step_message or "paused: spec.driver.upgradePolicy.pause")
        return hold(p)
    upgrade(p, scan, revision, targets, index)
    return False


def tally(p: Pass, scan: NodeScan, targets: list[int], *, fresh_epoch: bool) -> tuple[int, int]:
    """The step's counters from the scan; returns the step's index and target."""
    threshold = p.policy.max_failure_threshold
    counter = 0 if fresh_epoch else min(threshold, scan.epoch_failures + len(scan.new_failures))
    index = min(max(p.s.current_step_index, 1), len(p.policy.steps))
    target = targets[index - 1]
    # a step not above an earlier one adds no nodes (docs/policy.md#how-the-numbers-resolve)
    before = max(targets[: index - 1], default=0)
    batch = max(target - before, 0)
    p.set(
        current_failure_retry=counter,
        total_upgrade_replicas=p.total,
        total_upgrade_ready_replicas=scan.ready,
        current_step_index=index,
        current_upgrade_replicas=batch,
        current_upgrade_ready_replicas=min(max(scan.ready - before, 0), batch),
    )
    return index, target


def hold(p: Pass) -> bool:
    """The step waits (``pause: true``, a fallback, a gate, the pause timer)."""
    p.set(current_step_state=st.STEP_PAUSED)
    return False


def resume(p: Pass, index: int) -> None:
    """A person resumed a batch the fallback paused: a new epoch, no failures counted."""
    p.condition(st.COND_BATCH_FAILED, "False", "Resumed", "a person resumed the batch")
    if p.s.condition_true(ConditionType.HEALTH_CHECK_FAILED):
        p.condition(ConditionType.HEALTH_CHECK_FAILED, "False", "Resumed",
                    "a person resumed the batch; the checks run again")
    p.set_epoch(index, reason="Resumed")
    p.set(current_failure_retry=0)
    p.event("Resumed", f"step {index}: resumed after the fallback", step=index)


def confirm_gate(p: Pass, index: int, *, done: bool) -> bool:
    """A person confirmed the gate; True when the step may advance now."""
    p.condition(st.COND_MANUAL_GATE, "False", "Confirmed", f"step {index} confirmed")
    p.event("GateConfirmed", f"step {index}: gate confirmed", step=index)
    if done:
        return True
    # a node joined during the gate: the step is done (and confirmed) once it is Ready
    p.condition(
        ConditionType.GATE_CONFIRMED, "True", GATE_CONFIRMED_PENDING,
        f"step {index} confirmed; waiting for nodes that joined meanwhile",
    )
    return False


def gate_confirmed(p: Pass) -> bool:
    return p.s.condition_true(ConditionType.GATE_CONFIRMED)


def step_done(p: Pass, scan: NodeScan, index: int, revision: str) -> bool:
    """The step reached its target: its gate, or its pause, then the next step."""
    pause_ms = p.policy.steps[index - 1].pause_ms
    if pause_ms is None:
        return gate(p, index, revision)
    return pause_timer(p, scan, index, pause_ms, revision)


def gate(p: Pass, index: int, revision: str) -> bool:
    """A step without a pause waits for a person (``pause: true`` written back to Git)."""
    if gate_confirmed(p):  # see GATE_CONFIRMED_PENDING
        if p.policy.pause:
            return hold(p)
        return advance(p, index, revision)
    p.condition(
        st.COND_MANUAL_GATE, "True", "WaitingForConfirmation",
        f"step {index} done; set spec.driver.upgradePolicy.pause to false to continue",
    )
    if not p.policy.pause:
        p.actions.append(SetPolicyPause(True))
    p.event("GateOpened", f"step {index} done: waiting for a person", step=index)
    return hold(p)


def pause_timer(p: Pass, scan: NodeScan, index: int, pause_ms: int, revision: str) -> bool:
    """The step's pause runs from the pass that found it done (``recheckTime``)."""
    if not p.s.recheck_time:
        p.set(recheck_time=format_time(after_ms(p.now, pause_ms)))
        p.event(
            "StepCompleted",
            f"step {index} done ({scan.ready}/{p.total} nodes"
            + (f", {len(scan.tolerated)} tolerated" if scan.tolerated else "")
            + f"); pausing {pause_ms} ms",
            step=index,
        )
    recheck = parse_time_or(p.s.recheck_time, p.now)
    if p.now + CLOCK_SLACK >= recheck and not p.policy.pause:
        return advance(p, index, revision)
    p.requeue.append(recheck)
    return hold(p)


def upgrade(p: Pass, scan: NodeScan, revision: str, targets: list[int], index: int) -> None:
    """The step's nodes upgrade: start what the budget allows."""
    steps = p.policy.steps
    p.set(current_step_state=st.STEP_UPGRADE)
    if p.health_hold:  # docs/health.md: no answer (or no valid section): nothing new starts
        # one entry per waiting node, named up to the limit
        held = p.named(p.health_hold, separator="; ", more="; and ")
        p.set(step_message=held)
        p.holds.append({"kind": "health", "detail": held})
        p.keep_cordoned = frozenset(n.name for n in scan.cordoned)
        p.in_flight = scan.in_flight
        return
    next_wave = 0
    if steps[index - 1].pause_ms == 0 and index < len(steps):
        # the next step begins the moment this one is done: its first wave may wait
        # cordoned too, so that step starts with deletions alone
        next_batch = max(targets[index] - max(targets[:index]), 0)
        next_wave = min(p.policy.batch_max_parallel(next_batch), next_batch)
    selection.start_nodes(p, scan, revision, targets[index - 1],
                          p.s.current_upgrade_replicas, next_wave)


def advance(p: Pass, index: int, revision: str) -> bool:
    """Leave step ``index``: start the next one (True) or complete the rollout (False)."""
    p.set(recheck_time="")
    if gate_confirmed(p):
        p.condition(ConditionType.GATE_CONFIRMED, "False", "Confirmed", "")
    if index >= len(p.policy.steps):
        version = (p.s.applied_payload or {}).get("version")
        message = f"rollout of driver {version} completed"
        p.set(
            phase=st.PHASE_IDLING,
            current_step_state=st.STEP_COMPLETED,
            last_pod_spec_revision=revision,
            message=message,
        )
        p.condition(st.COND_PROGRESSING, "False", "RolloutCompleted", message)
        skipped.completed(p)
        tolerated.completed(p)
        p.event("RolloutCompleted", message, step=index)
        return False
    targets = p.policy.step_targets(p.total)
    ready = p.s.total_upgrade_ready_replicas
    before = max(targets[:index], default=0)
    batch = max(targets[index] - before, 0)
    p.set(
        current_step_index=index + 1,
        current_upgrade_replicas=batch,
        current_upgrade_ready_replicas=min(max(ready - before, 0), batch),
        current_failure_retry=0,
        current_step_state=st.STEP_INIT,
    )
    p.again = True  # the next plan starts the batch, once this step is on record
    p.set_epoch(index + 1, reason="StepStarted")
    p.event("StepStarted", f"step {index + 1} of {len(p.policy.steps)}", step=index + 1)
    return True


def fallback(p: Pass, scan: NodeScan, index: int) -> None:
    """Failures reached maxFailureThreshold: the policy's fallback."""
    failed = [n.name for n in scan.failed] + [n.name for n, _ in scan.new_failures]
    message = (
        f"step {index}: {p.s.current_failure_retry} failures reached "
        f"maxFailureThreshold {p.policy.max_failure_threshold} "
        f"(failed: {p.named(sorted(failed))})"
    )
    health_judgement.failure_condition(p, scan)
    fall_back(p, index, message, st.REASON_THRESHOLD)


def step_check_failed(p: Pass, failure: HealthFailure, index: int) -> None:
    """A false step check ends the batch: the fallback at once (docs/health.md)."""
    message = f"step {index}: {failure.message}"
    p.condition(ConditionType.HEALTH_CHECK_FAILED, "True", failure.reason,
                f"check {failure.check}: value {failure.value} (query {failure.query})")
    p.event("HealthCheckFailed", message, warning=True, step=index,
            extra={"checks": {failure.check: str(HealthState.FAILED)},
                   "value": failure.value, "query": failure.query})
    fall_back(p, index, message, failure.reason)


def fall_back(p: Pass, index: int, message: str, reason: str) -> None:
    """Roll back, or pause the batch (``BatchFailed`` with ``reason``) for a person."""
    if p.policy.fallback == "rollback":
        rollback.begin(p, st.PHASE_TERMINATING, st.REASON_THRESHOLD, message)
        rollback.rolling_back(p)
        return
    p.condition(st.COND_BATCH_FAILED, "True", reason, message)
    if not p.policy.pause:
        p.actions.append(SetPolicyPause(True))
    p.set(current_step_state=st.STEP_PAUSED, step_message=message)
    p.event("FallbackPaused", message, warning=True, step=index)
