"""From Kubernetes objects (plain JSON dicts) to the planner's snapshot parts. Pure."""

from __future__ import annotations

import math
import sys
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from reconciler.names import (
    ANN_MIRROR_POD,
    DRIVER_DAEMONSET,
    GPU_RESOURCES,
    OPERATOR_NAMESPACE,
    REVISION_LABEL,
)
from reconciler.policy.label_selector import LabelSelector
from reconciler.rollout.model import (
    PLANNER_LABELS,
    DaemonSetView,
    DisruptionBudget,
    DriverPod,
    RolloutNode,
    WorkloadPod,
)
from reconciler.timefmt import parse_time_or

JSON = dict[str, Any]


def parse_timestamp(text: str | None) -> float:
    """RFC 3339 as the API server writes it (``2026-11-30T01:02:03Z``) to whole epoch seconds;
    0 when absent or not a time."""
    return float(math.floor(parse_time_or(text, 0.0)))


def is_driver_pod(pod: Mapping[str, Any], daemonset: str = DRIVER_DAEMONSET,
                  namespace: str = OPERATOR_NAMESPACE) -> bool:
    meta = pod.get("metadata") or {}
    if meta.get("namespace") != namespace:
        return False
    return any(
        ref.get("kind") == "DaemonSet" and ref.get("name") == daemonset
        for ref in meta.get("ownerReferences") or ()
    )


def finished(pod: Mapping[str, Any]) -> bool:
    """A pod whose containers have all exited for good: it holds nothing on its node."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def requests_gpu(pod: Mapping[str, Any]) -> bool:
    """A running or pending pod that asks for a GPU resource: it blocks the node's upgrade."""
    if finished(pod):
        return False
    spec = pod.get("spec") or {}
    for container in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
        resources = container.get("resources") or {}
        for kind in ("requests", "limits"):
            if any(name in (resources.get(kind) or {}) for name in GPU_RESOURCES):
                return True
    return False


def workload_pod_view(pod: Mapping[str, Any]) -> WorkloadPod:
    """A pod other than the driver pod as the drain reads it (docs/live-clusters.md#the-drain).
    Small on purpose: one per pod of the fleet. Its strings and its labels are the cached object's
    own (no copies); the few strings many pods repeat are interned."""
    meta = pod.get("metadata") or {}
    controller = next((ref for ref in meta.get("ownerReferences") or ()
                       if ref.get("controller") is True), None)
    kind = controller.get("kind") if controller is not None else None
    volumes = (pod.get("spec") or {}).get("volumes") or ()
    return WorkloadPod(
        namespace=sys.intern(str(meta.get("namespace") or "")),
        name=str(meta.get("name") or ""),
        labels=meta.get("labels") or {},
        gpu=requests_gpu(pod),
        controller_kind=sys.intern(str(kind)) if kind else None,
        mirror=ANN_MIRROR_POD in (meta.get("annotations") or {}),
        empty_dir=any("emptyDir" in volume for volume in volumes),
        terminating=bool(meta.get("deletionTimestamp")),
    )


def budget_view(budget: Mapping[str, Any]) -> DisruptionBudget:
    """A policy/v1 PodDisruptionBudget as the disruption controller last computed it."""
    meta = budget.get("metadata") or {}
    allowed = (budget.get("status") or {}).get("disruptionsAllowed")
    return DisruptionBudget(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        selector=LabelSelector.from_object((budget.get("spec") or {}).get("selector")),
        # not computed yet: nothing is allowed (the API server refuses as well)
        disruptions_allowed=allowed if isinstance(allowed, int) else 0,
    )


