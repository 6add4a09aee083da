"""One planning pass in two parts, NVIDIA ``pkg/upgrade``'s ``BuildState`` then ``ApplyState``:

* what the pass read, frozen: ``Observed`` (the snapshot, ``now``, the settings, the policy, the
  health gates; built once, by ``observe``) and ``Found`` (one scan of the nodes against a target
  and what derives from it: the health judgement behind it, the topology's order; built once per
  scan, by the phase that scans);
* what the pass decided so far: ``Decisions``, the one thing a pass writes, and only through its
  methods: the status as it evolves, the actions, the times to plan again, N, and the few figures
  and records a pass accumulates (nodes in flight and unavailable, the holds, the drain's).

A part of the planner takes what it reads (``seen``, ``found``, or less) and, when it decides
something, the accumulator (``out``): the data flow is in the signatures. Nothing outlives a pass,
so ``plan`` keeps no memory between calls.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.health.checks import HealthConfig
from reconciler.policy.quantity import Quantity
from reconciler.policy.upgrade_policy import UpgradePolicy, UpgradeStep
from reconciler.rollout import status as st
from reconciler.rollout.actions import Action, RecordEvent
from reconciler.rollout.drain import Allowance
from reconciler.rollout.health_gate import NO_VERDICTS, NodeVerdicts
from reconciler.rollout.model import DisruptionBudget, PlannerSettings, RolloutSnapshot, WorkloadPod
from reconciler.rollout.scan import NodeScan
from reconciler.rollout.status import UpgradeStatus
from reconciler.rollout.topology import Topology
from reconciler.timefmt import format_time

# ----------------------------------------------------------------------------- what a pass read


@dataclass(frozen=True, slots=True)
class Observed:
    """What one pass read, fixed for the whole pass (``observe``)."""

    snap: RolloutSnapshot
    now: float
    #: ``now`` as RFC 3339 text (records and conditions)
    now_text: str
    settings: PlannerSettings
    #: the policy, with one 100% step when it has none
    policy: UpgradePolicy
    #: the health gates (docs/health.md); None: pods alone decide, exactly as without ``health``
    health: HealthConfig | None
    #: why no node starts whatever the nodes say: a ``health`` section that does not validate
    #: (fail closed); empty otherwise
    starts_held: tuple[str, ...] = ()

    def named(self, items: list[str], *, separator: str = ", ", more: str = " and ") -> str:
        """Up to ``message_node_limit`` items, then how many more: a wave of thousands keeps
        the status far below the API server's object size limit."""
        limit = self.settings.message_node_limit
        text = separator.join(items[:limit])
        if len(items) > limit:
            text += f"{more}{len(items) - limit} more"
        return text

    def version(self, status: UpgradeStatus) -> str:
        """The version being rolled out (or rolled out last) by ``status``."""
        return str((status.applied_payload or self.snap.payload).get("version") or "")


def observe(snapshot: RolloutSnapshot, now: float, settings: PlannerSettings) -> Observed:
    """The pass's read part (NVIDIA's ``BuildState``, before the nodes are scanned)."""
    policy = snapshot.policy
    if not policy.steps:
        # validation requires steps with enableRollout; a CR that has none anyway rolls
        # out in one batch rather than failing the controller
        policy = dataclasses.replace(policy, steps=(UpgradeStep(Quantity(100, True), 0),))
    health = snapshot.health
    held: tuple[str, ...] = ()
    if health is not None and health.error is not None:
        held = (f"health configuration invalid, no node starts: {health.error}",)
    return Observed(
        snap=snapshot, now=now, now_text=format_time(now), settings=settings, policy=policy,
        health=health.config if health is not None else None, starts_held=held,
    )


@dataclass(frozen=True, slots=True)
class Found:
    """One scan of the nodes against ``revision`` (the rollout's target, or the revision a
    rollback returns to) and what derives from it. The scan's lists are settled in place
    (``node_states.settle``: a drain that timed out fails its node, a failure the step tolerates
    moves) before the steps read them."""

    revision: str
    scan: NodeScan
    #: the topology's order and, in a rollout, its domains' counts
    #: (docs/rollout.md#topology-aware-waves); None: the order of
    #: docs/policy.md#how-the-numbers-resolve
    topology: Topology | None = None
    #: the node checks' verdicts behind the scan (docs/health.md)
    health: NodeVerdicts = NO_VERDICTS


# ----------------------------------------------------------------------------- what it decided


