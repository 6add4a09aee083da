"""When a status snapshot becomes a commit (docs/gitops.md), and what its message says.

Pure: snapshots are plain data (the shape of ``schemas/status-snapshot.schema.json``), time is a
number passed in. The rules:

- only the *key* of a snapshot counts: phase, step index, step state, the rejected commit, the
  firmware phase. Ready counters alone never cause a commit; the latest ones ride along;
- a change is committed once it has been stable for ``min_interval`` and at least
  ``min_interval`` after the previous commit, so the short-lived ``StepUpgradeInit`` and
  ``StepReady`` states between steps coalesce away instead of causing a commit storm;
- a state that keeps changing is still committed at least every ``max_delay``;
- terminal states (rollout ``Completed``, phase ``Idling``/``Disabled``) and a newly rejected
  commit are committed at once, so the end of a rollout or the reason for a refusal is in Git
  immediately;
- a change back to the committed key before it was written cancels it.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from reconciler.gitops.commits import PHASE_TRAILER, ROLLOUT_STEP_TRAILER, SOURCE_COMMIT_TRAILER
from reconciler.names import ACTIVE_PHASES, TERMINAL_PHASES
from reconciler.stored_status import conditions_by_type, conditions_in_force, upgrade_status_of


@dataclass(frozen=True, slots=True)
class SnapshotKey:
    phase: str | None
    step_index: int | None
    step_state: str | None
    rejected_commit: str | None = None
    firmware_phase: str | None = None
    #: the version the promotion gate holds (docs/configuration.md#promotion)
    held_version: str | None = None
    #: the version this cluster runs that its upstream rolled back (docs/configuration.md#promotion;
    #: reported only)
    upstream_rolled_back: str | None = None
    #: the payload version the last rollout applied (``lastAppliedSpec``): a rollout that ends
    #: between two looks in the same phase, step and state as the last one (Idling, step 3/3
    #: Completed) is still a new state, and a downstream's promotion gate reads it
    #: (docs/configuration.md#promotion). The spec's version alone (a merge the controller has not
    #: acted on) makes no commit.
    applied_version: str | None = None
    #: a closed maintenance window's next opening ("": none within the horizon; None: no window
    #: holds): a window closing or opening is a new state, and the snapshot says when the next
    #: one opens (docs/configuration.md#maintenance-windows)
    window_until: str | None = None
    #: ``fleet.domains`` (``key=domain:count,...``): counted again (a new topology key, nodes
    #: relabelled), ``reconciler plan`` needs them in Git before the next rollout starts
    fleet_domains: str | None = None

    @property
    def terminal(self) -> bool:
        """The rollout ended or there is none: nothing will follow soon, so write it now."""
        return self.step_state == "Completed" or self.phase in TERMINAL_PHASES or (
            self.phase is None
        )

    def urgent_after(self, committed: SnapshotKey | None) -> bool:
        """Committed at once: a terminal state, or a rejection Git does not show yet (later
        snapshots that still carry the same rejection coalesce like any other)."""
        return self.terminal or (
            self.rejected_commit is not None
            and (committed is None or committed.rejected_commit != self.rejected_commit)
        ) or (committed is not None and committed.held_version != self.held_version)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def snapshot_key(snapshot: Mapping[str, Any]) -> SnapshotKey:
    upgrade = _mapping(snapshot.get("upgradeStatus"))
    step = _mapping(upgrade.get("status"))
    index = step.get("currentStepIndex")
    return SnapshotKey(
        phase=_str_or_none(upgrade.get("phase")),
        step_index=index if isinstance(index, int) and not isinstance(index, bool) else None,
        step_state=_str_or_none(step.get("currentStepState")),
        rejected_commit=_str_or_none(_mapping(snapshot.get("rejection")).get("commit")),
        # no firmware section and an idle one say the same: no commit for that alone
        firmware_phase=_str_or_none(_mapping(snapshot.get("firmware")).get("phase") or None)
        if _mapping(snapshot.get("firmware")).get("phase") != "Idle" else None,
        held_version=_str_or_none(
            _mapping(_mapping(snapshot.get("promotion")).get("held")).get("version")),
        upstream_rolled_back=_str_or_none(_mapping(_mapping(snapshot.get("promotion")).get(
            "upstreamRolledBack")).get("version")),
        applied_version=_str_or_none(_mapping(_mapping(upgrade.get("lastAppliedSpec")).get(
            "payload")).get("version")),
        window_until=_window_until(snapshot),
        fleet_domains=_domains_text(_mapping(snapshot.get("fleet")).get("domains")),
    )


def _domains_text(value: object) -> str | None:
    domains = _domains(value)
    if domains is None:
        return None
    counts = ",".join(f"{domain}:{n}" for domain, n in sorted(domains["nodes"].items()))
    return f"{domains['key']}={counts}"


def _window_until(snapshot: Mapping[str, Any]) -> str | None:
    """The recorded window hold's ``until`` (builtin mode's ``upgradeStatus.holds``, operator
    mode's ``holds``)."""
    for holds in (_mapping(snapshot.get("upgradeStatus")).get("holds"), snapshot.get("holds")):
        for hold in holds if isinstance(holds, list) else ():
            if _mapping(hold).get("kind") == "window":
                return str(_mapping(hold).get("until") or "")
    return None


