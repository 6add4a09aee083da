"""What the rollout planner observes: a snapshot a controller can build from its list/watch caches.

Everything is immutable. A caller that keeps its snapshot up to date (the simulator, the
controller's caches) replaces only the entries that changed, so building a snapshot costs
O(changed nodes), not O(fleet).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from reconciler.fleet.windows import WindowCalendar
from reconciler.health.checks import HealthConfig, Reading
from reconciler.names import (
    ANN_DELETED_AT as ANN_DELETED_AT,
)
from reconciler.names import (
    ANN_FAILED_AT as ANN_FAILED_AT,
)
from reconciler.names import (
    ANN_FAILURE_REASON as ANN_FAILURE_REASON,
)
from reconciler.names import (
    ANN_FAILURES as ANN_FAILURES,
)
from reconciler.names import (
    ANN_STATE as ANN_STATE,
)
from reconciler.names import (
    ANN_TARGET as ANN_TARGET,
)
from reconciler.names import (
    ANN_WAS_UNSCHEDULABLE as ANN_WAS_UNSCHEDULABLE,
)
from reconciler.names import (
    ANNOTATION_PREFIX as ANNOTATION_PREFIX,
)
from reconciler.names import CANARY_LABEL, LABEL_UPGRADE_SKIP
from reconciler.names import (
    GPU_RESOURCES as GPU_RESOURCES,
)
from reconciler.names import (
    STATE_CORDONED as STATE_CORDONED,
)
from reconciler.names import (
    STATE_DONE as STATE_DONE,
)
from reconciler.names import (
    STATE_FAILED as STATE_FAILED,
)
from reconciler.names import (
    STATE_UPGRADING as STATE_UPGRADING,
)
from reconciler.policy.label_selector import LabelSelector
from reconciler.policy.rollout_settings import (
    DrainSettings,
    RolloutSettings,
    TopologySettings,
    UnavailableNodes,
    WaitForSettings,
)
from reconciler.policy.upgrade_policy import UpgradePolicy
from reconciler.rollout.node_class import FAILURE_REASONS as FAILURE_REASONS

#: the node labels the planner reads (a view carries only these)
PLANNER_LABELS = frozenset({CANARY_LABEL, LABEL_UPGRADE_SKIP})



@dataclass(frozen=True, slots=True)
class Namespaced:
    """A namespaced object's name: ``key`` (``namespace/name``) files it in the snapshot."""

    namespace: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class DriverPod:
    """The driver DaemonSet's pod on one node."""

    name: str
    revision: str  # label controller-revision-hash
    ready: bool = False
    waiting_reason: str | None = None  # e.g. ErrImagePull, CrashLoopBackOff
    restart_count: int = 0
    created_at: float = 0.0  # seconds since the epoch
    deleting: bool = False  # deletionTimestamp set
    #: when its deletion was asked for (deletionTimestamp less the grace period; 0: unknown)
    deletion_requested_at: float = 0.0


@dataclass(frozen=True, slots=True)
class WorkloadPod(Namespaced):
    """A pod on a node other than the driver pod, as the drain sees it
    (docs/live-clusters.md#the-drain)."""

    labels: Mapping[str, str] = field(default_factory=dict)
    #: requests metax-tech.com/gpu or metax-tech.com/vfio-gpu
    gpu: bool = True
    #: the kind of its controller owner (ReplicaSet, Job, StatefulSet, DaemonSet, ...); None:
    #: a bare pod (drain does not evict it: nothing would recreate it)
    controller_kind: str | None = "ReplicaSet"
    #: a static pod's mirror (never evicted)
    mirror: bool = False
    #: has an emptyDir volume (evicted only with ``deleteEmptyDir``)
    empty_dir: bool = False
    #: deletionTimestamp set: waited for, its grace period is its own
    terminating: bool = False


