"""The domain's names (docs/policy.md#the-objects-in-the-cluster, docs/rollout.md#the-state-machine
and docs/firmware.md): the vendor operator's API group and kind, the annotation and label keys the
program reads and writes, and the phases and step states of ``status.upgradeStatus`` and
``status.firmwareUpgrade``.

Defined once so a renamed key cannot drift between the planner that writes it and the code that
reads it. The bottom layer: imports nothing from ``reconciler``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

# -- the vendor operator's objects (docs/policy.md#the-objects-in-the-cluster)
# ---------------------------------------------------

GROUP: Final = "gpu.metax-tech.com"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "ClusterOperator"
PLURAL: Final = "clusteroperators"
#: label of a DaemonSet's pods and ControllerRevisions: the revision they belong to
REVISION_LABEL: Final = "controller-revision-hash"
CLUSTER_OPERATOR_NAME: Final = "cluster-operator"
#: field managers of docs/gitops.md#git-stays-the-truth: the sync role and the rollout controller
SYNC_FIELD_MANAGER: Final = "gpu-gitops-reconciler"
CONTROLLER_FIELD_MANAGER: Final = "gpu-rollout-controller"
#: the notifier's own (docs/notifications.md): the events it sent, in ``NOTIFIED_ANNOTATION``
NOTIFY_FIELD_MANAGER: Final = "gpu-gitops-reconciler-notify"

OPERATOR_NAMESPACE: Final = "metax-operator"
DRIVER_DAEMONSET: Final = "metax-driver"
DRIVER_CONTAINER: Final = "driver"
DRIVER_POD_LABEL: Final = "app.kubernetes.io/name"  # value: DRIVER_DAEMONSET
REVISION_HASH_LABEL: Final = "controller-revision-hash"
NOT_READY_TAINT: Final = "node.kubernetes.io/not-ready"

GPU_NODE_LABEL: Final = "metax-tech.com/gpu.installed"
GPU_RESOURCE: Final = "metax-tech.com/gpu"
VFIO_GPU_RESOURCE: Final = "metax-tech.com/vfio-gpu"
GPU_RESOURCES: Final = (GPU_RESOURCE, VFIO_GPU_RESOURCE)
VBIOS_VERSION_LABEL: Final = "metax-tech.com/gpu.vbios.version"

# -- the rollout (docs/rollout.md#the-state-machine)
# ----------------------------------------------------------------------

ANNOTATION_PREFIX: Final = "gpu.metax-tech.com/"
#: on the ClusterOperator: the commit the cluster runs (the sync role writes it)
SOURCE_COMMIT_ANNOTATION: Final = ANNOTATION_PREFIX + "source-commit"
#: on the ClusterOperator: the notification events already sent, per sink (JSON)
NOTIFIED_ANNOTATION: Final = ANNOTATION_PREFIX + "notifications-sent"
#: label that puts a node in front of the rollout order
CANARY_LABEL: Final = ANNOTATION_PREFIX + "canary"

# Per-node rollout state (node annotations); a restarted controller resumes from them.
ANN_STATE: Final = ANNOTATION_PREFIX + "upgrade-state"
ANN_TARGET: Final = ANNOTATION_PREFIX + "upgrade-target-revision"
ANN_WAS_UNSCHEDULABLE: Final = ANNOTATION_PREFIX + "was-unschedulable"
ANN_ATTEMPT: Final = ANNOTATION_PREFIX + "attempt"
ANN_DELETED_AT: Final = ANNOTATION_PREFIX + "deleted-at"
#: the driver pod whose deletion ``deleted-at`` records: while that pod is still there and not
#: terminating, the deletion never happened (a controller killed between the two)
ANN_DELETED_POD: Final = ANNOTATION_PREFIX + "deleted-pod"
ANN_FAILED_AT: Final = ANNOTATION_PREFIX + "failed-at"
#: ``<batch epoch>|<failures counted in that epoch>``; the source of ``currentFailureRetry``
ANN_FAILURES: Final = ANNOTATION_PREFIX + "failures"
ANN_FAILURE_REASON: Final = ANNOTATION_PREFIX + "failure-reason"
#: the node checks' timers (docs/health.md): a ``HealthRecord`` as JSON, written while the node is
#: verified on the target; a restart resumes the same timers
ANN_HEALTH: Final = ANNOTATION_PREFIX + "health"
#: why the node's health check failed (check, value, node): the fallback condition names it
ANN_HEALTH_FAILURE: Final = ANNOTATION_PREFIX + "health-failure"
#: the step in which the node passed its checks: the step checks' ``{{nodes}}``
ANN_HEALTH_STEP: Final = ANNOTATION_PREFIX + "health-step"
#: operator mode (docs/health.md#operator-mode): the sync role's node checks of a node the vendor
#: upgraded: ``{"revision", "started", "passed", "failure"}`` as JSON
ANN_VENDOR_HEALTH: Final = ANNOTATION_PREFIX + "vendor-health"

# -- live clusters (docs/live-clusters.md#the-drain and docs/rollout.md#topology-aware-waves)
# ---------------------------------------------------------------
#: when the node's drain began (its cordon): ``drain.timeout`` and ``waitFor.timeout`` run from it
ANN_DRAIN_STARTED: Final = ANNOTATION_PREFIX + "drain-started-at"
#: the drain settings the node started with (JSON; docs/live-clusters.md#the-drain: settings apply
#: from the next node that starts, so a node in flight keeps its own)
ANN_DRAIN_SETTINGS: Final = ANNOTATION_PREFIX + "drain-settings"
#: a node the rollout skipped (value: the target revision it was skipped for), so a restart
#: keeps the decision (docs/live-clusters.md#a-node-under-repair)
ANN_SKIPPED: Final = ANNOTATION_PREFIX + "upgrade-skipped"
#: a failed node the rollout left behind within its step's ``toleration``
#: (docs/rollout.md#failures-tolerated-in-a-step): ``<step>@<target revision>``, written with its
#: ``failed`` record, so a restart counts the step's tolerated nodes as they were decided
ANN_FAILURE_TOLERATED: Final = ANNOTATION_PREFIX + "failure-tolerated"
#: a node label: not a rollout node at all while it is ``true``
LABEL_UPGRADE_SKIP: Final = ANNOTATION_PREFIX + "upgrade.skip"
#: a pod label: never evicted by the drain
LABEL_DRAIN_SKIP: Final = ANNOTATION_PREFIX + "drain.skip"
#: the cluster autoscaler leaves a node alone while it carries this (``"true"``)
ANN_SCALE_DOWN_DISABLED: Final = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
#: a static pod's mirror on the API server carries this annotation
ANN_MIRROR_POD: Final = "kubernetes.io/config.mirror"
#: the budgets (``ns/name``, comma-separated) holding a draining node's evictions when the last
#: ``NodeDrainBlocked`` Event was recorded: the Event is recorded once per change, restarts included
ANN_DRAIN_BLOCKED_BY: Final = ANNOTATION_PREFIX + "drain-blocked-by"

# Values of ANN_STATE (annotation values, so plain strings). Each is meaningful only together
# with ANN_TARGET.
STATE_UPGRADING: Final = "upgrading"  # old pod deleted for the target, new pod not yet Ready
#: cordoned ahead of its start: the next to start for the target, old pod not deleted yet (a
#: freed slot is then refilled by the pod deletion alone; see PlannerSettings.cordon_ahead)
STATE_CORDONED: Final = "cordoned"
STATE_FAILED: Final = "failed"  # the attempt failed; waits for a retry, a person or a rollback
STATE_DONE: Final = "done"  # Ready on the target revision, schedulability restored
#: cordoned and in flight, its workload pods being evicted (``rollout.drain``) or waited for
#: (``rollout.waitFor``); the driver pod is deleted once the node is idle
STATE_DRAINING: Final = "draining"


class Phase(StrEnum):
    """``status.upgradeStatus.phase`` (docs/rollout.md#status-fields)."""

    IDLING = "Idling"
    PROGRESSING = "Progressing"
    TERMINATING = "Terminating"
    DISABLING = "Disabling"
    DISABLED = "Disabled"


#: phases in which a rollout is active (``upgrading: true``)
ACTIVE_PHASES: Final = frozenset({Phase.PROGRESSING, Phase.TERMINATING, Phase.DISABLING})
#: the active phases that move nodes back to the previous revision
#: (docs/rollout.md#fallback-rollback-and-pause)
ROLLBACK_PHASES: Final = frozenset({Phase.TERMINATING, Phase.DISABLING})
#: phases with no rollout running
TERMINAL_PHASES: Final = frozenset({Phase.IDLING, Phase.DISABLED})


class StepState(StrEnum):
    """``status.upgradeStatus.status.currentStepState`` (docs/rollout.md#status-fields)."""

    INIT = "StepUpgradeInit"
    UPGRADE = "StepUpgrade"
    PAUSED = "StepPaused"
    READY = "StepReady"
    COMPLETED = "Completed"


class ConditionType(StrEnum):
    """Condition types of ``status.upgradeStatus.conditions``. The CRD's conditions have no
    status: a condition on the list is in force, one no longer in force leaves it.
    lastTransitionTime of PROGRESSING is the start of the current batch epoch (step start or
    resume after a fallback); failures are counted per epoch."""

    PROGRESSING = "Progressing"
    MANUAL_GATE = "ManualGate"
    #: a person confirmed the step's gate, and nodes that joined during it are not Ready yet
    GATE_CONFIRMED = "GateConfirmed"
    BATCH_FAILED = "BatchFailed"
    #: a rollback runs; its reason says why (FailureThresholdReached, RolloutDisabled, ...)
    ROLLING_BACK = "RollingBack"
    ROLLED_BACK = "RolledBack"
    #: a health check failed (docs/health.md): beside the fallback it caused
    HEALTH_CHECK_FAILED = "HealthCheckFailed"


# -- firmware (docs/firmware.md)
# -------------------------------------------------------------------------

#: Annotations: the request on the ClusterOperator, and per node whether it was cordoned before
#: the flow (written in the same patch that cordons it).
REQUEST_ANNOTATION: Final = ANNOTATION_PREFIX + "firmware-request"
CORDONED_BEFORE_ANNOTATION: Final = ANNOTATION_PREFIX + "firmware-cordoned-before"
#: set with the cordon: which flow prepared the node, its boot ID and VBIOS version(s) then
FLOW_ANNOTATION: Final = ANNOTATION_PREFIX + "firmware-flow"
BOOT_ID_ANNOTATION: Final = ANNOTATION_PREFIX + "firmware-boot-id"
VBIOS_BEFORE_ANNOTATION: Final = ANNOTATION_PREFIX + "firmware-vbios-before"
FLOW_ANNOTATIONS: Final = (FLOW_ANNOTATION, BOOT_ID_ANNOTATION, VBIOS_BEFORE_ANNOTATION)
#: on the ClusterOperator, applied with the final ``Never``: ``<flow id>:<phase>``, so a flow
#: whose last status writes were lost is never run again
DONE_ANNOTATION: Final = ANNOTATION_PREFIX + "firmware-done"

# The driver-manager's Event, the reboot request and its acknowledgement (node annotations).
NODE_NEED_REBOOT_REASON: Final = "NodeNeedReboot"
NODE_NEED_REBOOT_MESSAGE: Final = "firmware upgrade done, need reboot machine to take effect"
REBOOT_REQUESTED_ANNOTATION: Final = ANNOTATION_PREFIX + "reboot-requested"
REBOOTED_ANNOTATION: Final = ANNOTATION_PREFIX + "rebooted"


class FirmwarePhase(StrEnum):
    """``status.firmwareUpgrade.phase`` (docs/firmware.md)."""

    IDLE = "Idle"
    PREFLIGHT = "Preflight"
    REFUSED = "Refused"
    CORDONING = "Cordoning"
    UPGRADING = "Upgrading"
    AWAITING_REBOOT = "AwaitingReboot"
    VERIFYING = "Verifying"
    FINISHING = "Finishing"
    COMPLETED = "Completed"
    FAILED = "Failed"


#: firmware phases in which no flow runs
FIRMWARE_DONE_PHASES: Final = frozenset({
    FirmwarePhase.IDLE, FirmwarePhase.COMPLETED, FirmwarePhase.FAILED, FirmwarePhase.REFUSED,
})
#: the same, plus a status that names no phase yet: no firmware upgrade is running
FIRMWARE_IDLE_PHASES: Final = frozenset({"", *FIRMWARE_DONE_PHASES})

#: the arch suffixes of a driver version (docs/policy.md#the-objects-in-the-cluster: none means
#: ``-amd64``)
ARCH_SUFFIXES: Final = ("-amd64", "-arm64")
