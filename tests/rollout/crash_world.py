"""A whole small rollout played to its end on the hand-driven fleet of ``world.py``, with the
controller killed once: after a part of one pass's actions landed, its status write lost
(docs/rollout.md#restart-safety-in-short). ``sweep`` kills every pass of a reference run at every
point a model allows and compares each run's end with the reference's."""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Literal, NamedTuple

from reconciler.names import (
    ANN_DELETED_AT,
    ANN_DRAIN_STARTED,
    ANN_FAILED_AT,
    ANN_FAILURE_TOLERATED,
    ANN_FAILURES,
    ANN_STATE,
    STATE_FAILED,
)
from reconciler.policy.label_selector import LabelSelector
from reconciler.rollout.actions import NODE_ACTIONS, Action, RecordEvent
from reconciler.rollout.model import (
    DisruptionBudget,
    PlannerSettings,
    RolloutNode,
    RolloutSnapshot,
    WorkloadPod,
)
from reconciler.rollout.node_class import MOVE_STATES
from reconciler.rollout.node_view import with_pod
from reconciler.rollout.planner import Plan, plan
from reconciler.rollout.simulator import EPOCH
from reconciler.stored_status import read_upgrade_status, split_upgrade_status

from .world import NEW_REV, World

#: when things happened: a killed run's timing differs from the reference's
TIMESTAMPS = frozenset({ANN_DELETED_AT, ANN_FAILED_AT, ANN_DRAIN_STARTED})
#: the conditions a person answers by setting ``pause: false``: a gate and a fallback's pause
CONFIRMABLE = ("ManualGate", "BatchFailed")

#: ``own_record``: killed between the pass's own record (an annotation) and its status write
Model = Literal["prefix", "per_node", "own_record"]


@dataclasses.dataclass(frozen=True, slots=True)
class Kill:
    """The controller killed in pass ``at`` (0-based), its status write lost.

    ``prefix``: the executor's order, the first ``prefix`` actions of the pass landed. Otherwise
    the dispatcher's (docs/rollout.md, "Pipelined passes"): a node's requests run in order and
    the nodes side by side, so each node in ``stopped`` keeps only the first so many of its
    actions and every other node all of its; a cluster-wide action waits for every request
    handed out before it, so once one is lost nothing from that action on is handed out."""

    at: int
    prefix: int | None = None
    stopped: tuple[tuple[str, int], ...] = ()
    #: the pass's own record (the ``rollout-state`` annotation, written before the status:
    #: docs/rollout.md#where-the-state-lives) landed, the CRD's status fields did not
    own_landed: bool = False

    def landed(self, actions: Sequence[Action]) -> list[Action]:
        if self.prefix is not None:
            return list(actions[: self.prefix])
        left = dict(self.stopped)
        out: list[Action] = []
        lost = False
        for action in actions:
            if isinstance(action, NODE_ACTIONS):
                if left.get(action.node) == 0:
                    lost = True
                    continue
                if action.node in left:
                    left[action.node] -= 1
            elif lost and not isinstance(action, RecordEvent):
                break  # cluster-wide
            out.append(action)
        return out

    def __str__(self) -> str:
        if self.own_landed:
            return f"pass {self.at}, killed between its own record and its status"
        if self.prefix is not None:
            return f"pass {self.at}, killed after {self.prefix} of its actions"
        stopped = ", ".join(f"{node} after {keep}" for node, keep in self.stopped)
        return f"pass {self.at}, stopped: {stopped} of their actions"


