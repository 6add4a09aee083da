"""Serving pods behind PodDisruptionBudgets on the simulator's virtual fleet
(docs/live-clusters.md#the-drain): what ``reconciler simulate --serving-pods N`` models of a live
cluster.

A simple model, deterministic: N serving pods spread evenly over the fleet, in groups of
``pods_per_budget`` (one Deployment each) behind a budget of ``maxUnavailable``. The API server
refuses an eviction a budget does not allow (counted); an evicted pod terminates for its grace
period (``grace_seconds``: the drain time a pod costs), then its replacement starts elsewhere
(off the rollout fleet) and is Ready ``reschedule_seconds`` later, when the budget's
``disruptionsAllowed`` is recomputed as the disruption controller would. Pure: the simulator's
virtual clock drives it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.policy.label_selector import LabelSelector
from reconciler.rollout.model import DisruptionBudget, WorkloadPod

NAMESPACE = "serve"


@dataclass(frozen=True, slots=True)
class ServingModel:
    """``--serving-pods`` and its companions."""

    pods: int
    pods_per_budget: int = 10
    max_unavailable: int = 1
    #: seconds an evicted pod takes to stop (its grace period)
    grace_seconds: float = 30.0
    #: seconds from a pod gone until its replacement elsewhere is Ready
    reschedule_seconds: float = 30.0


def _app(group: int) -> str:
    return f"serve-{group}"


@dataclass(slots=True)
class ServingFleet:
    """The budgets' state and what the run saw of them."""

    model: ServingModel
    #: budget key -> pods of the group not Ready (terminating, or replaced and not Ready yet)
    down: dict[str, int] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    selectors: dict[str, LabelSelector] = field(default_factory=dict)
    requested: int = 0
    refused: int = 0
    evicted: int = 0
    deleted: int = 0
    #: node -> the budgets holding its drain now (from the planner's blocked-by records)
    holding: dict[str, frozenset[str]] = field(default_factory=dict)
    #: budget -> since when it holds a node (while it does)
    held_since: dict[str, float] = field(default_factory=dict)
    held_seconds: dict[str, float] = field(default_factory=dict)
    held_nodes: dict[str, set[str]] = field(default_factory=dict)
    #: node -> when its drain started; node -> its drain time (start to driver pod deletion)
    drain_started: dict[str, float] = field(default_factory=dict)
    drain_seconds: dict[str, float] = field(default_factory=dict)

    def place(self, node_names: list[str]) -> dict[str, tuple[WorkloadPod, ...]]:
        """The pods of each node at the start: pod i on node ``i * nodes // pods``."""
        model = self.model
        per = max(model.pods_per_budget, 1)
        placed: dict[str, list[WorkloadPod]] = {}
        count = len(node_names)
        for i in range(model.pods):
            group = i // per
            pod = WorkloadPod(NAMESPACE, f"web-{i}", labels={"app": _app(group)})
            placed.setdefault(node_names[i * count // model.pods], []).append(pod)
        for group in range(-(-model.pods // per)):
            key = f"{NAMESPACE}/{_app(group)}-pdb"
            self.sizes[key] = min(per, model.pods - group * per)
            self.down[key] = 0
            self.selectors[key] = LabelSelector.parse(f"app={_app(group)}")
        return {name: tuple(pods) for name, pods in placed.items()}

    def budget_of(self, pod: WorkloadPod) -> str:
        return f"{NAMESPACE}/{pod.labels.get('app', '')}-pdb"

    def allowed(self, key: str) -> int:
        return max(0, self.model.max_unavailable - self.down[key])

    def budgets(self) -> dict[str, DisruptionBudget]:
        return {
            key: DisruptionBudget(NAMESPACE, key.partition("/")[2], self.selectors[key],
                                  self.allowed(key))
            for key in self.sizes
        }

    def evict(self, pod: WorkloadPod) -> bool:
        """An eviction request as the API server answers it: True when the pod goes."""
        self.requested += 1
        key = self.budget_of(pod)
        if key in self.down and self.allowed(key) <= 0:
            self.refused += 1
            return False
        self.evicted += 1
        self._down(pod)
        return True

    def delete(self, pod: WorkloadPod) -> None:
        """``onTimeout: delete``: no budget asked."""
        self.deleted += 1
        self._down(pod)

    def _down(self, pod: WorkloadPod) -> None:
        key = self.budget_of(pod)
        if key in self.down:
            self.down[key] += 1

    def replaced(self, key: str) -> None:
        """A replacement is Ready elsewhere: the budget allows again."""
        if key in self.down:
            self.down[key] = max(0, self.down[key] - 1)

    # -- what the run saw

    def blocked(self, t: float, node: str, budgets: Iterable[str]) -> None:
        """The planner recorded the budgets holding ``node`` (empty: none any more)."""
        now = frozenset(budgets)
        before = self.holding.pop(node, frozenset())
        if now:
            self.holding[node] = now
        for key in now:
            self.held_nodes.setdefault(key, set()).add(node)
        for key in now | before:
            holds = any(key in held for held in self.holding.values())
            if holds and key not in self.held_since:
                self.held_since[key] = t
            elif not holds and key in self.held_since:
                self.held_seconds[key] = (self.held_seconds.get(key, 0.0) + t
                                          - self.held_since.pop(key))

    def report(self, end: float) -> dict[str, Any]:
        """The ``drain`` key of ``simulate --format json``."""
        held = dict(self.held_seconds)
        for key, since in self.held_since.items():
            held[key] = held.get(key, 0.0) + end - since
        return {
            "nodes": [{"node": n, "seconds": round(s, 3)}
                      for n, s in sorted(self.drain_seconds.items())],
            "budgets_held": [
                {"budget": key, "seconds": round(held.get(key, 0.0), 3),
                 "nodes": len(self.held_nodes.get(key, ()))}
                for key in sorted(self.held_nodes)
            ],
            "evictions": {"requested": self.requested, "refused": self.refused,
                          "evicted": self.evicted, "deleted": self.deleted},
        }


def drain_summary(report: Mapping[str, Any], limit: int = 5) -> list[str]:
    """The text lines of ``simulate`` about the drain."""
    nodes = list(report.get("nodes") or [])
    lines = []
    if nodes:
        times = [float(n["seconds"]) for n in nodes]
        slowest = sorted(nodes, key=lambda n: (-float(n["seconds"]), n["node"]))[:limit]
        lines.append(
            f"drain: {len(nodes)} nodes drained, mean {sum(times) / len(times):g} s, max "
            f"{max(times):g} s; slowest: "
            + ", ".join(f"{n['node']} {float(n['seconds']):g} s" for n in slowest))
    else:
        lines.append("drain: no node had pods to drain")
    held = list(report.get("budgets_held") or [])
    if held:
        top = sorted(held, key=lambda b: (-float(b["seconds"]), b["budget"]))[:limit]
        lines.append("budgets that held: " + ", ".join(
            f"{b['budget']} ({b['nodes']} nodes, {float(b['seconds']):g} s)" for b in top)
            + (f" and {len(held) - limit} more" if len(held) > limit else ""))
    else:
        lines.append("budgets that held: none")
    ev = report.get("evictions") or {}
    lines.append(f"evictions: {ev.get('requested', 0)} requested, {ev.get('refused', 0)} "
                 f"refused, {ev.get('deleted', 0)} pods deleted on timeout")
    return lines
