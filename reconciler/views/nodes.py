"""Node states, classified once (docs/rollout.md#upgrading-one-node, docs/dashboard.md,
docs/live-clusters.md and docs/rollout.md#topology-aware-waves): one GPU node against the revision a
rollout moves to, what the states of all nodes mean for it (``NodeStates``), and the progress per
topology domain (``domain_progress``)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from reconciler.names import (
    ACTIVE_PHASES,
    ANN_FAILURE_REASON,
    ANN_STATE,
    ANN_TARGET,
    ROLLBACK_PHASES,
    STATE_CORDONED,
    STATE_DRAINING,
    STATE_FAILED,
    STATE_UPGRADING,
)
from reconciler.rollout.node_class import (
    MOVE_STATES,
    left_alone,
    pod_failed,
    skip_requested,
    standing,
    tolerated_step,
)

#: node states, in the order of the dashboard's legend (the page gets each node's index)
NODE_STATES: tuple[str, ...] = (
    "old",  # on the old version, not touched yet
    "cordoned",  # cordoned ahead: next to start
    # cordoned and in flight: its pods are evicted or waited for (docs/live-clusters.md#the-drain)
    "draining",
    "in-flight",  # old pod deleted, new one not Ready yet
    "verifying",  # new pod Ready, the controller has not recorded the node done yet
    "failed",  # the new pod failed (image pull, crash loop, readyTimeout)
    "upgraded",  # Ready on the version the rollout moves to
    "busy",  # a GPU workload pod holds the node: it waits (not failed)
    "not-ready",  # the node is NotReady
    "skipped",  # not moved by this rollout: the skip label, or skipped when its turn came
    "left-alone",  # no driver pod (not a rollout node), or cordoned by someone else
    # failed, left behind by its step's toleration (docs/rollout.md#failures-tolerated-in-a-step)
    "tolerated",
)
STATE_INDEX = {name: index for index, name in enumerate(NODE_STATES)}
#: why an unavailable rollout node is unavailable, by state
UNAVAILABLE_WHY = {"not-ready": "NotReady", "left-alone": "cordoned by someone else"}


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
    """One GPU node as the read model sees it."""

    name: str
    ready: bool = True
    ready_since: float | None = None  # the node's Ready condition's lastTransitionTime
    unschedulable: bool = False
    canary: bool = False
    annotations: Mapping[str, str] = field(default_factory=dict)
    pod: PodFacts | None = None
    workloads: tuple[str, ...] = ()  # "namespace/name" of pods requesting a GPU
    #: the labels the read model reads: the skip label and the topology key (others may be left
    #: out: at 10,000 nodes they are most of the memory)
    labels: Mapping[str, str] = field(default_factory=dict)


def classify(node: NodeFacts, *, target: str, active: bool,
             skipped: Collection[str] = ()) -> str:
    """One node's state against the revision the rollout moves to (``target``), by the rules
    the planner's scan classifies with (``reconciler.rollout.node_class``). ``skipped``: the
    nodes the rollout recorded as skipped (``upgradeStatus.skipped``: frozen for the rollout,
    even when a label goes or a node recovers)."""
    pod = node.pod
    if pod is None:
        return "not-ready" if not node.ready else "left-alone"
    ann = node.annotations
    on_target = pod.revision == target and not pod.deleting
    if not on_target and skip_requested(node, target, skipped):
        # not a rollout node (docs/live-clusters.md#a-node-under-repair): neither unavailable nor
        # waited for, NotReady or not; a label counts before the node's start (cordoned ahead is not
        # started yet)
        return "skipped"
    if not node.ready:
        return "not-ready"
    moving_to = ann.get(ANN_TARGET)
    recorded = standing(node, ann.get(ANN_STATE), moving_to) if moving_to == target else None
    if on_target and pod.ready:
        # cordoned ahead with a pod on the target: moved (its start writes no record)
        return "verifying" if active and recorded in MOVE_STATES else "upgraded"
    if recorded == STATE_FAILED and tolerated_step(ann, target) is not None:
        return "tolerated"
    if recorded == STATE_FAILED or (on_target and pod_failed(pod)):
        return "failed"
    if recorded == STATE_UPGRADING or (on_target and active):
        return "in-flight"
    if recorded == STATE_DRAINING:
        return "draining"
    if recorded == STATE_CORDONED:
        return "cordoned"
    if left_alone(node):
        return "left-alone"
    if active and node.workloads:
        return "busy"
    return "old"


def target_revision(upgrade: Mapping[str, Any], current_revision: str = "") -> str:
    """The revision nodes are classified against: the one an active rollout moves to (the
    previous one while rolling back), else the DaemonSet's current one (``current_revision``,
    when known)."""
    inner = upgrade.get("status")
    inner = inner if isinstance(inner, Mapping) else {}
    phase = upgrade.get("phase")
    last = str(inner.get("lastPodSpecRevision") or "")
    new = str(inner.get("upgradingPodSpecRevision") or "")
    if phase in ROLLBACK_PHASES:
        return last or current_revision
    if phase in ACTIVE_PHASES:
        return new or current_revision
    return current_revision or new or last


def recorded_skips(upgrade: Mapping[str, Any]) -> frozenset[str]:
    """The nodes ``upgradeStatus.skipped`` lists (docs/live-clusters.md#a-node-under-repair)."""
    raw = upgrade.get("skipped")
    return frozenset(str(n) for n in raw) if isinstance(raw, list) else frozenset()


def pod_reason(pod: PodFacts | None) -> str:
    """The driver pod's state in a word: its waiting reason, Ready, not Ready, or none."""
    if pod is None:
        return "no driver pod"
    return pod.waiting_reason or ("Ready" if pod.ready else "not Ready")


class NodeLine(Protocol):
    """A classified node, as far as ``node_states`` reads it (the dashboard's rows are)."""

    @property
    def name(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def pod(self) -> str: ...  # the driver pod's name ("" when none)
    @property
    def pod_reason(self) -> str: ...
    @property
    def failure_reason(self) -> str: ...
    @property
    def busy_pods(self) -> tuple[str, ...]: ...


@dataclass(frozen=True, slots=True)
class ClassifiedNode:
    name: str
    state: str
    pod: str = ""
    pod_reason: str = ""
    failure_reason: str = ""
    busy_pods: tuple[str, ...] = ()


def classified(node: NodeFacts, *, target: str, active: bool,
               skipped: Collection[str] = ()) -> ClassifiedNode:
    state = classify(node, target=target, active=active, skipped=skipped)
    return ClassifiedNode(
        name=node.name, state=state, pod=node.pod.name if node.pod else "",
        pod_reason=pod_reason(node.pod),
        failure_reason=str(node.annotations.get(ANN_FAILURE_REASON) or "")
        if state in ("failed", "tolerated") else "",
        busy_pods=node.workloads)


@dataclass(frozen=True, slots=True)
class NodeStates:
    """What the nodes mean for a rollout: what ``waits`` reads about them."""

    #: node -> the GPU pods it waits for (it is not failed)
    busy: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: rollout node -> why it is unavailable (maxUnavailable counts it)
    unavailable: Mapping[str, str] = field(default_factory=dict)
    #: node -> why its move failed
    failed: Mapping[str, str] = field(default_factory=dict)
    #: node -> the GPU pods on it while it drains (docs/live-clusters.md#the-drain; which pods and
    #: budgets hold it is the status's ``upgradeStatus.draining``)
    draining: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: nodes this rollout does not move (docs/live-clusters.md#a-node-under-repair), by name
    skipped: tuple[str, ...] = ()
    #: failed nodes a step's toleration left behind (docs/rollout.md#failures-tolerated-in-a-step),
    #: by name: neither failed (nothing waits for them) nor unavailable
    tolerated: tuple[str, ...] = ()
    #: the progress per topology domain (docs/rollout.md#topology-aware-waves), when the rollout has
    #: a topology key
    domains: tuple[DomainProgress, ...] = ()


def node_states(lines: Iterable[NodeLine], *,
                domains: Sequence[DomainProgress] = ()) -> NodeStates:
    """The summary of classified nodes. A GPU node without a driver pod is not a rollout node
    (docs/rollout.md#upgrading-one-node): left alone, it is not unavailable; nor is a skipped node
    (docs/live-clusters.md#a-node-under-repair)."""
    busy: dict[str, tuple[str, ...]] = {}
    unavailable: dict[str, str] = {}
    failed: dict[str, str] = {}
    draining: dict[str, tuple[str, ...]] = {}
    skipped: list[str] = []
    tolerated: list[str] = []
    for line in lines:
        if line.state == "busy":
            busy[line.name] = tuple(line.busy_pods)
        elif line.state == "not-ready" or (line.state == "left-alone" and line.pod):
            unavailable[line.name] = UNAVAILABLE_WHY[line.state]
        elif line.state == "failed":
            failed[line.name] = line.failure_reason or line.pod_reason
        elif line.state == "draining":
            draining[line.name] = tuple(line.busy_pods)
        elif line.state == "skipped":
            skipped.append(line.name)
        elif line.state == "tolerated":
            tolerated.append(line.name)
    return NodeStates(busy=busy, unavailable=unavailable, failed=failed, draining=draining,
                      skipped=tuple(sorted(skipped)), domains=tuple(domains),
                      tolerated=tuple(sorted(tolerated)))


def classify_all(nodes: Iterable[NodeFacts], *, upgrade: Mapping[str, Any],
                 current_revision: str = "") -> NodeStates:
    """``node_states`` of ``nodes`` against the rollout ``upgrade`` (``status.upgradeStatus``)
    describes, with the progress per domain when it has a topology key."""
    target = target_revision(upgrade, current_revision)
    active = upgrade.get("phase") in ACTIVE_PHASES
    facts = list(nodes)
    skipped = recorded_skips(upgrade)
    lines = [classified(n, target=target, active=active, skipped=skipped) for n in facts]
    key = topology_key(upgrade)
    domains = domain_progress(zip(facts, (line.state for line in lines), strict=True),
                              key=key) if key else []
    return node_states(lines, domains=domains)


# ----------------------------------------------------------------------------- topology

#: the progress columns of a domain: each a sum of node states (``DomainProgress.to_json``)
PROGRESS_COLUMNS: Final = (
    ("upgraded", ("upgraded", "verifying")),  # on the new version, Ready
    ("inFlight", ("draining", "in-flight")),  # holding a slot (a draining node is in flight)
    ("draining", ("draining",)),
    ("failed", ("failed", "tolerated")),  # tolerated ones too: the states say how many
    ("skipped", ("skipped",)),
    ("pending", ("old", "cordoned", "busy")),  # not started yet
    ("unavailable", ("not-ready", "left-alone")),
)
#: how a status or the page names the domain of the nodes without the label
UNLABELLED: Final = "(no label)"
#: domain states that end a domain under ``order: sequential``
#: (docs/rollout.md#topology-aware-waves)
_FINISHED: Final = frozenset({"upgraded", "verifying", "failed", "skipped", "tolerated"})


def topology_key(upgrade: Mapping[str, Any]) -> str:
    """The topology key frozen in the status when the rollout started
    (``upgradeStatus.topology.key``), or ``""``."""
    topology = upgrade.get("topology")
    key = topology.get("key") if isinstance(topology, Mapping) else None
    return key if isinstance(key, str) else ""


@dataclass(frozen=True, slots=True)
class DomainProgress:
    """One topology domain: its nodes' states counted."""

    #: the key's value; None: the nodes without the label (one domain, last)
    domain: str | None
    states: Mapping[str, int]
    canary: bool = False  # holds a canary node (such domains go first)

    @property
    def nodes(self) -> int:
        return sum(self.states.values())

    def count(self, *states: str) -> int:
        return sum(self.states.get(s, 0) for s in states)

    @property
    def done(self) -> bool:
        """Every node upgraded, failed or skipped: under ``sequential`` the next domain may
        start."""
        return all(s in _FINISHED for s, n in self.states.items() if n)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"domain": self.domain, "nodes": self.nodes}
        out.update({name: self.count(*states) for name, states in PROGRESS_COLUMNS})
        out["done"] = self.done
        out["states"] = {s: n for s, n in self.states.items() if n}
        return out


def domain_progress(nodes: Iterable[tuple[NodeFacts, str]], *, key: str) -> list[DomainProgress]:
    """The GPU nodes with a driver pod (``(node, its state)``) by their value of the label
    ``key``, counted per state, in the rollout's domain order
    (docs/rollout.md#topology-aware-waves): domains holding canary nodes first (canary nodes go
    first), then by value as strings; the nodes without the label form one domain, last (of its
    group). Skipped nodes count in their domain, as ``skipped``."""
    counts: dict[str | None, dict[str, int]] = {}
    canary: set[str | None] = set()
    for node, state in nodes:
        if node.pod is None and state != "skipped":
            continue  # not a rollout node
        domain = node.labels.get(key)
        per = counts.setdefault(domain, {})
        per[state] = per.get(state, 0) + 1
        if node.canary and state != "skipped":
            canary.add(domain)
    order = sorted(counts, key=lambda d: (d not in canary, d is None, d or ""))
    return [DomainProgress(domain=d, states=dict(sorted(
        counts[d].items(), key=lambda item: STATE_INDEX[item[0]])), canary=d in canary)
        for d in order]