@dataclass(slots=True)
class DrainLedger:
    """The drain's part of a pass (docs/live-clusters.md#the-drain): the budgets' allowance it
    spends, and the draining nodes it found (``upgradeStatus.draining``, the step message)."""

    #: this pass's copy of the budgets' disruptionsAllowed (made at the first eviction)
    allowance: Allowance | None = None
    #: ``upgradeStatus.draining`` entries, in the order the nodes were seen
    entries: list[dict[str, Any]] = field(default_factory=list)
    #: node -> what holds it, for the step message
    notes: dict[str, str] = field(default_factory=dict)

    def spend(self, budgets: Mapping[str, DisruptionBudget], pod: WorkloadPod) -> list[str]:
        """One eviction of ``pod`` against the budgets' allowance left in this pass; returns
        the budgets that hold it instead (nothing spent then)."""
        if self.allowance is None:
            self.allowance = Allowance(budgets)
        return self.allowance.take(pod)

    def record(self, entry: dict[str, Any], note: str) -> None:
        """A draining node's status entry and its note for the step message."""
        self.entries.append(entry)
        self.notes[str(entry["node"])] = note


@dataclass(slots=True)
class Decisions:
    """What one pass decided so far; ``planner`` turns it into the ``Plan``. Written only through
    its methods."""

    #: the status as this pass leaves it so far; every decision about it replaces it
    status: UpgradeStatus
    #: the time conditions are stamped with (the pass's ``now``)
    stamp: str
    #: N: the rollout nodes now; smaller by each node the rollout skips
    total: int
    actions: list[Action] = field(default_factory=list)
    #: when to plan again if nothing happens before (the earliest future one counts)
    requeue: list[float] = field(default_factory=list)
    in_flight: int = 0
    unavailable: int = 0
    #: plan again as soon as this status is stored (a step just began)
    again: bool = False
    #: nodes cordoned ahead that stay so (every other one is released)
    keep_cordoned: frozenset[str] = frozenset()
    #: ``upgradeStatus.holds`` as this pass leaves it: what holds fresh starts back, as data
    holds: list[dict[str, Any]] = field(default_factory=list)
    drain: DrainLedger = field(default_factory=DrainLedger)
    # -- the writers of ``actions`` and ``requeue``: their lists' own ``append`` and ``extend``,
    # bound once (a wave's pass at 10,000 nodes calls them thousands of times)
    #: one action, after those decided so far
    act: Callable[[Action], None] = field(init=False, repr=False, compare=False)
    #: several actions, in order
    act_all: Callable[[Iterable[Action]], None] = field(init=False, repr=False, compare=False)
    #: plan again at this time, if nothing happens before
    requeue_at: Callable[[float], None] = field(init=False, repr=False, compare=False)
    requeue_all: Callable[[Iterable[float]], None] = field(init=False, repr=False,
                                                           compare=False)

    def __post_init__(self) -> None:
        self.act = self.actions.append
        self.act_all = self.actions.extend
        self.requeue_at = self.requeue.append
        self.requeue_all = self.requeue.extend

    @classmethod
    def begin(cls, seen: Observed) -> Decisions:
        """Nothing decided yet: the status as read, every node a rollout node."""
        return cls(status=UpgradeStatus.from_json(seen.snap.status), stamp=seen.now_text,
                   total=len(seen.snap.nodes))

    # -- the status

    def set(self, **changes: Any) -> None:
        self.status = self.status.evolve(**changes)

    def condition(
        self, ctype: str, value: str, reason: str, message: str, *, touch: bool = False
    ) -> None:
        self.status = self.status.with_condition(ctype, value, reason, message, self.stamp,
                                                 touch=touch)

    def set_epoch(self, step: int, steps: int, *, reason: str) -> None:
        """A new batch epoch of step ``step`` of ``steps``: failures count from here
        (``Progressing`` moves)."""
        self.condition(st.COND_PROGRESSING, "True", reason, f"step {step} of {steps}",
                       touch=True)

    def step_index(self) -> int | None:
        """The step an event names (None before the first)."""
        return self.status.current_step_index or None

    # -- actions (``act``, ``act_all``) and times (``requeue_at``, ``requeue_all``)

    def event(self, reason: str, message: str, *, warning: bool = False, **kw: Any) -> None:
        self.act(RecordEvent("Warning" if warning else "Normal", reason, message, **kw))

    # -- figures and records

    def leave_out(self, nodes: int) -> None:
        """``nodes`` are no rollout nodes of this rollout (skipped): N without them."""
        self.total -= nodes

    def count(self, *, in_flight: int | None = None, unavailable: int | None = None) -> None:
        """The plan's figures as the pass found them last."""
        if in_flight is not None:
            self.in_flight = in_flight
        if unavailable is not None:
            self.unavailable = unavailable

    def plan_again(self, again: bool = True) -> None:
        """Plan again as soon as this status is stored (or, ``False``, not: the step that began
        is decided in this pass too)."""
        self.again = again

    def keep_cordoned_ahead(self, nodes: frozenset[str]) -> None:
        self.keep_cordoned = nodes

    def hold(self, entry: dict[str, Any]) -> None:
        """What holds fresh starts back (``upgradeStatus.holds``)."""
        self.holds.append(entry)
