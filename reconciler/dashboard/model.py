"""The dashboard's read model: what the page shows, built purely from a snapshot of the cluster
(the ClusterOperator, the GPU nodes with their driver pods and GPU workloads, the driver
DaemonSet's revisions, the ClusterOperator's Events), the Git audit trail and ``now``.

No Kubernetes, Git, clock or sockets here: the adapters (``source``, ``gitaudit``) collect the
inputs, ``build_view`` derives everything, the server only serves its JSON. The node states and
what the rollout waits for come from the read model ``reconciler.views`` (what ``reconciler
status`` shows too), so the page and the command never disagree: "waiting for" is the list of
typed entries (``Wait``) of every kind (``reconciler.views.waits.KINDS``: gate, pause timer,
``pause: true``, failure fallback, health checks, maintenance window, promotion gate, draining,
busy and unavailable nodes, a rejected commit, the firmware reboot); the page renders any kind it
is given. A live cluster (docs/live-clusters.md#the-drain and docs/rollout.md#topology-aware-waves)
adds the draining nodes with the pods and budgets that hold them, the skipped nodes and, when the
rollout has a topology key, the map grouped by domain with each domain's progress.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from reconciler.names import (
    ACTIVE_PHASES,
    ANN_ATTEMPT,
    ANN_DELETED_AT,
    ANN_DRAIN_STARTED,
    ANN_FAILED_AT,
    ANN_FAILURE_REASON,
    ANN_FAILURES,
    ANN_TARGET,
    ROLLBACK_PHASES,
)
from reconciler.policy.upgrade_policy import UpgradePolicy
from reconciler.rollout import status as st
from reconciler.stored_status import firmware_status_of, upgrade_status_of
from reconciler.sync.status_view import StatusReport, report
from reconciler.timefmt import format_wait
from reconciler.timefmt import parse_time_or_none as parse_time
from reconciler.views.nodes import (
    NODE_STATES,
    STATE_INDEX,
    UNLABELLED,
    DomainProgress,
    NodeFacts,
    PodFacts,
    classify,
    domain_progress,
    node_states,
    pod_reason,
    recorded_skips,
    target_revision,
    topology_key,
)
from reconciler.views.waits import HOLDING_KINDS, GitContext, Wait, draining_entries, waits

#: the names the dashboard's callers import from here (the read model lives in reconciler.views)
__all__ = ["NODE_STATES", "STATE_INDEX", "ClusterFacts", "DashboardView", "EventFacts",
           "GitContext", "NodeFacts", "NodeRow", "PodFacts", "Prediction", "StepView",
           "Wait", "build_view", "classify", "event_step", "measured_install_seconds",
           "node_rows", "step_times"]

_STEP_RE = re.compile(r"\bstep (\d+)")


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
    #: its value of the rollout's topology key (None: no label, or no topology)
    domain: str | None = None
    #: a draining node's entry of ``upgradeStatus.draining``: pods, budgets, waitingFor, since
    drain: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["since"] = _rfc3339(self.since)
        data["busy_pods"] = list(self.busy_pods)
        data["health"] = [list(pair) for pair in self.health]
        data["drain"] = dict(self.drain) if self.drain is not None else None
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
    #: failures the step tolerates (docs/rollout.md#failures-tolerated-in-a-step)
    toleration: int = 0

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
    waiting: list[Wait]
    nodes: list[NodeRow]
    audit: list[dict[str, Any]] | None  # None without --repo
    error: str | None = None
    conditions: list[dict[str, str]] = field(default_factory=list)
    #: the rollout's topology (``upgradeStatus.topology``) and the progress per domain, in the
    #: rollout's domain order (the map's groups then)
    topology: Mapping[str, Any] | None = None
    domains: list[DomainProgress] = field(default_factory=list)
    #: ``upgradeStatus.draining`` (node, since, pods, budgets, waitingFor) and the skipped nodes
    draining: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

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
            if self.domains:
                digest.update(b"\1" if row.domain is None else row.domain.encode() + b"\0")
        return digest.hexdigest()[:16]

    def domain_indexes(self) -> list[int]:
        """Per node of the map, its domain's index in ``domains`` (-1: not a rollout node)."""
        rank = {d.domain: i for i, d in enumerate(self.domains)}
        return [rank.get(row.domain, -1) if row.pod or row.state == "skipped" else -1
                for row in self.nodes]

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
            if self.domains:
                # the map grouped by domain (docs/rollout.md#topology-aware-waves): each node's
                # domain, by index
                fleet["domains"] = self.domain_indexes()
        return {
            "cluster": self.cluster,
            "object": self.object_name,
            "generatedAt": _rfc3339(self.generated_at),
            "found": self.found,
            "error": self.error,
            "header": self.header,
            "steps": [s.to_json() for s in self.steps],
            "waiting": [w.to_json() for w in self.waiting],
            "fleet": fleet,
            "audit": self.audit,
            "conditions": self.conditions,
            "topology": dict(self.topology) if self.topology else None,
            "domains": [{**d.to_json(), "name": UNLABELLED if d.domain is None else d.domain}
                        for d in self.domains],
            "draining": self.draining,
            "skipped": self.skipped,
        }

    def node(self, name: str) -> NodeRow | None:
        for row in self.nodes:
            if row.name == name:
                return row
        return None


