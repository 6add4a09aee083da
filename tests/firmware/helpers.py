"""Driving and observing the firmware orchestrator on the real control plane."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from reconciler.firmware.request import firmware_request_annotation
from reconciler.kube.api import JSON, KubeApi, resource_path
from reconciler.kube.objects import cluster_operator_path
from reconciler.kube.watch import ListWatch
from reconciler.names import CLUSTER_OPERATOR_NAME, GPU_NODE_LABEL, REQUEST_ANNOTATION
from reconciler.stored_status import firmware_status_of


def request_firmware(kube: KubeApi, *, source_commit: str, enable_virt: bool = False) -> None:
    """What the sync role does for a merged ``fwUpgradePolicy: PreferCloud`` (or a person with
    kubectl in controller-only mode)."""
    key, value = firmware_request_annotation(enable_virt=enable_virt, source_commit=source_commit)
    assert key == REQUEST_ANNOTATION
    kube.patch(cluster_operator_path(CLUSTER_OPERATOR_NAME),
               {"metadata": {"annotations": {key: value}}})


def cluster_operator(kube: KubeApi) -> JSON:
    return kube.get(cluster_operator_path(CLUSTER_OPERATOR_NAME))


def firmware_status(kube: KubeApi) -> JSON:
    return firmware_status_of(cluster_operator(kube))


def stages(kube: KubeApi) -> dict[str, str]:
    return {n: str(e.get("stage")) for n, e in (firmware_status(kube).get("nodes") or {}).items()}


def gpu_nodes(kube: KubeApi) -> dict[str, JSON]:
    items = kube.list(resource_path("v1", "nodes"),
                      query={"labelSelector": f"{GPU_NODE_LABEL}=true"})["items"]
    return {str(n["metadata"]["name"]): n for n in items}


@dataclass
class NodeObserver:
    """Watches GPU nodes on its own: boots per node (boot ID changes) and the most nodes
    NotReady at once."""

    kube: KubeApi
    boots: dict[str, int] = field(default_factory=dict)
    max_not_ready: int = 0
    _boot_ids: dict[str, str] = field(default_factory=dict)
    _not_ready: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _watch: ListWatch | None = None

    def start(self) -> NodeObserver:
        self._watch = ListWatch(self.kube, "/api/v1/nodes", on_event=self._on_node,
                                query={"labelSelector": f"{GPU_NODE_LABEL}=true"},
                                name="observer nodes").start()
        assert self._watch.wait_synced(30)
        return self

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.stop()

    def _on_node(self, event: str, obj: JSON) -> None:
        name = str(obj["metadata"]["name"])
        status = obj.get("status") or {}
        boot = str((status.get("nodeInfo") or {}).get("bootID") or "")
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in status.get("conditions") or ())
        with self._lock:
            old = self._boot_ids.get(name)
            if old is not None and boot and boot != old:
                self.boots[name] = self.boots.get(name, 0) + 1
            if boot:
                self._boot_ids[name] = boot
            if ready or event == "DELETED":
                self._not_ready.discard(name)
            else:
                self._not_ready.add(name)
            self.max_not_ready = max(self.max_not_ready, len(self._not_ready))