def _str_or_none(value: Any) -> str | None:
    return str(value) if value is not None else None


@dataclass(frozen=True, slots=True)
class WriterTiming:
    min_interval: float = 5.0
    max_delay: float = 30.0


@dataclass(frozen=True, slots=True)
class WriterState:
    """What the writer knows: the key last committed (or found in Git) and the pending snapshot."""

    committed_key: SnapshotKey | None = None
    last_commit_at: float | None = None
    pending: Mapping[str, Any] | None = None
    pending_key: SnapshotKey | None = None
    first_pending_at: float | None = None
    changed_at: float | None = None


def observe(state: WriterState, snapshot: Mapping[str, Any], now: float) -> WriterState:
    """Take in the latest snapshot (called for every status update, counters included)."""
    key = snapshot_key(snapshot)
    if key == state.committed_key:
        return replace(state, pending=None, pending_key=None, first_pending_at=None,
                       changed_at=None)
    if key == state.pending_key:
        return replace(state, pending=snapshot)  # fresher counters, same state
    return replace(
        state,
        pending=snapshot,
        pending_key=key,
        first_pending_at=state.first_pending_at if state.pending is not None else now,
        changed_at=now,
    )


def due_at(state: WriterState, timing: WriterTiming) -> float | None:
    """When the pending snapshot should be committed; None when nothing is pending."""
    if state.pending is None or state.pending_key is None:
        return None
    assert state.changed_at is not None and state.first_pending_at is not None
    if state.pending_key.urgent_after(state.committed_key):
        return state.changed_at
    settled = min(state.changed_at + timing.min_interval,
                  state.first_pending_at + timing.max_delay)
    if state.last_commit_at is None:
        return settled
    return max(settled, state.last_commit_at + timing.min_interval)


def committed(state: WriterState, now: float) -> WriterState:
    """The pending snapshot was handed to the publisher."""
    return WriterState(committed_key=state.pending_key, last_commit_at=now)


def step_label(snapshot: Mapping[str, Any]) -> str:
    """``2/4`` when the number of steps is known, else ``2``; ``0`` before the first step."""
    key = snapshot_key(snapshot)
    index = key.step_index or 0
    total = _step_count(snapshot)
    return f"{index}/{total}" if total else str(index)


def _step_count(snapshot: Mapping[str, Any]) -> int | None:
    spec = _mapping(snapshot.get("spec"))
    for policy in (spec.get("upgradePolicy"), _mapping(spec.get("driver")).get("upgradePolicy")):
        steps = _mapping(policy).get("upgradeSteps")
        if isinstance(steps, list) and steps:
            return len(steps)
    return None