def _rfc3339(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _version_of(image: str) -> str:
    return image.rpartition(":")[2] if ":" in image.rpartition("/")[2] else ""


# ----------------------------------------------------------------------------- nodes


def _since(node: NodeFacts, state: str) -> float | None:
    ann = node.annotations
    if state == "draining":
        return _time(ann.get(ANN_DRAIN_STARTED))
    if state == "in-flight":
        return _time(ann.get(ANN_DELETED_AT)) or (node.pod.created_at if node.pod else None)
    if state in ("failed", "tolerated"):
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
        # a drained node started at its cordon (docs/live-clusters.md#the-drain), before its pod's
        # deletion
        at = _time(ann.get(ANN_DRAIN_STARTED)) or _time(ann.get(ANN_DELETED_AT))
        if at is not None:
            return at
    pod = node.pod
    if pod is not None and pod.revision == target:
        return pod.created_at
    return None


def node_rows(facts: ClusterFacts, *, target: str, active: bool, targets: Sequence[int],
              epoch: str, topology: Mapping[str, Any] | None = None,
              draining: Mapping[str, Mapping[str, Any]] | None = None,
              skipped: frozenset[str] = frozenset()) -> list[NodeRow]:
    """Every GPU node, in the order of the map: the nodes moved to ``target`` by when they
    started, then the rest in the rollout's order (canary first, then by name; with a topology,
    domain by domain or in turn, docs/rollout.md#topology-aware-waves), skipped nodes last; cut into
    steps at the step targets. With a topology key the map then shows the nodes grouped by domain,
    in the rollout's domain order (each row's step kept)."""
    key = topology_key({"topology": topology or {}})
    states = {node.name: classify(node, target=target, active=active, skipped=skipped)
              for node in facts.nodes}
    rank: dict[str | None, int] = {}
    if key:
        progress = domain_progress(((n, states[n.name]) for n in facts.nodes), key=key)
        rank = {d.domain: i for i, d in enumerate(progress)}
    spread = (topology or {}).get("order") == "spread"
    started: list[tuple[float, str, NodeFacts]] = []
    waiting: list[tuple[Any, ...]] = []
    seen: dict[str | None, int] = {}
    for node in sorted(facts.nodes, key=lambda n: (not n.canary, n.name)):
        at = _started_at(node, target) if target else None
        if at is not None:
            started.append((at, node.name, node))
            continue
        last = states[node.name] == "skipped"  # takes no rollout node's place in a step
        domain = node.labels.get(key) if key else None
        place = rank.get(domain, len(rank))
        turn = seen[domain] = seen.get(domain, -1) + 1  # its place within its domain
        if not key:
            order: tuple[Any, ...] = (not node.canary, node.name)
        elif spread:
            order = (not node.canary, turn, place, node.name)
        else:
            order = (place, not node.canary, node.name)
        waiting.append((last, *order, node))
    ordered = [n for _, _, n in sorted(started)] + [w[-1] for w in sorted(
        waiting, key=lambda w: w[:-1])]
    rows: list[NodeRow] = []
    step = 0
    for position, node in enumerate(ordered):
        while step < len(targets) and position >= targets[step]:
            step += 1
        state = states[node.name]
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
            pod_reason=pod_reason(pod),
            failure_reason=str(ann.get(ANN_FAILURE_REASON) or "")
            if state in ("failed", "tolerated") else "",
            failures=count,
            attempt=st.int_or(ann.get(ANN_ATTEMPT), 0) if ann.get(ANN_TARGET) == target else 0,
            busy_pods=node.workloads,
            ready=node.ready,
            domain=node.labels.get(key) if key else None,
            drain=(draining or {}).get(node.name),
        ))
    if key:
        rows.sort(key=lambda r: rank.get(r.domain, len(rank)) if r.pod or r.state == "skipped"
                  else len(rank) + 1)
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