def kills(passes: Sequence[Sequence[Action]], model: Model) -> Iterator[Kill]:
    """Every kill of ``model`` in a run whose passes asked for ``passes``: ``prefix``, every
    prefix of every pass, the whole pass included (its status write alone lost); ``per_node``,
    in every pass every combination of the nodes' own prefixes that loses at least one action."""
    for at, actions in enumerate(passes):
        if model == "own_record":
            yield Kill(at, prefix=len(actions), own_landed=True)
            continue
        if model == "prefix":
            for prefix in range(len(actions) + 1):
                yield Kill(at, prefix=prefix)
            continue
        per_node = Counter(a.node for a in actions if isinstance(a, NODE_ACTIONS))
        for keeps in itertools.product(*(range(count + 1) for count in per_node.values())):
            stopped = tuple(
                (node, keep) for (node, count), keep in zip(per_node.items(), keeps, strict=True)
                if keep < count
            )
            if stopped:
                yield Kill(at, stopped=stopped)


class NodeEnd(NamedTuple):
    """One node at the end: where it stands and what its annotations record."""

    unschedulable: bool
    revision: str | None
    ready: bool | None
    #: without timestamps; ``failures`` without its batch epoch (a timestamp too)
    annotations: tuple[tuple[str, str], ...]

    @property
    def state(self) -> str | None:
        return dict(self.annotations).get(ANN_STATE)


@dataclasses.dataclass(frozen=True, slots=True)
class EndState:
    """What a run ends with, the part a kill must not change (timestamps left out)."""

    phase: str | None
    counters: dict[str, Any]
    conditions: dict[str, tuple[str, str | None]]
    pause: bool
    nodes: dict[str, NodeEnd]
    #: driver pod deletions per (node, the DaemonSet's revision then)
    deletions: Counter[tuple[str, str]]
    #: evictions and deletions per workload pod (``namespace/name``)
    evictions: Counter[str]
    #: (step index, condition) per ``pause: false`` a person set
    confirmations: list[tuple[int, str]]

    @property
    def rolled_back(self) -> bool:
        return "RolledBack" in self.conditions


