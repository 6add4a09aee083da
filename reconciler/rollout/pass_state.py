"""One planning pass's working state: what it read (the snapshot, ``now``, the settings, the
policy) and what it decided so far (the status value, the actions, the times to plan again, the
counts). Every part of the planner takes it and adds to it; nothing outlives a pass, so
``plan`` keeps no memory between calls.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.health.checks import HealthConfig, HealthFailure
from reconciler.policy.quantity import Quantity
from reconciler.policy.upgrade_policy import UpgradePolicy, UpgradeStep
from reconciler.rollout import status as st
from reconciler.rollout.actions import Action, RecordEvent
from reconciler.rollout.drain import Allowance
from reconciler.rollout.model import PlannerSettings, RolloutSnapshot
from reconciler.rollout.status import UpgradeStatus
from reconciler.rollout.topology import Topology
from reconciler.timefmt import format_time


@dataclass(slots=True)
class Pass:
    """The read part is fixed at ``begin``; the rest is what the pass decided so far."""

    snap: RolloutSnapshot
    now: float
    now_text: str
    settings: PlannerSettings
    #: the policy, with one 100% step when it has none
    policy: UpgradePolicy
    #: the status as read
    old: Mapping[str, Any]
    total: int
    #: the health gates (docs/health.md); None: pods alone decide, exactly as without ``health``
    health: HealthConfig | None
    #: the status as this pass leaves it so far; every step replaces it
    s: UpgradeStatus
    actions: list[Action] = field(default_factory=list)
    requeue: list[float] = field(default_factory=list)
    in_flight: int = 0
    unavailable: int = 0
    #: plan again as soon as this status is stored (a step just began)
    again: bool = False
    #: nodes cordoned ahead that stay so (every other one is released)
    keep_cordoned: frozenset[str] = frozenset()
    #: why nothing new starts: a check without an answer, or a section that does not
    #: validate (fail closed)
    health_hold: list[str] = field(default_factory=list)
    #: node -> the health failure found in this pass
    health_failures: dict[str, HealthFailure] = field(default_factory=dict)
    #: nodes whose node checks passed in this pass (their record lands with its actions)
    health_passed: list[str] = field(default_factory=list)
    #: ``upgradeStatus.health`` as this pass leaves it
    health_status: dict[str, Any] = field(default_factory=dict)
    #: ``upgradeStatus.holds`` as this pass leaves it: what holds fresh starts back, as data
    holds: list[dict[str, Any]] = field(default_factory=list)
    # -- the drain (docs/live-clusters.md#the-drain)
    #: this pass's copy of the budgets' disruptionsAllowed (made at the first eviction)
    allowance: Allowance | None = None
    #: ``upgradeStatus.draining`` as this pass leaves it
    draining: list[dict[str, Any]] = field(default_factory=list)
    #: node -> what holds it, for the step message
    drain_notes: dict[str, str] = field(default_factory=dict)
    #: the topology the rollout started with (docs/rollout.md#topology-aware-waves): the order, the
    #: sequential gate and the per-domain budgets; None: the order of
    #: docs/policy.md#how-the-numbers-resolve
    topology: Topology | None = None
    #: (node, step) of the nodes a step's toleration left behind, as this pass found and decided
    #: them (docs/rollout.md#failures-tolerated-in-a-step)
    tolerated: tuple[tuple[str, int], ...] = ()

    @classmethod
    def begin(cls, snapshot: RolloutSnapshot, now: float, settings: PlannerSettings) -> Pass:
        policy = snapshot.policy
        if not policy.steps:
            # validation requires steps with enableRollout; a CR that has none anyway rolls
            # out in one batch rather than failing the controller
            policy = dataclasses.replace(policy, steps=(UpgradeStep(Quantity(100, True), 0),))
        status = UpgradeStatus.from_json(snapshot.status)
        health = snapshot.health
        found = cls(
            snap=snapshot, now=now, now_text=format_time(now), settings=settings,
            policy=policy, old=snapshot.status, total=len(snapshot.nodes),
            health=health.config if health is not None else None, s=status,
            health_status=dict(status.health),
        )
        if health is not None and health.error is not None:
            found.health_hold.append(f"health configuration invalid, no node starts: "
                                     f"{health.error}")
        return found

    def event(self, reason: str, message: str, *, warning: bool = False, **kw: Any) -> None:
        self.actions.append(
            RecordEvent("Warning" if warning else "Normal", reason, message, **kw)
        )

    def step_index(self) -> int | None:
        """The step an event names (None before the first)."""
        return self.s.current_step_index or None

    def set(self, **changes: Any) -> None:
        self.s = self.s.evolve(**changes)

    def condition(
        self, ctype: str, value: str, reason: str, message: str, *, touch: bool = False
    ) -> None:
        self.s = self.s.with_condition(ctype, value, reason, message, self.now_text, touch=touch)

    def set_epoch(self, step: int, *, reason: str) -> None:
        """A new batch epoch: failures count from here (``Progressing`` moves)."""
        self.condition(
            st.COND_PROGRESSING, "True", reason, f"step {step} of {len(self.policy.steps)}",
            touch=True,
        )

    def budgets(self) -> Allowance:
        """The budgets' allowance left in this pass (docs/live-clusters.md#the-drain)."""
        if self.allowance is None:
            self.allowance = Allowance(self.snap.budgets)
        return self.allowance

    def version(self) -> str:
        """The version being rolled out (or rolled out last)."""
        return str((self.s.applied_payload or self.snap.payload).get("version") or "")

    def named(self, items: list[str], *, separator: str = ", ", more: str = " and ") -> str:
        """Up to ``message_node_limit`` items, then how many more: a wave of thousands keeps
        the status far below the API server's object size limit."""
        limit = self.settings.message_node_limit
        text = separator.join(items[:limit])
        if len(items) > limit:
            text += f"{more}{len(items) - limit} more"
        return text
