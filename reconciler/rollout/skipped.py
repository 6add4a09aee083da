"""Skipped nodes (docs/live-clusters.md#a-node-under-repair): nodes that are not rollout nodes of
this rollout. A node is skipped when it carries the label ``gpu.metax-tech.com/upgrade.skip=true``
before its start, or, with ``rollout.unavailableNodes: skip``, when it is cordoned by someone else
or NotReady at the moment it would be the next fresh start (its turn).

A skipped node keeps its old driver, is not in N (the step targets and maxUnavailable are
resolved again against the smaller N, as when a node leaves) and is never counted unavailable.
Decisions are frozen for the rollout (docs/live-clusters.md#when-a-change-applies decision): a node
listed in ``upgradeStatus.skipped`` stays skipped even if its label goes or it recovers; a skip for
being unavailable is also recorded on the node (``ANN_SKIPPED`` = the target revision) so a restart
keeps it even when the status write was lost. A new rollout starts with an empty list and clears
the old records (a record of another revision is ignored anyway).

A label put on a node whose move already began (in flight, failed, done) does not skip it: the
label counts before the node's start, and a node in flight finishes (and is retried, when it
failed, like any rollout node). A node cordoned ahead and not started yet is skipped and released.

The decision itself is in ``scan`` (frozen and labelled nodes: one cheap look per node, none of
it when nothing is skipped) and ``selection.fresh_starts`` (unavailable at its turn, ``Turns``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from reconciler.names import (
    ANN_SKIPPED,
    LABEL_UPGRADE_SKIP,
)
from reconciler.rollout.actions import AnnotateNode
from reconciler.rollout.model import RolloutNode
from reconciler.rollout.node_class import left_alone

if TYPE_CHECKING:  # the scan reads the node predicates: no import of the pass at run time
    from reconciler.rollout.pass_state import Decisions, Observed
    from reconciler.rollout.status import UpgradeStatus

#: the condition of a completed rollout that skipped nodes: names every one
#: (docs/live-clusters.md#a-node-under-repair)
COND_NODES_SKIPPED: Final = "NodesSkipped"
#: ``unavailableNodes`` value that skips nodes unavailable at their turn
SKIP: Final = "skip"


def labelled(node: RolloutNode) -> bool:
    """The node carries ``upgrade.skip=true``."""
    return bool(node.labels) and node.labels.get(LABEL_UPGRADE_SKIP) == "true"


def unavailable_at_turn(node: RolloutNode) -> bool:
    """What ``unavailableNodes: skip`` skips when the node's turn comes."""
    return not node.ready or left_alone(node)  # cordoned by someone else


def start_clears(seen: Observed, out: Decisions) -> None:
    """A new rollout: no node is skipped yet, and the records of earlier rollouts go (a later
    rollout to the same template would have the same revision hash)."""
    nodes = seen.snap.nodes.values()
    out.set(skipped=())
    out.act_all(AnnotateNode(node.name, {ANN_SKIPPED: None}) for node in nodes
                if ANN_SKIPPED in node.annotations)
    out.leave_out(sum(1 for n in nodes if labelled(n)))


def found(out: Decisions, nodes: list[RolloutNode]) -> None:
    """The scan's skipped nodes: N without them, the status lists them (a newly listed one
    gets an Event)."""
    known = set(out.status.skipped)
    new: list[str] = []
    out.leave_out(len(nodes))
    for node in nodes:
        if node.name in known:
            continue
        new.append(node.name)
        why = (f"labelled {LABEL_UPGRADE_SKIP}=true" if labelled(node)
               else "recorded as skipped for this revision")
        out.event("NodeSkipped", f"{node.name}: skipped ({why}); it keeps its driver",
                  node=node.name, step=out.step_index())
    if new:
        out.set(skipped=tuple(sorted(known.union(new))))


def skip(out: Decisions, node: RolloutNode, revision: str, why: str) -> None:
    """Skip ``node`` for ``revision`` now: recorded on the node, listed, out of N."""
    out.act(AnnotateNode(node.name, {ANN_SKIPPED: revision}))
    out.leave_out(1)
    out.set(total_upgrade_replicas=out.total)
    if node.name not in out.status.skipped:
        out.set(skipped=tuple(sorted((*out.status.skipped, node.name))))
    out.event("NodeSkipped", f"{node.name}: skipped ({why}); it keeps its driver",
              warning=True, node=node.name, step=out.step_index())


@dataclass(slots=True)
class Turns:
    """``unavailableNodes: skip`` in one pass's fresh starts: a node unavailable when its turn
    comes is skipped, and the step's target is resolved again against the smaller N, so the
    starts of this pass never go past it (``count``)."""

    seen: Observed
    out: Decisions
    revision: str
    #: the current step (1-based) and the nodes that already fill its target
    index: int
    occupied: int
    #: fresh starts still wanted in this pass
    count: int

    def skips(self, node: RolloutNode) -> bool:
        """True when ``node`` is skipped now (``count`` may have shrunk)."""
        if not unavailable_at_turn(node):
            return False
        why = "NotReady" if not node.ready else "cordoned by someone else"
        out = self.out
        skip(out, node, self.revision, f"{why} at its turn, unavailableNodes: skip")
        total = out.total
        target = self.seen.policy.step_targets(total)[self.index - 1] if total > 0 else 0
        self.count = min(self.count, max(target - self.occupied, 0))
        out.plan_again()  # N shrank: the step may be done; plan again once this is stored
        return True


def message(seen: Observed, status: UpgradeStatus) -> str:
    """The step message's part about skipped nodes ("" when none)."""
    if not status.skipped:
        return ""
    count = len(status.skipped)
    return (f"{count} node{'s' if count != 1 else ''} skipped: "
            f"{seen.named(list(status.skipped))}")


def completed(out: Decisions) -> None:
    """The rollout completed: ``NodesSkipped`` names every skipped node."""
    skipped = out.status.skipped
    if not skipped:
        return
    out.condition(COND_NODES_SKIPPED, "True", COND_NODES_SKIPPED,
                  f"skipped, still on the previous driver: {', '.join(skipped)}")
