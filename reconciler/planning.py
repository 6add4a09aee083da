"""What every planner returns: a ``Plan`` of actions as data and the new status, and the one
action every planner shares, a Kubernetes Event on the ClusterOperator.

The rollout planner (docs/rollout.md#the-state-machine) and the firmware planner (docs/firmware.md)
each take a snapshot and "now" and return a ``Plan``; a controller carries out its actions in order,
writes its status when ``changed``, and plans again at ``requeue_at`` if nothing happens before. The
node actions (``NodeAction``) are one vocabulary for both, read once per side: as API requests in
``reconciler.kube.node_requests``, as a node's view once landed in ``reconciler.rollout.node_view``.
Pure data: imports nothing else from ``reconciler``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar, get_args

EventType = Literal["Normal", "Warning"]


@dataclass(frozen=True, slots=True)
class RecordEvent:
    """A Kubernetes Event on the ClusterOperator."""

    type: EventType
    reason: str
    message: str
    node: str | None = None
    step: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


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
class _Schedulability:
    node: str


@dataclass(frozen=True, slots=True)
class Cordon(_Schedulability):
    """Mark the node unschedulable."""


@dataclass(frozen=True, slots=True)
class Uncordon(_Schedulability):
    """Mark the node schedulable again."""


@dataclass(frozen=True, slots=True)
class EvictPod:
    """Ask the Eviction API (``policy/v1``) to evict a workload pod of a draining node: a
    PodDisruptionBudget may refuse (HTTP 429), and the executor then waits at least 5 s
    (jittered) before asking again for the same pod."""

    node: str
    namespace: str
    pod: str


@dataclass(frozen=True, slots=True)
class DeletePod:
    """Delete a workload pod of a draining node outright (``drain.onTimeout: delete``)."""

    node: str
    namespace: str
    pod: str


#: the node-maintenance vocabulary both planners speak; each is idempotent against the state it
#: was planned from
NodeAction = Cordon | Uncordon | AnnotateNode | DeleteDriverPod | EvictPod | DeletePod
#: its members, for ``isinstance``
NODE_ACTIONS: tuple[type[NodeAction], ...] = get_args(NodeAction)

A = TypeVar("A")


@dataclass(frozen=True, slots=True)
class Plan(Generic[A]):
    actions: tuple[A, ...]
    #: the new status section; equal to the old one (same update time) when nothing changed,
    #: so the caller can skip the write
    status: dict[str, Any]
    changed: bool
    #: when to plan again if nothing happens before (a pause end, a back-off, a timeout)
    requeue_at: float | None = None
    #: plan again as soon as this status is stored (the rollout persists a new step before any
    #: node of it starts, so a restart never finds nodes of a batch its status does not show)
    again: bool = False
    #: rollout nodes in flight after the actions are carried out
    in_flight: int = 0
    #: unavailable rollout nodes as observed (docs/rollout.md#upgrading-one-node step 5)
    unavailable: int = 0