@dataclass(frozen=True, slots=True)
class DisruptionBudget(Namespaced):
    """A PodDisruptionBudget as the disruption controller last computed it."""

    #: None: selects no pod
    selector: LabelSelector | None
    #: ``status.disruptionsAllowed``: evictions the API server allows now
    disruptions_allowed: int

    def covers(self, pod: WorkloadPod) -> bool:
        return (self.selector is not None and pod.namespace == self.namespace
                and self.selector.matches(pod.labels))


@dataclass(frozen=True, slots=True)
class RolloutNode:
    """A node that runs the driver DaemonSet, with its driver pod and GPU workloads."""

    name: str
    ready: bool = True
    unschedulable: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    pod: DriverPod | None = None
    #: ``namespace/name`` of pods on the node requesting a GPU resource (the offline precondition)
    workloads: tuple[str, ...] = ()
    #: the node's last driver pod that went away: when its deletion was asked for (0: unknown,
    #: e.g. it went before the controller started)
    pod_deleted_at: float = 0.0
    #: the node's pods besides the driver pod, for the drain and waitFor
    #: (docs/live-clusters.md#waiting-for-jobs); filled by a caller when either is set (empty
    #: otherwise: ``workloads`` alone decides)
    pods: tuple[WorkloadPod, ...] = ()

    @property
    def canary(self) -> bool:
        return self.labels.get(CANARY_LABEL) == "true"


# A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``: at 100,000
# simulated nodes, built five or six times each, that is a second of a what-if run. The two
# builders below set the slots directly (the objects are the same, frozen, equal as built by
# ``__init__``); the simulator and the node view build with them.
_new = object.__new__


def _slot(cls: type, name: str) -> Callable[[Any, Any], None]:
    setter: Callable[[Any, Any], None] = cls.__dict__[name].__set__
    return setter


_pod_name, _pod_revision, _pod_ready, _pod_waiting, _pod_restarts = (
    _slot(DriverPod, f) for f in ("name", "revision", "ready", "waiting_reason",
                                  "restart_count"))
_pod_created, _pod_deleting, _pod_deletion_at = (
    _slot(DriverPod, f) for f in ("created_at", "deleting", "deletion_requested_at"))
_node_name, _node_ready, _node_unschedulable, _node_labels, _node_annotations = (
    _slot(RolloutNode, f) for f in ("name", "ready", "unschedulable", "labels", "annotations"))
_node_pod, _node_workloads, _node_deleted_at, _node_pods = (
    _slot(RolloutNode, f) for f in ("pod", "workloads", "pod_deleted_at", "pods"))


def build_pod(name: str, revision: str, ready: bool, waiting_reason: str | None,
              restart_count: int, created_at: float, deleting: bool,
              deletion_requested_at: float) -> DriverPod:
    """``DriverPod(...)`` with every field given, in field order."""
    pod: DriverPod = _new(DriverPod)
    _pod_name(pod, name)
    _pod_revision(pod, revision)
    _pod_ready(pod, ready)
    _pod_waiting(pod, waiting_reason)
    _pod_restarts(pod, restart_count)
    _pod_created(pod, created_at)
    _pod_deleting(pod, deleting)
    _pod_deletion_at(pod, deletion_requested_at)
    return pod


def build_node(name: str, ready: bool, unschedulable: bool, labels: Mapping[str, str],
               annotations: Mapping[str, str], pod: DriverPod | None,
               workloads: tuple[str, ...], pod_deleted_at: float,
               pods: tuple[WorkloadPod, ...]) -> RolloutNode:
    """``RolloutNode(...)`` with every field given, in field order."""
    node: RolloutNode = _new(RolloutNode)
    _node_name(node, name)
    _node_ready(node, ready)
    _node_unschedulable(node, unschedulable)
    _node_labels(node, labels)
    _node_annotations(node, annotations)
    _node_pod(node, pod)
    _node_workloads(node, workloads)
    _node_deleted_at(node, pod_deleted_at)
    _node_pods(node, pods)
    return node


