"""The batched canary rollout of SPEC section 4 as a pure function.

``plan(snapshot, now)`` looks at what a controller can observe and returns the actions to take
and the new ``status.upgradeStatus``. It keeps no memory between calls: everything a restart
needs is in the status it returns and in the node annotations its actions write. Calling it again
on the same snapshot returns the same plan, and calling it on the snapshot after its actions were
carried out asks for nothing new.

The status is read once into an ``UpgradeStatus`` value; each step of a pass replaces it with
the next value, and the JSON written back differs from what was read only where a value changed.

One pass over the nodes per call (O(N)); a caller batches simultaneous events into one call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from reconciler import planning
from reconciler.health.checks import (
    Health,
    HealthFailure,
    HealthState,
    step_health,
)
from reconciler.names import (
    ACTIVE_PHASES,
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
    ConditionType,
)
from reconciler.policy.payload import Payload
from reconciler.policy.quantity import Quantity
from reconciler.policy.upgrade_policy import UpgradeStep
from reconciler.rollout import health_gate
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
from reconciler.rollout.model import PlannerSettings, RolloutNode, RolloutSnapshot
from reconciler.rollout.scan import CLOCK_SLACK, NodeScan, scan_nodes
from reconciler.rollout.status import UpgradeStatus
from reconciler.timefmt import after_ms, format_time, parse_time_or

DEFAULT_SETTINGS = PlannerSettings()
#: ManualGate reason: confirmed, but a node that joined meanwhile is not Ready yet
GATE_CONFIRMED_PENDING = "ConfirmedPendingNodes"

#: what ``plan`` returns: the actions, the new ``status.upgradeStatus`` (equal to the old one,
#: same lastUpdateTime, when nothing changed), when to plan again (pause end, back-off,
#: readyTimeout), and the nodes in flight and unavailable
Plan = planning.Plan[Action]


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
        self.now_text = format_time(now)
        self.settings = settings
        policy = snapshot.policy
        if not policy.steps:
            # validation requires steps with enableRollout; a CR that has none anyway rolls
            # out in one batch rather than failing the controller
            policy = dataclasses.replace(policy, steps=(UpgradeStep(Quantity(100, True), 0),))
        self.policy = policy
        self.old = snapshot.status
        #: the status as this pass leaves it so far; every step replaces it
        self.s = UpgradeStatus.from_json(snapshot.status)
        self.actions: list[Action] = []
        self.requeue: list[float] = []
        self.in_flight = 0
        self.unavailable = 0
        self.again = False
        self.total = len(snapshot.nodes)
        #: nodes cordoned ahead that stay so (every other one is released)
        self.keep_cordoned: frozenset[str] = frozenset()
        health = snapshot.health
        #: the health gates (SPEC 9); None: pods alone decide, exactly as without ``health``
        self.health = health.config if health is not None else None
        #: why nothing new starts: a check without an answer, or a section that does not
        #: validate (fail closed)
        self.health_hold: list[str] = []
        if health is not None and health.error is not None:
            self.health_hold.append(f"health configuration invalid, no node starts: "
                                    f"{health.error}")
        #: node -> the health failure found in this pass
        self.health_failures: dict[str, HealthFailure] = {}
        #: nodes whose node checks passed in this pass (their record lands with its actions)
        self.health_passed: list[str] = []
        #: ``upgradeStatus.health`` as this pass leaves it
        self.health_status: dict[str, Any] = dict(self.s.health)
        #: ``upgradeStatus.holds`` as this pass leaves it: what holds fresh starts back, as data
        self.holds: list[dict[str, Any]] = []

    # ----------------------------------------------------------------------------- entry

    def run(self) -> Plan:
        phase = self.s.phase or st.PHASE_IDLING
        if phase == st.PHASE_PROGRESSING:
            self._progressing()
        elif phase in (st.PHASE_TERMINATING, st.PHASE_DISABLING):
            self._rolling_back()
        else:
            self._idle()
        self.s = self.s.evolve(upgrading=self.s.phase in ACTIVE_PHASES)
        if self.health_status != dict(self.s.health):
            self.s = self.s.evolve(health=self.health_status)
        holds = tuple(h for i, h in enumerate(self.holds) if h not in self.holds[:i])
        if holds != self.s.holds:
            self.s = self.s.evolve(holds=holds)
        status = self.s.to_json()
        # ``source`` is the status as read, every SPEC field present
        changed = st.without_update_time(status) != st.without_update_time(self.s.source)
        if changed:
            status["status"]["lastUpdateTime"] = self.now_text
        else:
            status["status"]["lastUpdateTime"] = (self.old.get("status") or {}).get(
                "lastUpdateTime", ""
            )
        future = [t for t in self.requeue if t > self.now + CLOCK_SLACK]
        return planning.Plan(
            actions=tuple(self.actions),
            status=status,
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

    def _step_index(self) -> int | None:
        """The step an event names (None before the first)."""
        return self.s.current_step_index or None

    def _set(self, **changes: Any) -> None:
        self.s = self.s.evolve(**changes)

    def _condition(
        self, ctype: str, value: str, reason: str, message: str, *, touch: bool = False
    ) -> None:
        self.s = self.s.with_condition(ctype, value, reason, message, self.now_text, touch=touch)

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
        applied = self.s.applied_payload
        recorded = self.s.last_pod_spec_revision
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
            self._set(
                phase=idle_phase,
                last_applied_spec={"payload": dict(snap.payload)},
                last_pod_spec_revision=snap.daemonset.current_revision,
                message=self.s.message or "nothing to do",
            )
            return
        before = previous_payload(snap)
        self._set(
            last_co_driver_spec={"payload": before},
            last_applied_spec={"payload": dict(snap.payload)},
        )
        self.actions.append(SetDaemonSetImage(desired.image))
        if not self.policy.enable_rollout:
            # SPEC 4.2: the template changes; OnDelete leaves every pod where it is.
            message = (
                f"grey release off: driver template set to {desired.version}; nodes change "
                "when their driver pod is deleted"
            )
            self._set(phase=st.PHASE_DISABLED, message=message)
            self._event("TemplateUpdated", message)
            return
        self._start(before, desired, snap.daemonset.current_revision)

    def _start(self, before: dict[str, Any], desired: Payload, old_revision: str) -> None:
        message = f"upgrading driver {before.get('version')} -> {desired.version}"
        self.health_status = {}
        self._set(
            last_co_driver_spec={"payload": before},
            last_applied_spec={"payload": dict(self.snap.payload)},
            phase=st.PHASE_PROGRESSING,
            conditions=(),
            message=message,
            last_pod_spec_revision=old_revision,
            upgrading_pod_spec_revision="",
            current_step_index=1,
            current_step_state=st.STEP_INIT,
            current_upgrade_replicas=0,
            current_upgrade_ready_replicas=0,
            current_failure_retry=0,
            total_upgrade_replicas=self.total,
            total_upgrade_ready_replicas=0,
            step_message="waiting for the driver DaemonSet to take the new template",
            recheck_time="",
        )
        self._set_epoch(1, reason="StepStarted")
        self._event("RolloutStarted", message, step=1)

    def _set_epoch(self, step: int, *, reason: str) -> None:
        self._condition(
            st.COND_PROGRESSING, "True", reason, f"step {step} of {len(self.policy.steps)}",
            touch=True,
        )

    # ----------------------------------------------------------------------------- node moves

    @staticmethod
    def _order(node: RolloutNode) -> tuple[bool, str]:
        return (not node.canary, node.name)

    def _process_completed_nodes(self, nodes: list[RolloutNode], target: str) -> None:
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

    def _process_new_failures(
        self, failures: list[tuple[RolloutNode, str]], *, counted: bool
    ) -> None:
        """Failed just now: record (counted in the epoch unless rolling back), cordon, back off."""
        epoch = self.s.epoch()
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
                step=self._step_index(),
                extra={"reason": reason},
            )

    def _move(self, node: RolloutNode, target: str, attempt: int) -> None:
        """Record the move, cordon, delete the old pod, in that order."""
        assert node.pod is not None
        was = self._was_unschedulable(node)
        update: dict[str, str | None] = {
            ANN_STATE: STATE_UPGRADING,
            ANN_TARGET: target,
            ANN_WAS_UNSCHEDULABLE: was,
            ANN_ATTEMPT: str(attempt),
            ANN_DELETED_AT: self.now_text,
            ANN_FAILED_AT: None,
            ANN_FAILURE_REASON: None,
        }
        for key in (ANN_HEALTH, ANN_HEALTH_FAILURE, ANN_HEALTH_STEP):
            if key in node.annotations:  # a new attempt: its checks start afresh
                update[key] = None
        self.actions.append(AnnotateNode(node.name, update))
        if not node.unschedulable:
            self.actions.append(Cordon(node.name))
        self.actions.append(DeleteDriverPod(node.name, node.pod.name, at=self.now))
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
        """Start a node cordoned ahead: the deletion alone. The record of the cordon already
        names the node and the target, so whoever finds the old pod deleting or gone knows the
        deletion was ours, and the pods say when it was (scan: ``deletion_time``): no record
        after it, one node write less per node in a wave's burst."""
        if not node.unschedulable:  # someone uncordoned it meanwhile: the full sequence
            self._move(node, target, 1)
            return
        assert node.pod is not None
        self.actions.append(DeleteDriverPod(node.name, node.pod.name, at=self.now))
        self.requeue.append(self.now + self.settings.ready_timeout)

    def _record_deletions(self, nodes: list[RolloutNode]) -> None:
        """The record of a deletion of a node cordoned ahead whose time nothing tells (the
        controller restarted after the old pod went): from now (readyTimeout runs late by the
        time the controller was away)."""
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

    def _process_redo_nodes(self, nodes: list[RolloutNode]) -> None:
        """A recorded move whose cordon or delete never happened (crash after annotating)."""
        for node in nodes:
            assert node.pod is not None
            if not node.unschedulable:
                self.actions.append(Cordon(node.name))
            self.actions.append(DeleteDriverPod(node.name, node.pod.name, at=self.now))

    def _retry_due(self, node: RolloutNode, epoch_start: float) -> float:
        ann = node.annotations
        failed_at = parse_time_or(ann.get(ANN_FAILED_AT), self.now)
        if failed_at < epoch_start:
            return self.now  # failed before a person resumed: retry at once
        return failed_at + self.settings.backoff(st.int_or(ann.get(ANN_ATTEMPT), 1))

    def _retries(self, failed: list[RolloutNode], target: str, slots: int) -> int:
        """Retry failed nodes whose back-off passed; returns how many were started."""
        cond = self.s.condition(st.COND_PROGRESSING)
        epoch_start = parse_time_or(cond.last_transition_time if cond else None, self.now)
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
                step=self._step_index(),
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
            self._set(step_message="waiting for GPU workloads to finish: " + "; ".join(blocked))
        return started, frozenset(kept)

    # ----------------------------------------------------------------------------- scanned nodes

    def _settle(self, scan: NodeScan, target: str, *, counted: bool) -> None:
        """What the scan found settles first, one function per node state (the steps only
        start new moves): the same in a rollout and in a rollback, which counts no failures."""
        self._process_completed_nodes(scan.completed, target)
        self._process_new_failures(scan.new_failures, counted=counted)
        self._process_failed_nodes(scan.failed)
        self._process_redo_nodes(scan.redo)
        self.requeue.extend(scan.deadlines)
        self.unavailable = scan.unavailable

    def _process_failed_nodes(self, nodes: list[RolloutNode]) -> None:
        """A failed node stays cordoned until it is retried (someone may have uncordoned it)."""
        for node in nodes:
            if not node.unschedulable:
                self.actions.append(Cordon(node.name))

    # ----------------------------------------------------------------------------- progressing

    def _progressing(self) -> None:
        snap, policy = self.snap, self.policy
        if not policy.enable_rollout:
            self._begin_rollback(st.PHASE_DISABLING, st.REASON_DISABLED, "enableRollout turned off")
            self._rolling_back()
            return
        target_image = Payload.from_spec(self.s.applied_payload or snap.payload).image
        if self._payload_reverted(target_image):
            self._rolling_back()
            return
        ds = snap.daemonset
        if ds.current_image != target_image:
            self.actions.append(SetDaemonSetImage(target_image))
            if not self.s.upgrading_pod_spec_revision:
                self._set(current_step_state=st.STEP_INIT)
            self._set(step_message="waiting for the driver DaemonSet to take the new template")
            return
        revision = ds.current_revision
        self._set(upgrading_pod_spec_revision=revision)
        if Payload.from_spec(snap.payload).image != target_image:
            self._set(
                message="spec.driver.payload changed during an active rollout; ignored until it "
                "ends"
            )
        self._set(step_message="")
        verifying, health_failed, adopted = self._judge_nodes(revision)
        scan = scan_nodes(
            [adopted.get(n.name, n) for n in self.snap.nodes.values()], revision,
            now=self.now, epoch=self.s.epoch(),
            ready_timeout=self.settings.ready_timeout,
            verifying=verifying, health_failed=health_failed,
        )
        self._settle(scan, revision, counted=True)
        self._record_deletions(scan.unrecorded)
        self.in_flight = scan.in_flight
        self._steps(scan, revision)
        # a rollback releases them itself; a step just begun (``again``) starts them next
        if self.s.phase == st.PHASE_PROGRESSING and not self.again:
            started = {a.node for a in self.actions if isinstance(a, DeleteDriverPod)}
            self._release(
                [n for n in scan.cordoned + scan.stale_cordoned if n.name not in started],
                self.keep_cordoned,
            )

    def _payload_reverted(self, target_image: str) -> bool:
        """Our own RestorePayload landed but its status did not (or a person reverted the
        version): the fleet must go back. True when a rollback began."""
        previous = self.s.previous_payload
        spec_image = Payload.from_spec(self.snap.payload).image
        if not previous or spec_image == target_image:
            return False
        if spec_image != Payload.from_spec(previous).image:
            return False
        cause = self.s.condition(st.COND_PROGRESSING)
        reason = cause.reason if cause is not None else ""
        if reason not in (st.REASON_THRESHOLD, st.REASON_DISABLED):
            reason = st.REASON_THRESHOLD if self._threshold_reached() else "PayloadReverted"
        self._begin_rollback(
            st.PHASE_TERMINATING, reason, "spec.driver.payload is back on the previous version"
        )
        return True

    def _threshold_reached(self) -> bool:
        epoch = self.s.epoch() + "|"
        count = 0
        for node in self.snap.nodes.values():
            failures = node.annotations.get(ANN_FAILURES)
            if failures and failures.startswith(epoch):
                count += st.int_or(failures[len(epoch) :], 1)
        return count >= self.policy.max_failure_threshold

    # ----------------------------------------------------------------------------- steps

    def _steps(self, scan: NodeScan, revision: str) -> None:
        """Decide the current step; a step begun in this pass whose target is already reached
        (targets capped at N, a node that joined) and that is no gate is decided in this same
        pass too, and so on: no node of it starts, so it need not go on record first (decision
        9), and a step that is done waits for nothing but its pause."""
        targets = self.policy.step_targets(self.total)
        fresh_epoch = False
        while self._step(scan, revision, targets, fresh_epoch=fresh_epoch):
            index = self.s.current_step_index
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
        index, target = self._tally(scan, targets, fresh_epoch=fresh_epoch)
        if self.s.condition_true(st.COND_BATCH_FAILED):
            if self.policy.pause:
                return self._hold()
            self._resume(index)
        if self.s.condition_true(st.COND_MANUAL_GATE):
            if self.policy.pause:
                return self._hold()
            if self._confirm_gate(index, done=scan.ready >= target):
                return self._advance(index, revision)
        if self.s.current_failure_retry >= self.policy.max_failure_threshold:
            self._fallback(scan, index)
            return False
        if scan.ready >= target:
            if not self._step_checks(index, revision):
                return False
            return self._step_done(scan, index, revision)
        if self.policy.pause:
            self._set(step_message=self.s.step_message or "paused: spec.driver.upgradePolicy.pause")
            return self._hold()
        self._upgrade(scan, revision, targets, index)
        return False

    def _tally(
        self, scan: NodeScan, targets: list[int], *, fresh_epoch: bool
    ) -> tuple[int, int]:
        """The step's counters from the scan; returns the step's index and target."""
        threshold = self.policy.max_failure_threshold
        counter = 0 if fresh_epoch else min(
            threshold, scan.epoch_failures + len(scan.new_failures)
        )
        index = min(max(self.s.current_step_index, 1), len(self.policy.steps))
        target = targets[index - 1]
        # a step not above an earlier one adds no nodes (SPEC 3)
        before = max(targets[: index - 1], default=0)
        batch = max(target - before, 0)
        self._set(
            current_failure_retry=counter,
            total_upgrade_replicas=self.total,
            total_upgrade_ready_replicas=scan.ready,
            current_step_index=index,
            current_upgrade_replicas=batch,
            current_upgrade_ready_replicas=min(max(scan.ready - before, 0), batch),
        )
        return index, target

    def _hold(self) -> bool:
        """The step waits (``pause: true``, a fallback, a gate, the pause timer)."""
        self._set(current_step_state=st.STEP_PAUSED)
        return False

    def _resume(self, index: int) -> None:
        """A person resumed a batch the fallback paused: a new epoch, no failures counted."""
        self._condition(st.COND_BATCH_FAILED, "False", "Resumed", "a person resumed the batch")
        if self.s.condition_true(ConditionType.HEALTH_CHECK_FAILED):
            self._condition(ConditionType.HEALTH_CHECK_FAILED, "False", "Resumed",
                            "a person resumed the batch; the checks run again")
        self._set_epoch(index, reason="Resumed")
        self._set(current_failure_retry=0)
        self._event("Resumed", f"step {index}: resumed after the fallback", step=index)

    def _confirm_gate(self, index: int, *, done: bool) -> bool:
        """A person confirmed the gate; True when the step may advance now."""
        self._condition(st.COND_MANUAL_GATE, "False", "Confirmed", f"step {index} confirmed")
        self._event("GateConfirmed", f"step {index}: gate confirmed", step=index)
        if done:
            return True
        # a node joined during the gate: the step is done (and confirmed) once it is Ready
        self._condition(
            st.COND_MANUAL_GATE, "False", GATE_CONFIRMED_PENDING,
            f"step {index} confirmed; waiting for nodes that joined meanwhile",
        )
        return False

    def _step_done(self, scan: NodeScan, index: int, revision: str) -> bool:
        """The step reached its target: its gate, or its pause, then the next step."""
        pause_ms = self.policy.steps[index - 1].pause_ms
        if pause_ms is None:
            return self._gate(index, revision)
        return self._pause_timer(scan, index, pause_ms, revision)

    def _gate(self, index: int, revision: str) -> bool:
        """A step without a pause waits for a person (``pause: true`` written back to Git)."""
        if self._gate_confirmed():  # see GATE_CONFIRMED_PENDING
            if self.policy.pause:
                return self._hold()
            return self._advance(index, revision)
        self._condition(
            st.COND_MANUAL_GATE, "True", "WaitingForConfirmation",
            f"step {index} done; set spec.driver.upgradePolicy.pause to false to continue",
        )
        if not self.policy.pause:
            self.actions.append(SetPolicyPause(True))
        self._event("GateOpened", f"step {index} done: waiting for a person", step=index)
        return self._hold()

    def _pause_timer(self, scan: NodeScan, index: int, pause_ms: int, revision: str) -> bool:
        """The step's pause runs from the pass that found it done (``recheckTime``)."""
        if not self.s.recheck_time:
            self._set(recheck_time=format_time(after_ms(self.now, pause_ms)))
            self._event(
                "StepCompleted",
                f"step {index} done ({scan.ready}/{self.total} nodes); pausing {pause_ms} ms",
                step=index,
            )
        recheck = parse_time_or(self.s.recheck_time, self.now)
        if self.now + CLOCK_SLACK >= recheck and not self.policy.pause:
            return self._advance(index, revision)
        self.requeue.append(recheck)
        return self._hold()

    def _upgrade(self, scan: NodeScan, revision: str, targets: list[int], index: int) -> None:
        """The step's nodes upgrade: start what the budget allows."""
        policy = self.policy
        steps = policy.steps
        self._set(current_step_state=st.STEP_UPGRADE)
        if self.health_hold:  # SPEC 9: no answer (or no valid section): nothing new starts
            # one entry per waiting node: named up to the limit, so that a wave of thousands
            # keeps the status far below the API server's object size limit
            limit = self.settings.message_node_limit
            held = "; ".join(self.health_hold[:limit])
            if len(self.health_hold) > limit:
                held += f"; and {len(self.health_hold) - limit} more"
            self._set(step_message=held)
            self.holds.append({"kind": "health", "detail": held})
            self.keep_cordoned = frozenset(n.name for n in scan.cordoned)
            self.in_flight = scan.in_flight
            return
        next_wave = 0
        if steps[index - 1].pause_ms == 0 and index < len(steps):
            # the next step begins the moment this one is done: its first wave may wait
            # cordoned too, so that step starts with deletions alone
            next_batch = max(targets[index] - max(targets[:index]), 0)
            next_wave = min(policy.batch_max_parallel(next_batch), next_batch)
        target = targets[index - 1]
        self._start_nodes(scan, revision, target, self.s.current_upgrade_replicas, next_wave)

    def _gate_confirmed(self) -> bool:
        gate = self.s.condition(st.COND_MANUAL_GATE)
        return gate is not None and gate.reason == GATE_CONFIRMED_PENDING

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
        if (count or ahead) and not self._window_open():
            count = ahead = 0  # nodes cordoned ahead go back to work until the window opens
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
                    self._set(
                        step_message=f"{unavailable} rollout nodes unavailable (maxUnavailable "
                        f"{max_unavailable}): no new node starts"
                    )
        self.in_flight = scan.in_flight + retried + fresh

    def _window_open(self) -> bool:
        """Fresh starts only inside a maintenance window (SPEC 10); when closed, the step
        message says when the next one opens and the planner wakes then."""
        calendar = self.snap.windows
        if calendar is None or calendar.is_open(self.now):
            return True  # (is_open is cheap; only a closed calendar looks ahead)
        verdict = calendar.verdict(self.now)
        self._set(step_message=verdict.describe())
        self.holds.append(verdict.hold())
        if verdict.until is not None:
            self.requeue.append(verdict.until)
        return False

    def _advance(self, index: int, revision: str) -> bool:
        """Leave step ``index``: start the next one (True) or complete the rollout (False)."""
        self._set(recheck_time="")
        gate = self.s.condition(st.COND_MANUAL_GATE)
        if gate is not None and gate.reason == GATE_CONFIRMED_PENDING:
            self._condition(st.COND_MANUAL_GATE, "False", "Confirmed", gate.message)
        if index >= len(self.policy.steps):
            version = (self.s.applied_payload or {}).get("version")
            message = f"rollout of driver {version} completed"
            self._set(
                phase=st.PHASE_IDLING,
                current_step_state=st.STEP_COMPLETED,
                last_pod_spec_revision=revision,
                message=message,
            )
            self._condition(st.COND_PROGRESSING, "False", "RolloutCompleted", message)
            self._event("RolloutCompleted", message, step=index)
            return False
        targets = self.policy.step_targets(self.total)
        ready = self.s.total_upgrade_ready_replicas
        before = max(targets[:index], default=0)
        batch = max(targets[index] - before, 0)
        self._set(
            current_step_index=index + 1,
            current_upgrade_replicas=batch,
            current_upgrade_ready_replicas=min(max(ready - before, 0), batch),
            current_failure_retry=0,
            current_step_state=st.STEP_INIT,
        )
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
            f"step {index}: {self.s.current_failure_retry} failures reached "
            f"maxFailureThreshold {self.policy.max_failure_threshold} (failed: {named})"
        )
        self._health_failure_condition(scan)
        if self.policy.fallback == "rollback":
            self._begin_rollback(st.PHASE_TERMINATING, st.REASON_THRESHOLD, message)
            self._rolling_back()
            return
        self._condition(st.COND_BATCH_FAILED, "True", st.REASON_THRESHOLD, message)
        if not self.policy.pause:
            self.actions.append(SetPolicyPause(True))
        self._set(current_step_state=st.STEP_PAUSED, step_message=message)
        self._event("FallbackPaused", message, warning=True, step=index)

    # ----------------------------------------------------------------------------- rollback

    def _begin_rollback(self, phase: str, reason: str, why: str) -> None:
        self._set(phase=phase)
        for ctype in (st.COND_MANUAL_GATE, st.COND_BATCH_FAILED):
            if self.s.condition_true(ctype):
                self._condition(ctype, "False", reason, why)
        self._condition(st.COND_PROGRESSING, "False", reason, why)
        version = (self.s.applied_payload or {}).get("version")
        message = f"rolling back driver {version}: {why}"
        self._set(recheck_time="", current_step_state=st.STEP_UPGRADE, message=message)
        self._event("RollbackStarted", message, warning=True, step=self._step_index())

    def _rolling_back(self) -> None:
        snap = self.snap
        previous = self.s.previous_payload or previous_payload(snap)
        previous_image = Payload.from_spec(previous).image
        ds = snap.daemonset
        # The payload first: if we stop in between, the spec no longer asks for the new version
        # and the next plan continues the rollback instead of re-applying the new template.
        if Payload.from_spec(snap.payload).image != previous_image:
            self.actions.append(RestorePayload(dict(previous)))
        if ds.current_image != previous_image:
            self.actions.append(SetDaemonSetImage(previous_image))
            self._set(step_message="waiting for the driver DaemonSet to take the previous template")
            return
        # Restoring a template brings back its revision hash; adopt it if it was recreated.
        old = ds.current_revision
        new = self.s.upgrading_pod_spec_revision
        self._set(last_pod_spec_revision=old, step_message="")
        scan = scan_nodes(
            self.snap.nodes.values(), old, now=self.now, epoch=self.s.epoch(),
            ready_timeout=self.settings.ready_timeout, rollback_from=new,
        )
        self._settle(scan, old, counted=False)
        self._release(scan.stale_cordoned)
        for node in scan.convert:  # in flight to the new revision: turn around, same slot
            self._move(node, old, 1)
        started = self._rollback_starts(scan, old)
        self.in_flight = scan.in_flight + started
        remaining = (
            len(scan.untouched) + len(scan.failed_other) + len(scan.failed)
            + len(scan.new_failures) + scan.in_flight + len(scan.convert) + scan.settling
        )
        self._set(
            total_upgrade_ready_replicas=scan.ready_other,
            total_upgrade_replicas=self.total,
            current_step_state=st.STEP_UPGRADE,
        )
        if remaining or started or Payload.from_spec(snap.payload).image != previous_image:
            return
        self._rolled_back(previous)

    def _rollback_starts(self, scan: NodeScan, old: str) -> int:
        """Move nodes back to the previous revision, maxParallel of the step at a time (failed
        ones after their back-off first); returns how many started."""
        batch = self.s.current_upgrade_replicas or 1
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
        return started

    def _rolled_back(self, previous: Mapping[str, Any]) -> None:
        """Every node runs the previous revision again: the rollback is complete."""
        cause = self.s.condition(st.COND_PROGRESSING)
        reason = (cause.reason if cause is not None else "") or st.REASON_THRESHOLD
        rolled = (self.s.applied_payload or {}).get("version")
        message = (
            f"driver {rolled} rolled back to {previous.get('version')} ({reason}): "
            f"{cause.message if cause is not None else ''}"
        )
        self._condition(st.COND_ROLLED_BACK, "True", reason, message)
        self._set(
            phase=st.PHASE_IDLING if self.policy.enable_rollout else st.PHASE_DISABLED,
            message=message,
            last_applied_spec={"payload": dict(previous)},
            rolled_back_spec={"payload": dict(self.s.applied_payload or {})},
            current_step_state=st.STEP_COMPLETED,
        )
        self._event("RolledBack", message, warning=True, step=self._step_index())

    # ----------------------------------------------------------------------------- health gates

    def _version(self) -> str:
        return str((self.s.applied_payload or self.snap.payload).get("version") or "")

    def _note(self, health: Health, node: str | None) -> None:
        """Each check's last value and verdict, for ``reconciler status``."""
        checks = dict(self.health_status.get("checks") or {})
        for outcome in health.checks:
            entry: dict[str, Any] = {"state": str(outcome.state), "value": outcome.value,
                                     "since": format_time(outcome.since)}
            if node is not None:
                entry["node"] = node
            checks[outcome.check] = entry
        self.health_status["checks"] = checks

    def _judge_nodes(self, revision: str) -> tuple[frozenset[str], frozenset[str],
                                                   dict[str, RolloutNode]]:
        """The node checks of the moved nodes Ready on ``revision`` (SPEC 9): returns the
        nodes still verifying (in flight), those that failed now, and the nodes that got the
        new driver without a move (joined mid-rollout), seen as moved from now on."""
        config = self.health
        if config is None or not config.node_checks or self.snap.health is None:
            return frozenset(), frozenset(), {}
        all_readings = self.snap.health.node_readings
        version = self._version()
        waiting: set[str] = set()
        failed: set[str] = set()
        adopted: dict[str, RolloutNode] = {}
        for node in self.snap.nodes.values():
            update: dict[str, str | None] = {}
            if health_gate.joined_unchecked(node, revision):
                # record the move it made by itself: from here it is checked, counted and
                # retried like a node the rollout moved (it holds a slot while it verifies)
                update = {ANN_STATE: STATE_UPGRADING, ANN_TARGET: revision,
                          ANN_WAS_UNSCHEDULABLE: self._was_unschedulable(node),
                          ANN_ATTEMPT: "1", ANN_DELETED_AT: self.now_text,
                          ANN_FAILED_AT: None, ANN_FAILURE_REASON: None,
                          ANN_HEALTH: None, ANN_HEALTH_FAILURE: None, ANN_HEALTH_STEP: None}
                ann = {k: v for k, v in {**node.annotations, **update}.items() if v is not None}
                node = dataclasses.replace(node, annotations=ann)
                adopted[node.name] = node
            if not health_gate.verifying(node, revision):
                continue
            readings = all_readings.get(node.name, {})
            health = health_gate.judge_node(config, node, version, readings, self.now)
            self._note(health, node.name)
            text = health.record.to_text()
            if text != node.annotations.get(ANN_HEALTH):
                update[ANN_HEALTH] = text
            results = {c.check: str(c.state) for c in health.checks}
            if health.state is HealthState.PASSED:
                update[ANN_HEALTH_STEP] = str(self.s.current_step_index)
                self.health_passed.append(node.name)
                self.actions.append(AnnotateNode(node.name, update))
                values = ", ".join(f"{c.check}={c.value}" for c in health.checks)
                self._event("HealthCheckPassed", f"{node.name}: node health checks passed "
                            f"({values})", node=node.name, step=self._step_index(),
                            extra={"checks": results})
            elif health.failure is not None:
                failure = health.failure
                update[ANN_HEALTH_FAILURE] = failure.message
                self.actions.append(AnnotateNode(node.name, update))
                failed.add(node.name)
                self.health_failures[node.name] = failure
                self._event("HealthCheckFailed", failure.message, warning=True, node=node.name,
                            step=self._step_index(),
                            extra={"checks": {failure.check: str(HealthState.FAILED)},
                                   "value": failure.value, "query": failure.query})
            else:
                if update:
                    self.actions.append(AnnotateNode(node.name, update))
                waiting.add(node.name)
                self.requeue.append(self.now + config.interval)
                self.requeue.extend(health.record.started + c.within
                                    for c in config.node_checks)
                fresh = health_gate.fresh(readings, health.record.started)
                if health_gate.no_answer(config, health, fresh):
                    self.health_hold.append(f"{node.name}: {health.message}")
        return frozenset(waiting), frozenset(failed), adopted

    def _step_checks(self, index: int, revision: str) -> bool:
        """The step checks, once all of the step's nodes passed and before StepReady: True
        when they passed (or there are none)."""
        config = self.health
        if config is None or not config.step_checks or self.snap.health is None:
            return True
        nodes = sorted({*health_gate.step_nodes(self.snap.nodes.values(), revision, index),
                        *(self.health_passed if index == self.s.current_step_index else ())})
        if not nodes:
            return True
        epoch = self.s.epoch()
        record = health_gate.step_record(self.health_status, epoch, self.now)
        already = all(c.name in record.passed for c in config.step_checks)
        readings = health_gate.fresh(self.snap.health.step_readings, record.started)
        health = step_health(config.step_checks, nodes, self._version(), record, readings,
                             self.now)
        self.health_status["step"] = {"epoch": epoch, "index": index,
                                      **health.record.as_data()}
        self._note(health, None)
        results = {c.check: str(c.state) for c in health.checks}
        if health.state is HealthState.PASSED:
            if not already:
                values = ", ".join(f"{c.check}={c.value}" for c in health.checks)
                self._event("HealthCheckPassed", f"step {index}: step health checks passed "
                            f"({values})", step=index, extra={"checks": results})
            return True
        if health.failure is not None:
            self._step_check_failed(health.failure, index)
            return False
        self._set(current_step_state=st.STEP_UPGRADE,
                  step_message=health.message or f"step {index}: step health checks hold")
        self.requeue.append(self.now + config.interval)
        self.requeue.extend(since + c.hold for c in config.step_checks
                            if (since := health.record.holding.get(c.name)) is not None)
        if health_gate.no_answer(config, health, readings):
            self.health_hold.append(health.message)
        return False

    def _step_check_failed(self, failure: HealthFailure, index: int) -> None:
        """A false step check ends the batch: the fallback at once (SPEC 9)."""
        message = f"step {index}: {failure.message}"
        self._condition(ConditionType.HEALTH_CHECK_FAILED, "True", failure.reason,
                        f"check {failure.check}: value {failure.value} (query {failure.query})")
        self._event("HealthCheckFailed", message, warning=True, step=index,
                    extra={"checks": {failure.check: str(HealthState.FAILED)},
                           "value": failure.value, "query": failure.query})
        if self.policy.fallback == "rollback":
            self._begin_rollback(st.PHASE_TERMINATING, st.REASON_THRESHOLD, message)
            self._rolling_back()
            return
        self._condition(st.COND_BATCH_FAILED, "True", failure.reason, message)
        if not self.policy.pause:
            self.actions.append(SetPolicyPause(True))
        self._set(current_step_state=st.STEP_PAUSED, step_message=message)
        self._event("FallbackPaused", message, warning=True, step=index)

    def _health_failure_condition(self, scan: NodeScan) -> None:
        """A fallback caused by failed node checks also carries a HealthCheckFailed condition
        naming the check, the node and the value."""
        found = [f.message for f in self.health_failures.values()]
        for node in scan.failed:
            ann = node.annotations
            if ann.get(ANN_FAILURE_REASON) == ConditionType.HEALTH_CHECK_FAILED:
                found.append(ann.get(ANN_HEALTH_FAILURE) or f"health check failed on node "
                             f"{node.name}")
        if not found:
            return
        limit = self.settings.message_node_limit
        message = "; ".join(sorted(found)[:limit])
        if len(found) > limit:
            message += f" and {len(found) - limit} more"
        self._condition(ConditionType.HEALTH_CHECK_FAILED, "True",
                        ConditionType.HEALTH_CHECK_FAILED.value, message)
