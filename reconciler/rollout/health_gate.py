"""The health gates of docs/health.md inside the rollout, pure: which nodes and which step are being
verified, what to ask Prometheus next, and the timers read back from where a restart finds them
(the node annotation ``ANN_HEALTH``, ``status.upgradeStatus.health.step``).

The planner calls ``judge_nodes`` before its node scan and ``step_record`` / ``step_nodes``
when a step reached its target; the controller calls ``pending_queries`` before planning.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.health.checks import (
    Health,
    HealthConfig,
    HealthFailure,
    HealthRecord,
    HealthState,
    NodeCheck,
    Reading,
    StepCheck,
    Verdict,
    evaluate,
    node_health,
    pending_node_queries,
    pending_step_queries,
)
from reconciler.names import (
    ANN_HEALTH,
    ANN_HEALTH_STEP,
    ANN_STATE,
    ANN_TARGET,
    ANN_VENDOR_HEALTH,
    STATE_CORDONED,
    STATE_DONE,
    STATE_FAILED,
    STATE_UPGRADING,
)
from reconciler.rollout.model import HealthReading, RolloutNode, RolloutSnapshot


@dataclass(frozen=True, slots=True)
class PendingQuery:
    """One query the controller should send: a node check (``node`` set) or a step check."""

    check: str
    query: str
    node: str | None = None
    #: a step check: the step's nodes (its ``{{nodes}}``)
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeVerdicts:
    """The node checks of one pass (``health_judgement.judge_nodes``): what the scan and the
    steps read of them."""

    #: moved nodes Ready on the target whose checks have not passed yet: in flight
    verifying: frozenset[str] = frozenset()
    #: node -> the check it failed in this pass (in the order the nodes were judged)
    failed: Mapping[str, HealthFailure] = field(default_factory=dict)
    #: nodes whose checks passed in this pass (their record lands with this pass's actions)
    passed: tuple[str, ...] = ()
    #: nodes that got the new driver without a move (joined mid-rollout), as seen with the
    #: move recorded in this pass
    adopted: Mapping[str, RolloutNode] = field(default_factory=dict)
    #: why nothing new starts: a node check whose query got no usable answer
    holds: tuple[str, ...] = ()


#: a pass without node checks
NO_VERDICTS = NodeVerdicts()


def verifying(node: RolloutNode, revision: str) -> bool:
    """Moved to ``revision`` by the rollout and its new pod Ready there: its checks run. A
    node cordoned ahead for ``revision`` with a pod there was moved: only the rollout deletes
    the old pod of a node it cordoned ahead, and writes no record after that deletion."""
    ann = node.annotations
    pod = node.pod
    return (
        ann.get(ANN_STATE) in (STATE_UPGRADING, STATE_CORDONED)
        and ann.get(ANN_TARGET) == revision
        and pod is not None
        and pod.revision == revision
        and pod.ready
        and not pod.deleting
    )


def joined_unchecked(node: RolloutNode, revision: str) -> bool:
    """Ready on ``revision`` without the rollout having moved it there: a node that joined
    mid-rollout (or whose old pod went away for another reason) and got the new template from
    the DaemonSet (docs/rollout.md#upgrading-one-node). It runs the new driver unchecked, so the
    planner records a move for it and its checks run like any moved node's (docs/health.md)."""
    ann = node.annotations
    pod = node.pod
    moved = ann.get(ANN_TARGET) == revision and ann.get(ANN_STATE) in (
        STATE_UPGRADING, STATE_FAILED, STATE_DONE, STATE_CORDONED)
    return (
        not moved
        and pod is not None
        and pod.revision == revision
        and pod.ready
        and not pod.deleting
    )


def fresh(readings: Mapping[str, HealthReading], started: float) -> dict[str, Reading]:
    """The readings taken since the checks started (an older one, e.g. of an earlier attempt
    or of before a resume, decides nothing)."""
    return {name: r.value for name, r in readings.items() if r.at >= started}


def judge_node(config: HealthConfig, node: RolloutNode, version: str,
               readings: Mapping[str, HealthReading], now: float) -> Health:
    record = HealthRecord.from_text(node.annotations.get(ANN_HEALTH), now)
    return node_health(config.node_checks, node.name, version, record,
                       fresh(readings, record.started), now)


def no_answer(config: HealthConfig, health: Health,
              readings: Mapping[str, Reading]) -> bool:
    """A check that waits because its query got no usable answer (not merely not read yet):
    nothing new starts (docs/health.md)."""
    checks: dict[str, NodeCheck | StepCheck] = {c.name: c for c in config.node_checks}
    checks.update((c.name, c) for c in config.step_checks)
    for outcome in health.checks:
        check = checks.get(outcome.check)
        reading = readings.get(outcome.check)
        if check is None or reading is None or outcome.state is not HealthState.WAITING:
            continue
        if evaluate(check, reading) is Verdict.WAITING:
            return True
    return False


def step_nodes(nodes: Iterable[RolloutNode], revision: str, index: int) -> list[str]:
    """The nodes that passed their checks in step ``index`` (the step checks' ``{{nodes}}``)."""
    return sorted(
        n.name for n in nodes
        if n.annotations.get(ANN_HEALTH_STEP) == str(index)
        and n.annotations.get(ANN_TARGET) == revision
        and n.annotations.get(ANN_STATE) == STATE_DONE
    )


def step_record(stored: Mapping[str, Any], epoch: str, now: float) -> HealthRecord:
    """The step checks' record of this batch epoch; another epoch's (a resume, the next step)
    starts afresh."""
    step = stored.get("step")
    if isinstance(step, Mapping) and step.get("epoch") == epoch:
        return HealthRecord.from_data(step, now)
    return HealthRecord(now)


def pending_queries(snapshot: RolloutSnapshot) -> list[PendingQuery]:
    """The queries whose answers the next plan needs: the checks not passed yet of the nodes
    being verified (a record stored: the planner saw the pod Ready), and of the current step
    once its checks started. Nothing without a valid ``health`` section."""
    health = snapshot.health
    config = health.config if health is not None else None
    status = snapshot.status
    if config is None or status.get("phase") != "Progressing":
        return []
    inner = status.get("status") or {}
    revision = str(inner.get("upgradingPodSpecRevision") or "")
    version = str(((status.get("lastAppliedSpec") or {}).get("payload") or {}).get("version")
                  or snapshot.payload.get("version") or "")
    if not revision:
        return []
    out: list[PendingQuery] = []
    if config.node_checks:
        for node in snapshot.nodes.values():
            text = node.annotations.get(ANN_HEALTH)
            if text is None or not verifying(node, revision):
                continue
            record = HealthRecord.from_text(text, 0.0)
            for check, query in pending_node_queries(config.node_checks, node.name, version,
                                                     record).items():
                out.append(PendingQuery(check, query, node.name))
    stored = status.get("health") or {}
    step = stored.get("step") if isinstance(stored, Mapping) else None
    if config.step_checks and isinstance(step, Mapping):
        try:
            index = int(str(inner.get("currentStepIndex")))
        except ValueError:
            return out
        nodes = step_nodes(snapshot.nodes.values(), revision, index)
        if nodes and str(step.get("index")) == str(index):
            record = HealthRecord.from_data(step, 0.0)
            for check, query in pending_step_queries(config.step_checks, nodes, version,
                                                     record).items():
                out.append(PendingQuery(check, query, nodes=tuple(nodes)))
    return out


# -- operator mode: the vendor runs the rollout, the sync role checks its nodes (docs/health.md)
# ------

@dataclass(frozen=True, slots=True)
class VendorRecord:
    """``ANN_VENDOR_HEALTH``: the node checks' timers for one revision, and the failure once
    one was found (then the sync role has committed ``pause: true`` and checks it no more)."""

    revision: str
    record: HealthRecord
    failure: str | None = None
    #: False: nothing was stored for this revision (the checks start now)
    stored: bool = True

    def to_text(self) -> str:
        data: dict[str, Any] = {"revision": self.revision, **self.record.as_data()}
        if self.failure is not None:
            data["failure"] = self.failure
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    @classmethod
    def read(cls, node: RolloutNode, revision: str, now: float) -> VendorRecord:
        """The stored record of ``revision``; another revision's (or garbage) starts afresh."""
        text = node.annotations.get(ANN_VENDOR_HEALTH)
        try:
            data = json.loads(text) if text and len(text) <= 65536 else None
        except ValueError:
            data = None
        if not isinstance(data, Mapping) or data.get("revision") != revision:
            return cls(revision, HealthRecord(now), stored=False)
        failure = data.get("failure")
        return cls(revision, HealthRecord.from_data(data, now),
                   failure if isinstance(failure, str) else None)


def vendor_verifying(nodes: Iterable[RolloutNode], status: Mapping[str, Any]
                     ) -> tuple[str, list[RolloutNode]]:
    """The revision the vendor rolls out (or rolled out last: checks of a node it upgraded
    go on after the rollout completed) and the nodes whose driver pod is Ready there; their
    checks run until they passed or failed once. None before any rollout or while it rolls
    back."""
    inner = status.get("status") or {}
    revision = str(inner.get("upgradingPodSpecRevision") or "")
    if status.get("phase") not in ("Progressing", "Idling") or not revision:
        return revision, []
    out = []
    for node in nodes:
        pod = node.pod
        if pod is None or pod.revision != revision or not pod.ready or pod.deleting:
            continue
        out.append(node)
    return revision, out