@dataclass(frozen=True, slots=True)
class DaemonSetView:
    """The driver DaemonSet: its current template revision and the images of known revisions."""

    current_revision: str
    current_image: str
    #: revision hash -> image (ControllerRevisions); used to name versions in messages
    revision_images: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HealthReading:
    """The latest answer to one check's query and when it was read (a reading older than the
    check's start, e.g. of an earlier attempt, decides nothing)."""

    at: float
    value: Reading


@dataclass(frozen=True, slots=True)
class HealthInput:
    """The health gates of docs/health.md as the planner sees them: the ``health`` section (None
    when the section does not validate: ``error`` says why, and no node starts) and the latest
    readings of the pending checks, which the controller fills."""

    config: HealthConfig | None
    #: node name -> check name -> reading (node checks)
    node_readings: Mapping[str, Mapping[str, HealthReading]] = field(default_factory=dict)
    #: check name -> reading (the current step's checks)
    step_readings: Mapping[str, HealthReading] = field(default_factory=dict)
    #: the located validation error of the ``health`` section (fail closed)
    error: str | None = None


@dataclass(frozen=True, slots=True)
class RolloutSnapshot:
    nodes: Mapping[str, RolloutNode]
    daemonset: DaemonSetView
    #: ``spec.driver.payload`` as written (registry, name, version, pullPolicy)
    payload: Mapping[str, Any]
    policy: UpgradePolicy
    #: ``status.upgradeStatus`` as last written (``{}`` when never written)
    status: Mapping[str, Any] = field(default_factory=dict)
    #: the health gates; None: no ``health`` section (the rollout judges pods alone)
    health: HealthInput | None = None
    #: the cluster's maintenance windows (docs/configuration.md#maintenance-windows; None: always
    #: open): fresh node starts happen only when the calendar is open at the planner's ``now``
    windows: WindowCalendar | None = None
    #: the PodDisruptionBudgets of the namespaces with pods on rollout nodes, by
    #: ``namespace/name`` (filled when ``drain`` is set)
    budgets: Mapping[str, DisruptionBudget] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PlannerSettings:
    """Reconciler settings of the planner (not part of the policy): the process's own
    (back-off, message size, cordon ahead) and, through ``for_pass``, the cluster's ``rollout``
    section of reconciler.yaml."""

    ready_timeout: float = 600.0  # seconds a new driver pod may take to become Ready
    retry_backoff: float = 30.0  # seconds before the first retry of a failed node
    retry_backoff_max: float = 300.0  # the back-off doubles per attempt up to this
    #: nodes named in a status message before "and N more"
    message_node_limit: int = 5
    #: cordon (and record) the nodes next in line, at most maxParallel of them and never past
    #: the current step, while the nodes before them upgrade: a freed slot is then refilled by
    #: the pod deletion alone, and no new GPU job lands on a node about to go offline
    cordon_ahead: bool = True
    #: ``rollout.drain`` (None: off, busy nodes wait) and the rest of ``rollout`` in
    #: reconciler.yaml (docs/live-clusters.md#the-drain and docs/rollout.md#topology-aware-waves),
    #: as of the latest commit
    drain: DrainSettings | None = None
    wait_for: WaitForSettings | None = None
    unavailable_nodes: UnavailableNodes = "count"
    topology: TopologySettings | None = None

    def for_pass(self, rollout: RolloutSettings) -> PlannerSettings:
        """These settings with the cluster's ``rollout`` section in force
        (docs/live-clusters.md: read at every commit). The one way the section reaches a
        planner: the controller's every pass, and ``simulate``, ``plan`` and the dashboard's
        predictions, so each predicts what the controller runs."""
        return replace(self, ready_timeout=rollout.ready_timeout, drain=rollout.drain,
                       wait_for=rollout.wait_for, unavailable_nodes=rollout.unavailable_nodes,
                       topology=rollout.topology)

    def backoff(self, attempt: int) -> float:
        """Back-off after the ``attempt``-th failed attempt (1-based)."""
        # the attempt comes from an annotation anyone can edit: 2.0 ** 2000 would overflow
        doublings = min(max(attempt - 1, 0), 64)
        return min(self.retry_backoff * 2.0 ** doublings, self.retry_backoff_max)
