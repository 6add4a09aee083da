"""Failures tolerated in a step (docs/rollout.md#failures-tolerated-in-a-step): the vendor CRD's
``upgradeSteps[].toleration``.

Step i tolerates T_i failures: its ``toleration`` resolved against the step's batch (the nodes it
adds), percentages rounded up, left out 0, never more than the batch. A rollout node that fails
while step i runs, when fewer than T_i nodes were tolerated in step i, is *tolerated*: its failure
is not counted (``currentFailureRetry`` does not move, so it never brings the fallback closer),
it is not retried, it stays cordoned as a failed node does, and it counts as done for the steps:
a step is done when the nodes Ready on the new revision and the tolerated nodes reach its target.
The rollout completes with the tolerated nodes left behind and says so in the condition
``FailuresTolerated``. Failures beyond T_i count as before.

The decision is written on the node, in the same annotation as its ``failed`` record
(``failure-tolerated: <step>@<target revision>``): a controller killed before that write decides
again from the same facts, one killed after it counts the node as tolerated. A record counts only
for the rollout's target revision and only while the node's record is ``failed`` for it
(``node_class.tolerated_step``, the scan's and the read model's rule); a new rollout removes the
old ones, a move of the node (a rollback) or its recovery (its pod Ready on the target: it is
upgraded) drops it.
"""

from __future__ import annotations

from typing import Final

from reconciler.names import ANN_FAILURE_TOLERATED
from reconciler.policy.upgrade_policy import UpgradePolicy
from reconciler.rollout.actions import AnnotateNode
from reconciler.rollout.model import RolloutNode
from reconciler.rollout.pass_state import Decisions, Observed
from reconciler.rollout.scan import NodeScan
from reconciler.rollout.status import UpgradeStatus

#: the condition of a completed rollout that left tolerated nodes behind: names every one
COND_FAILURES_TOLERATED: Final = "FailuresTolerated"
#: the Event of a failure the step tolerated
EVENT_TOLERATED: Final = "NodeFailureTolerated"


def record(step: int, revision: str) -> str:
    """The annotation's value: the step that tolerated the node, for the target revision."""
    return f"{step}@{revision}"


def step_index(policy: UpgradePolicy, status: UpgradeStatus) -> int:
    """The step failures are judged in: the status's, within the policy's steps."""
    return min(max(status.current_step_index, 1), len(policy.steps))


def allowed(policy: UpgradePolicy, total: int, index: int) -> int:
    """T_i of step ``index`` (1-based) against ``total`` rollout nodes."""
    if total <= 0:
        return 0
    return policy.step_tolerations(total)[index - 1]


def take(policy: UpgradePolicy, status: UpgradeStatus, total: int, scan: NodeScan) -> set[str]:
    """Of the nodes that failed just now, those the current step tolerates: in rollout order
    (canaries first, then by name, so a restart decides alike), while fewer than T_i nodes are
    tolerated in the step. They move from ``scan.new_failures`` (counted) to ``scan.tolerated``
    (a health failure tolerated is then no cause of a fallback: ``failure_condition``)."""
    if not scan.new_failures:
        return set()
    index = step_index(policy, status)
    room = allowed(policy, total, index) - sum(1 for step, _ in scan.tolerated if step == index)
    if room <= 0:
        return set()
    taken: set[str] = set()
    for node, _ in sorted(scan.new_failures, key=lambda f: (not f[0].canary, f[0].name)):
        if len(taken) >= room:
            break
        taken.add(node.name)
        scan.tolerate(index, node)
    scan.new_failures = [f for f in scan.new_failures if f[0].name not in taken]
    return taken


def left_behind(scan: NodeScan) -> list[tuple[str, int]]:
    """(node, step) of the nodes a step's toleration left behind, as the scan found and the
    pass decided them, by name."""
    return sorted((node.name, step) for step, node in scan.tolerated)


def message(seen: Observed, scan: NodeScan) -> str:
    """The step message's part about tolerated nodes ("" when none)."""
    left = left_behind(scan)
    if not left:
        return ""
    count = len(left)
    named = seen.named([f"{name} (step {step})" for name, step in left])
    return (f"{count} failure{'s' if count != 1 else ''} tolerated, left on the failed "
            f"driver: {named}")


def completed(out: Decisions, scan: NodeScan) -> None:
    """The rollout completed: ``FailuresTolerated`` names every node left behind."""
    left = left_behind(scan)
    if not left:
        return
    names = ", ".join(f"{name} (step {step})" for name, step in left)
    out.condition(COND_FAILURES_TOLERATED, "True", COND_FAILURES_TOLERATED,
                  f"failures tolerated, left cordoned on the failed driver: {names}")


def start_clears(seen: Observed, out: Decisions) -> None:
    """A new rollout: the records of earlier rollouts go (a later rollout to the same template
    would have the same revision hash)."""
    out.act_all(AnnotateNode(node.name, {ANN_FAILURE_TOLERATED: None})
                for node in seen.snap.nodes.values()
                if ANN_FAILURE_TOLERATED in node.annotations)


def dropped(node: RolloutNode, update: dict[str, str | None]) -> dict[str, str | None]:
    """``update`` (a move's or a completion's record) with the node's toleration record removed
    when it has one: it is upgraded now, or moves again (a rollback)."""
    if ANN_FAILURE_TOLERATED in node.annotations:
        update[ANN_FAILURE_TOLERATED] = None
    return update
