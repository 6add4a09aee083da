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
from reconciler.rollout.pass_state import Decisions, Found, Observed
from reconciler.rollout.scan import CLOCK_SLACK, NodeScan
from reconciler.rollout.status import UpgradeStatus
from reconciler.timefmt import after_ms, format_time, parse_time_or

#: ManualGate reason: confirmed, but a node that joined meanwhile is not Ready yet
GATE_CONFIRMED_PENDING = "ConfirmedPendingNodes"


def run(seen: Observed, out: Decisions, found: Found) -> None:
    """Decide the current step; a step begun in this pass whose target is already reached
    (targets capped at N, a node that joined) and that is no gate is decided in this same pass
    too, and so on: no node of it starts, so it need not go on record first (decision 9), and a
    step that is done waits for nothing but its pause."""
    policy = seen.policy
    targets = policy.step_targets(out.total)
    fresh_epoch = False
    while step(seen, out, found, targets, fresh_epoch=fresh_epoch):
        index = out.status.current_step_index
        if targets[index - 1] > done(found.scan) or policy.steps[index - 1].pause_ms is None:
            # its nodes start, or its gate opens (pause: true written back to Git), in the
            # next pass, once the step is on record: a restart finds the gate it set
            return
        out.plan_again(False)
        fresh_epoch = True


def done(scan: NodeScan) -> int:
    """The nodes that count toward a step's target: Ready on the new revision, and those a
    step's toleration left behind (docs/rollout.md#failures-tolerated-in-a-step)."""
    return scan.ready + len(scan.tolerated)


def step(seen: Observed, out: Decisions, found: Found, targets: list[int], *,
         fresh_epoch: bool) -> bool:
    """The current step; True when it advanced to the next one (which is StepUpgradeInit).
    ``fresh_epoch``: the step began in this pass, so no failure counts against it yet."""
    policy, scan = seen.policy, found.scan
    index, target = tally(seen, out, scan, targets, fresh_epoch=fresh_epoch)
    if out.status.condition_true(st.COND_BATCH_FAILED):
        if policy.pause:
            return hold(out)
        resume(seen, out, index)
    if out.status.condition_true(st.COND_MANUAL_GATE):
        if policy.pause:
            return hold(out)
        if confirm_gate(out, index, done=done(scan) >= target):
            return advance(seen, out, found, index)
    if out.status.current_failure_retry >= policy.max_failure_threshold:
        fallback(seen, out, found, index)
        return False
    if done(scan) >= target:
        checked = health_judgement.step_checks(seen, out, index, found)
        if isinstance(checked, HealthFailure):
            step_check_failed(seen, out, checked, index)
            return False
        if not checked:
            return False
        return step_done(seen, out, found, index)
    if policy.pause:
        out.set(step_message=out.status.step_message
                or "paused: spec.driver.upgradePolicy.pause")
        return hold(out)
    upgrade(seen, out, found, targets, index)
    return False


def tally(seen: Observed, out: Decisions, scan: NodeScan, targets: list[int], *,
          fresh_epoch: bool) -> tuple[int, int]:
    """The step's counters from the scan; returns the step's index and target."""
    threshold = seen.policy.max_failure_threshold
    counter = 0 if fresh_epoch else min(threshold, scan.epoch_failures + len(scan.new_failures))
    index = min(max(out.status.current_step_index, 1), len(seen.policy.steps))
    target = targets[index - 1]
    # a step not above an earlier one adds no nodes (docs/policy.md#how-the-numbers-resolve)
    before = max(targets[: index - 1], default=0)
    batch = max(target - before, 0)
    out.set(
        current_failure_retry=counter,
        total_upgrade_replicas=out.total,
        total_upgrade_ready_replicas=scan.ready,
        current_step_index=index,
        current_upgrade_replicas=batch,
        current_upgrade_ready_replicas=min(max(scan.ready - before, 0), batch),
    )
    return index, target


def hold(out: Decisions) -> bool:
    """The step waits (``pause: true``, a fallback, a gate, the pause timer)."""
    out.set(current_step_state=st.STEP_PAUSED)
    return False


