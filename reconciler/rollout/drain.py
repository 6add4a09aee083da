"""The drain of docs/live-clusters.md#the-drain, pure: which of a draining node's pods are evicted,
which are waited for and why, what the PodDisruptionBudgets allow in one pass, and the settings a
node started with (``ANN_DRAIN_SETTINGS``: drain, waitFor and readyTimeout apply from the next node
that starts, so a node in flight keeps its own record).

Never evicted: DaemonSet pods, mirror pods and pods labelled ``drain.skip=true`` (left alone:
they do not hold the node); terminating pods are waited for (their grace period is theirs);
``waitFor`` pods are waited for until ``waitFor.timeout`` (0: as long as it takes); bare pods,
emptyDir pods without ``deleteEmptyDir`` and GPU pods a non-empty ``podSelector`` does not
match are never evicted and keep the node waiting, named. The node states that act on this are
in ``node_states`` (``draining``, ``drain_start``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.names import ANN_DRAIN_SETTINGS, LABEL_DRAIN_SKIP
from reconciler.policy.label_selector import LabelSelector, LabelSelectorError, Requirement
from reconciler.policy.rollout_settings import DrainSettings, OnTimeout, WaitForSettings
from reconciler.rollout.model import DisruptionBudget, PlannerSettings, RolloutNode, WorkloadPod

#: seconds between two eviction requests for a pod a budget holds (docs/live-clusters.md#the-drain:
#: at most once per 5 s)
EVICTION_RETRY = 5.0
#: entries of ``upgradeStatus.draining`` at most (the status stays small on a large fleet)
STATUS_LIMIT = 20

# why a pod keeps a draining node waiting (``waitingFor``)
WHY_TERMINATING = "terminating"
WHY_WAIT_FOR = "waitFor"
WHY_BARE = "no controller"
WHY_EMPTY_DIR = "emptyDir"
WHY_NOT_SELECTED = "not selected by drain.podSelector"
WHY_SKIP = "drain.skip"
WHY_UNKNOWN = "not observed"


def selector_text(selector: LabelSelector) -> str:
    """The string form of a selector (its text as written, else rendered)."""
    if selector.text or selector.empty:
        return selector.text
    return ",".join(_requirement_text(r) for r in selector.requirements)


def _requirement_text(r: Requirement) -> str:
    values = sorted(r.values)
    if r.operator == "Exists":
        return r.key
    if r.operator == "DoesNotExist":
        return "!" + r.key
    if len(values) == 1:
        return f"{r.key}{'=' if r.operator == 'In' else '!='}{values[0]}"
    return f"{r.key} {'in' if r.operator == 'In' else 'notin'} ({','.join(values)})"


@dataclass(frozen=True, slots=True)
class NodeDrainSettings:
    """What a node started with (``ANN_DRAIN_SETTINGS``, JSON)."""

    ready_timeout: float
    drain: DrainSettings | None
    wait_for: WaitForSettings | None
    #: the rollout set the autoscaler's scale-down-disabled annotation: it removes it at the end
    #: (and only then: one a person set stays)
    scale_down_set: bool = False

    @classmethod
    def of_pass(cls, settings: PlannerSettings, *, scale_down_set: bool) -> NodeDrainSettings:
        return cls(settings.ready_timeout, settings.drain, settings.wait_for, scale_down_set)

    def to_text(self) -> str:
        data: dict[str, Any] = {"readyTimeout": self.ready_timeout}
        if self.drain is not None:
            d = self.drain
            data["drain"] = {"podSelector": selector_text(d.pod_selector), "timeout": d.timeout,
                             "onTimeout": d.on_timeout, "deleteEmptyDir": d.delete_empty_dir}
        if self.wait_for is not None:
            data["waitFor"] = {"podSelector": selector_text(self.wait_for.pod_selector),
                               "timeout": self.wait_for.timeout}
        if self.scale_down_set:
            data["scaleDownDisabled"] = True
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_text(cls, text: str | None) -> NodeDrainSettings | None:
        """The record as written; None when absent or unreadable (the pass's settings apply).
        Read once per distinct text: a wave's nodes share one, and every pass reads it for each
        node in flight."""
        return _read_record(text) if text else None

    @classmethod
    def _parse(cls, text: str) -> NodeDrainSettings | None:
        try:
            data = json.loads(text)
            if not isinstance(data, Mapping):
                return None
            drain = data.get("drain")
            wait_for = data.get("waitFor")
            on_timeout: OnTimeout = "wait"
            if isinstance(drain, Mapping) and drain.get("onTimeout") in ("fail", "delete"):
                on_timeout = drain["onTimeout"]
            return cls(
                ready_timeout=float(data["readyTimeout"]),
                drain=DrainSettings(
                    pod_selector=LabelSelector.parse(str(drain.get("podSelector") or "")),
                    timeout=float(drain["timeout"]), on_timeout=on_timeout,
                    delete_empty_dir=drain.get("deleteEmptyDir") is True,
                ) if isinstance(drain, Mapping) else None,
                wait_for=WaitForSettings(
                    pod_selector=LabelSelector.parse(str(wait_for.get("podSelector") or "")),
                    timeout=float(wait_for.get("timeout") or 0.0),
                ) if isinstance(wait_for, Mapping) else None,
                scale_down_set=data.get("scaleDownDisabled") is True,
            )
        except (ValueError, TypeError, KeyError, LabelSelectorError):
            return None


@functools.lru_cache(maxsize=256)
def _read_record(text: str) -> NodeDrainSettings | None:
    return NodeDrainSettings._parse(text)


def recorded(node: RolloutNode) -> NodeDrainSettings | None:
    return NodeDrainSettings.from_text(node.annotations.get(ANN_DRAIN_SETTINGS))


def settings_of(node: RolloutNode, settings: PlannerSettings) -> NodeDrainSettings:
    """The settings that decide for ``node``: its record, else the pass's."""
    return recorded(node) or NodeDrainSettings.of_pass(settings, scale_down_set=False)


def ready_timeout_of(node: RolloutNode, default: float) -> float:
    """readyTimeout for a node in flight: the one it started with, else ``default``."""
    if ANN_DRAIN_SETTINGS not in node.annotations:
        return default
    record = recorded(node)
    return default if record is None else record.ready_timeout


# ----------------------------------------------------------------------------- the pods


def left_alone(pod: WorkloadPod) -> bool:
    """Never evicted and never waited for: they do not hold the node."""
    return pod.controller_kind == "DaemonSet" or pod.mirror


def wait_for_pods(node: RolloutNode, wait_for: WaitForSettings | None) -> list[str]:
    """``waitFor`` pods on the node (waitFor without drain: they make it wait like a busy
    node)."""
    if wait_for is None:
        return []
    selector = wait_for.pod_selector
    return [p.key for p in node.pods if not left_alone(p) and selector.matches(p.labels)]


@dataclass(frozen=True, slots=True)
class Assessment:
    """A draining node's pods as the drain sees them now."""

    #: pods to evict, not terminating yet
    evict: tuple[WorkloadPod, ...] = ()
    #: pods that keep the node waiting and are not evicted now: (``ns/name``, why)
    waiting: tuple[tuple[str, str], ...] = ()
    #: of ``waiting``, the waitFor pods still within their timeout (the drain timeout spares
    #: them: "as long as it takes")
    waited_for: int = 0
    #: the next instant an answer changes by itself (a waitFor timeout), if any
    next_change: float | None = None

    @property
    def idle(self) -> bool:
        """Nothing holds the node: its driver pod may go."""
        return not self.evict and not self.waiting

    @property
    def drain_blocked(self) -> bool:
        """Something the drain timeout applies to holds the node (not only waitFor pods)."""
        return bool(self.evict) or len(self.waiting) > self.waited_for


def assess(node: RolloutNode, record: NodeDrainSettings, *, now: float, started: float,
           slack: float = 0.0) -> Assessment:
    """Sort a draining node's pods (``started``: its drain's start, the timers' origin)."""
    drain = record.drain
    wait_for = record.wait_for
    wait_expired = False
    next_change: float | None = None
    if wait_for is not None and wait_for.timeout:
        deadline = started + wait_for.timeout
        wait_expired = now + slack >= deadline
        if not wait_expired:
            next_change = deadline
    evict: list[WorkloadPod] = []
    waiting: list[tuple[str, str]] = []
    waited = 0
    for pod in sorted(node.pods, key=lambda p: p.key):
        if left_alone(pod):
            continue
        waited_pod = wait_for is not None and wait_for.pod_selector.matches(pod.labels)
        if pod.terminating:
            waiting.append((pod.key, WHY_TERMINATING))
            continue
        if waited_pod and not wait_expired:
            waiting.append((pod.key, WHY_WAIT_FOR))
            waited += 1
            continue
        if not waited_pod:
            if not pod.gpu:
                continue
            if pod.labels.get(LABEL_DRAIN_SKIP) == "true":
                continue
            if drain is not None and not drain.pod_selector.matches(pod.labels):
                waiting.append((pod.key, WHY_NOT_SELECTED))
                continue
        elif pod.labels.get(LABEL_DRAIN_SKIP) == "true":
            waiting.append((pod.key, WHY_SKIP))  # waited for, then never evicted
            continue
        why = _never_evicted(pod, drain)
        if why is not None:
            waiting.append((pod.key, why))
        else:
            evict.append(pod)
    if not node.pods and node.workloads:
        # GPU pods the caller saw but did not describe: never deleted from under them
        waiting.extend((key, WHY_UNKNOWN) for key in node.workloads)
    return Assessment(tuple(evict), tuple(waiting), waited, next_change)


def _never_evicted(pod: WorkloadPod, drain: DrainSettings | None) -> str | None:
    if pod.controller_kind is None:
        return WHY_BARE
    if pod.empty_dir and not (drain is not None and drain.delete_empty_dir):
        return WHY_EMPTY_DIR
    return None


# ----------------------------------------------------------------------------- the budgets


@dataclass(slots=True)
class Allowance:
    """One pass's copy of the budgets' ``disruptionsAllowed``, spent as evictions are asked
    for: one pass never asks for more than a budget allows."""

    budgets: Mapping[str, DisruptionBudget]
    left: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.left = {key: b.disruptions_allowed for key, b in self.budgets.items()}

    def covering(self, pod: WorkloadPod) -> list[str]:
        return [key for key, b in self.budgets.items() if b.covers(pod)]

    def take(self, pod: WorkloadPod) -> list[str]:
        """Spend one disruption of every budget covering ``pod``; returns the budgets that
        hold it instead (nothing spent then)."""
        keys = self.covering(pod)
        holding = sorted(k for k in keys if self.left[k] <= 0)
        if not holding:
            for key in keys:
                self.left[key] -= 1
        return holding


def blocked_text(budgets: Iterable[str]) -> str:
    """The value of the blocked-by annotation (the budgets holding a node, sorted)."""
    return ",".join(sorted(set(budgets)))
