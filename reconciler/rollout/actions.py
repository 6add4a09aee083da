"""Actions the planner asks for: the node actions both planners share (``NodeAction``, from
``reconciler.planning``) and the rollout's own. Small and frozen; each is idempotent when
executed against the state it was planned from, and a plan's order matters (annotate a node
before deleting its pod, so a crash in between leaves a record, never an unrecorded
deletion)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.planning import NODE_ACTIONS as NODE_ACTIONS
from reconciler.planning import AnnotateNode as AnnotateNode
from reconciler.planning import Cordon as Cordon
from reconciler.planning import DeleteDriverPod as DeleteDriverPod
from reconciler.planning import DeletePod as DeletePod
from reconciler.planning import EvictPod as EvictPod
from reconciler.planning import NodeAction as NodeAction
from reconciler.planning import RecordEvent as RecordEvent
from reconciler.planning import Uncordon as Uncordon


@dataclass(frozen=True, slots=True)
class SetDaemonSetImage:
    """Set the driver DaemonSet's pod template image (OnDelete: no pod changes by itself)."""

    image: str


@dataclass(frozen=True, slots=True)
class SetPolicyPause:
    """Set ``spec.driver.upgradePolicy.pause`` on the ClusterOperator (a gate or a fallback)."""

    pause: bool


@dataclass(frozen=True, slots=True)
class RestorePayload:
    """Set ``spec.driver.payload`` back to the previous payload (rollback)."""

    payload: Mapping[str, Any]


#: the rollout's actions beside the node actions: on the DaemonSet, on the ClusterOperator (its
#: policy, its payload, an Event)
ClusterAction = SetDaemonSetImage | SetPolicyPause | RestorePayload | RecordEvent
Action = NodeAction | ClusterAction