def resume(seen: Observed, out: Decisions, index: int) -> None:
    """A person resumed a batch the fallback paused: a new epoch, no failures counted."""
    out.condition(st.COND_BATCH_FAILED, "False", "Resumed", "a person resumed the batch")
    if out.status.condition_true(ConditionType.HEALTH_CHECK_FAILED):
        out.condition(ConditionType.HEALTH_CHECK_FAILED, "False", "Resumed",
                      "a person resumed the batch; the checks run again")
    out.set_epoch(index, len(seen.policy.steps), reason="Resumed")
    out.set(current_failure_retry=0)
    out.event("Resumed", f"step {index}: resumed after the fallback", step=index)


def confirm_gate(out: Decisions, index: int, *, done: bool) -> bool:
    """A person confirmed the gate; True when the step may advance now."""
    out.condition(st.COND_MANUAL_GATE, "False", "Confirmed", f"step {index} confirmed")
    out.event("GateConfirmed", f"step {index}: gate confirmed", step=index)
    if done:
        return True
    # a node joined during the gate: the step is done (and confirmed) once it is Ready
    out.condition(
        ConditionType.GATE_CONFIRMED, "True", GATE_CONFIRMED_PENDING,
        f"step {index} confirmed; waiting for nodes that joined meanwhile",
    )
    return False


def gate_confirmed(status: UpgradeStatus) -> bool:
    return status.condition_true(ConditionType.GATE_CONFIRMED)


def step_done(seen: Observed, out: Decisions, found: Found, index: int) -> bool:
    """The step reached its target: its gate, or its pause, then the next step."""
    pause_ms = seen.policy.steps[index - 1].pause_ms
    if pause_ms is None:
        return gate(seen, out, found, index)
    return pause_timer(seen, out, found, index, pause_ms)


def gate(seen: Observed, out: Decisions, found: Found, index: int) -> bool:
    """A step without a pause waits for a person (``pause: true`` written back to Git)."""
    if gate_confirmed(out.status):  # see GATE_CONFIRMED_PENDING
        if seen.policy.pause:
            return hold(out)
        return advance(seen, out, found, index)
    out.condition(
        st.COND_MANUAL_GATE, "True", "WaitingForConfirmation",
        f"step {index} done; set spec.driver.upgradePolicy.pause to false to continue",
    )
    if not seen.policy.pause:
        out.act(SetPolicyPause(True))
    out.event("GateOpened", f"step {index} done: waiting for a person", step=index)
    return hold(out)


def pause_timer(seen: Observed, out: Decisions, found: Found, index: int,
                pause_ms: int) -> bool:
    """The step's pause runs from the pass that found it done (``recheckTime``)."""
    scan, now = found.scan, seen.now
    if not out.status.recheck_time:
        out.set(recheck_time=format_time(after_ms(now, pause_ms)))
        out.event(
            "StepCompleted",
            f"step {index} done ({scan.ready}/{out.total} nodes"
            + (f", {len(scan.tolerated)} tolerated" if scan.tolerated else "")
            + f"); pausing {pause_ms} ms",
            step=index,
        )
    recheck = parse_time_or(out.status.recheck_time, now)
    if now + CLOCK_SLACK >= recheck and not seen.policy.pause:
        return advance(seen, out, found, index)
    out.requeue_at(recheck)
    return hold(out)


def upgrade(seen: Observed, out: Decisions, found: Found, targets: list[int],
            index: int) -> None:
    """The step's nodes upgrade: start what the budget allows."""
    policy, scan = seen.policy, found.scan
    steps = policy.steps
    out.set(current_step_state=st.STEP_UPGRADE)
    health_hold = [*seen.starts_held, *found.health.holds]
    if health_hold:  # docs/health.md: no answer (or no valid section): nothing new starts
        # one entry per waiting node, named up to the limit
        held = seen.named(health_hold, separator="; ", more="; and ")
        out.set(step_message=held)
        out.hold({"kind": "health", "detail": held})
        out.keep_cordoned_ahead(frozenset(n.name for n in scan.cordoned))
        out.count(in_flight=scan.in_flight)
        return
    next_wave = 0
    if steps[index - 1].pause_ms == 0 and index < len(steps):
        # the next step begins the moment this one is done: its first wave may wait
        # cordoned too, so that step starts with deletions alone
        next_batch = max(targets[index] - max(targets[:index]), 0)
        next_wave = min(policy.batch_max_parallel(next_batch), next_batch)
    selection.start_nodes(seen, out, found, targets[index - 1],
                          out.status.current_upgrade_replicas, next_wave)


