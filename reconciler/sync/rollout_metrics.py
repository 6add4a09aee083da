"""The rollout's metrics as the sync role sees them on the ClusterOperator (phase, conditions,
step, node counts, failures, rollbacks), for a process that may not run the controller."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from reconciler.fieldpath import items, section
from reconciler.gitops.publisher import PendingChange
from reconciler.names import ConditionType
from reconciler.ops.metrics import NODE_STATES, Metrics
from reconciler.stored_status import conditions_in_force, upgrade_status_of
from reconciler.sync.fields import PAUSE, VERSION_FIELD
from reconciler.timefmt import parse_time_or_none

#: The conditions that are True while a rollout waits for a person, by the wait they name.
#: A gate a person confirmed is False (reason Confirmed, or ConfirmedPendingNodes while nodes
#: that joined meanwhile get Ready): that wait is for nodes, not for a person.
AWAITING_PERSON_CONDITIONS: dict[str, str] = {
    ConditionType.MANUAL_GATE: "gate",
    ConditionType.BATCH_FAILED: "fallback",
}


def awaiting_person(conditions: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Since when the rollout waits for a person, by wait (``gate``, ``fallback``): the
    lastTransitionTime of each such condition that is True. A True condition whose time cannot
    be read counts from the epoch, so the alert on it fires rather than stays silent."""
    since: dict[str, float] = {}
    for condition in conditions:
        wait = AWAITING_PERSON_CONDITIONS.get(str(condition.get("type")))
        if wait is not None and condition.get("status", "True") == "True":
            began = parse_time_or_none(condition.get("lastTransitionTime"))
            since[wait] = 1.0 if began is None or began <= 0 else began
    return since


class RolloutMetrics:
    def __init__(self, metrics: Metrics, *, cluster: str,
                 node_counts: Callable[[], Mapping[str, int]] | None = None) -> None:
        """``node_counts``: node states only a controller in this process knows (in flight,
        unavailable), for the ``gpu_reconciler_nodes`` metric."""
        self.metrics = metrics
        self.cluster = cluster
        self.node_counts = node_counts
        self._failures_seen = 0
        self._rollback_seen: str | None = None

    def observe(self, live: Mapping[str, Any]) -> None:
        metrics, cluster = self.metrics, self.cluster
        upgrade = upgrade_status_of(live)
        inner = section(upgrade, ("status",))
        conditions = conditions_in_force(upgrade)
        if upgrade.get("phase"):
            metrics.set_rollout_phase(cluster, str(upgrade["phase"]))
        metrics.set_rollout_conditions(cluster, {str(c.get("type")) for c in conditions})
        metrics.set_awaiting_person(cluster, awaiting_person(conditions))
        steps = items(live, ("spec", "driver", "upgradePolicy", "upgradeSteps"))
        index = inner.get("currentStepIndex")
        state = inner.get("currentStepState")
        if state:
            metrics.set_rollout_step(cluster, index if isinstance(index, int) else 0, str(state),
                                     steps=len(steps))
        total = int(inner.get("totalUpgradeReplicas") or 0)
        ready = int(inner.get("totalUpgradeReadyReplicas") or 0)
        counts = dict.fromkeys(NODE_STATES, 0)
        counts["upgraded"] = ready
        counts["pending"] = max(total - ready, 0)
        if self.node_counts is not None:
            counts.update(self.node_counts())
            counts["pending"] = max(total - ready - counts.get("in_flight", 0), 0)
        metrics.set_nodes(cluster, counts)
        failures = int(inner.get("currentFailureRetry") or 0)
        if failures > self._failures_seen:
            for _ in range(failures - self._failures_seen):
                metrics.count_node_failure(cluster, "driver-pod-failed")
        self._failures_seen = failures
        rolled_back = next((c for c in conditions if c.get("type") == "RolledBack"), None)
        marker = str(rolled_back.get("lastTransitionTime")) if rolled_back else None
        if rolled_back is not None and marker != self._rollback_seen:
            metrics.count_rollback(cluster, str(rolled_back.get("reason") or "unknown"))
        self._rollback_seen = marker


def commit_kind(change: PendingChange) -> str:
    """The ``kind`` label of a landed commit's metric."""
    if change.kind in ("status", "promotion"):
        return change.kind
    if change.kind in ("window", "health"):
        return "pause"
    fields = {tuple(e.field) for e in change.edits}
    if PAUSE in fields:
        return "pause"
    if VERSION_FIELD in fields:
        return "rollback"
    return "firmware"
