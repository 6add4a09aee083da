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
from reconciler.rollout.pass_state import Decisions, Observed
from reconciler.rollout.scan import NodeScan, scan_nodes
from reconciler.rollout.topology import Topology


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


def begin(out: Decisions, phase: str, reason: str, why: str) -> None:
    out.set(phase=phase)
    for ctype in (st.COND_MANUAL_GATE, ConditionType.GATE_CONFIRMED, st.COND_BATCH_FAILED,
                  st.COND_PROGRESSING):
        out.condition(ctype, "False", reason, why)
    out.condition(ConditionType.ROLLING_BACK, "True", reason, why)
    version = (out.status.applied_payload or {}).get("version")
    message = f"rolling back driver {version}: {why}"
    out.set(recheck_time="", current_step_state=st.STEP_UPGRADE, message=message)
    out.event("RollbackStarted", message, warning=True, step=out.step_index())


def rolling_back(seen: Observed, out: Decisions) -> None:
    snap = seen.snap
    previous = out.status.previous_payload or previous_payload(snap)
    previous_image = Payload.from_spec(previous).image
    ds = snap.daemonset
    # The payload first: if we stop in between, the spec no longer asks for the new version
    # and the next plan continues the rollback instead of re-applying the new template.
    if Payload.from_spec(snap.payload).image != previous_image:
        out.act(RestorePayload(dict(previous)))
    if ds.current_image != previous_image:
        out.act(SetDaemonSetImage(previous_image))
        out.set(step_message="waiting for the driver DaemonSet to take the previous template")
        return
    # Restoring a template brings back its revision hash; adopt it if it was recreated.
    old = ds.current_revision
    new = out.status.upgrading_pod_spec_revision
    out.set(last_pod_spec_revision=old, step_message="")
    settings = topology.read(out.status.topology)
    # the order alone (the same order as the rollout's: the same frozen settings, the same nodes)
    order = Topology.of(settings, snap.nodes.values()) if settings is not None else None
    scan = scan_nodes(
        snap.nodes.values(), old, now=seen.now, epoch=out.status.epoch(),
        ready_timeout=seen.settings.ready_timeout, rollback_from=new,
    )
    node_states.settle(seen, out, scan, old, counted=False)
    node_states.release(out, scan.stale_cordoned)
    for node in scan.convert:  # in flight to the new revision: turn around, same slot
        node_states.start(seen, out, node, old, 1)
    started = starts(seen, out, scan, old, order)
    out.count(in_flight=scan.in_flight + started)
    remaining = (
        len(scan.untouched) + len(scan.failed_other) + len(scan.failed)
        + len(scan.new_failures) + scan.in_flight + len(scan.convert) + scan.settling
    )
    out.set(
        total_upgrade_ready_replicas=scan.ready_other,
        total_upgrade_replicas=out.total,
        current_step_state=st.STEP_UPGRADE,
    )
    if remaining or started or Payload.from_spec(snap.payload).image != previous_image:
        return
    rolled_back(seen, out, previous)


def starts(seen: Observed, out: Decisions, scan: NodeScan, old: str,
           order: Topology | None) -> int:
    """Move nodes back to the previous revision, maxParallel of the step at a time (failed
    ones after their back-off first), in the rollout's ``order``; returns how many started."""
    batch = out.status.current_upgrade_replicas or 1
    slots = seen.policy.batch_max_parallel(batch) - scan.in_flight
    started = selection.retries(seen, out, scan.failed, old, slots, order) if slots > 0 else 0
    waiting = scan.failed_other + selection.in_order(scan.untouched, order)
    for node in waiting:
        if started >= slots:
            break
        if selection.waits_for(seen.settings, node) or not node.ready:
            continue
        # drained first when drain is on (docs/live-clusters.md#the-drain)
        node_states.start(seen, out, node, old, 1)
        started += 1
    return started


def rolled_back(seen: Observed, out: Decisions, previous: Mapping[str, Any]) -> None:
    """Every node runs the previous revision again: the rollback is complete."""
    cause = out.status.condition(ConditionType.ROLLING_BACK)
    reason = (cause.reason if cause is not None else "") or st.REASON_THRESHOLD
    rolled = (out.status.applied_payload or {}).get("version")
    message = (
        f"driver {rolled} rolled back to {previous.get('version')} ({reason}): "
        f"{cause.message if cause is not None else ''}"
    )
    out.condition(ConditionType.ROLLING_BACK, "False", reason, message)
    out.condition(st.COND_ROLLED_BACK, "True", reason, message)
    out.set(
        phase=st.PHASE_IDLING if seen.policy.enable_rollout else st.PHASE_DISABLED,
        message=message,
        last_applied_spec={"payload": dict(previous)},
        rolled_back_spec={"payload": dict(out.status.applied_payload or {})},
        current_step_state=st.STEP_COMPLETED,
    )
    out.event("RolledBack", message, warning=True, step=out.step_index())


def payload_reverted(seen: Observed, out: Decisions, target_image: str) -> bool:
    """Our own RestorePayload landed but its status did not (or a person reverted the
    version): the fleet must go back. True when a rollback began."""
    previous = out.status.previous_payload
    spec_image = Payload.from_spec(seen.snap.payload).image
    if not previous or spec_image == target_image:
        return False
    if spec_image != Payload.from_spec(previous).image:
        return False
    cause = out.status.condition(ConditionType.ROLLING_BACK)
    reason = cause.reason if cause is not None else ""
    why = "spec.driver.payload is back on the previous version"
    threshold = seen.policy.max_failure_threshold
    counted = failures_in(seen, out.status.epoch())
    if reason not in (st.REASON_THRESHOLD, st.REASON_DISABLED):
        reason = st.REASON_THRESHOLD if counted >= threshold else "PayloadReverted"
    if reason == st.REASON_THRESHOLD and counted >= threshold:
        # the fallback's own status write was lost: the nodes' records say what it said
        out.set(current_failure_retry=threshold)
        why = (f"step {out.step_index()}: {threshold} failures reached maxFailureThreshold "
               f"{threshold}; {why}")
    begin(out, st.PHASE_TERMINATING, reason, why)
    return True


def failures_in(seen: Observed, epoch: str) -> int:
    """The failures the nodes' records count in batch epoch ``epoch``."""
    prefix = epoch + "|"
    count = 0
    for node in seen.snap.nodes.values():
        failures = node.annotations.get(ANN_FAILURES)
        if failures and failures.startswith(prefix):
            count += st.int_or(failures[len(prefix) :], 1)
    return count