def advance(seen: Observed, out: Decisions, found: Found, index: int) -> bool:
    """Leave step ``index``: start the next one (True) or complete the rollout (False)."""
    policy = seen.policy
    out.set(recheck_time="")
    if gate_confirmed(out.status):
        out.condition(ConditionType.GATE_CONFIRMED, "False", "Confirmed", "")
    if index >= len(policy.steps):
        version = (out.status.applied_payload or {}).get("version")
        message = f"rollout of driver {version} completed"
        out.set(
            phase=st.PHASE_IDLING,
            current_step_state=st.STEP_COMPLETED,
            last_pod_spec_revision=found.revision,
            message=message,
        )
        out.condition(st.COND_PROGRESSING, "False", "RolloutCompleted", message)
        skipped.completed(out)
        tolerated.completed(out, found.scan)
        out.event("RolloutCompleted", message, step=index)
        return False
    targets = policy.step_targets(out.total)
    ready = out.status.total_upgrade_ready_replicas
    before = max(targets[:index], default=0)
    batch = max(targets[index] - before, 0)
    out.set(
        current_step_index=index + 1,
        current_upgrade_replicas=batch,
        current_upgrade_ready_replicas=min(max(ready - before, 0), batch),
        current_failure_retry=0,
        current_step_state=st.STEP_INIT,
    )
    out.plan_again()  # the next plan starts the batch, once this step is on record
    out.set_epoch(index + 1, len(policy.steps), reason="StepStarted")
    out.event("StepStarted", f"step {index + 1} of {len(policy.steps)}", step=index + 1)
    return True


def fallback(seen: Observed, out: Decisions, found: Found, index: int) -> None:
    """Failures reached maxFailureThreshold: the policy's fallback."""
    scan = found.scan
    failed = [n.name for n in scan.failed] + [n.name for n, _ in scan.new_failures]
    message = (
        f"step {index}: {out.status.current_failure_retry} failures reached "
        f"maxFailureThreshold {seen.policy.max_failure_threshold} "
        f"(failed: {seen.named(sorted(failed))})"
    )
    health_judgement.failure_condition(seen, out, found)
    fall_back(seen, out, index, message, st.REASON_THRESHOLD)


def step_check_failed(seen: Observed, out: Decisions, failure: HealthFailure,
                      index: int) -> None:
    """A false step check ends the batch: the fallback at once (docs/health.md)."""
    message = f"step {index}: {failure.message}"
    out.condition(ConditionType.HEALTH_CHECK_FAILED, "True", failure.reason,
                  f"check {failure.check}: value {failure.value} (query {failure.query})")
    out.event("HealthCheckFailed", message, warning=True, step=index,
              extra={"checks": {failure.check: str(HealthState.FAILED)},
                     "value": failure.value, "query": failure.query})
    fall_back(seen, out, index, message, failure.reason)


def fall_back(seen: Observed, out: Decisions, index: int, message: str, reason: str) -> None:
    """Roll back, or pause the batch (``BatchFailed`` with ``reason``) for a person."""
    if seen.policy.fallback == "rollback":
        rollback.begin(out, st.PHASE_TERMINATING, st.REASON_THRESHOLD, message)
        rollback.rolling_back(seen, out)
        return
    out.condition(st.COND_BATCH_FAILED, "True", reason, message)
    if not seen.policy.pause:
        out.act(SetPolicyPause(True))
    out.set(current_step_state=st.STEP_PAUSED, step_message=message)
    out.event("FallbackPaused", message, warning=True, step=index)
