"""After the cluster changed: Git's values applied again where the cluster drifted, and the
rollout's own spec changes (pause, a rolled-back version, ``fwUpgradePolicy: Never``) dispatched
as write-back commits to Git with the reason the cluster's status gives
(docs/gitops.md#git-stays-the-truth).

Times come from the injected ``monotonic`` clock.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Mapping
from typing import Any

from reconciler.clock import Clock
from reconciler.fieldpath import FieldPath, ensure, items, section
from reconciler.gitops.edits import same_value
from reconciler.gitops.publisher import PendingChange
from reconciler.gitops.repository import PolicyRepository
from reconciler.gitops.status_policy import step_label
from reconciler.kube.api import JSON, KubeApi
from reconciler.kube.objects import cluster_operator_path
from reconciler.names import SYNC_FIELD_MANAGER
from reconciler.stored_status import (
    conditions_by_type,
    conditions_in_force,
    firmware_status_of,
    upgrade_status_of,
)
from reconciler.sync.desired import drifted
from reconciler.sync.fields import FW_POLICY, PAUSE, VERSION_FIELD
from reconciler.sync.record import SyncStats, log

#: the same drift right after a repair (e.g. a field the server prunes) is repaired at most this
#: often, so a field the cluster refuses does not cause an apply storm
SAME_DRIFT_INTERVAL = 60.0
NEW_DRIFT_INTERVAL = 1.0
#: how long a cluster value may wait for the status write that explains it
EXPLANATION_GRACE = 2.0
EXPLANATION_RECHECK = 0.5


class DriftRepair:
    """Applies Git's last body again when the live object differs from it."""

    def __init__(self, api: KubeApi, cluster_operator: str, *, cluster: str,
                 monotonic: Clock, stats: SyncStats) -> None:
        self.api = api
        self.name = cluster_operator
        self.cluster = cluster
        self.monotonic = monotonic
        #: the body of the last apply (None: nothing applied by this process yet)
        self.body: dict[str, Any] | None = None
        self._last_drift: list[str] = []
        self._last_repair = 0.0
        self.stats = stats
        #: a repair (the sync's worker) and ``apply_now`` (operator mode's watches) do not
        #: interleave: a repair judged against the body before ``apply_now`` would undo it
        self._lock = threading.Lock()

    def repair(self, live: JSON, controller_owned: set[FieldPath]) -> JSON | None:
        """The object the server returned to a repair (None: nothing repaired)."""
        with self._lock:
            body = self.body
            if body is None:
                return None
            drift = drifted(body, live, ignore=controller_owned)
            if not drift:
                self._last_drift = []
                return None
            pause = SAME_DRIFT_INTERVAL if drift == self._last_drift else NEW_DRIFT_INTERVAL
            if self.monotonic() - self._last_repair < pause:
                return None
            self._last_drift = drift
            self._last_repair = self.monotonic()
            log.warning("%s: the ClusterOperator differs from Git at %s (changed in the "
                        "cluster); applying Git's value again", self.cluster,
                        ", ".join(drift[:5]))
            applied = self.api.apply(cluster_operator_path(self.name), body,
                                     field_manager=SYNC_FIELD_MANAGER, force=True)
            self.stats.drift_repairs += 1
            return applied

    def apply_commit(self, body: dict[str, Any]) -> JSON:
        """Apply a commit's ``body``; it is the body repairs compare with from now on."""
        with self._lock:
            applied = self.api.apply(cluster_operator_path(self.name), body,
                                     field_manager=SYNC_FIELD_MANAGER, force=True)
            self.body = body
            return applied

    def apply_now(self, field: FieldPath, value: Any) -> JSON | None:
        """Apply ``field = value`` at once with the last body, as a sync of Git would: for a
        write-back the sync role itself decides (operator mode's health pause, docs/health.md),
        whose commit says the same; the body keeps it, so a repair does not undo it. None: nothing
        applied by this process yet (no body to apply it with)."""
        with self._lock:
            if self.body is None:
                return None
            body = copy.deepcopy(self.body)
            ensure(body, field, value)
            # kept before the apply: a repair after a failed apply applies it too
            self.body = body
            return self.api.apply(cluster_operator_path(self.name), body,
                                  field_manager=SYNC_FIELD_MANAGER, force=True)