def describe(snapshot: Mapping[str, Any]) -> str:
    """The commit subject: what happened, in the domain's words."""
    cluster = snapshot.get("cluster", "?")
    key = snapshot_key(snapshot)
    upgrade = _mapping(snapshot.get("upgradeStatus"))
    step = _mapping(upgrade.get("status"))
    label = step_label(snapshot)
    rejection = _mapping(snapshot.get("rejection"))
    if key.rejected_commit:
        findings = rejection.get("findings")
        first = _mapping(findings[0]) if isinstance(findings, list) and findings else {}
        where = first.get("file", "")
        if first.get("line"):
            where += f":{first['line']}"
        reason = first.get("message", "invalid policy")
        return f"status({cluster}): rejected {key.rejected_commit[:12]}: {where} {reason}".strip()
    ready = step.get("totalUpgradeReadyReplicas")
    total = step.get("totalUpgradeReplicas")
    counts = f" ({ready}/{total} nodes on the new driver)" if ready is not None and total else ""
    rolled_back = _rolled_back(upgrade)
    state = key.step_state
    if key.phase == "Terminating":
        what = f"rolling back at step {label} after failures"
    elif key.phase == "Disabling":
        what = f"rolling back at step {label}: grey release turned off"
    elif state == "Completed" and rolled_back:
        what = f"rollback finished at step {label}: {rolled_back}"
    elif state == "Completed" and (key.step_index or 0) > 0:
        what = f"rollout completed at step {label}{counts}"
    elif key.phase in TERMINAL_PHASES or key.phase is None:
        what = f"{key.phase or 'no rollout'}"
    elif state == "StepPaused":
        what = f"step {label} paused: {_pause_reason(upgrade)}{counts}"
    elif state == "StepUpgrade":
        what = f"step {label} upgrading{counts}"
    elif state == "StepReady":
        what = f"step {label} done{counts}"
    elif state == "StepUpgradeInit":
        what = f"step {label} starting"
    else:
        what = f"{key.phase} {state or ''}".strip()
    if key.firmware_phase and key.firmware_phase != "Idle":
        what += f"; firmware {key.firmware_phase}"
    if key.held_version:
        upstream = _mapping(_mapping(snapshot.get("promotion")).get("held")).get("upstream")
        what += f"; {key.held_version} held by promotion gate (after {upstream})"
    return f"status({cluster}): {what}"


def _rolled_back(upgrade: Mapping[str, Any]) -> str | None:
    for condition in conditions_in_force(upgrade):
        if condition.get("type") == "RolledBack":
            return str(condition.get("message") or condition.get("reason") or "rolled back")
    return None


def _pause_reason(upgrade: Mapping[str, Any]) -> str:
    # a gate or a failure fallback says more than the rollout's general message
    for condition in conditions_in_force(upgrade):
        if condition.get("type") == "ManualGate":
            return "waiting for a person (manual gate)"
        if condition.get("type") == "BatchFailed":
            return f"failure fallback: {condition.get('message') or 'failures'}"
    recheck = _mapping(upgrade.get("status")).get("recheckTime")
    if recheck:
        return f"pause timer until {recheck}"
    message = upgrade.get("message") or _mapping(upgrade.get("status")).get("message")
    return str(message) if message else "waiting"


def build_snapshot(
    cluster_operator: Mapping[str, Any],
    *,
    source_commit: str | None,
    rejection: Mapping[str, Any] | None = None,
    firmware: Mapping[str, Any] | None = None,
    promotion: Mapping[str, Any] | None = None,
    holds: Sequence[Mapping[str, Any]] = (),
    install_seconds: float | None = None,
    domains: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A status snapshot (``schemas/status-snapshot.schema.json``, without ``cluster`` and
    ``observedAt``, which the writer adds) from the live ``ClusterOperator`` object.
    ``holds``: operator mode's holds (``{kind, until, detail}``; the vendor's status has no room
    for them), left out when there are none."""
    driver = _mapping(_mapping(cluster_operator.get("spec")).get("driver"))
    snapshot: dict[str, Any] = {
        "sourceCommit": source_commit,
        "upgradeStatus": upgrade_status_of(cluster_operator),
        "spec": {"driver": {key: driver[key] for key in ("payload", "upgradePolicy")
                            if key in driver}},
    }
    if rejection is not None:
        snapshot["rejection"] = dict(rejection)
    if firmware is not None:
        snapshot["firmware"] = dict(firmware)
    if promotion is not None:
        snapshot["promotion"] = dict(promotion)
    if holds:
        snapshot["holds"] = [dict(h) for h in holds]
    measured: dict[str, Any] = {}
    if install_seconds is not None:
        measured["installSeconds"] = install_seconds
    if domains is not None:
        measured["domains"] = copy.deepcopy(dict(domains))
    if measured:
        # the writer completes it into ``fleet`` with the rollout nodes (``fleet_record``)
        snapshot["fleet"] = measured
    return snapshot


# -- the fleet record (docs/plan.md: ``reconciler plan`` predicts from it) ------------------------

def fleet_record(upgrade: Mapping[str, Any], previous: Mapping[str, Any] | None,
                 measured: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``fleet: {nodes, installSeconds[, domains]}`` of a snapshot: the rollout nodes (the
    status's ``totalUpgradeReplicas`` once a rollout froze them, else what ``previous`` said),
    the mean install time measured in the last rollout and the nodes per topology domain
    (``measured``'s, else ``previous``'s; None when never measured). None until nodes or install
    time is known."""
    before = _mapping(previous)
    total = _mapping(upgrade.get("status")).get("totalUpgradeReplicas")
    nodes = total if _positive(total) else before.get("nodes")
    install = _mapping(measured).get("installSeconds")
    if not _positive(install):
        install = before.get("installSeconds")
    if not _positive(nodes) and not _positive(install):
        return None
    record: dict[str, Any] = {"nodes": nodes if _positive(nodes) else None,
                              "installSeconds": install if _positive(install) else None}
    domains = _domains(_mapping(measured).get("domains")) or _domains(before.get("domains"))
    if domains is not None:
        record["domains"] = domains
    return record


