"""What a node's record and driver pod say about its move, written once: the planner's scan
(``reconciler.rollout.scan``) and the read model's node states (``reconciler.views.nodes``)
both classify with these rules, so ``reconciler status``, the dashboard and the planner never
disagree about a node (issue 31, item 1).

The rules read a node through ``NodeLike`` (the planner's ``RolloutNode`` and the read model's
``NodeFacts`` both are one). They are small on purpose: the scan runs them once per node and
pass (100,000 nodes in a what-if run), and calls them only where a node has a record.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Final, Protocol

from reconciler.names import (
    ANN_FAILURE_TOLERATED,
    ANN_SKIPPED,
    ANN_STATE,
    ANN_TARGET,
    ANN_WAS_UNSCHEDULABLE,
    LABEL_UPGRADE_SKIP,
    STATE_CORDONED,
    STATE_DRAINING,
    STATE_FAILED,
    STATE_UPGRADING,
)

#: waiting reasons of a driver pod that mean the attempt failed
FAILURE_REASONS: Final = frozenset({"ErrImagePull", "ImagePullBackOff", "CrashLoopBackOff"})
#: the recorded states of a move the rollout began (its record says whether the node was
#: cordoned before: ``was-unschedulable``)
MOVE_STATES: Final = frozenset({STATE_UPGRADING, STATE_FAILED, STATE_CORDONED, STATE_DRAINING})


class PodLike(Protocol):
    """The driver pod, as far as the rules read it."""

    @property
    def revision(self) -> str: ...
    @property
    def ready(self) -> bool: ...
    @property
    def deleting(self) -> bool: ...
    @property
    def waiting_reason(self) -> str | None: ...


class NodeLike(Protocol):
    """A GPU node, as far as the rules read it."""

    @property
    def name(self) -> str: ...
    @property
    def unschedulable(self) -> bool: ...
    @property
    def labels(self) -> Mapping[str, str]: ...
    @property
    def annotations(self) -> Mapping[str, str]: ...
    @property
    def pod(self) -> PodLike | None: ...


def standing(node: NodeLike, recorded: str | None, moving_to: str | None) -> str | None:
    """The recorded state (``recorded``, for the revision ``moving_to``) as the node stands: a
    node cordoned ahead or draining whose old pod went (deleting, gone, or already on the
    revision it was cordoned for) has started, and is upgrading. Only the rollout deletes the
    old pod of such a node, and that deletion alone starts it (no record is written)."""
    if recorded in (STATE_CORDONED, STATE_DRAINING):
        pod = node.pod
        if pod is None or pod.deleting or pod.revision == moving_to:
            return STATE_UPGRADING
    return recorded


def begun(node: NodeLike, target: str) -> bool:
    """The node's move to ``target`` began: a label put on it now does not skip it (it
    finishes); a node cordoned ahead whose old pod is still there has not begun."""
    ann = node.annotations
    recorded = ann.get(ANN_STATE)
    if not recorded:
        return False
    moving_to = ann.get(ANN_TARGET)
    return moving_to == target and standing(node, recorded, moving_to) != STATE_CORDONED


def skip_requested(node: NodeLike, target: str, skipped: Collection[str]) -> bool:
    """Not a rollout node of the move to ``target`` (docs/live-clusters.md#a-node-under-repair):
    listed as skipped (``upgradeStatus.skipped``, frozen for the rollout), recorded as skipped for
    ``target``, or labelled ``upgrade.skip`` before its move began."""
    return ((bool(skipped) and node.name in skipped)
            or node.annotations.get(ANN_SKIPPED) == target
            or (node.labels.get(LABEL_UPGRADE_SKIP) == "true" and not begun(node, target)))


def left_alone(node: NodeLike) -> bool:
    """Cordoned by someone other than the rollout (the rollout's own cordon is a move's, whose
    record says the node was schedulable before): the rollout leaves it alone and counts it
    unavailable."""
    if not node.unschedulable:
        return False
    ann = node.annotations
    return not (ann.get(ANN_STATE) in MOVE_STATES and ann.get(ANN_WAS_UNSCHEDULABLE) == "false")


def pod_failed(pod: PodLike) -> bool:
    """The driver pod says its attempt failed (image pull, crash loop)."""
    return pod.waiting_reason in FAILURE_REASONS


def tolerated_step(annotations: Mapping[str, str], target: str) -> int | None:
    """The step whose toleration left the node behind on its move to ``target``
    (docs/rollout.md#failures-tolerated-in-a-step; None: not tolerated for it): its record
    ``failure-tolerated`` names ``target``, and its move record is ``failed`` for ``target``."""
    text = annotations.get(ANN_FAILURE_TOLERATED)
    if (not text or annotations.get(ANN_STATE) != STATE_FAILED
            or annotations.get(ANN_TARGET) != target):
        return None
    step, _, revision = text.partition("@")
    if revision != target or not step.isdigit():
        return None
    return int(step)