def driver_pod_view(pod: Mapping[str, Any]) -> DriverPod:
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )
    waiting_reason: str | None = None
    restarts = 0
    for container in status.get("containerStatuses") or ():
        restarts += int(container.get("restartCount") or 0)
        waiting = (container.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            waiting_reason = str(waiting["reason"])
    return DriverPod(
        name=str(meta.get("name")),
        revision=str((meta.get("labels") or {}).get(REVISION_LABEL, "")),
        ready=ready,
        waiting_reason=waiting_reason,
        restart_count=restarts,
        created_at=parse_timestamp(meta.get("creationTimestamp")),
        deleting=bool(meta.get("deletionTimestamp")),
        deletion_requested_at=deletion_requested_at(meta),
    )


def deletion_requested_at(meta: Mapping[str, Any]) -> float:
    """When a pod's deletion was asked for: the API server sets ``deletionTimestamp`` to that
    time plus the grace period (to the second); 0 when not deleting."""
    deadline = parse_timestamp(meta.get("deletionTimestamp"))
    if not deadline:
        return 0.0
    grace = meta.get("deletionGracePeriodSeconds")
    if not isinstance(grace, int) or isinstance(grace, bool) or grace < 0:
        grace = 0  # the API server writes a count of seconds; anything else takes nothing off
    return max(deadline - grace, 0.0)


def pick_driver_pod(pods: Iterable[DriverPod]) -> DriverPod | None:
    """The pod that speaks for the node: the live one over one being deleted, then the newest."""
    best: DriverPod | None = None
    for pod in pods:
        if best is None or (best.deleting, -best.created_at, best.name) > (
            pod.deleting, -pod.created_at, pod.name
        ):
            best = pod
    return best


def node_view(node: Mapping[str, Any], pod: DriverPod | None,
              workloads: Iterable[str] = (), pod_deleted_at: float = 0.0,
              labels: Collection[str] = PLANNER_LABELS,
              pods: Iterable[WorkloadPod] = ()) -> RolloutNode:
    """``labels``: the label keys the planner reads (a topology adds its key); ``pods``: the
    node's workload pods the drain sees (docs/live-clusters.md#the-drain)."""
    meta = node.get("metadata") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or ()
    )
    return RolloutNode(
        name=str(meta.get("name")),
        ready=ready,
        unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
        # only what the planner reads, so that labels others change (e.g. the vendor's node
        # labeller on every driver install) do not wake it
        labels={k: v for k, v in (meta.get("labels") or {}).items() if k in labels},
        annotations=dict(meta.get("annotations") or {}),
        pod=pod,
        workloads=tuple(sorted(workloads)),
        pod_deleted_at=pod_deleted_at,
        pods=tuple(sorted(pods, key=lambda p: (p.namespace, p.name))),
    )


def revision_image(revision: Mapping[str, Any], container: str | None = None) -> str:
    """The driver image recorded in a ControllerRevision of the DaemonSet."""
    template = ((revision.get("data") or {}).get("spec") or {}).get("template") or {}
    containers = (template.get("spec") or {}).get("containers") or []
    for c in containers:
        if container is None or c.get("name") == container:
            return str(c.get("image", ""))
    return ""


def owned_by(obj: Mapping[str, Any], kind: str, name: str) -> bool:
    return any(
        ref.get("kind") == kind and ref.get("name") == name
        for ref in (obj.get("metadata") or {}).get("ownerReferences") or ()
    )


def daemonset_view(
    daemonset: Mapping[str, Any], revisions: Iterable[Mapping[str, Any]]
) -> DaemonSetView | None:
    """The DaemonSet's current revision is its ControllerRevision with the highest number (the
    DaemonSet controller renumbers a reused one). The image is taken from that revision, not from
    the template, so revision and image always agree even while the template was just changed and
    the controller has not caught up."""
    name = str((daemonset.get("metadata") or {}).get("name"))
    container = driver_container_name(daemonset)
    owned = [r for r in revisions if owned_by(r, "DaemonSet", name)]
    if not owned:
        return None
    current = max(owned, key=lambda r: int(r.get("revision") or 0))
    images = {
        str((r.get("metadata") or {}).get("labels", {}).get(REVISION_LABEL, "")): revision_image(
            r, container
        )
        for r in owned
    }
    current_hash = str((current.get("metadata") or {}).get("labels", {}).get(REVISION_LABEL, ""))
    return DaemonSetView(
        current_revision=current_hash,
        current_image=images.get(current_hash, ""),
        revision_images=images,
    )


def driver_container_name(daemonset: Mapping[str, Any]) -> str | None:
    containers = (
        (((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")
        or []
    )
    return str(containers[0].get("name")) if containers else None


def template_image(daemonset: Mapping[str, Any]) -> str:
    containers = (
        (((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")
        or []
    )
    return str(containers[0].get("image", "")) if containers else ""
