"""The rollback of docs/rollout.md#steps (the fallback ``rollback``, enableRollout turned off, the
payload reverted): the previous payload and template first, then every node back to the previous
revision, maxParallel of the step at a time, no failures counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reconciler.names import ANN_FAILURES, ConditionType
from reconciler.policy.payload import Payload
from reconciler.rollout import node_states, selection, topology
from reconciler.rollout import status as st
from reconciler.rollout.actions import RestorePayload, SetDaemonSetImage
from reconciler.rollout.model import RolloutSnapshot
from reconciler.rollout.pass_state import Pass
from reconciler.rollout.scan import NodeScan, scan_nodes


def previous_payload(snapshot: RolloutSnapshot) -> dict[str, Any]:
    """The payload the fleet runs: the last applied one if it still names the DaemonSet's
    image, else parsed back from the image (``<registry>/<name>:<version>``)."""
    last = (snapshot.status.get("lastAppliedSpec") or {}).get("payload")
    if last and Payload.from_spec(last).image == snapshot.daemonset.current_image:
        return dict(last)
    registry, name, version = split_image(snapshot.daemonset.current_image,
                                          str(snapshot.payload.get("name") or ""))
    result: dict[str, Any] = dict(snapshot.payload)
    result.update({"registry": registry, "name": name, "version": version})
    return result


def split_image(image: str, name: str = "") -> tuple[str, str, str]:
    """``<registry>/<name>:<version>`` back into its parts. A name with a folder (the vendor's
    ``metax/driver-image``) stays whole when the image ends with ``name``, so the payload keeps
    the spelling the spec has; else the name is the image's last path part."""
    repo, _, version = image.rpartition(":")
    if name and (repo == name or repo.endswith(f"/{name}")):
        return repo[: len(repo) - len(name)].rstrip("/"), name, version
    registry, _, last = repo.rpartition("/")
    return registry, last, version


def begin(p: Pass, phase: str, reason: str, why: str) -> None:
    p.set(phase=phase)
    for ctype in (st.COND_MANUAL_GATE, ConditionType.GATE_CONFIRMED, st.COND_BATCH_FAILED,
                  st.COND_PROGRESSING):
        p.condition(ctype, "False", reason, why)
    p.condition(ConditionType.ROLLING_BACK, "True", reason, why)
    version = (p.s.applied_payload or {}).get("version")
    message = f"rolling back driver {version}: {why}"
    p.set(recheck_time="", current_step_state=st.STEP_UPGRADE, message=message)
    p.event("RollbackStarted", message, warning=True, step=p.step_index())


def rolling_back(p: Pass) -> None:
    snap = p.snap
    previous = p.s.previous_payload or previous_payload(snap)
    previous_image = Payload.from_spec(previous).image
    ds = snap.daemonset
    # The payload first: if we stop in between, the spec no longer asks for the new version
    # and the next plan continues the rollback instead of re-applying the new template.
    if Payload.from_spec(snap.payload).image != previous_image:
        p.actions.append(RestorePayload(dict(previous)))
    if ds.current_image != previous_image:
        p.actions.append(SetDaemonSetImage(previous_image))
        p.set(step_message="waiting for the driver DaemonSet to take the previous template")
        return
    # Restoring a template brings back its revision hash; adopt it if it was recreated.
    old = ds.current_revision
    new = p.s.upgrading_pod_spec_revision
    p.set(last_pod_spec_revision=old, step_message="")
    settings = topology.read(p.s.topology)
    if settings is not None and p.topology is None:
        p.topology = topology.Topology.of(settings, snap.nodes.values())  # the order alone
    scan = scan_nodes(
        snap.nodes.values(), old, now=p.now, epoch=p.s.epoch(),
        ready_timeout=p.settings.ready_timeout, rollback_from=new,
    )
    node_states.settle(p, scan, old, counted=False)
    node_states.release(p, scan.stale_cordoned)
    for node in scan.convert:  # in flight to the new revision: turn around, same slot
        node_states.start(p, node, old, 1)
    started = starts(p, scan, old)
    p.in_flight = scan.in_flight + started
    remaining = (
        len(scan.untouched) + len(scan.failed_other) + len(scan.failed)
        + len(scan.new_failures) + scan.in_flight + len(scan.convert) + scan.settling
    )
    p.set(
        total_upgrade_ready_replicas=scan.ready_other,
        total_upgrade_replicas=p.total,
        current_step_state=st.STEP_UPGRADE,
    )
    if remaining or started or Payload.from_spec(snap.payload).image != previous_image:
        return
    rolled_back(p, previous)


def starts(p: Pass, scan: NodeScan, old: str) -> int:
    """Move nodes back to the previous revision, maxParallel of the step at a time (failed
    ones after their back-off first); returns how many started."""
    batch = p.s.current_upgrade_replicas or 1
    slots = p.policy.batch_max_parallel(batch) - scan.in_flight
    started = selection.retries(p, scan.failed, old, slots) if slots > 0 else 0
    waiting = scan.failed_other + selection.in_order(scan.untouched, p.topology)
    for node in waiting:
        if started >= slots:
            break
        if selection.waits_for(p, node) or not node.ready:
            continue
        # drained first when drain is on (docs/live-clusters.md#the-drain)
        node_states.start(p, node, old, 1)
        started += 1
    return started


def rolled_back(p: Pass, previous: Mapping[str, Any]) -> None:
    """Every node runs the previous revision again: the rollback is complete."""
    cause = p.s.condition(ConditionType.ROLLING_BACK)
    reason = (cause.reason if cause is not None else "") or st.REASON_THRESHOLD
    rolled = (p.s.applied_payload or {}).get("version")
    message = (
        f"driver {rolled} rolled back to {previous.get('version')} ({reason}): "
        f"{cause.message if cause is not None else ''}"
    )
    p.condition(ConditionType.ROLLING_BACK, "False", reason, message)
    p.condition(st.COND_ROLLED_BACK, "True", reason, message)
    p.set(
        phase=st.PHASE_IDLING if p.policy.enable_rollout else st.PHASE_DISABLED,
        message=message,
        last_applied_spec={"payload": dict(previous)},
        rolled_back_spec={"payload": dict(p.s.applied_payload or {})},
        current_step_state=st.STEP_COMPLETED,
    )
    p.event("RolledBack", message, warning=True, step=p.step_index())


def payload_reverted(p: Pass, target_image: str) -> bool:
    """Our own RestorePayload landed but its status did not (or a person reverted the
    version): the fleet must go back. True when a rollback began."""
    previous = p.s.previous_payload
    spec_image = Payload.from_spec(p.snap.payload).image
    if not previous or spec_image == target_image:
        return False
    if spec_image != Payload.from_spec(previous).image:
        return False
    cause = p.s.condition(ConditionType.ROLLING_BACK)
    reason = cause.reason if cause is not None else ""
    if reason not in (st.REASON_THRESHOLD, st.REASON_DISABLED):
        reason = st.REASON_THRESHOLD if threshold_reached(p) else "PayloadReverted"
    begin(p, st.PHASE_TERMINATING, reason, "spec.driver.payload is back on the previous version")
    return True


def threshold_reached(p: Pass) -> bool:
    epoch = p.s.epoch() + "|"
    count = 0
    for node in p.snap.nodes.values():
        failures = node.annotations.get(ANN_FAILURES)
        if failures and failures.startswith(epoch):
            count += st.int_or(failures[len(epoch) :], 1)
    return count >= p.policy.max_failure_threshold
