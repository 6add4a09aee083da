"""The cluster side of the dashboard: list+watch caches of the ClusterOperator, the GPU nodes,
pods, the driver DaemonSet with its ControllerRevisions and the ClusterOperator's Events, turned
into ``ClusterFacts`` on demand. Read-only: it never writes to the API server.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.dashboard.model import ClusterFacts, EventFacts
from reconciler.kube.api import JSON, KubeApi, resource_path
from reconciler.kube.events import EVENT_NAMESPACE
from reconciler.kube.objects import cluster_operator_path
from reconciler.kube.observe import (
    daemonset_view,
    driver_pod_view,
    is_driver_pod,
    parse_timestamp,
    requests_gpu,
)
from reconciler.kube.watch import ListWatch, without_managed_fields
from reconciler.names import (
    CANARY_LABEL,
    DRIVER_DAEMONSET,
    GPU_NODE_LABEL,
    LABEL_UPGRADE_SKIP,
    OPERATOR_NAMESPACE,
)
from reconciler.stored_status import upgrade_status_of
from reconciler.views.nodes import NodeFacts, PodFacts, topology_key


def _condition_since(obj: Mapping[str, Any], kind: str) -> tuple[bool, float | None]:
    for condition in (obj.get("status") or {}).get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            since = parse_timestamp(condition.get("lastTransitionTime")) or None
            return condition.get("status") == "True", since
    return False, None


def pod_facts(pod: Mapping[str, Any]) -> PodFacts:
    view = driver_pod_view(pod)
    ready, since = _condition_since(pod, "Ready")
    return PodFacts(
        name=view.name, revision=view.revision, ready=view.ready,
        waiting_reason=view.waiting_reason, restart_count=view.restart_count,
        created_at=view.created_at, ready_since=since if ready else None,
        deleting=view.deleting,
    )


def _pick(pods: list[PodFacts]) -> PodFacts | None:
    best: PodFacts | None = None
    for pod in pods:
        if best is None or (best.deleting, -best.created_at, best.name) > (
                pod.deleting, -pod.created_at, pod.name):
            best = pod
    return best


@dataclass(slots=True)
class FactsMemo:
    """What the last call derived, by object and resourceVersion: an unchanged object is not
    parsed again (at 10,000 nodes that is most of a rebuild's CPU)."""

    pods: dict[str, tuple[str, PodFacts]] = field(default_factory=dict)
    nodes: dict[str, tuple[tuple[Any, ...], NodeFacts]] = field(default_factory=dict)


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def facts_from_objects(
    cluster: str,
    cluster_operator: Mapping[str, Any] | None,
    nodes: list[JSON],
    pods: list[JSON],
    daemonset: Mapping[str, Any] | None,
    revisions: list[JSON],
    events: list[JSON],
    *,
    error: str | None = None,
    memo: FactsMemo | None = None,
) -> ClusterFacts:
    """``ClusterFacts`` from the API's objects (plain JSON). Pure but for ``memo``, which only
    saves work (objects without a resourceVersion are always parsed)."""
    driver_pods: dict[str, list[PodFacts]] = {}
    workloads: dict[str, list[str]] = {}
    old_pods = memo.pods if memo is not None else {}
    new_pods: dict[str, tuple[str, PodFacts]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            continue
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        rv = _rv(pod)
        hit = old_pods.get(key)
        if hit is not None and rv and hit[0] == rv:
            driver_pods.setdefault(node, []).append(hit[1])
            new_pods[key] = hit
        elif is_driver_pod(pod):
            parsed = pod_facts(pod)
            driver_pods.setdefault(node, []).append(parsed)
            new_pods[key] = (rv, parsed)
        elif requests_gpu(pod):
            workloads.setdefault(node, []).append(key)
    old_nodes = memo.nodes if memo is not None else {}
    new_nodes: dict[str, tuple[tuple[Any, ...], NodeFacts]] = {}
    node_facts = []
    # the labels the read model reads: the skip label and the rollout's topology key
    upgrade = upgrade_status_of(cluster_operator)
    label_keys = tuple(k for k in (LABEL_UPGRADE_SKIP, topology_key(upgrade)) if k)
    for node in nodes:
        meta = node.get("metadata") or {}
        name = str(meta.get("name"))
        picked = _pick(driver_pods.get(name, []))
        held = tuple(sorted(workloads.get(name, ())))
        rv = _rv(node)
        signature = (rv, picked, held, label_keys)
        cached = old_nodes.get(name)
        if cached is not None and rv and cached[0] == signature:
            node_facts.append(cached[1])
            new_nodes[name] = cached
            continue
        ready, since = _condition_since(node, "Ready")
        labels = meta.get("labels") or {}
        one = NodeFacts(
            name=name, ready=ready, ready_since=since,
            unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
            canary=labels.get(CANARY_LABEL) == "true",
            annotations={k: str(v) for k, v in (meta.get("annotations") or {}).items()
                         if k.startswith("gpu.metax-tech.com/")},
            pod=picked,
            workloads=held,
            labels={k: str(labels[k]) for k in label_keys if k in labels},
        )
        node_facts.append(one)
        new_nodes[name] = (signature, one)
    if memo is not None:
        memo.pods, memo.nodes = new_pods, new_nodes
    view = daemonset_view(daemonset, revisions) if daemonset is not None else None
    uid = ((cluster_operator or {}).get("metadata") or {}).get("uid")
    event_facts = []
    for event in events:
        involved = event.get("involvedObject") or {}
        if uid and involved.get("uid") and involved.get("uid") != uid:
            continue  # an earlier object of the same name
        at = parse_timestamp(event.get("lastTimestamp") or event.get("firstTimestamp")
                             or (event.get("metadata") or {}).get("creationTimestamp"))
        event_facts.append(EventFacts(at, str(event.get("reason") or ""),
                                      str(event.get("message") or "")))
    return ClusterFacts(
        cluster=cluster,
        cluster_operator=cluster_operator,
        nodes=node_facts,
        revision_images=dict(view.revision_images) if view else {},
        current_revision=view.current_revision if view else "",
        events=sorted(event_facts, key=lambda e: e.at),
        error=error,
    )


class ClusterSource:
    """Caches kept by watches; ``on_change`` is called (from the watch threads) after every
    event, so the server can rebuild the view soon."""

    def __init__(self, api: KubeApi, *, cluster: str, object_name: str,
                 on_change: Callable[[], None] = lambda: None) -> None:
        self.api = api
        self.cluster = cluster
        self.object_name = object_name
        self._on_change = on_change

        def changed(_kind: str, _obj: JSON) -> None:
            self._on_change()

        ns = OPERATOR_NAMESPACE
        self.watches = {
            "co": ListWatch(api, cluster_operator_path(), on_event=changed, name="dashboard co",
                            query={"fieldSelector": f"metadata.name={object_name}"},
                            transform=without_managed_fields),
            "nodes": ListWatch(api, resource_path("v1", "nodes"), on_event=changed,
                               query={"labelSelector": f"{GPU_NODE_LABEL}=true"},
                               name="dashboard nodes", transform=without_managed_fields),
            "pods": ListWatch(api, resource_path("v1", "pods"), on_event=changed,
                              name="dashboard pods", transform=without_managed_fields),
            "ds": ListWatch(api, resource_path("apps/v1", "daemonsets", namespace=ns),
                            on_event=changed, name="dashboard daemonset",
                            query={"fieldSelector": f"metadata.name={DRIVER_DAEMONSET}"},
                            transform=without_managed_fields),
            "revisions": ListWatch(api, resource_path("apps/v1", "controllerrevisions",
                                                      namespace=ns),
                                   on_event=changed, name="dashboard revisions",
                                   transform=without_managed_fields),
            "events": ListWatch(api, resource_path("v1", "events", namespace=EVENT_NAMESPACE),
                                on_event=changed, name="dashboard events",
                                query={"fieldSelector": f"involvedObject.name={object_name}"},
                                transform=without_managed_fields),
        }
        self._lock = threading.Lock()
        self._memo = FactsMemo()

    def start(self) -> ClusterSource:
        for watch in self.watches.values():
            watch.start()
        return self

    def wait_synced(self, timeout: float) -> bool:
        return all(watch.wait_synced(timeout) for watch in self.watches.values())

    def stop(self) -> None:
        for watch in self.watches.values():
            watch.stop()

    def facts(self) -> ClusterFacts:
        with self._lock:  # the memo is this source's: one rebuild at a time
            return self._facts()

    def _facts(self) -> ClusterFacts:
        w = self.watches
        cos = w["co"].items()
        daemonsets = w["ds"].items()
        errors = [f"{watch.name}: {watch.last_error}" for watch in w.values()
                  if watch.last_error and not watch.wait_synced(0)]
        return facts_from_objects(
            self.cluster,
            cos[0] if cos else None,
            w["nodes"].items(),
            w["pods"].items(),
            daemonsets[0] if daemonsets else None,
            w["revisions"].items(),
            w["events"].items(),
            error="; ".join(errors) or None,
            memo=self._memo,
        )
