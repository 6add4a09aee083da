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
from reconciler.rollout.pass_state import Decisions, Found, Observed
from reconciler.rollout.scan import NodeScan, scan_nodes


def idle(seen: Observed, out: Decisions) -> None:
    snap = seen.snap
    # nothing starts while idle: no node stays cordoned ahead (left over from a rollout whose
    # status someone reset, or a crash)
    node_states.release(out, [
        n for n in snap.nodes.values()
        if n.annotations.get(ANN_STATE) in (STATE_CORDONED, STATE_DRAINING)
        and (n.pod is None or not n.pod.deleting)
    ])
    recovered(seen, out, snap.daemonset.current_revision)
    desired = Payload.from_spec(snap.payload)
    idle_phase = st.PHASE_IDLING if seen.policy.enable_rollout else st.PHASE_DISABLED
    applied = out.status.applied_payload
    recorded = out.status.last_pod_spec_revision
    if (
        desired.image == snap.daemonset.current_image
        and seen.policy.enable_rollout
        and applied
        and Payload.from_spec(applied).image != desired.image
        and recorded
        and recorded != snap.daemonset.current_revision
    ):
        # We set the template and stopped before recording the rollout: start it now, from
        # what the status says the fleet ran.
        start(seen, out, dict(applied), desired, recorded)
        return
    if desired.image == snap.daemonset.current_image:
        out.set(
            phase=idle_phase,
            last_applied_spec={"payload": dict(snap.payload)},
            last_pod_spec_revision=snap.daemonset.current_revision,
            message=out.status.message or "nothing to do",
        )
        return
    before = rollback.previous_payload(snap)
    out.set(
        last_co_driver_spec={"payload": before},
        last_applied_spec={"payload": dict(snap.payload)},
    )
    out.act(SetDaemonSetImage(desired.image))
    if not seen.policy.enable_rollout:
        # docs/rollout.md#starting-a-rollout: the template changes; OnDelete leaves every pod where
        # it is.
        message = (
            f"grey release off: driver template set to {desired.version}; nodes change "
            "when their driver pod is deleted"
        )
        out.set(phase=st.PHASE_DISABLED, message=message)
        out.event("TemplateUpdated", message)
        return
    start(seen, out, before, desired, snap.daemonset.current_revision)


def recovered(seen: Observed, out: Decisions, revision: str) -> None:
    """A node a step's toleration left behind whose driver turned Ready on the revision the
    fleet runs after the rollout ended: it is upgraded, so our cordon goes and its records are
    cleared, as for any node that completes (docs/rollout.md#failures-tolerated-in-a-step)."""
    ready = [
        n for n in seen.snap.nodes.values()
        if n.annotations and tolerated_step(n.annotations, revision) is not None
        and n.pod is not None and n.pod.ready and not n.pod.deleting
        and n.pod.revision == revision
    ]
    if ready:
        node_states.completed(seen, out, NodeScan(completed=ready), revision, False)


def start(seen: Observed, out: Decisions, before: dict[str, Any], desired: Payload,
          old_revision: str) -> None:
    message = f"upgrading driver {before.get('version')} -> {desired.version}"
    skipped.start_clears(seen, out)
    tolerated.start_clears(seen, out)
    out.set(
        last_co_driver_spec={"payload": before},
        last_applied_spec={"payload": dict(seen.snap.payload)},
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
        total_upgrade_replicas=out.total,
        total_upgrade_ready_replicas=0,
        step_message="waiting for the driver DaemonSet to take the new template",
        recheck_time="",
        # docs/rollout.md#topology-aware-waves: the topology holds for the whole rollout (none if it
        # starts without)
        topology=topology.frozen(seen.settings.topology),
        # the health checks' timers and verdicts start afresh
        health={},
    )
    out.set_epoch(1, len(seen.policy.steps), reason="StepStarted")
    out.event("RolloutStarted", message, step=1)


def progressing(seen: Observed, out: Decisions) -> None:
    snap, policy = seen.snap, seen.policy
    if not policy.enable_rollout:
        rollback.begin(out, st.PHASE_DISABLING, st.REASON_DISABLED, "enableRollout turned off")
        rollback.rolling_back(seen, out)
        return
    target_image = Payload.from_spec(out.status.applied_payload or snap.payload).image
    if rollback.payload_reverted(seen, out, target_image):
        rollback.rolling_back(seen, out)
        return
    ds = snap.daemonset
    if ds.current_image != target_image:
        out.act(SetDaemonSetImage(target_image))
        if not out.status.upgrading_pod_spec_revision:
            out.set(current_step_state=st.STEP_INIT)
        out.set(step_message="waiting for the driver DaemonSet to take the new template")
        return
    revision = ds.current_revision
    out.set(upgrading_pod_spec_revision=revision)
    if Payload.from_spec(snap.payload).image != target_image:
        out.set(message="spec.driver.payload changed during an active rollout; ignored until "
                "it ends")
    out.set(step_message="")
    verdicts = health_judgement.judge_nodes(seen, out, revision)
    adopted = verdicts.adopted
    nodes = snap.nodes.values()
    waves = topology.read(out.status.topology)
    scan = scan_nodes(
        [adopted.get(n.name, n) for n in nodes] if adopted else nodes, revision,
        now=seen.now, epoch=out.status.epoch(), ready_timeout=seen.settings.ready_timeout,
        verifying=verdicts.verifying, health_failed=frozenset(verdicts.failed),
        skipped=frozenset(out.status.skipped),
        skip_unavailable=seen.settings.unavailable_nodes == skipped.SKIP,
        domain_key=waves.key if waves is not None else None,
    )
    if scan.skipped:
        skipped.found(out, scan.skipped)
    found = Found(
        revision, scan,
        topology.Topology.of(waves, nodes, scan.domains) if waves is not None else None,
        verdicts,
    )
    node_states.settle(seen, out, scan, revision, counted=True)
    node_states.unrecorded(seen, out, scan, revision, True)
    out.count(in_flight=scan.in_flight)
    steps.run(seen, out, found)
    for note in (skipped.message(seen, out.status), tolerated.message(seen, scan)):
        if note:
            out.set(step_message=f"{out.status.step_message}; {note}"
                    if out.status.step_message else note)
    # a rollback releases them itself; a step just begun (``again``) starts them next
    if out.status.phase == st.PHASE_PROGRESSING and not out.again:
        started = {a.node for a in out.actions if isinstance(a, DeleteDriverPod) or (
            isinstance(a, AnnotateNode) and a.annotations.get(ANN_STATE) == STATE_DRAINING)}
        node_states.release(
            out, [n for n in scan.cordoned + scan.stale_cordoned if n.name not in started],
            out.keep_cordoned,
        )