# ----------------------------------------------------------------------------- the view


def build_view(facts: ClusterFacts, *, now: float, object_name: str = "cluster-operator",
               prediction: Prediction | None = None, git: GitContext | None = None,
               audit: list[dict[str, Any]] | None = None,
               recorded: Mapping[str, Any] | None = None) -> DashboardView:
    """The whole page's content. Pure: the same facts and ``now`` give the same view.
    ``recorded``: the cluster's status snapshot in Git (with ``--repo``), for what only Git
    knows: a rejected commit, the promotion gate, operator mode's holds."""
    co = _mapping(facts.cluster_operator)
    upgrade = upgrade_status_of(co)
    inner = _mapping(upgrade.get("status"))
    driver = _mapping(_mapping(co.get("spec")).get("driver"))
    raw_policy = _mapping(driver.get("upgradePolicy"))
    snapshot = {
        "cluster": facts.cluster,
        "upgradeStatus": upgrade,
        "spec": {"driver": {k: driver[k] for k in ("payload", "upgradePolicy") if k in driver}},
    }
    firmware = firmware_status_of(co)
    if firmware:
        snapshot["firmware"] = firmware
    for key in ("rejection", "promotion", "holds"):
        if _mapping(recorded).get(key):
            snapshot[key] = _mapping(recorded)[key]
    rep = report(snapshot, now=now)
    try:
        policy = UpgradePolicy.from_spec(raw_policy)
    except (ValueError, TypeError, KeyError):
        policy = UpgradePolicy()
    phase = rep.phase
    active = phase in ACTIVE_PHASES
    rolling_back = phase in ROLLBACK_PHASES
    target = target_revision(upgrade, facts.current_revision)
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
    topology = _mapping(upgrade.get("topology"))
    drains = [dict(e) for e in draining_entries(upgrade)]
    rows = node_rows(facts, target=target, active=active, targets=targets, epoch=epoch,
                     topology=topology, draining={str(e["node"]): e for e in drains},
                     skipped=recorded_skips(upgrade))
    steps = _steps(rep, policy, targets, rows, facts.events, prediction, now=now, total=total)
    index = _int(inner.get("currentStepIndex"))
    waiting = waits(snapshot, now=now, nodes=node_states(rows), git=git,
                    object_name=object_name) if facts.cluster_operator is not None else []
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
        topology=topology or None,
        domains=_domains(facts, rows, topology),
        draining=drains,
        skipped=sorted(set(rep.skipped) | {r.name for r in rows if r.state == "skipped"}),
    )


def _domains(facts: ClusterFacts, rows: Sequence[NodeRow],
             topology: Mapping[str, Any]) -> list[DomainProgress]:
    key = topology_key({"topology": topology})
    if not key:
        return []
    states = {row.name: row.state for row in rows}
    return domain_progress(((n, states[n.name]) for n in facts.nodes), key=key)


def _epoch(upgrade: Mapping[str, Any], rep: StatusReport) -> str:
    condition = st.find_condition(upgrade, st.COND_PROGRESSING) if upgrade else None
    start = (condition or {}).get("lastTransitionTime") or ""
    index = rep.step.split("/")[0]
    return f"{index}@{start}"


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _steps(rep: StatusReport, policy: UpgradePolicy, targets: Sequence[int],
           rows: Sequence[NodeRow], events: Sequence[EventFacts],
           prediction: Prediction | None, *, now: float, total: int = 0) -> list[StepView]:
    times = step_times([(e.at, e.reason, event_step(e)) for e in events])
    states = {row.step: row.state for row in rep.steps}
    out: list[StepView] = []
    before = 0
    tolerations = policy.step_tolerations(total) if targets else []
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
            toleration=tolerations[number - 1] if number <= len(tolerations) else 0,
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