class WriteBacks:
    """Dispatches write-back commits, one per cluster value (a publisher thread reports when
    each landed or was skipped)."""

    def __init__(self, repo: PolicyRepository, *, cluster: str, monotonic: Clock,
                 applied_commit: Callable[[], str | None], stats: SyncStats) -> None:
        self.repo = repo
        self.cluster = cluster
        self.monotonic = monotonic
        self.applied_commit = applied_commit
        self._lock = threading.Lock()
        self._pending: dict[str, tuple[FieldPath, Any]] = {}
        #: write-back path -> since when the cluster shows a value whose reason is not written
        self._unexplained_since: dict[FieldPath, float] = {}
        #: look again at this time (a reason may still be on its way)
        self.recheck_at: float | None = None
        self.stats = stats

    def settled(self, change: PendingChange) -> None:
        """``change`` landed or was skipped: a new one for its field may be dispatched."""
        with self._lock:
            self._pending.pop(change.change_id, None)

    def take_recheck(self) -> float | None:
        recheck, self.recheck_at = self.recheck_at, None
        return recheck

    def dispatch(self, path: FieldPath, cluster_value: Any, git_value: Any,
                 live: Mapping[str, Any]) -> None:
        """Commit the cluster's ``cluster_value`` of ``path`` to Git, with its reason."""
        with self._lock:
            if any(p == path and same_value(path, v, cluster_value)
                   for p, v in self._pending.values()):
                return
        upgrade = upgrade_status_of(live)
        snapshot = {"upgradeStatus": upgrade, "spec": {"driver": section(live, ("spec", "driver"))}}
        step = step_label(snapshot)
        spec = self.repo.spec
        source_commit = self.applied_commit()
        if path == PAUSE:
            if cluster_value is not True:
                return
            # the controller sets pause before it writes the condition that says why
            reason = self._reason_once_explained(PAUSE, pause_reason(upgrade),
                                                 "paused by the rollout controller")
            if reason is None:
                return
            change = spec.pause(self.cluster, reason=reason, step=step,
                                source_commit=source_commit)
        elif path == VERSION_FIELD:
            if not isinstance(cluster_value, str) or not isinstance(git_value, str):
                return
            change = spec.restore_payload_version(
                self.cluster, version=cluster_value, rolled_back=git_value,
                reason=rollback_reason(upgrade), step=step, source_commit=source_commit)
        elif path == FW_POLICY:
            if cluster_value != "Never" or not isinstance(git_value, str):
                return
            # the orchestrator sets Never before it writes the phase that says why
            reason = self._reason_once_explained(
                FW_POLICY, firmware_never_reason(firmware_status_of(live)),
                "firmware upgrade ended")
            if reason is None:
                return
            change = spec.firmware_never(self.cluster, reason=reason,
                                         source_commit=source_commit, expected=git_value)
        else:
            return
        with self._lock:
            self._pending[change.change_id] = (path, cluster_value)
        self.stats.write_backs += 1
        self.repo.policy_publisher.kick()
        log.info("%s: %s", self.cluster, change.subject)

    def pause_for_health(self, reason: str, live: Mapping[str, Any], *,
                         cause: str = "health check failed") -> None:
        """Operator mode (docs/health.md#operator-mode): a node check failed on a node the vendor
        upgraded (or the ``health`` section does not validate: ``cause`` says which): commit
        ``pause: true`` with the reason (``health_watch.stop_vendor`` applies it at once, so the
        vendor stops even while Git cannot be reached; the sync applies the commit once it
        landed)."""
        with self._lock:
            if any(p == PAUSE for p, _ in self._pending.values()):
                return
        upgrade = upgrade_status_of(live)
        snapshot = {"upgradeStatus": upgrade, "spec": {"driver": section(live, ("spec", "driver"))}}
        change = self.repo.spec.health_pause(self.cluster, reason=f"{cause}: {reason}",
                                             step=step_label(snapshot),
                                             source_commit=self.applied_commit())
        with self._lock:
            self._pending[change.change_id] = (PAUSE, True)
        self.stats.write_backs += 1
        self.repo.policy_publisher.kick()
        log.info("%s: %s", self.cluster, change.subject)

    def _reason_once_explained(self, path: FieldPath, reason: str | None,
                               generic: str) -> str | None:
        """``reason`` when known; None (look again shortly) while the status write that explains
        the cluster's value may still be on its way; ``generic`` after the grace time."""
        if reason is not None:
            self._unexplained_since.pop(path, None)
            return reason
        first = self._unexplained_since.setdefault(path, self.monotonic())
        if self.monotonic() - first < EXPLANATION_GRACE:
            self.recheck_at = self.monotonic() + EXPLANATION_RECHECK
            return None
        del self._unexplained_since[path]
        return generic


def pause_reason(upgrade: Mapping[str, Any]) -> str | None:
    true = conditions_in_force(upgrade)
    # a fallback a health check caused names the check (docs/health.md), not only the failed nodes
    health = next((c for c in true if c.get("type") == "HealthCheckFailed"), None)
    for condition in true:
        if condition.get("type") == "ManualGate":
            return "manual gate"
        if condition.get("type") == "BatchFailed":
            if health is not None:
                return f"failure fallback: {health.get('message') or 'health check failed'}"
            return f"failure fallback: {condition.get('message') or 'failures'}"
    return None


def rollback_reason(upgrade: Mapping[str, Any]) -> str:
    conditions = conditions_by_type(upgrade)
    for ctype in ("RolledBack", "RollingBack"):
        condition = conditions.get(ctype)
        if condition is not None:
            return str(condition.get("message") or condition.get("reason") or "rolled back")
    phase = upgrade.get("phase")
    if phase == "Disabling":
        return "grey release turned off"
    return "failure threshold reached" if phase == "Terminating" else "rolled back"


def firmware_never_reason(firmware: Mapping[str, Any]) -> str | None:
    """Why the orchestrator set ``Never`` (None while its status does not say yet): the commit
    subject must not say "finished" when the upgrade was refused or failed."""
    phase = firmware.get("phase")
    if phase == "Refused":
        refusals = items(firmware, ("refusals",))
        first = section(refusals[0], ()) if refusals else {}
        node = first.get("node")
        detail = first.get("reason") or "see the status snapshot"
        where = f" ({node})" if node and node != "*" else ""
        return f"firmware upgrade refused{where}: {detail}"
    if phase == "Failed":
        return f"firmware upgrade failed: {firmware.get('message') or 'see the status snapshot'}"
    return "firmware upgrade finished" if phase == "Completed" else None