def _domains(value: object) -> dict[str, Any] | None:
    """``{key, nodes}`` as the snapshot schema has it; None for anything else (a hand-edited
    snapshot read back from Git is not carried on)."""
    record = _mapping(value)
    key, nodes = record.get("key"), _mapping(record.get("nodes"))
    if not isinstance(key, str) or not key or not nodes:
        return None
    if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in nodes.values()):
        return None
    return {"key": key, "nodes": {str(domain): n for domain, n in nodes.items()}}


def _positive(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0)


# -- the completion record (docs/configuration.md#the-completion-record)
# ----------------------------------------------------------

_ROLLED_BACK_VERSION = re.compile(r"^driver (\S+) rolled back to ")


def rollout_version(upgrade: Mapping[str, Any]) -> str | None:
    """The driver version an active rollout (or its rollback) is about: the applied payload."""
    if upgrade.get("phase") not in ACTIVE_PHASES:
        return None
    payload = _mapping(_mapping(upgrade.get("lastAppliedSpec")).get("payload"))
    version = payload.get("version")
    return str(version) if version else None


def last_rollout(upgrade: Mapping[str, Any], previous: Mapping[str, Any] | None, *,
                 active_version: str | None, now_text: str) -> dict[str, Any] | None:
    """``lastRollout`` of a snapshot whose ``upgradeStatus`` is ``upgrade``: ``previous`` (the
    record the last snapshot carried) until a rollout ends, then that rollout's. A record
    equal in version and result to ``previous`` keeps its ``finishedAt``: later snapshots never
    move it. ``active_version``: the version the last active snapshot was rolling out (the
    status of a finished rollback names the version it went back to)."""
    step = _mapping(upgrade.get("status"))
    if upgrade.get("phase") not in TERMINAL_PHASES or step.get("currentStepState") != "Completed":
        return dict(previous) if previous else None
    rolled_back = _condition(upgrade, "RolledBack")
    if rolled_back is not None:
        result = "RolledBack"
        # the planner's record first; then what the last active snapshot rolled out; the
        # condition's message only for a status written before ``rolledBackSpec`` existed
        recorded = _mapping(_mapping(upgrade.get("rolledBackSpec")).get("payload")).get("version")
        named = _ROLLED_BACK_VERSION.match(str(rolled_back.get("message") or ""))
        version = (str(recorded) if recorded else None) or active_version or (
            named.group(1) if named else None)
        ended = rolled_back.get("lastTransitionTime")
    else:
        result = "Completed"
        payload = _mapping(_mapping(upgrade.get("lastAppliedSpec")).get("payload"))
        version = str(payload["version"]) if payload.get("version") else None
        # an older record keeps Progressing (False, RolloutCompleted) with the end; the CRD's
        # conditions drop it, and the step's last update is the end
        progressing = _listed(upgrade, "Progressing")
        ended = (progressing or {}).get("lastTransitionTime") if (progressing or {}).get(
            "reason") == "RolloutCompleted" else None
    if not version:
        return dict(previous) if previous else None
    if previous and previous.get("version") == version and previous.get("result") == result:
        return dict(previous)
    finished = ended or step.get("lastUpdateTime") or now_text
    return {"version": version, "result": result, "finishedAt": str(finished)}


def _condition(upgrade: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    return conditions_by_type(upgrade).get(ctype)


def _listed(upgrade: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    """The entry of ``ctype`` in force or not (the manual's ``condition`` keeps both)."""
    for raw in (upgrade.get("conditions"), upgrade.get("condition")):
        for entry in raw if isinstance(raw, list) else ():
            if _mapping(entry).get("type") == ctype:
                return _mapping(entry)
    return None


def trailers(snapshot: Mapping[str, Any]) -> list[tuple[str, str]]:
    key = snapshot_key(snapshot)
    result = []
    source = snapshot.get("sourceCommit")
    if source:
        result.append((SOURCE_COMMIT_TRAILER, str(source)))
    result.append((ROLLOUT_STEP_TRAILER, step_label(snapshot)))
    result.append((PHASE_TRAILER, key.phase or "None"))
    return result
