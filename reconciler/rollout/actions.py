"""Actions the planner asks for. Small and frozen; each is idempotent when executed against the
state it was planned from, and a plan's order matters (annotate a node before deleting its pod,
so a crash in between leaves a record, never an unrecorded deletion)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.planning import RecordEvent as RecordEvent


@dataclass(frozen=True, slots=True)
class SetDaemonSetImage:
    """Set the driver DaemonSet's pod template image (OnDelete: no pod changes by itself)."""

    image: str


@dataclass(frozen=True, slots=True)
class Cordon:
    node: str


@dataclass(frozen=True, slots=True)
class Uncordon:
    node: str


@dataclass(frozen=True, slots=True)
class AnnotateNode:
    """Merge annotations into the node; a value of None removes the key."""

    node: str
    annotations: Mapping[str, str | None]


@dataclass(frozen=True, slots=True)
class DeleteDriverPod:
    """Delete exactly this pod (by name), never whatever pod the node runs by then."""

    node: str
    pod: str
    #: the plan's time: the deletion's time until the server's answer says it
    at: float = field(default=0.0, compare=False)


@dataclass(frozen=True, slots=True)
class SetPolicyPause:
    """Set ``spec.driver.upgradePolicy.pause`` on the ClusterOperator (a gate or a fallback)."""

    pause: bool


@dataclass(frozen=True, slots=True)
class RestorePayload:
    """Set ``spec.driver.payload`` back to the previous payload (rollback)."""

    payload: Mapping[str, Any]


Action = (
    SetDaemonSetImage
    | Cordon
    | Uncordon
    | AnnotateNode
    | DeleteDriverPod
    | SetPolicyPause
    | RestorePayload
    | RecordEvent
)
