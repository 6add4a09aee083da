"""The dashboard's read model: what the page shows, built purely from a snapshot of the cluster
(the ClusterOperator, the GPU nodes with their driver pods and GPU workloads, the driver
DaemonSet's revisions, the ClusterOperator's Events), the Git audit trail and ``now``.

No Kubernetes, Git, clock or sockets here: the adapters (``source``, ``gitaudit``) collect the
inputs, ``build_view`` derives everything, the server only serves its JSON. The summary fields
come from ``reconciler.sync.status_view.report`` (what ``reconciler status`` shows), so the page
and the command never disagree.

"Waiting for" is a list of typed entries (``Waiting``): the gate, the pause timer,
``pause: true``, the failure fallback, busy and unavailable nodes, a rejected commit, the
firmware reboot. Health checks, maintenance windows and promotion holds add entries of their
own kinds (``health``, ``window``, ``promotion``) the same way once they exist: the page renders
any kind it is given.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from reconciler.names import (
    ANN_ATTEMPT,
    ANN_DELETED_AT,
    ANN_FAILED_AT,
    ANN_FAILURE_REASON,
    ANN_FAILURES,
    ANN_STATE,
    ANN_TARGET,
    ANN_WAS_UNSCHEDULABLE,
    STATE_CORDONED,
    STATE_FAILED,
    STATE_UPGRADING,
)
from reconciler.policy.upgrade_policy import UpgradePolicy
from reconciler.rollout import status as st
from reconciler.rollout.model import FAILURE_REASONS
from reconciler.sync.status_view import StatusReport, report
from reconciler.timefmt import format_wait
from reconciler.timefmt import parse_time_or_none as parse_time

#: node states, in the order of the legend; the page gets each node's index into this tuple
NODE_STATES: tuple[str, ...] = (
    "old",  # on the old version, not touched yet
    "cordoned",  # cordoned ahead: next to start
    "in-flight",  # old pod deleted, new one not Ready yet
    "verifying",  # new pod Ready, the controller has not recorded the node done yet
    "failed",  # the new pod failed (image pull, crash loop, readyTimeout)
    "upgraded",  # Ready on the version the rollout moves to
    "busy",  # a GPU workload pod holds the node: it waits (not failed)
    "not-ready",  # the node is NotReady
    "left-alone",  # no driver pod (not a rollout node), or cordoned by someone else
)
STATE_INDEX = {name: index for index, name in enumerate(NODE_STATES)}
ACTIVE_PHASES = ("Progressing", "Terminating", "Disabling")
#: kinds of "waiting for" that stop the rollout until a person acts (a gate does not: the
#: prediction counts it and says so); health, window and promotion holds will join them
HOLDING_KINDS = frozenset({"fallback", "policy-pause", "rejection"})
_UNAVAILABLE_WHY = {"not-ready": "NotReady", "left-alone": "cordoned by someone else"}
_STEP_RE = re.compile(r"\bstep (\d+)")


@dataclass(frozen=True, slots=True)
class PodFacts:
    """The driver pod speaking for a node."""

    name: str
    revision: str
    ready: bool = False
    waiting_reason: str | None = None
    restart_count: int = 0
    created_at: float = 0.0
    ready_since: float | None = None  # the Ready condition's lastTransitionTime, when Ready
    deleting: bool = False


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """One GPU node as the dashboard sees it."""

    name: str
    ready: bool = True
    ready_since: float | None = None  # the node's Ready condition's lastTransitionTime
    unschedulable: bool = False
    canary: bool = False
    annotations: Mapping[str, str] = field(default_factory=dict)
    pod: PodFacts | None = None
    workloads: tuple[str, ...] = ()  # "namespace/name" of pods requesting a GPU


@dataclass(frozen=True, slots=True)
class EventFacts:
    """An Event on the ClusterOperator (the controller's StepStarted, GateOpened, ...)."""

    at: float
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """Everything the view is built from."""

    cluster: str
    cluster_operator: Mapping[str, Any] | None  # None: not found
    nodes: Sequence[NodeFacts] = ()
    #: revision hash -> image, from the driver DaemonSet's ControllerRevisions
    revision_images: Mapping[str, str] = field(default_factory=dict)
    current_revision: str = ""
    events: Sequence[EventFacts] = ()
    #: an error reading the cluster (the view still shows what it has)
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Waiting:
    """One thing the rollout waits for, with the exact action a person takes."""

    kind: str  # gate, pause, policy-pause, fallback, busy, unavailable, rejection, firmware,
    # upgrading; later health, window, promotion
    title: str
    detail: str = ""
    #: what a person does: a Git change (``change``), a command, or pods to finish
    action: str = ""
    #: the file and the edit for a Git change: {path, line, before, after}
    change: Mapping[str, Any] | None = None
    until: str | None = None  # RFC 3339, for a timer
    nodes: tuple[str, ...] = ()
    items: tuple[str, ...] = ()  # e.g. the pods to finish, the findings


@dataclass(slots=True)
class NodeRow:
    name: str
    state: str
    step: int  # 1-based group; 0 when there are no steps
    since: float | None = None
    version: str = ""
    pod: str = ""
    pod_reason: str = ""
    failure_reason: str = ""
    failures: int = 0
    attempt: int = 0
    busy_pods: tuple[str, ...] = ()
    ready: bool = True
    #: room for health readings once health checks exist: (check, value) pairs
    health: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["since"] = _rfc3339(self.since)
        data["busy_pods"] = list(self.busy_pods)
        data["health"] = [list(pair) for pair in self.health]
        return data


@dataclass(slots=True)
class StepView:
    step: int
    target: int
    nodes: int
    pause: str  # "none", "5m00s", "gate"
    gate: bool
    state: str  # done, running, paused, predicted, pending
    started_at: float | None = None
    upgraded_at: float | None = None
    ended_at: float | None = None
    #: predicted seconds for the whole step (upgrade + pause; a gate counts 0)
    predicted_seconds: float | None = None
    counts: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("started_at", "upgraded_at", "ended_at"):
            data[key] = _rfc3339(getattr(self, key))
        return data


@dataclass(frozen=True, slots=True)
class Prediction:
    """The planner's model run on a virtual fleet (``reconciler.dashboard.predict``)."""

    #: seconds per step from its start to its end (upgrade + pause; gates released at once)
    step_seconds: tuple[float, ...]
    #: seconds per step from its start to its last node being upgraded
    upgrade_seconds: tuple[float, ...]
    install_seconds: float
    measured: bool  # install_seconds measured in this rollout (else the default)
    nodes: int


@dataclass(slots=True)
class DashboardView:
    cluster: str
    object_name: str
    generated_at: float
    found: bool
    header: dict[str, Any]
    steps: list[StepView]
    waiting: list[Waiting]
    nodes: list[NodeRow]
    audit: list[dict[str, Any]] | None  # None without --repo
    error: str | None = None
    conditions: list[dict[str, str]] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(NODE_STATES, 0)
        for row in self.nodes:
            out[row.state] += 1
        return out

    def fleet_key(self) -> str:
        """Changes when the node names or their order change (the page then reloads them)."""
        digest = hashlib.sha256()
        for row in self.nodes:
            digest.update(row.name.encode())
            digest.update(b"\0%d\0" % row.step)
        return digest.hexdigest()[:16]

    def to_json(self, *, with_names: bool = True) -> dict[str, Any]:
        """The page's payload: small fields as they are, the map as compact arrays (names only
        when asked for: they change rarely and are most of the bytes at 10,000 nodes)."""
        fleet: dict[str, Any] = {
            "key": self.fleet_key(),
            "states": "".join(chr(48 + STATE_INDEX[row.state]) for row in self.nodes),
            "counts": self.counts(),
            "legend": list(NODE_STATES),
        }
        if with_names:
            fleet["names"] = [row.name for row in self.nodes]
            fleet["steps"] = [row.step for row in self.nodes]
        return {
            "cluster": self.cluster,
            "object": self.object_name,
            "generatedAt": _rfc3339(self.generated_at),
            "found": self.found,
            "error": self.error,
            "header": self.header,
            "steps": [s.to_json() for s in self.steps],
            "waiting": [_waiting_json(w) for w in self.waiting],
            "fleet": fleet,
            "audit": self.audit,
            "conditions": self.conditions,
        }

    def node(self, name: str) -> NodeRow | None:
        for row in self.nodes:
            if row.name == name:
                return row
        return None


def _waiting_json(item: Waiting) -> dict[str, Any]:
    data = asdict(item)
    data["nodes"] = list(item.nodes)
    data["items"] = list(item.items)
    data["change"] = dict(item.change) if item.change else None
    return data


def _rfc3339(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _version_of(image: str) -> str:
    return image.rpartition(":")[2] if ":" in image.rpartition("/")[2] else ""


@dataclass(frozen=True, slots=True)
class GitContext:
    """What the Git side knows for the actions: where the cluster's policy lives."""

    policy_file: str | None = None  # path of the file holding upgradePolicy
    pause_line: int | None = None  # 1-based line of ``pause:`` in it, if present
    branch: str = "main"


# ----------------------------------------------------------------------------- nodes


def classify(node: NodeFacts, *, target: str, active: bool) -> str:
    """One node's state against the revision the rollout moves to (``target``)."""
    ann = node.annotations
    pod = node.pod
    ours = ann.get(ANN_TARGET) == target
    recorded = ann.get(ANN_STATE) if ours else None
    on_target = pod is not None and pod.revision == target and not pod.deleting
    ready_target = on_target and pod is not None and pod.ready
    if pod is None:
        return "not-ready" if not node.ready else "left-alone"
    if not node.ready:
        return "not-ready"
    if ready_target:
        # cordoned ahead with a pod on the target: moved (its start writes no record)
        moved = (STATE_UPGRADING, STATE_FAILED, STATE_CORDONED)
        return "verifying" if active and recorded in moved else "upgraded"
    if recorded == STATE_FAILED or (on_target and pod.waiting_reason in FAILURE_REASONS):
        return "failed"
    if recorded == STATE_UPGRADING or (on_target and active) or (
            recorded == STATE_CORDONED and pod.deleting):
        return "in-flight"
    if recorded == STATE_CORDONED:
        return "cordoned"
    by_us = ann.get(ANN_WAS_UNSCHEDULABLE) == "false" and ann.get(ANN_STATE) in (
        STATE_UPGRADING, STATE_FAILED, STATE_CORDONED)
    if node.unschedulable and not by_us:
        return "left-alone"
    if active and node.workloads:
        return "busy"
    return "old"


def _since(node: NodeFacts, state: str) -> float | None:
    ann = node.annotations
    if state == "in-flight":
        return _time(ann.get(ANN_DELETED_AT)) or (node.pod.created_at if node.pod else None)
    if state == "failed":
        return _time(ann.get(ANN_FAILED_AT))
    if state in ("upgraded", "verifying") and node.pod is not None:
        return node.pod.ready_since or node.pod.created_at or None
    if state == "not-ready":
        return node.ready_since
    return None


def _time(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return st.parse_time(text)
    except ValueError:
        return None


def _started_at(node: NodeFacts, target: str) -> float | None:
    """When the node's move to ``target`` began (for grouping nodes by the step they went in)."""
    ann = node.annotations
    if ann.get(ANN_TARGET) == target:
        at = _time(ann.get(ANN_DELETED_AT))
        if at is not None:
            return at
    pod = node.pod
    if pod is not None and pod.revision == target:
        return pod.created_at
    return None


def node_rows(facts: ClusterFacts, *, target: str, active: bool, targets: Sequence[int],
              epoch: str) -> list[NodeRow]:
    """Every GPU node, in the order of the map: the nodes moved to ``target`` by when they
    started, then the rest in the rollout's order (canary first, then by name); cut into steps
    at the step targets."""
    started: list[tuple[float, str, NodeFacts]] = []
    waiting: list[tuple[bool, str, NodeFacts]] = []
    for node in facts.nodes:
        at = _started_at(node, target) if target else None
        if at is not None:
            started.append((at, node.name, node))
        else:
            waiting.append((not node.canary, node.name, node))
    ordered = [n for _, _, n in sorted(started)] + [n for _, _, n in sorted(waiting)]
    rows: list[NodeRow] = []
    step = 0
    for position, node in enumerate(ordered):
        while step < len(targets) and position >= targets[step]:
            step += 1
        state = classify(node, target=target, active=active)
        pod = node.pod
        ann = node.annotations
        failures = ann.get(ANN_FAILURES) or ""
        count = st.int_or(failures.partition("|")[2], 0) if failures.startswith(epoch + "|") \
            else 0
        rows.append(NodeRow(
            name=node.name,
            state=state,
            step=min(step + 1, len(targets)) if targets else 0,
            since=_since(node, state),
            version=_version_of(facts.revision_images.get(pod.revision, "")) if pod else "",
            pod=pod.name if pod else "",
            pod_reason=(pod.waiting_reason or ("Ready" if pod.ready else "not Ready"))
            if pod else "no driver pod",
            failure_reason=str(ann.get(ANN_FAILURE_REASON) or "") if state == "failed" else "",
            failures=count,
            attempt=st.int_or(ann.get(ANN_ATTEMPT), 0) if ann.get(ANN_TARGET) == target else 0,
            busy_pods=node.workloads,
            ready=node.ready,
        ))
    return rows


# ----------------------------------------------------------------------------- steps


def step_times(events: Sequence[tuple[float, str, int | None]]) -> dict[int, dict[str, float]]:
    """Per step, from its events (the controller's Events or the simulator's): ``started``,
    ``upgraded`` (its last node done: StepCompleted or GateOpened) and ``ended`` (the next step
    started, or the rollout ended)."""
    out: dict[int, dict[str, float]] = {}
    current = 0
    for t, reason, step in sorted(events, key=lambda e: e[0]):
        if reason in ("StepStarted", "RolloutCompleted", "RollbackStarted") and current:
            out.setdefault(current, {}).setdefault("ended", t)
        if reason in ("RolloutStarted", "StepStarted") and step:
            if reason == "RolloutStarted":
                out.clear()  # a new rollout: the steps of an earlier one do not count
            current = step
            out.setdefault(step, {}).setdefault("started", t)
        if reason in ("StepCompleted", "GateOpened") and step:
            out.setdefault(step, {}).setdefault("upgraded", t)
    return out


def event_step(event: EventFacts) -> int | None:
    if event.reason == "RolloutStarted":
        return 1
    match = _STEP_RE.search(event.message)
    return int(match.group(1)) if match else None


def _pause_text(pause_ms: int | None) -> str:
    if pause_ms is None:
        return "gate"
    if pause_ms == 0:
        return "none"
    return format_wait(pause_ms / 1000)


# ----------------------------------------------------------------------------- waiting


def _git_change(git: GitContext | None, object_name: str, *, value: str = "false") -> tuple[
        str, Mapping[str, Any] | None]:
    if git is None or git.policy_file is None:
        patch = ('{"spec":{"driver":{"upgradePolicy":{"pause":' + value + '}}}}')
        return (f"kubectl patch clusteroperator {object_name} --type merge -p '{patch}'", None)
    where = f"{git.policy_file}:{git.pause_line}" if git.pause_line else git.policy_file
    return (
        f"merge a change of {where} to `pause: {value}` into {git.branch}",
        {"path": git.policy_file, "line": git.pause_line, "before": "pause: true",
         "after": f"pause: {value}", "field": "spec.driver.upgradePolicy.pause"},
    )


def waiting_for(rep: StatusReport, upgrade: Mapping[str, Any], raw_policy: Mapping[str, Any],
                rows: Sequence[NodeRow], *, now: float, object_name: str,
                git: GitContext | None) -> list[Waiting]:
    """What the rollout waits for, typed, each with the action a person takes."""
    out: list[Waiting] = []
    inner = _mapping(upgrade.get("status"))
    conditions = {c["type"]: c for c in rep.conditions if c.get("status") == "True"}
    active = rep.phase in ACTIVE_PHASES
    if rep.rejection:
        findings = [f for f in rep.rejection.get("findings") or () if isinstance(f, Mapping)]
        items = tuple(
            f"{f.get('file', '')}:{f.get('line', '')}: {f.get('message', '')}" for f in findings)
        first = findings[0] if findings else {}
        out.append(Waiting(
            kind="rejection",
            title=f"a fixed commit: {str(rep.rejection.get('commit', ''))[:12]} was rejected",
            detail=str(first.get("message", "")),
            action=f"fix {first.get('file', 'the policy file')}"
                   + (f" line {first.get('line')}" if first.get("line") else "")
                   + " and merge the fix",
            items=items,
        ))
    if active and rep.step_state == "StepPaused":
        action, change = _git_change(git, object_name)
        if "BatchFailed" in conditions:
            failed = tuple(r.name for r in rows if r.state == "failed")
            out.append(Waiting(
                kind="fallback",
                title=f"a person: the batch failed ({rep.failures} of "
                      f"{rep.max_failures} failures)",
                detail=conditions["BatchFailed"].get("message", ""),
                action=f"fix the cause, then {action} (or set `enableRollout: false` to roll "
                       "back)",
                change=change,
                nodes=failed,
                items=tuple(f"{r.name}: {r.failure_reason or r.pod_reason}" for r in rows
                            if r.state == "failed"),
            ))
        elif "ManualGate" in conditions:
            out.append(Waiting(
                kind="gate",
                title=f"a person: step {rep.step} is done (manual gate)",
                detail="the next batch starts when the gate is released",
                action=action, change=change,
            ))
        elif raw_policy.get("pause") is True:
            out.append(Waiting(
                kind="policy-pause",
                title="a person: the policy says `pause: true`",
                action=action, change=change,
            ))
        else:
            recheck = parse_time(inner.get("recheckTime"))
            if recheck is not None:
                left = recheck - now
                out.append(Waiting(
                    kind="pause",
                    title=f"the pause after step {rep.step}: {format_wait(left)} left"
                          if left > 0 else "the pause ended; the next step starts now",
                    until=_rfc3339(recheck),
                    action="nothing: the next step starts by itself",
                ))
    elif active and raw_policy.get("pause") is True:
        action, change = _git_change(git, object_name)
        out.append(Waiting(kind="policy-pause", title="a person: the policy says `pause: true`",
                           detail="nodes in flight finish; nothing new starts",
                           action=action, change=change))
    if active and rep.step_state in ("StepUpgrade", "StepUpgradeInit"):
        in_flight = tuple(r.name for r in rows if r.state in ("in-flight", "verifying"))
        out.append(Waiting(
            kind="upgrading",
            title=f"nodes upgrading: {rep.nodes_ready}/{rep.nodes_total} on the new driver",
            detail=f"{len(in_flight)} in flight",
            nodes=in_flight,
            action="nothing: the controller goes on",
        ))
    busy = [r for r in rows if r.state == "busy"]
    if busy:
        out.append(Waiting(
            kind="busy",
            title=f"busy nodes: {len(busy)} wait for their GPU pods to finish",
            nodes=tuple(r.name for r in busy),
            items=tuple(f"{r.name}: {', '.join(r.busy_pods)}" for r in busy),
            action="let these pods finish (or move them off the nodes); the nodes then upgrade",
        ))
    # rollout nodes only: a GPU node without a driver pod is not one (SPEC 4.3)
    unavailable = [r for r in rows if r.state == "not-ready"
                   or (r.state == "left-alone" and r.pod)]
    if active and unavailable:
        out.append(Waiting(
            kind="unavailable",
            title=f"unavailable nodes: {len(unavailable)} (maxUnavailable counts them)",
            nodes=tuple(r.name for r in unavailable),
            items=tuple(f"{r.name}: {_UNAVAILABLE_WHY[r.state]}" for r in unavailable),
            action="bring the nodes back (Ready, uncordoned) or remove them from the cluster",
        ))
    firmware = rep.firmware or {}
    if firmware.get("phase") == "AwaitingReboot":
        out.append(Waiting(kind="firmware", title="a person: reboot the nodes (firmware upgrade)",
                           action="reboot the nodes the firmware upgrade names"))
    return out


# ----------------------------------------------------------------------------- the view


def build_view(facts: ClusterFacts, *, now: float, object_name: str = "cluster-operator",
               prediction: Prediction | None = None, git: GitContext | None = None,
               audit: list[dict[str, Any]] | None = None) -> DashboardView:
    """The whole page's content. Pure: the same facts and ``now`` give the same view."""
    co = _mapping(facts.cluster_operator)
    status = _mapping(co.get("status"))
    upgrade = _mapping(status.get("upgradeStatus"))
    inner = _mapping(upgrade.get("status"))
    driver = _mapping(_mapping(co.get("spec")).get("driver"))
    raw_policy = _mapping(driver.get("upgradePolicy"))
    snapshot = {
        "cluster": facts.cluster,
        "upgradeStatus": upgrade,
        "spec": {"driver": {k: driver[k] for k in ("payload", "upgradePolicy") if k in driver}},
    }
    if status.get("firmwareUpgrade"):
        snapshot["firmware"] = status["firmwareUpgrade"]
    rep = report(snapshot, now=now)
    try:
        policy = UpgradePolicy.from_spec(raw_policy)
    except (ValueError, TypeError, KeyError):
        policy = UpgradePolicy()
    phase = rep.phase
    active = phase in ACTIVE_PHASES
    rolling_back = phase in ("Terminating", "Disabling")
    last_rev = str(inner.get("lastPodSpecRevision") or "")
    new_rev = str(inner.get("upgradingPodSpecRevision") or "")
    target = last_rev if rolling_back else (new_rev if active else (
        facts.current_revision or new_rev or last_rev))
    if active and not target:
        target = facts.current_revision
    old_version = str(_mapping(_mapping(upgrade.get("lastCoDriverSpec")).get("payload")).get(
        "version") or "")
    new_version = str(_mapping(_mapping(upgrade.get("lastAppliedSpec")).get("payload")).get(
        "version") or rep.version or "")
    if rolling_back:
        old_version, new_version = new_version, old_version
    total = rep.nodes_total or len([n for n in facts.nodes if n.pod is not None])
    try:
        targets = policy.step_targets(total) if policy.steps and total else []
    except (ValueError, ZeroDivisionError):
        targets = []
    epoch = _epoch(upgrade, rep)
    rows = node_rows(facts, target=target, active=active, targets=targets, epoch=epoch)
    steps = _steps(rep, policy, targets, rows, facts.events, prediction, now=now)
    index = _int(inner.get("currentStepIndex"))
    waiting = waiting_for(rep, upgrade, raw_policy, rows, now=now, object_name=object_name,
                          git=git) if facts.cluster_operator is not None else []
    header: dict[str, Any] = {
        "phase": phase,
        "upgrading": rep.upgrading,
        "step": rep.step,
        "stepIndex": index,
        "stepCount": len(policy.steps),
        "stepState": rep.step_state,
        "oldVersion": old_version,
        "newVersion": new_version,
        "rollingBack": rolling_back,
        "nodesOnNew": sum(1 for r in rows if r.state in ("upgraded", "verifying")),
        "nodesTotal": total,
        "nodesReadyStatus": rep.nodes_ready,
        "failures": rep.failures,
        "maxFailures": rep.max_failures,
        "message": rep.message,
        "sourceCommit": rep.source_commit,
        "prediction": _predicted_end(rep, steps, prediction, upgrade, now=now),
    }
    held = [w for w in waiting if w.kind in HOLDING_KINDS]
    if header["prediction"] is not None and held:
        # nothing moves until a person acts: no end can be predicted
        header["prediction"] = {**header["prediction"], "at": None,
                                "note": f"held: {held[0].title}"}
    return DashboardView(
        cluster=facts.cluster,
        object_name=object_name,
        generated_at=now,
        found=facts.cluster_operator is not None,
        header=header,
        steps=steps,
        waiting=waiting,
        nodes=rows,
        audit=audit,
        error=facts.error if facts.cluster_operator is not None or facts.error else
        f"no ClusterOperator {object_name!r}",
        conditions=rep.conditions,
    )


def _epoch(upgrade: Mapping[str, Any], rep: StatusReport) -> str:
    condition = st.find_condition(upgrade, st.COND_PROGRESSING) if upgrade else None
    start = (condition or {}).get("lastTransitionTime") or ""
    index = rep.step.split("/")[0]
    return f"{index}@{start}"


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _steps(rep: StatusReport, policy: UpgradePolicy, targets: Sequence[int],
           rows: Sequence[NodeRow], events: Sequence[EventFacts],
           prediction: Prediction | None, *, now: float) -> list[StepView]:
    times = step_times([(e.at, e.reason, event_step(e)) for e in events])
    states = {row.step: row.state for row in rep.steps}
    out: list[StepView] = []
    before = 0
    for number, (step, target) in enumerate(zip(policy.steps, targets, strict=False), 1):
        reported = states.get(number, "pending")
        if reported == "done":
            state = "done"
        elif reported in ("StepPaused",):
            state = "paused"
        elif reported == "pending":
            state = "predicted" if prediction is not None else "pending"
        else:
            state = "running"
        if rep.phase not in ACTIVE_PHASES and reported != "done" and state != "predicted":
            state = "pending"
        at = times.get(number, {})
        counts: dict[str, int] = {}
        for row in rows:
            if row.step == number:
                counts[row.state] = counts.get(row.state, 0) + 1
        predicted = None
        if prediction is not None and number <= len(prediction.step_seconds):
            predicted = prediction.step_seconds[number - 1]
        out.append(StepView(
            step=number, target=target, nodes=max(target - before, 0),
            pause=_pause_text(step.pause_ms), gate=step.pause_ms is None, state=state,
            started_at=at.get("started"), upgraded_at=at.get("upgraded"),
            ended_at=at.get("ended"), predicted_seconds=predicted, counts=counts,
        ))
        before = max(before, target)
    return out


def _predicted_end(rep: StatusReport, steps: Sequence[StepView], prediction: Prediction | None,
                   upgrade: Mapping[str, Any], *, now: float) -> dict[str, Any] | None:
    """When the rollout ends: the rest of the current step (the model's time for it less what
    has passed, or the pause timer) plus the model's time for every later step. Gates count
    zero: the page says how many are left for a person."""
    if prediction is None or rep.phase != "Progressing" or not steps:
        return None
    index = next((s.step for s in steps if s.state in ("running", "paused")), 0)
    if index == 0:
        return None
    current = steps[index - 1]
    model = prediction.step_seconds
    if index > len(model):
        return None
    remaining = 0.0
    gate_waiting = False
    if current.state == "paused":
        recheck = parse_time(_mapping(upgrade.get("status")).get("recheckTime"))
        if current.gate:
            gate_waiting = True
        elif recheck is not None:
            remaining += max(recheck - now, 0.0)
    else:
        elapsed = now - current.started_at if current.started_at is not None else 0.0
        remaining += max(model[index - 1] - elapsed, 0.0)
    remaining += sum(model[index:])
    gates = sum(1 for s in steps[index:] if s.gate) + (1 if gate_waiting else 0)
    return {
        "at": _rfc3339(now + remaining),
        "remainingSeconds": round(remaining, 1),
        "gatesLeft": gates,
        "installSeconds": round(prediction.install_seconds, 2),
        "installMeasured": prediction.measured,
        "note": "from the planner's model with the install time "
                + ("measured in this rollout" if prediction.measured else "assumed (60 s)")
                + (f"; plus the time {gates} gate(s) wait for a person" if gates else ""),
    }


def measured_install_seconds(facts: ClusterFacts, *, target: str) -> list[float]:
    """Per node upgraded in this rollout: seconds from its new pod's creation (the old pod's
    deletion, within the API's latency) to the new pod turning Ready."""
    out = []
    for node in facts.nodes:
        pod = node.pod
        if (pod is not None and pod.revision == target and pod.ready
                and pod.ready_since is not None and pod.created_at):
            out.append(max(pod.ready_since - pod.created_at, 0.0))
    return out
