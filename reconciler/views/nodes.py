"""Node states, classified once (SPEC 4.3, 11): one GPU node against the revision a rollout
moves to, and what the states of all nodes mean for it (``NodeStates``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from reconciler.names import (
    ACTIVE_PHASES,
    ANN_FAILURE_REASON,
    ANN_STATE,
    ANN_TARGET,
    ANN_WAS_UNSCHEDULABLE,
    ROLLBACK_PHASES,
    STATE_CORDONED,
    STATE_FAILED,
    STATE_UPGRADING,
)
from reconciler.rollout.model import FAILURE_REASONS

#: node states, in the order of the dashboard's legend (the page gets each node's index)
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


def classified(node: NodeFacts, *, target: str, active: bool) -> ClassifiedNode:
    state = classify(node, target=target, active=active)
    return ClassifiedNode(
        name=node.name, state=state, pod=node.pod.name if node.pod else "",
        pod_reason=pod_reason(node.pod),
        failure_reason=str(node.annotations.get(ANN_FAILURE_REASON) or "")
        if state == "failed" else "",
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
    #: node -> the pods being evicted from it before it upgrades (the drain; next issue)
    draining: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def node_states(lines: Iterable[NodeLine]) -> NodeStates:
    """The summary of classified nodes. A GPU node without a driver pod is not a rollout node
    (SPEC 4.3): left alone, it is not unavailable."""
    busy: dict[str, tuple[str, ...]] = {}
    unavailable: dict[str, str] = {}
    failed: dict[str, str] = {}
    for line in lines:
        if line.state == "busy":
            busy[line.name] = tuple(line.busy_pods)
        elif line.state == "not-ready" or (line.state == "left-alone" and line.pod):
            unavailable[line.name] = UNAVAILABLE_WHY[line.state]
        elif line.state == "failed":
            failed[line.name] = line.failure_reason or line.pod_reason
    return NodeStates(busy=busy, unavailable=unavailable, failed=failed)


def classify_all(nodes: Iterable[NodeFacts], *, upgrade: Mapping[str, Any],
                 current_revision: str = "") -> NodeStates:
    """``node_states`` of ``nodes`` against the rollout ``upgrade`` (``status.upgradeStatus``)
    describes."""
    target = target_revision(upgrade, current_revision)
    active = upgrade.get("phase") in ACTIVE_PHASES
    return node_states(classified(n, target=target, active=active) for n in nodes)