class CrashWorld(World):
    """``World`` with the world's side played too: evicted pods go, a new driver pod turns
    Ready by the next pass (or fails once, or never), and a person confirms a gate or resumes
    after a fallback's pause from the status as written. Passes are ``dt`` seconds apart."""

    def __init__(
        self,
        n: int,
        policy_raw: dict[str, Any],
        *,
        canary: Iterable[str] = (),
        settings: PlannerSettings | None = None,
        fail_once: Iterable[str] = (),
        never_ready: Iterable[str] = (),
        busy: Iterable[str] = (),
        budget: int | None = None,
    ) -> None:
        super().__init__(n, policy_raw, canary=canary, settings=settings)
        self.t = 0.0
        #: its first pod on the target crash-loops; a retry's pod turns Ready
        self.fail_once = frozenset(fail_once)
        self.failed: set[str] = set()
        #: its first pod on the target never turns Ready (the ready timeout); a retry's does
        self.never_ready = frozenset(never_ready)
        self.stuck: dict[str, str] = {}  # node: the pod that never turns Ready
        self.evictions: Counter[str] = Counter()
        self.confirmations: list[tuple[int, str]] = []
        self.budgets: dict[str, DisruptionBudget] = {}
        if budget is not None:
            self.budgets["serve/web-pdb"] = DisruptionBudget(
                "serve", "web-pdb", LabelSelector.parse("app=web"), budget
            )
        for name in busy:  # a GPU workload the drain evicts
            pods = (WorkloadPod("serve", f"web-{name}", labels={"app": "web"}),)
            self.set(name, pods=pods, workloads=tuple(p.key for p in pods))

    def snapshot(self) -> RolloutSnapshot:
        return dataclasses.replace(super().snapshot(), budgets=dict(self.budgets))

    def driver_pod_deleted(self, node: RolloutNode, at: float) -> RolloutNode:
        landed = super().driver_pod_deleted(node, at)
        assert landed.pod is not None
        # the new pod's age is how a pass tells a recorded deletion that never happened
        return with_pod(landed, dataclasses.replace(landed.pod, created_at=EPOCH + self.t))

    def evicts(self, node: RolloutNode, pod: WorkloadPod) -> bool:
        self.evictions[pod.key] += 1
        return True

    def deletes(self, node: RolloutNode, pod: WorkloadPod) -> bool:
        self.evictions[pod.key] += 1
        return True

    def between_passes(self) -> None:
        """What the cluster and a person do while the controller waits for the next pass."""
        for name in list(self.nodes):
            node = self.nodes[name]
            if any(p.terminating for p in node.pods):
                gone = tuple(p for p in node.pods if not p.terminating)
                self.set(name, pods=gone, workloads=tuple(p.key for p in gone if p.gpu))
            pod = node.pod
            if pod is None or pod.ready or pod.deleting or pod.waiting_reason:
                continue
            if pod.revision == NEW_REV and name in self.fail_once and name not in self.failed:
                self.failed.add(name)
                self.pod(name, waiting_reason="CrashLoopBackOff", restart_count=3)
            elif pod.revision == NEW_REV and name in self.never_ready:
                if self.stuck.setdefault(name, pod.name) != pod.name:
                    self.pod(name, ready=True)
            else:
                self.pod(name, ready=True)
        # the person reads the status as written: a killed pass's status never reaches them
        if not self.policy_raw.get("pause"):
            return
        conditions = self.conditions()
        for kind in CONFIRMABLE:
            if (conditions.get(kind) or {}).get("status") == "True":
                self.policy_raw["pause"] = False
                self.confirmations.append((int(self.inner.get("currentStepIndex") or 0), kind))
                return

    def one_pass(self, kill: Kill | None = None) -> Plan:
        result = plan(self.snapshot(), EPOCH + self.t, self.settings)
        if kill is None:
            self.apply(result.actions)
            self.status = result.status
            return result
        self.apply(kill.landed(result.actions))
        if kill.own_landed:
            crd, _ = split_upgrade_status(self.status)
            _, own = split_upgrade_status(result.status)
            self.status = read_upgrade_status(crd, own)
        # the restarted controller's index no longer knows when a gone pod's deletion was asked
        for name, node in self.nodes.items():
            if node.pod_deleted_at:
                self.nodes[name] = dataclasses.replace(node, pod_deleted_at=0.0)
        return result

    def at_rest(self, result: Plan) -> bool:
        inner = self.inner
        return (
            self.status.get("phase") == "Idling"
            and all(isinstance(a, RecordEvent) for a in result.actions)
            and (inner.get("currentStepState") == "Completed" or "rolledBackSpec" in inner)
        )

    def run(self, kill: Kill | None = None, *, limit: int = 400, dt: float = 10.0
            ) -> list[tuple[Action, ...]]:
        """Passes until three in a row find the rollout at rest; the actions of each pass."""
        passes: list[tuple[Action, ...]] = []
        quiet = 0
        for at in range(limit):
            result = self.one_pass(kill if kill is not None and kill.at == at else None)
            passes.append(tuple(result.actions))
            self.between_passes()
            self.t += dt
            quiet = quiet + 1 if self.at_rest(result) else 0
            if quiet == 3:
                return passes
        raise AssertionError(f"no end after {limit} passes: {self.status}")

    def end_state(self) -> EndState:
        nodes: dict[str, NodeEnd] = {}
        for name, node in self.nodes.items():
            ann = {k: v for k, v in node.annotations.items() if k not in TIMESTAMPS}
            if ANN_FAILURES in ann:
                ann[ANN_FAILURES] = ann[ANN_FAILURES].rpartition("|")[2]
            pod = node.pod
            nodes[name] = NodeEnd(
                node.unschedulable,
                pod.revision if pod else None,
                pod.ready if pod else None,
                tuple(sorted(ann.items())),
            )
        inner = self.inner
        return EndState(
            phase=self.status.get("phase"),
            counters={k: inner.get(k) for k in (
                "currentStepIndex", "currentStepState", "totalUpgradeReplicas",
                "totalUpgradeReadyReplicas", "currentUpgradeReplicas",
                "CurrentUpgradeReadyReplicas", "currentFailureRetry")},
            conditions={c["type"]: c.get("reason") for c in self.status.get("conditions") or ()},
            pause=bool(self.policy_raw.get("pause")),
            nodes=nodes,
            deletions=Counter(self.deleted),
            evictions=Counter(self.evictions),
            confirmations=list(self.confirmations),
        )


