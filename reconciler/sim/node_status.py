"""The simulated kubelets' part for their Nodes (in the spirit of kwok): each GPU node's labels
as the vendor's node labeller has them, its registration, its status and the not-ready taint.

A node is Ready unless the machine reboots or a ``node-notready`` fault applies (to the node, or
to a driver version one of its driver pods runs). The Node's status is written only when its
readiness changes, never as a heartbeat (heartbeats are Leases: reconciler/sim/leases.py); a
change is then handed to the pods (``on_readiness``), which stop or start with their node.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping

from reconciler.kube.api import JSON, Conflict, NotFound, resource_path
from reconciler.names import (
    GPU_NODE_LABEL,
    GPU_RESOURCE,
    NOT_READY_TAINT,
    VBIOS_VERSION_LABEL,
    VFIO_GPU_RESOURCE,
)
from reconciler.sim.faults import FaultKind
from reconciler.sim.fleet_state import (
    FLEET_LABEL,
    FleetState,
    SimNode,
    node_ip,
    node_name,
    timestamp,
)
from reconciler.sim.leases import Leases
from reconciler.sim.operator_install import DRIVER_MODE_LABEL, RUNTIME_READY_LABEL, release_minor


class NodeStatus:
    """The fleet's Nodes as their kubelets report them (see the module docstring)."""

    def __init__(self, state: FleetState, leases: Leases, *, nodes: int, vbios_version: str,
                 node_labels: Mapping[str, Mapping[str, str]] | None,
                 on_readiness: Callable[[SimNode, bool], None]) -> None:
        self._state = state
        self._leases = leases
        self._on_readiness = on_readiness
        #: the VBIOS a new GPU node reports
        self.vbios_version = vbios_version
        #: what the nodes report as their kubelet: the API server's own release (start())
        self.kubelet_version = ""
        #: digits of the numbered node names
        self.width = max(4, len(str(nodes)))
        self._extra_labels = {k: dict(v) for k, v in (node_labels or {}).items()}
        self._next_index = 1

    def new_node(self, name: str | None, labels: Mapping[str, str] | None, *,
                 gpu: bool) -> SimNode:
        """The record of a machine not registered yet (``register`` does)."""
        state = self._state
        with state.lock:
            index = self._next_index
            self._next_index += 1
            name = name or node_name(index, self.width)
            if name in state.nodes and not state.nodes[name].removed:
                raise ValueError(f"node {name} exists")
            major, minor, patch = ([*state.payload.version.split("-")[0].split("."), "0", "0"])[:3]
            node_labels = {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                FLEET_LABEL: state.fleet_id,
            }
            if gpu:
                node_labels.update({
                    GPU_NODE_LABEL: "true",
                    "metax-tech.com/gpu.product": "MXC500",
                    "metax-tech.com/gpu.family": "Xi",
                    "metax-tech.com/gpu.memory": "65536",
                    "metax-tech.com/gpu.sriov": "forbidden",
                    "metax-tech.com/gpu.driver.major": major,
                    "metax-tech.com/gpu.driver.minor": minor,
                    "metax-tech.com/gpu.driver.patch": patch,
                    "metax-tech.com/driver.ready": "false",
                    "metax-tech.com/maca.ready": "true",
                    RUNTIME_READY_LABEL: "true",
                    DRIVER_MODE_LABEL: "cloud",
                    VBIOS_VERSION_LABEL: self.vbios_version,
                })
            node_labels.update(self._extra_labels.get(name, {}))
            node_labels.update(labels or {})
            node = SimNode(name=name, index=index, labels=node_labels, gpu=gpu,
                           vbios=node_labels.get(VBIOS_VERSION_LABEL, ""))
            state.nodes[name] = node
            return node

    def register(self, node: SimNode) -> None:
        ready = self.should_be_ready(node)
        body = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node.name, "labels": node.labels},
            "spec": {},
            "status": self._status(node, ready),
        }
        try:
            created = self._state.call("POST", resource_path("v1", "nodes"), body)
        except Conflict:
            created = self._state.call("GET", resource_path("v1", "nodes", node.name))
        node.uid = str(created["metadata"]["uid"])
        node.reported_ready = ready
        # The TaintNodesByCondition admission plugin taints every new node not-ready; a ready
        # kubelet's node lifecycle lifts it (the node lifecycle controller is off here).
        self._set_not_ready_taint(node, created, present=not ready)
        if self._leases.seconds is not None:
            self._leases.create(node)

    def remove(self, name: str) -> None:
        """The machine leaves: its Node and the pods bound to it are deleted."""
        state = self._state
        with state.lock:
            node = state.nodes[name]
            node.removed = True
            pods = [p for p in state.pods.values() if p.node == name]
        state.call("DELETE", resource_path("v1", "nodes", name), ok_missing=True)
        for pod in pods:
            state.api.delete(resource_path("v1", "pods", pod.name, namespace=pod.namespace),
                             grace_period_seconds=0)

    def _status(self, node: SimNode, ready: bool) -> JSON:
        now = timestamp()
        gpus = "8" if node.gpu else "0"
        resources = {"cpu": "128", "memory": "1056000Mi", "pods": "110",
                     "ephemeral-storage": "1800Gi", GPU_RESOURCE: gpus, VFIO_GPU_RESOURCE: "0"}
        return {
            "capacity": resources,
            "allocatable": resources,
            "conditions": _conditions(ready, now),
            "addresses": [{"type": "InternalIP", "address": node_ip(node)},
                          {"type": "Hostname", "address": node.name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, node.name).hex,
                "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_URL, node.name)),
                "bootID": node.boot_id,
                "kernelVersion": "5.15.0-105-generic",
                "osImage": "Ubuntu 22.04.4 LTS",
                "containerRuntimeVersion": "containerd://1.7.12",
                "kubeletVersion": self.kubelet_version,
                # Deprecated (KEP 4004); kubelets of 1.31 and newer leave it out.
                **({"kubeProxyVersion": self.kubelet_version}
                   if release_minor(self.kubelet_version) < 31 else {}),
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    def _set_not_ready_taint(self, node: SimNode, current: JSON | None, *, present: bool) -> None:
        for _ in range(10):
            if current is None:
                current = self._state.call("GET", resource_path("v1", "nodes", node.name))
            before = (current.get("spec") or {}).get("taints") or []
            taints = [t for t in before if t.get("key") != NOT_READY_TAINT]
            if present:
                taints.append({"key": NOT_READY_TAINT, "effect": "NoSchedule",
                               "timeAdded": timestamp()})
            if [t.get("key") for t in before] == [t.get("key") for t in taints]:
                return
            try:
                # resourceVersion makes the list replacement safe against concurrent cordons.
                self._state.call(
                    "PATCH", resource_path("v1", "nodes", node.name),
                    {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                     "spec": {"taints": taints}},
                    content_type="application/merge-patch+json")
                return
            except Conflict:
                current = None
        raise RuntimeError(f"could not update the taints of {node.name}: too many conflicts")

    # -- readiness --------------------------------------------------------------------------

    def should_be_ready(self, node: SimNode) -> bool:
        if node.rebooting:
            return False
        for fault in node.faults:
            if fault.kind != FaultKind.NODE_NOT_READY:
                continue
            if fault.version is None:
                return False
            with self._state.lock:
                running = [p.version for p in self._state.pods.values()
                           if p.driver and p.node == node.name and not p.deleting]
            if any(fault.applies_to(v) for v in running):
                return False
        return True

    def submit_sync(self, name: str) -> None:
        """``sync`` on the node's worker (a fault set or cleared from outside)."""
        workers = self._state.workers
        if workers is not None:
            workers.submit(name, lambda: self.sync(name))

    def sync(self, name: str) -> None:
        """Reports the node's readiness if it changed."""
        node = self._state.nodes.get(name)
        if node is None or node.removed or not node.uid:
            return
        ready = self.should_be_ready(node)
        if ready == node.reported_ready:
            return
        self.report(node, ready)

    def report(self, node: SimNode, ready: bool, *, extra_status: JSON | None = None) -> None:
        status = {"conditions": _conditions(ready, timestamp()), **(extra_status or {})}
        self._state.call("PATCH", resource_path("v1", "nodes", node.name, subresource="status"),
                         {"status": status},
                         content_type="application/strategic-merge-patch+json")
        node.reported_ready = ready
        self._set_not_ready_taint(node, None, present=not ready)
        self._on_readiness(node, ready)

    def update_labels(self, node: SimNode, labels: Mapping[str, str]) -> None:
        changed = {k: v for k, v in labels.items() if node.labels.get(k) != v}
        if not changed or node.removed:
            return
        node.labels.update(changed)
        try:
            self._state.call("PATCH", resource_path("v1", "nodes", node.name),
                             {"metadata": {"labels": changed}},
                             content_type="application/merge-patch+json")
        except NotFound:
            node.removed = True


def _conditions(ready: bool, now: str) -> list[JSON]:
    pressure = [
        {"type": kind, "status": "False", "reason": f"KubeletHas{reason}",
         "message": message, "lastHeartbeatTime": now, "lastTransitionTime": now}
        for kind, reason, message in (
            ("MemoryPressure", "SufficientMemory", "kubelet has sufficient memory available"),
            ("DiskPressure", "NoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "SufficientPID", "kubelet has sufficient PID available"),
        )
    ]
    ready_condition = (
        {"type": "Ready", "status": "True", "reason": "KubeletReady",
         "message": "kubelet is posting ready status"}
        if ready else
        {"type": "Ready", "status": "False", "reason": "KubeletNotReady",
         "message": "container runtime status check may not have completed yet"}
    )
    return [*pressure, {**ready_condition, "lastHeartbeatTime": now, "lastTransitionTime": now}]
