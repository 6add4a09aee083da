"""The batched canary rollout of SPEC section 4 as a pure function.

``plan(snapshot, now)`` looks at what a controller can observe and returns the actions to take
and the new ``status.upgradeStatus``. It keeps no memory between calls: everything a restart
needs is in the status it returns and in the node annotations its actions write. Calling it again
on the same snapshot returns the same plan, and calling it on the snapshot after its actions were
carried out asks for nothing new.

One pass over the nodes per call (O(N)); a caller batches simultaneous events into one call.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from reconciler.policy.payload import Payload
from reconciler.policy.quantity import Quantity
from reconciler.policy.upgrade_policy import UpgradeStep
from reconciler.rollout import status as st
from reconciler.rollout.actions import (
    Action,
    AnnotateNode,
    Cordon,
    DeleteDriverPod,
    RecordEvent,
    RestorePayload,
    SetDaemonSetImage,
    SetPolicyPause,
    Uncordon,
)
from reconciler.rollout.model import (
    ANN_ATTEMPT,
    ANN_DELETED_AT,
    ANN_FAILED_AT,
    ANN_FAILURE_REASON,
    ANN_FAILURES,
    ANN_STATE,
    ANN_TARGET,
    ANN_WAS_UNSCHEDULABLE,
    STATE_CORDONED,
    STATE_DONE,
    STATE_FAILED,
    STATE_UPGRADING,
    PlannerSettings,
    RolloutNode,
    RolloutSnapshot,
)
from reconciler.rollout.scan import CLOCK_SLACK, NodeScan, scan_nodes

DEFAULT_SETTINGS = PlannerSettings()
#: ManualGate reason: confirmed, but a node that joined meanwhile is not Ready yet
GATE_CONFIRMED_PENDING = "ConfirmedPendingNodes"


@dataclass(frozen=True, slots=True)
class Plan:
    actions: tuple[Action, ...]
    #: the new ``status.upgradeStatus``; equal to the old one (same lastUpdateTime) when
    #: nothing changed, so the caller can skip the write
    status: dict[str, Any]
    changed: bool
    #: when to plan again if nothing happens before (pause end, back-off, readyTimeout)
    requeue_at: float | None = None
    #: plan again as soon as this status is stored (a new step is persisted before any node
    #: of it starts, so a restart never finds nodes of a batch its status does not show)
    again: bool = False
    #: nodes in flight after the actions are carried out
    in_flight: int = 0
    #: unavailable rollout nodes as observed (SPEC 4.3 step 5)
    unavailable: int = 0


def plan(
    snapshot: RolloutSnapshot, now: float, settings: PlannerSettings = DEFAULT_SETTINGS
) -> Plan:
    return _Planner(snapshot, now, settings).run()


def previous_payload(snapshot: RolloutSnapshot) -> dict[str, Any]:
    """The payload the fleet runs: the last applied one if it still names the DaemonSet's
    image, else parsed back from the image (``<registry>/<name>:<version>``)."""
    last = (snapshot.status.get("lastAppliedSpec") or {}).get("payload")
    if last and Payload.from_spec(last).image == snapshot.daemonset.current_image:
        return dict(last)
    image = snapshot.daemonset.current_image
    repo, _, version = image.rpartition(":")
    registry, _, name = repo.rpartition("/")
    result: dict[str, Any] = dict(snapshot.payload)
    result.update({"registry": registry, "name": name, "version": version})
    return result


class _Planner:
    def __init__(self, snapshot: RolloutSnapshot, now: float, settings: PlannerSettings) -> None:
        self.snap = snapshot
        self.now = now
        self.now_text = st.format_time(now)
        self.settings = settings
        policy = snapshot.policy
        if not policy.steps:
            # validation requires steps with enableRollout; a CR that has none anyway rolls
            # out in one batch rather than failing the controller
            policy = dataclasses.replace(policy, steps=(UpgradeStep(Quantity(100, True), 0),))
        self.policy = policy
        self.old = snapshot.status
        self.status = st.normalized(snapshot.status)
        self.inner: dict[str, Any] = self.status["status"]
        self.actions: list[Action] = []
        self.requeue: list[float] = []
        self.in_flight = 0
        self.unavailable = 0
        self.again = False
        self.total = len(snapshot.nodes)
        #: nodes cordoned ahead that stay so (every other one is released)
        self.keep_cordoned: frozenset[str] = frozenset()

    # ----------------------------------------------------------------------------- entry

    def run(self) -> Plan:
        phase = self.status.get("phase") or st.PHASE_IDLING
        if phase == st.PHASE_PROGRESSING:
            self._progressing()
        elif phase in (st.PHASE_TERMINATING, st.PHASE_DISABLING):
            self._rolling_back()
        else:
            self._idle()
        self.status["upgrading"] = self.status["phase"] in st.ACTIVE_PHASES
        changed = st.without_update_time(self.status) != st.without_update_time(
            st.normalized(self.old)
        )
        if changed:
            self.inner["lastUpdateTime"] = self.now_text
        else:
            self.inner["lastUpdateTime"] = (self.old.get("status") or {}).get("lastUpdateTime", "")
        future = [t for t in self.requeue if t > self.now + CLOCK_SLACK]
        return Plan(
            actions=tuple(self.actions),
            status=self.status,
            changed=changed,
            requeue_at=min(future) if future else None,
            in_flight=self.in_flight,
            unavailable=self.unavailable,
            again=self.again,
        )

    def _event(self, reason: str, message: str, *, warning: bool = False, **kw: Any) -> None:
        self.actions.append(
            RecordEvent("Warning" if warning else "Normal", reason, message, **kw)
        )

    # ----------------------------------------------------------------------------- idle

    def _idle(self) -> None:
        snap = self.snap
        # nothing starts while idle: no node stays cordoned ahead (left over from a rollout
        # whose status someone reset, or a crash)
        self._release([
            n for n in snap.nodes.values()
            if n.annotations.get(ANN_STATE) == STATE_CORDONED
            and (n.pod is None or not n.pod.deleting)
        ])
        desired = Payload.from_spec(snap.payload)
        idle_phase = st.PHASE_IDLING if self.policy.enable_rollout else st.PHASE_DISABLED
        applied = (self.status.get("lastAppliedSpec") or {}).get("payload")
        recorded = str(self.inner.get("lastPodSpecRevision") or "")
        if (
            desired.image == snap.daemonset.current_image
            and self.policy.enable_rollout
            and applied
            and Payload.from_spec(applied).image != desired.image
            and recorded
            and recorded != snap.daemonset.current_revision
        ):
            # We set the template and stopped before recording the rollout: start it now,
            # from what the status says the fleet ran.
            self._start(dict(applied), desired, recorded)
            return
        if desired.image == snap.daemonset.current_image:
            self.status["phase"] = idle_phase
            self.status["lastAppliedSpec"] = {"payload": dict(snap.payload)}
            self.inner["lastPodSpecRevision"] = snap.daemonset.current_revision
            if not self.status["message"]:
                self.status["message"] = "nothing to do"
            return
        before = previous_payload(snap)
        self.status["lastCoDriverSpec"] = {"payload": before}
        self.status["lastAppliedSpec"] = {"payload": dict(snap.payload)}
        self.actions.append(SetDaemonSetImage(desired.image))
        if not self.policy.enable_rollout:
            # SPEC 4.2: the template changes; OnDelete leaves every pod where it is.
            self.status["phase"] = st.PHASE_DISABLED
            self.status["message"] = (
                f"grey release off: driver template set to {desired.version}; nodes change "
                "when their driver pod is deleted"
            )
            self._event("TemplateUpdated", self.status["message"])
            return
        self._start(before, desired, snap.daemonset.current_revision)

    def _start(self, before: dict[str, Any], desired: Payload, old_revision: str) -> None:
        self.status["lastCoDriverSpec"] = {"payload": before}
        self.status["lastAppliedSpec"] = {"payload": dict(self.snap.payload)}
        self.status["phase"] = st.PHASE_PROGRESSING
        self.status["condition"] = []
        self.status["message"] = f"upgrading driver {before.get('version')} -> {desired.version}"
        self.inner.update(
            lastPodSpecRevision=old_revision,
            upgradingPodSpecRevision="",
            currentStepIndex=1,
            currentStepState=st.STEP_INIT,
            currentUpgradeReplicas=0,
            currentUpgradeReadyReplicas=0,
            currentFailureRetry=0,
            totalUpgradeReplicas=self.total,
            totalUpgradeReadyReplicas=0,
            message="waiting for the driver DaemonSet to take the new template",
            recheckTime="",
        )
        self._set_epoch(1, reason="StepStarted")
        self._event("RolloutStarted", self.status["message"], step=1)

    def _set_epoch(self, step: int, *, reason: str) -> None:
        st.set_condition(
            self.status,
            st.COND_PROGRESSING,
            "True",
            reason,
            f"step {step} of {len(self.policy.steps)}",
            self.now_text,
            touch=True,
        )

    def _epoch(self) -> str:
        cond = st.find_condition(self.status, st.COND_PROGRESSING) or {}
        return f"{self.inner.get('currentStepIndex', 0)}@{cond.get('lastTransitionTime', '')}"

    # ----------------------------------------------------------------------------- node moves

    @staticmethod
    def _order(node: RolloutNode) -> tuple[bool, str]:
        return (not node.canary, node.name)

    def _complete(self, nodes: list[RolloutNode], target: str) -> None:
        """Ready on the target: restore schedulability, then clear the move record."""
        for node in nodes:
            if node.unschedulable and node.annotations.get(ANN_WAS_UNSCHEDULABLE) == "false":
                self.actions.append(Uncordon(node.name))
            self.actions.append(
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

    def _fail(self, failures: list[tuple[RolloutNode, str]], *, counted: bool) -> None:
        epoch = self._epoch()
        for node, reason in failures:
            ann = node.annotations
            update: dict[str, str | None] = {
                ANN_STATE: STATE_FAILED,
                ANN_FAILED_AT: self.now_text,
                ANN_FAILURE_REASON: reason,
            }
            if counted:
                previous = ann.get(ANN_FAILURES) or ""
                prior = 0
                if previous.startswith(epoch + "|"):
                    prior = st.int_or(previous.rpartition("|")[2], 0)
                update[ANN_FAILURES] = f"{epoch}|{prior + 1}"
            self.actions.append(AnnotateNode(node.name, update))
            if not node.unschedulable:
                self.actions.append(Cordon(node.name))
            attempt = st.int_or(ann.get(ANN_ATTEMPT), 1)
            self.requeue.append(self.now + self.settings.backoff(attempt))
            self._event(
                "NodeFailed",
                f"{node.name}: driver pod failed ({reason}), attempt {ann.get(ANN_ATTEMPT, '1')}",
                warning=True,
                node=node.name,
                step=int(self.inner["currentStepIndex"] or 0) or None,
                extra={"reason": reason},
            )

    def _move(self, node: RolloutNode, target: str, attempt: int) -> None:
        """Record the move, cordon, delete the old pod, in that order."""
        assert node.pod is not None
        was = self._was_unschedulable(node)
        self.actions.append(
            AnnotateNode(
                node.name,
                {
                    ANN_STATE: STATE_UPGRADING,
                    ANN_TARGET: target,
                    ANN_WAS_UNSCHEDULABLE: was,
                    ANN_ATTEMPT: str(attempt),
                    ANN_DELETED_AT: self.now_text,
                    ANN_FAILED_AT: None,
                    ANN_FAILURE_REASON: None,
                },
            )
        )
        if not node.unschedulable:
            self.actions.append(Cordon(node.name))
        self.actions.append(DeleteDriverPod(node.name, node.pod.name))
        self.requeue.append(self.now + self.settings.ready_timeout)

    @staticmethod
    def _was_unschedulable(node: RolloutNode) -> str:
        ann = node.annotations
        if ann.get(ANN_STATE) in (STATE_UPGRADING, STATE_FAILED, STATE_CORDONED) and ann.get(
            ANN_WAS_UNSCHEDULABLE
        ) in ("true", "false"):
            return str(ann[ANN_WAS_UNSCHEDULABLE])  # the cordon is ours already
        return "true" if node.unschedulable else "false"

    def _cordon_ahead(self, node: RolloutNode, target: str) -> None:
        """Record and cordon a node next in line; its start is then the pod deletion alone."""
        self.actions.append(
            AnnotateNode(
                node.name,
                {
                    ANN_STATE: STATE_CORDONED,
                    ANN_TARGET: target,
                    ANN_WAS_UNSCHEDULABLE: self._was_unschedulable(node),
                    ANN_ATTEMPT: "1",
                    ANN_DELETED_AT: None,
                    ANN_FAILED_AT: None,
                    ANN_FAILURE_REASON: None,
                },
            )
        )
        if not node.unschedulable:
            self.actions.append(Cordon(node.name))

    def _start_cordoned(self, node: RolloutNode, target: str) -> None:
        """Start a node cordoned ahead: the deletion first, its record after. The record of the
        cordon already names the node and the target, so a restart that finds the old pod
        gone knows the deletion was ours (scan: ``unrecorded``)."""
        if not node.unschedulable:  # someone uncordoned it meanwhile: the full sequence
            self._move(node, target, 1)
            return
        assert node.pod is not None
        self.actions.append(DeleteDriverPod(node.name, node.pod.name))
        self._record_deletions([node])
        self.requeue.append(self.now + self.settings.ready_timeout)

    def _record_deletions(self, nodes: list[RolloutNode]) -> None:
        """The record of a deletion of a node cordoned ahead, right after it (or, when it never
        landed, as soon as a plan finds it: readyTimeout then runs a little late)."""
        for node in nodes:
            self.actions.append(
                AnnotateNode(
                    node.name, {ANN_STATE: STATE_UPGRADING, ANN_DELETED_AT: self.now_text}
                )
            )

    def _release(self, nodes: list[RolloutNode], keep: frozenset[str] = frozenset()) -> None:
        """Nodes cordoned ahead that will not start now (paused, the step changed, a rollback):
        give back our cordon first, then drop the record (a crash in between leaves a record
        the next plan releases again, never a cordon nobody owns)."""
        for node in nodes:
            if node.name in keep:
                continue
            if node.unschedulable and node.annotations.get(ANN_WAS_UNSCHEDULABLE) == "false":
                self.actions.append(Uncordon(node.name))
            self.actions.append(
                AnnotateNode(
                    node.name,
                    {ANN_STATE: None, ANN_TARGET: None, ANN_WAS_UNSCHEDULABLE: None,
                     ANN_ATTEMPT: None},
                )
            )

    def _redo(self, nodes: list[RolloutNode]) -> None:
        """A recorded move whose cordon or delete never happened (crash after annotating)."""
        for node in nodes:
            assert node.pod is not None
            if not node.unschedulable:
                self.actions.append(Cordon(node.name))
            self.actions.append(DeleteDriverPod(node.name, node.pod.name))

    def _retry_due(self, node: RolloutNode, epoch_start: float) -> float:
        ann = node.annotations
        failed_at = st.parse_time_or(ann.get(ANN_FAILED_AT), self.now)
        if failed_at < epoch_start:
            return self.now  # failed before a person resumed: retry at once
        return failed_at + self.settings.backoff(st.int_or(ann.get(ANN_ATTEMPT), 1))

    def _retries(self, failed: list[RolloutNode], target: str, slots: int) -> int:
        """Retry failed nodes whose back-off passed; returns how many were started."""
        cond = st.find_condition(self.status, st.COND_PROGRESSING) or {}
        epoch_start = st.parse_time_or(cond.get("lastTransitionTime"), self.now)
        started = 0
        for node in sorted(failed, key=self._order):
            if started >= slots:
                break
            due = self._retry_due(node, epoch_start)
            if due > self.now + CLOCK_SLACK:
                self.requeue.append(due)
                continue
            if node.workloads or not node.ready or node.pod is None or node.pod.deleting:
                continue
            self._move(node, target, st.int_or(node.annotations.get(ANN_ATTEMPT), 1) + 1)
            self._event(
                "NodeRetried",
                f"{node.name}: retrying the driver pod",
                node=node.name,
                step=int(self.inner["currentStepIndex"] or 0) or None,
            )
            started += 1
        return started

    def _fresh_starts(
        self, candidates: list[RolloutNode], target: str, count: int, ahead: int
    ) -> tuple[int, frozenset[str]]:
        """Start up to ``count`` nodes not started yet, in rollout order, and cordon the next
        ``ahead`` ones; busy nodes wait. Returns how many started and the nodes cordoned ahead
        (kept or new)."""
        started = 0
        kept: set[str] = set()
        blocked: list[str] = []
        limit = self.settings.message_node_limit
        ordered = sorted(candidates, key=self._order)
        for node in ordered:
            if started >= count and len(kept) >= ahead:
                break
            if not node.ready:
                continue
            if node.workloads:
                if started < count and len(blocked) < limit:
                    blocked.append(f"{node.name} ({', '.join(node.workloads)})")
                continue
            cordoned = (node.annotations.get(ANN_STATE) == STATE_CORDONED
                        and node.annotations.get(ANN_TARGET) == target)
            if started < count:
                if cordoned:
                    self._start_cordoned(node, target)
                else:
                    self._move(node, target, 1)
                started += 1
                continue
            kept.add(node.name)
            if not cordoned:
                self._cordon_ahead(node, target)
        if blocked:
            self.inner["message"] = "waiting for GPU workloads to finish: " + "; ".join(blocked)
        return started, frozenset(kept)

    # ----------------------------------------------------------------------------- progressing

    def _progressing(self) -> None:
        snap, policy, inner = self.snap, self.policy, self.inner
        if not policy.enable_rollout:
            self._begin_rollback(st.PHASE_DISABLING, st.REASON_DISABLED, "enableRollout turned off")
            self._rolling_back()
            return
        target_payload = (self.status.get("lastAppliedSpec") or {}).get("payload") or snap.payload
        target_image = Payload.from_spec(target_payload).image
        previous = (self.status.get("lastCoDriverSpec") or {}).get("payload")
        spec_image = Payload.from_spec(snap.payload).image
        if previous and spec_image != target_image and spec_image == Payload.from_spec(
            previous
        ).image:
            # Our own RestorePayload landed but its status did not (or a person reverted the
            # version): the fleet must go back.
            cause = st.find_condition(self.status, st.COND_PROGRESSING) or {}
            reason = str(cause.get("reason") or "")
            if reason not in (st.REASON_THRESHOLD, st.REASON_DISABLED):
                reason = st.REASON_THRESHOLD if self._threshold_reached() else "PayloadReverted"
            self._begin_rollback(
                st.PHASE_TERMINATING, reason, "spec.driver.payload is back on the previous version"
            )
            self._rolling_back()
            return
        ds = snap.daemonset
        if ds.current_image != target_image:
            self.actions.append(SetDaemonSetImage(target_image))
            if not inner["upgradingPodSpecRevision"]:
                inner["currentStepState"] = st.STEP_INIT
            inner["message"] = "waiting for the driver DaemonSet to take the new template"
            return
        if inner["upgradingPodSpecRevision"] != ds.current_revision:
            inner["upgradingPodSpecRevision"] = ds.current_revision
        revision = ds.current_revision
        if Payload.from_spec(snap.payload).image != target_image:
            self.status["message"] = (
                "spec.driver.payload changed during an active rollout; ignored until it ends"
            )
        inner["message"] = ""
        scan = scan_nodes(
            self.snap.nodes.values(), revision, now=self.now, epoch=self._epoch(),
            ready_timeout=self.settings.ready_timeout,
        )
        self._complete(scan.completed, revision)
        self._fail(scan.new_failures, counted=True)
        for node in scan.failed:
            if not node.unschedulable:
                self.actions.append(Cordon(node.name))
        self._redo(scan.redo)
        self._record_deletions(scan.unrecorded)
        self.requeue.extend(scan.deadlines)
        self.unavailable = scan.unavailable
        self.in_flight = scan.in_flight
        self._steps(scan, revision)
        # a rollback releases them itself; a step just begun (``again``) starts them next
        if self.status["phase"] == st.PHASE_PROGRESSING and not self.again:
            started = {a.node for a in self.actions if isinstance(a, DeleteDriverPod)}
            self._release(
                [n for n in scan.cordoned + scan.stale_cordoned if n.name not in started],
                self.keep_cordoned,
            )

    def _threshold_reached(self) -> bool:
        epoch = self._epoch() + "|"
        count = 0
        for node in self.snap.nodes.values():
            failures = node.annotations.get(ANN_FAILURES)
            if failures and failures.startswith(epoch):
                count += st.int_or(failures[len(epoch) :], 1)
        return count >= self.policy.max_failure_threshold

    def _steps(self, scan: NodeScan, revision: str) -> None:
        """Decide the current step; a step begun in this pass whose target is already reached
        (targets capped at N, a node that joined) and that is no gate is decided in this same
        pass too, and so on: no node of it starts, so it need not go on record first (decision
        9), and a step that is done waits for nothing but its pause."""
        targets = self.policy.step_targets(self.total)
        fresh_epoch = False
        while self._step(scan, revision, targets, fresh_epoch=fresh_epoch):
            index = int(self.inner["currentStepIndex"])
            if targets[index - 1] > scan.ready or self.policy.steps[index - 1].pause_ms is None:
                # its nodes start, or its gate opens (pause: true written back to Git), in the
                # next pass, once the step is on record: a restart finds the gate it set
                return
            self.again = False
            fresh_epoch = True

    def _step(
        self, scan: NodeScan, revision: str, targets: list[int], *, fresh_epoch: bool
    ) -> bool:
        """The current step; True when it advanced to the next one (which is StepUpgradeInit).
        ``fresh_epoch``: the step began in this pass, so no failure counts against it yet."""
        policy, inner = self.policy, self.inner
        steps = policy.steps
        total = self.total
        threshold = policy.max_failure_threshold
        counter = 0 if fresh_epoch else min(
            threshold, scan.epoch_failures + len(scan.new_failures)
        )
        inner["currentFailureRetry"] = counter
        inner["totalUpgradeReplicas"] = total
        inner["totalUpgradeReadyReplicas"] = scan.ready
        index = min(max(int(inner["currentStepIndex"] or 1), 1), len(steps))
        target = targets[index - 1]
        # a step not above an earlier one adds no nodes (SPEC 3)
        before = max(targets[: index - 1], default=0)
        batch = max(target - before, 0)
        inner["currentStepIndex"] = index
        inner["currentUpgradeReplicas"] = batch
        inner["currentUpgradeReadyReplicas"] = min(max(scan.ready - before, 0), batch)
        if st.condition_true(self.status, st.COND_BATCH_FAILED):
            if policy.pause:
                inner["currentStepState"] = st.STEP_PAUSED
                return False
            st.set_condition(
                self.status, st.COND_BATCH_FAILED, "False", "Resumed",
                "a person resumed the batch", self.now_text,
            )
            self._set_epoch(index, reason="Resumed")
            counter = 0
            inner["currentFailureRetry"] = 0
            self._event("Resumed", f"step {index}: resumed after the fallback", step=index)
        if st.condition_true(self.status, st.COND_MANUAL_GATE):
            if policy.pause:
                inner["currentStepState"] = st.STEP_PAUSED
                return False
            st.set_condition(
                self.status, st.COND_MANUAL_GATE, "False", "Confirmed",
                f"step {index} confirmed", self.now_text,
            )
            self._event("GateConfirmed", f"step {index}: gate confirmed", step=index)
            if scan.ready >= target:
                return self._advance(index, revision)
            # a node joined during the gate: the step is done (and confirmed) once it is Ready
            st.set_condition(
                self.status, st.COND_MANUAL_GATE, "False", GATE_CONFIRMED_PENDING,
                f"step {index} confirmed; waiting for nodes that joined meanwhile",
                self.now_text,
            )
        if counter >= threshold:
            self._fallback(scan, index)
            return False
        if scan.ready >= target:
            step = steps[index - 1]
            if step.pause_ms is None and self._gate_confirmed():  # see GATE_CONFIRMED_PENDING
                if policy.pause:
                    inner["currentStepState"] = st.STEP_PAUSED
                    return False
                return self._advance(index, revision)
            if step.pause_ms is None:
                st.set_condition(
                    self.status, st.COND_MANUAL_GATE, "True", "WaitingForConfirmation",
                    f"step {index} done; set spec.driver.upgradePolicy.pause to false "
                    "to continue",
                    self.now_text,
                )
                if not policy.pause:
                    self.actions.append(SetPolicyPause(True))
                inner["currentStepState"] = st.STEP_PAUSED
                self._event(
                    "GateOpened", f"step {index} done: waiting for a person", step=index
                )
                return False
            if not inner["recheckTime"]:
                inner["recheckTime"] = st.format_time(st.after_ms(self.now, step.pause_ms))
                self._event(
                    "StepCompleted",
                    f"step {index} done ({scan.ready}/{total} nodes); pausing "
                    f"{step.pause_ms} ms",
                    step=index,
                )
            recheck = st.parse_time_or(inner["recheckTime"], self.now)
            if self.now + CLOCK_SLACK >= recheck and not policy.pause:
                return self._advance(index, revision)
            inner["currentStepState"] = st.STEP_PAUSED
            self.requeue.append(recheck)
            return False
        if policy.pause:
            inner["currentStepState"] = st.STEP_PAUSED
            inner["message"] = inner["message"] or "paused: spec.driver.upgradePolicy.pause"
            return False
        inner["currentStepState"] = st.STEP_UPGRADE
        next_wave = 0
        if steps[index - 1].pause_ms == 0 and index < len(steps):
            # the next step begins the moment this one is done: its first wave may wait
            # cordoned too, so that step starts with deletions alone
            next_batch = max(targets[index] - max(targets[:index]), 0)
            next_wave = min(policy.batch_max_parallel(next_batch), next_batch)
        self._start_nodes(scan, revision, target, batch, next_wave)
        return False

    def _gate_confirmed(self) -> bool:
        gate = st.find_condition(self.status, st.COND_MANUAL_GATE) or {}
        return gate.get("reason") == GATE_CONFIRMED_PENDING

    def _start_nodes(
        self, scan: NodeScan, revision: str, target: int, batch: int, next_wave: int
    ) -> None:
        """Start what the slots and maxUnavailable allow; cordon ahead the nodes next in line:
        up to maxParallel of this step's, or once all of this step's nodes are started, the
        next step's first wave (``next_wave``: 0 when a pause or a gate comes first)."""
        policy = self.policy
        parallel = policy.batch_max_parallel(batch)
        slots = parallel - scan.in_flight
        retried = self._retries(scan.failed, revision, slots) if slots > 0 else 0
        slots -= retried
        occupied = (
            scan.ready + scan.in_flight + len(scan.failed) + len(scan.new_failures)
            + scan.joiners_pending
        )
        need = target - occupied
        count = min(max(need, 0), max(slots, 0))
        ahead = 0
        if self.settings.cordon_ahead:
            ahead = min(need - count, parallel) if need > count else next_wave
        fresh = 0
        if count or ahead:
            max_unavailable = policy.resolved_max_unavailable(self.total)
            # a retried node is in flight now, and in-flight nodes are not unavailable
            unavailable = scan.unavailable - retried
            if unavailable <= max_unavailable:
                fresh, self.keep_cordoned = self._fresh_starts(
                    scan.cordoned + scan.untouched, revision, count, ahead
                )
            else:
                # the nodes next in line stay cordoned (no churn while availability flickers)
                self.keep_cordoned = frozenset(n.name for n in scan.cordoned)
                if need > 0:
                    self.inner["message"] = (
                        f"{unavailable} rollout nodes unavailable (maxUnavailable "
                        f"{max_unavailable}): no new node starts"
                    )
        self.in_flight = scan.in_flight + retried + fresh

    def _advance(self, index: int, revision: str) -> bool:
        """Leave step ``index``: start the next one (True) or complete the rollout (False)."""
        inner = self.inner
        inner["recheckTime"] = ""
        if self._gate_confirmed():
            gate = st.find_condition(self.status, st.COND_MANUAL_GATE) or {}
            st.set_condition(
                self.status, st.COND_MANUAL_GATE, "False", "Confirmed",
                str(gate.get("message", "")), self.now_text,
            )
        if index >= len(self.policy.steps):
            self.status["phase"] = st.PHASE_IDLING
            inner["currentStepState"] = st.STEP_COMPLETED
            inner["lastPodSpecRevision"] = revision
            version = ((self.status.get("lastAppliedSpec") or {}).get("payload") or {}).get(
                "version"
            )
            self.status["message"] = f"rollout of driver {version} completed"
            st.set_condition(
                self.status, st.COND_PROGRESSING, "False", "RolloutCompleted",
                self.status["message"], self.now_text,
            )
            self._event("RolloutCompleted", self.status["message"], step=index)
            return False
        targets = self.policy.step_targets(self.total)
        ready = int(inner["totalUpgradeReadyReplicas"] or 0)
        before = max(targets[:index], default=0)
        batch = max(targets[index] - before, 0)
        inner["currentStepIndex"] = index + 1
        inner["currentUpgradeReplicas"] = batch
        inner["currentUpgradeReadyReplicas"] = min(max(ready - before, 0), batch)
        inner["currentFailureRetry"] = 0
        inner["currentStepState"] = st.STEP_INIT
        self.again = True  # the next plan starts the batch, once this step is on record
        self._set_epoch(index + 1, reason="StepStarted")
        self._event("StepStarted", f"step {index + 1} of {len(self.policy.steps)}", step=index + 1)
        return True

    def _fallback(self, scan: NodeScan, index: int) -> None:
        limit = self.settings.message_node_limit
        failed = [n.name for n in scan.failed] + [n.name for n, _ in scan.new_failures]
        named = ", ".join(sorted(failed)[:limit])
        if len(failed) > limit:
            named += f" and {len(failed) - limit} more"
        message = (
            f"step {index}: {self.inner['currentFailureRetry']} failures reached "
            f"maxFailureThreshold {self.policy.max_failure_threshold} (failed: {named})"
        )
        if self.policy.fallback == "rollback":
            self._begin_rollback(st.PHASE_TERMINATING, st.REASON_THRESHOLD, message)
            self._rolling_back()
            return
        st.set_condition(
            self.status, st.COND_BATCH_FAILED, "True", st.REASON_THRESHOLD, message, self.now_text
        )
        if not self.policy.pause:
            self.actions.append(SetPolicyPause(True))
        self.inner["currentStepState"] = st.STEP_PAUSED
        self.inner["message"] = message
        self._event("FallbackPaused", message, warning=True, step=index)

    # ----------------------------------------------------------------------------- rollback

    def _begin_rollback(self, phase: str, reason: str, why: str) -> None:
        self.status["phase"] = phase
        for ctype in (st.COND_MANUAL_GATE, st.COND_BATCH_FAILED):
            if st.condition_true(self.status, ctype):
                st.set_condition(self.status, ctype, "False", reason, why, self.now_text)
        st.set_condition(self.status, st.COND_PROGRESSING, "False", reason, why, self.now_text)
        self.inner["recheckTime"] = ""
        self.inner["currentStepState"] = st.STEP_UPGRADE
        version = ((self.status.get("lastAppliedSpec") or {}).get("payload") or {}).get("version")
        self.status["message"] = f"rolling back driver {version}: {why}"
        self._event("RollbackStarted", self.status["message"], warning=True,
                    step=int(self.inner["currentStepIndex"] or 0) or None)

    def _rolling_back(self) -> None:
        snap, inner = self.snap, self.inner
        previous = (self.status.get("lastCoDriverSpec") or {}).get("payload") or previous_payload(
            snap
        )
        previous_image = Payload.from_spec(previous).image
        ds = snap.daemonset
        # The payload first: if we stop in between, the spec no longer asks for the new version
        # and the next plan continues the rollback instead of re-applying the new template.
        if Payload.from_spec(snap.payload).image != previous_image:
            self.actions.append(RestorePayload(dict(previous)))
        if ds.current_image != previous_image:
            self.actions.append(SetDaemonSetImage(previous_image))
        if ds.current_image != previous_image:
            inner["message"] = "waiting for the driver DaemonSet to take the previous template"
            return
        # Restoring a template brings back its revision hash; adopt it if it was recreated.
        old = inner["lastPodSpecRevision"] = ds.current_revision
        new = str(inner["upgradingPodSpecRevision"] or "")
        inner["message"] = ""
        scan = scan_nodes(
            self.snap.nodes.values(), old, now=self.now, epoch=self._epoch(),
            ready_timeout=self.settings.ready_timeout, rollback_from=new,
        )
        self._complete(scan.completed, old)
        self._fail(scan.new_failures, counted=False)
        for node in scan.failed:
            if not node.unschedulable:
                self.actions.append(Cordon(node.name))
        self._redo(scan.redo)
        self._release(scan.stale_cordoned)
        self.requeue.extend(scan.deadlines)
        self.unavailable = scan.unavailable
        for node in scan.convert:  # in flight to the new revision: turn around, same slot
            self._move(node, old, 1)
        batch = int(inner["currentUpgradeReplicas"] or 1)
        slots = self.policy.batch_max_parallel(batch) - scan.in_flight
        started = self._retries(scan.failed, old, slots) if slots > 0 else 0
        waiting = scan.failed_other + sorted(scan.untouched, key=self._order)
        for node in waiting:
            if started >= slots:
                break
            if node.workloads or not node.ready:
                continue
            self._move(node, old, 1)
            started += 1
        self.in_flight = scan.in_flight + started
        remaining = (
            len(scan.untouched) + len(scan.failed_other) + len(scan.failed)
            + len(scan.new_failures) + scan.in_flight + len(scan.convert) + scan.settling
        )
        inner["totalUpgradeReadyReplicas"] = scan.ready_other
        inner["totalUpgradeReplicas"] = self.total
        inner["currentStepState"] = st.STEP_UPGRADE
        if remaining or started or Payload.from_spec(snap.payload).image != previous_image:
            return
        cause = st.find_condition(self.status, st.COND_PROGRESSING) or {}
        reason = str(cause.get("reason") or st.REASON_THRESHOLD)
        rolled = ((self.status.get("lastAppliedSpec") or {}).get("payload") or {}).get("version")
        message = (
            f"driver {rolled} rolled back to {previous.get('version')} ({reason}): "
            f"{cause.get('message', '')}"
        )
        st.set_condition(self.status, st.COND_ROLLED_BACK, "True", reason, message, self.now_text)
        self.status["phase"] = st.PHASE_IDLING if self.policy.enable_rollout else st.PHASE_DISABLED
        self.status["message"] = message
        self.status["lastAppliedSpec"] = {"payload": dict(previous)}
        inner["currentStepState"] = st.STEP_COMPLETED
        self._event("RolledBack", message, warning=True,
                    step=int(inner["currentStepIndex"] or 0) or None)