def settled(end: EndState, revision: str, left_behind: frozenset[str] = frozenset()
            ) -> list[str]:
    """Every node on ``revision``, Ready, schedulable, no move or cordon ahead recorded; but
    the nodes of ``left_behind``: failed, cordoned, a step's toleration recorded
    (docs/rollout.md#failures-tolerated-in-a-step)."""
    problems = []
    for name, node in end.nodes.items():
        if name in left_behind:
            recorded = dict(node.annotations)
            if not (node.unschedulable and node.state == STATE_FAILED
                    and ANN_FAILURE_TOLERATED in recorded):
                problems.append(f"{name} is not left behind by a toleration: {node}")
            continue
        if node.unschedulable:
            problems.append(f"{name} left cordoned")
        if node.revision != revision or not node.ready:
            problems.append(f"{name} ends on {node.revision} (Ready: {node.ready})")
        if node.state in MOVE_STATES:
            problems.append(f"{name} ends {node.state}")
    return problems


def differences(ref: EndState, got: EndState) -> list[str]:
    """What a killed run did that its reference did not."""
    problems = []
    for key in ("phase", "counters", "conditions", "pause", "confirmations"):
        if key == "counters" and ref.rolled_back:
            continue  # a rollback freezes the step counters where it caught the rollout
        if getattr(ref, key) != getattr(got, key):
            problems.append(f"{key}: ref {getattr(ref, key)}, got {getattr(got, key)}")
    for name, want in ref.nodes.items():
        have = got.nodes[name]
        # which nodes went forward before a rollback depends on timing, and with them their
        # records: only where each node ends is compared
        if (have[:3] != want[:3]) if ref.rolled_back else (have != want):
            problems.append(f"{name}: ref {want}, got {have}")
    for moved, count in got.deletions.items():
        if count > ref.deletions[moved]:
            problems.append(f"deletions of {moved}: ref {ref.deletions[moved]}, got {count}")
    for pod, count in got.evictions.items():
        # a rollback may catch a node the reference did not drain; once is still the most
        if count > max(ref.evictions[pod], 1):
            problems.append(f"{pod} evicted {count} times (ref {ref.evictions[pod]})")
    return problems


@dataclasses.dataclass
class Sweep:
    reference: EndState
    runs: int
    problems: list[str]


def sweep(make: Callable[[], CrashWorld], model: Model, revision: str,
          left_behind: frozenset[str] = frozenset()) -> Sweep:
    """A reference run of ``make()``, then one run per kill of ``model``, each checked against
    the reference and for ending with every node settled on ``revision`` (but those a
    toleration leaves behind)."""
    ref_world = make()
    ref_passes = ref_world.run()
    ref = ref_world.end_state()
    problems = [f"reference: {p}" for p in settled(ref, revision, left_behind)]
    runs = 0
    for kill in kills(ref_passes, model):
        world = make()
        try:
            passes = world.run(kill)
        except AssertionError as exc:
            problems.append(f"{kill}: {str(exc)[:300]}")
            continue
        runs += 1
        # the same passes up to the kill: the kill hit the actions it was chosen from
        if passes[: kill.at + 1] != ref_passes[: kill.at + 1]:
            problems.append(f"{kill}: the run differs from the reference before the kill")
        end = world.end_state()
        problems += [f"{kill}: {p}"
                     for p in settled(end, revision, left_behind) + differences(ref, end)]
    return Sweep(ref, runs, problems)
