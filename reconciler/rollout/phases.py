"""The rollout's phases (docs/rollout.md#starting-a-rollout): idle (a new payload starts a rollout),
progressing (the template, the health judgement, the node scan, its states settled, then the steps),
and the rollback (``rollback``)."""

from __future__ import annotations

from typing import Any

from reconciler.names import ANN_STATE, STATE_CORDONED, STATE_DRAINING
from reconciler.policy.payload import Payload
from reconciler.rollout import (
    health_judgement,
    node_states,
    rollback,
    skipped,
    steps,
    tolerated,
    topology,
)
from reconciler.rollout import status as st
from reconciler.rollout.actions import AnnotateNode, DeleteDriverPod, SetDaemonSetImage
from reconciler.rollout.node_class import tolerated_step
from reconciler.rollout.pass_state import Pass
from reconciler.rollout.scan import NodeScan, scan_nodes


def idle(p: Pass) -> None:
    snap = p.snap
    # nothing starts while idle: no node stays cordoned ahead (left over from a rollout whose
    # status someone reset, or a crash)
    node_states.release(p, [
        n for n in snap.nodes.values()
        if n.annotations.get(ANN_STATE) in (STATE_CORDONED, STATE_DRAINING)
        and (n.pod is None or not n.pod.deleting)
    ])
    recovered(p, snap.daemonset.current_revision)
    desired = Payload.from_spec(snap.payload)
    idle_phase = st.PHASE_IDLING if p.policy.enable_rollout else st.PHASE_DISABLED
    applied = p.s.applied_payload
    recorded = p.s.last_pod_spec_revision
    if (
        desired.image == snap.daemonset.current_image
        and p.policy.enable_rollout
        and applied
        and Payload.from_spec(applied).image != desired.image
        and recorded
        and recorded != snap.daemonset.current_revision
    ):
        # We set the template and stopped before recording the rollout: start it now, from
        # what the status says the fleet ran.
        start(p, dict(applied), desired, recorded)
        return
    if desired.image == snap.daemonset.current_image:
        p.set(
            phase=idle_phase,
            last_applied_spec={"payload": dict(snap.payload)},
            last_pod_spec_revision=snap.daemonset.current_revision,
            message=p.s.message or "nothing to do",
        )
        return
    before = rollback.previous_payload(snap)
    p.set(
        last_co_driver_spec={"payload": before},
        last_applied_spec={"payload": dict(snap.payload)},
    )
    p.actions.append(SetDaemonSetImage(desired.image))
    if not p.policy.enable_rollout:
        # docs/rollout.md#starting-a-rollout: the template changes; OnDelete leaves every pod where
        # it is.
        message = (
            f"grey release off: driver template set to {desired.version}; nodes change "
            "when their driver pod is deleted"
        )
        p.set(phase=st.PHASE_DISABLED, message=message)
        p.event("TemplateUpdated", message)
        return
    start(p, before, desired, snap.daemonset.current_revision)


def recovered(p: Pass, revision: str) -> None:
    """A node a step's toleration left behind whose driver turned Ready on the revision the
    fleet runs after the rollout ended: it is upgraded, so our cordon goes and its records are
    cleared, as for any node that completes (docs/rollout.md#failures-tolerated-in-a-step)."""
    ready = [
        n for n in p.snap.nodes.values()
        if n.annotations and tolerated_step(n.annotations, revision) is not None
        and n.pod is not None and n.pod.ready and not n.pod.deleting
        and n.pod.revision == revision
    ]
    if ready:
        node_states.completed(p, NodeScan(completed=ready), revision, False)


def start(p: Pass, before: dict[str, Any], desired: Payload, old_revision: str) -> None:
    message = f"upgrading driver {before.get('version')} -> {desired.version}"
    p.health_status = {}
    skipped.start_clears(p)
    tolerated.start_clears(p)
    p.set(
        last_co_driver_spec={"payload": before},
        last_applied_spec={"payload": dict(p.snap.payload)},
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
        total_upgrade_replicas=p.total,
        total_upgrade_ready_replicas=0,
        step_message="waiting for the driver DaemonSet to take the new template",
        recheck_time="",
        # docs/rollout.md#topology-aware-waves: the topology holds for the whole rollout (none if it
        # starts without)
        topology=topology.frozen(p.settings.topology),
    )
    p.set_epoch(1, reason="StepStarted")
    p.event("RolloutStarted", message, step=1)


def progressing(p: Pass) -> None:
    snap, policy = p.snap, p.policy
    if not policy.enable_rollout:
        rollback.begin(p, st.PHASE_DISABLING, st.REASON_DISABLED, "enableRollout turned off")
        rollback.rolling_back(p)
        return
    target_image = Payload.from_spec(p.s.applied_payload or snap.payload).image
    if rollback.payload_reverted(p, target_image):
        rollback.rolling_back(p)
        return
    ds = snap.daemonset
    if ds.current_image != target_image:
        p.actions.append(SetDaemonSetImage(target_image))
        if not p.s.upgrading_pod_spec_revision:
            p.set(current_step_state=st.STEP_INIT)
        p.set(step_message="waiting for the driver DaemonSet to take the new template")
        return
    revision = ds.current_revision
    p.set(upgrading_pod_spec_revision=revision)
    if Payload.from_spec(snap.payload).image != target_image:
        p.set(message="spec.driver.payload changed during an active rollout; ignored until it "
              "ends")
    p.set(step_message="")
    verifying, health_failed, adopted = health_judgement.judge_nodes(p, revision)
    nodes = snap.nodes.values()
    waves = topology.read(p.s.topology)
    scan = scan_nodes(
        [adopted.get(n.name, n) for n in nodes] if adopted else nodes, revision,
        now=p.now, epoch=p.s.epoch(), ready_timeout=p.settings.ready_timeout,
        verifying=verifying, health_failed=health_failed,
        skipped=frozenset(p.s.skipped),
        skip_unavailable=p.settings.unavailable_nodes == skipped.SKIP,
        domain_key=waves.key if waves is not None else None,
    )
    if scan.skipped:
        skipped.found(p, scan.skipped)
    if waves is not None:
        p.topology = topology.Topology.of(waves, nodes, scan.domains)
    node_states.settle(p, scan, revision, counted=True)
    node_states.unrecorded(p, scan, revision, True)
    tolerated.found(p, scan)
    p.in_flight = scan.in_flight
    steps.run(p, scan, revision)
    for note in (skipped.message(p), tolerated.message(p)):
        if note:
            p.set(step_message=f"{p.s.step_message}; {note}" if p.s.step_message else note)
    # a rollback releases them itself; a step just begun (``again``) starts them next
    if p.s.phase == st.PHASE_PROGRESSING and not p.again:
        started = {a.node for a in p.actions if isinstance(a, DeleteDriverPod) or (
            isinstance(a, AnnotateNode) and a.annotations.get(ANN_STATE) == STATE_DRAINING)}
        node_states.release(
            p, [n for n in scan.cordoned + scan.stale_cordoned if n.name not in started],
            p.keep_cordoned,
        )
