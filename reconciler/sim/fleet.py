"""A simulated GPU fleet: registers GPU nodes and plays their kubelets (in the spirit of kwok),
plus the vendor operator's install and the driver-manager's firmware behaviour.

Event-driven: it watches nodes, bound pods and the ``ClusterOperator``; work for one node runs
in order on a keyed worker, different nodes in parallel; delays (driver install, reboots,
firmware flashing) are timers, never polling.

``Fleet`` is the facade over the parts it plays, each in a module of its own:

- ``node_status.py``: the kubelets' Nodes (registration, labels, readiness, the not-ready taint);
- ``leases.py``: their heartbeats (``lease_seconds``);
- ``pods.py``: the pods bound to the nodes, driver pods with their install time and faults
  (``workloads.py``: workload pods with ``workloads=True``);
- ``firmware_host.py``: the machines' firmware flashing and reboots;
- ``vendor_operator.py``: the vendor operator's install, finalizer and firmware policy;
- ``fleet_state.py``: what they share (the machine and pod records, the API with a kubelet's
  retries, the seeded RNG, the workers and timers); ``fleet_cleanup.py``: ``stop(cleanup=True)``.
"""

from __future__ import annotations

import functools
import random
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Generic, TypeVar, overload

from reconciler.kube.api import JSON, KubeApi, resource_path
from reconciler.kube.watch import ListWatch
from reconciler.names import (
    API_VERSION,
    GPU_RESOURCE,
    PLURAL,
    REBOOT_REQUESTED_ANNOTATION,
    REBOOTED_ANNOTATION,
)
from reconciler.policy.payload import Payload
from reconciler.sim.dispatch import KeyedWorkers, Timers
from reconciler.sim.faults import Fault, FaultKind
from reconciler.sim.firmware_host import DRIVER_MANAGER, EVENT_NAMESPACE, FirmwareHost
from reconciler.sim.fleet_cleanup import clean_away
from reconciler.sim.fleet_state import (
    FLEET_LABEL,
    WORKLOAD_NAMESPACE,
    Duration,
    FleetState,
    SimNode,
    SimPod,
    node_name,
)
from reconciler.sim.leases import LEASE_DURATION_INTERVALS, LEASE_NAMESPACE, Leases, lease_path
from reconciler.sim.node_status import NodeStatus
from reconciler.sim.operator_install import DEFAULT_PAYLOAD, server_version
from reconciler.sim.pods import DriverPodView, Pods, gpu_job, image_version
from reconciler.sim.vendor_operator import VendorOperator
from reconciler.sim.workloads import WorkloadPods

__all__ = [
    "DRIVER_MANAGER", "EVENT_NAMESPACE", "FLEET_LABEL", "LEASE_DURATION_INTERVALS",
    "LEASE_NAMESPACE", "MAX_WORKERS", "MIN_WORKERS", "WORKLOAD_NAMESPACE", "DriverPodView",
    "Duration", "Fleet", "SimNode", "SimPod", "default_workers", "image_version",
    "lease_path", "node_name",
]

T = TypeVar("T")
V = TypeVar("V")

#: the simulated kubelets' threads: 16, or one per 100 nodes once that is more, up to 64. At
#: 10,000 nodes a wave is 1,000 pods; each pod's writes wait on the API server (about 0.2 s a
#: DELETE there at that size), so 16 threads queued a wave's deletions and starts for 10-20 s
#: where real kubelets, one per node, do not queue at all
MIN_WORKERS = 16
MAX_WORKERS = 64


def default_workers(nodes: int) -> int:
    return max(MIN_WORKERS, min(MAX_WORKERS, nodes // 100))


class _Kept(Generic[V]):
    """A public attribute of ``Fleet`` kept by the part that uses it (read and written there)."""

    def __init__(self, part: str, name: str | None = None) -> None:
        self._part = part
        self._name = name or ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = self._name or name

    @overload
    def __get__(self, fleet: None, owner: type) -> _Kept[V]: ...
    @overload
    def __get__(self, fleet: Fleet, owner: type) -> V: ...
    def __get__(self, fleet: Fleet | None, owner: type) -> _Kept[V] | V:
        if fleet is None:
            return self
        value: V = getattr(getattr(fleet, self._part), self._name)
        return value

    def __set__(self, fleet: Fleet, value: V) -> None:
        setattr(getattr(fleet, self._part), self._name, value)


class Fleet:
    """``Fleet(api, nodes=10).start()`` ... ``stop()``. See the module docstring."""

    api: _Kept[KubeApi] = _Kept("_state")
    fleet_id: _Kept[str] = _Kept("_state")
    payload: _Kept[Payload] = _Kept("_state")
    rng: _Kept[random.Random] = _Kept("_state")
    #: API requests the kubelets sent
    requests: _Kept[int] = _Kept("_state")
    nodes: _Kept[dict[str, SimNode]] = _Kept("_state")
    pods: _Kept[dict[str, SimPod]] = _Kept("_state")
    workers: _Kept[KeyedWorkers | None] = _Kept("_state")
    timers: _Kept[Timers | None] = _Kept("_state")
    lease_seconds: _Kept[float | None] = _Kept("_leases", "seconds")
    #: Lease renewals sent (heartbeats; the creations not counted)
    lease_renewals: _Kept[int] = _Kept("_leases", "renewals")
    vbios_version: _Kept[str] = _Kept("_node_status")
    #: what the nodes report as their kubelet: the API server's own release (start())
    kubelet_version: _Kept[str] = _Kept("_node_status")
    install_seconds: _Kept[Duration] = _Kept("_pods")
    pull_seconds: _Kept[Duration] = _Kept("_pods")
    termination_seconds: _Kept[Duration] = _Kept("_pods")
    crash_seconds: _Kept[float] = _Kept("_pods")
    #: the kubelet's part for workload pods (``workloads=True``); None: they run at once
    #: and stop after ``termination_seconds``, the fleet's behaviour before workloads
    workloads: _Kept[WorkloadPods | None] = _Kept("_pods")
    firmware_seconds: _Kept[Duration] = _Kept("_firmware")
    reboot_seconds: _Kept[Duration] = _Kept("_firmware")
    firmware_version: _Kept[str | Callable[[str], str]] = _Kept("_firmware")
    should_install_operator: _Kept[bool] = _Kept("_operator", "install")

    def __init__(
        self,
        api: KubeApi,
        *,
        nodes: int = 10,
        faults: Iterable[Fault] = (),
        install_seconds: Duration = 1.0,
        pull_seconds: Duration = 0.0,
        termination_seconds: Duration = 0.0,
        crash_seconds: float = 2.0,
        payload: Payload = DEFAULT_PAYLOAD,
        install_operator: bool = True,
        firmware_seconds: Duration = 1.0,
        reboot_seconds: Duration = 2.0,
        vbios_version: str = "1.12.0.0",
        firmware_version: str | Callable[[str], str] = "1.13.0.0",
        node_labels: Mapping[str, Mapping[str, str]] | None = None,
        fleet_id: str = "default",
        workers: int | None = None,
        seed: int = 0,
        lease_seconds: float | None = None,
        workloads: bool = False,
    ) -> None:
        self._state = FleetState(api, fleet_id=fleet_id, payload=payload, seed=seed)
        self._leases = Leases(self._state, lease_seconds, seed=seed)
        self._node_status = NodeStatus(
            self._state, self._leases, nodes=nodes, vbios_version=vbios_version,
            node_labels=node_labels,
            on_readiness=lambda node, ready: self._pods.readiness_changed(node, ready))
        self._pods = Pods(self._state, self._node_status, install_seconds=install_seconds,
                          pull_seconds=pull_seconds, termination_seconds=termination_seconds,
                          crash_seconds=crash_seconds, workloads=workloads)
        self._firmware = FirmwareHost(self._state, self._node_status,
                                      firmware_seconds=firmware_seconds,
                                      reboot_seconds=reboot_seconds,
                                      firmware_version=firmware_version)
        self._operator = VendorOperator(self._state, self._firmware, install=install_operator)
        for _ in range(nodes):
            self._node_status.new_node(None, None, gpu=True)
        width = self._node_status.width
        for fault in faults:
            if fault.node not in self.nodes:
                raise ValueError(f"fault for unknown node {fault.node} (nodes are "
                                 f"{node_name(1, width)}..{node_name(nodes, width)})")
            self.nodes[fault.node].faults.append(fault)
        self._workers_count = workers if workers is not None else default_workers(nodes)
        self.node_watch: ListWatch | None = None
        self.pod_watch: ListWatch | None = None
        self.co_watch: ListWatch | None = None
        self._started = False

    # -- public API -------------------------------------------------------------------------

    def start(self, *, timeout: float = 600.0) -> Fleet:
        """Installs the operator objects (unless told not to), starts the watches and registers
        every node; returns once all nodes are registered and schedulable."""
        state = self._state
        workers = state.workers = KeyedWorkers(self._workers_count, name=f"fleet-{self.fleet_id}")
        state.timers = Timers(workers)
        # A kubelet runs the control plane's release (a newer one is not allowed to join).
        self.kubelet_version = server_version(self.api)
        state.ensure_namespace(WORKLOAD_NAMESPACE)
        if self.lease_seconds is not None:
            state.ensure_namespace(LEASE_NAMESPACE)  # the API server makes it, in its own time
        self.node_watch = ListWatch(
            self.api, resource_path("v1", "nodes"), on_event=self._on_node_event,
            query={"labelSelector": f"{FLEET_LABEL}={self.fleet_id}"}, name="fleet nodes",
        ).start()
        self.pod_watch = ListWatch(
            self.api, resource_path("v1", "pods"), on_event=self._on_pod_event,
            query={"fieldSelector": "spec.nodeName!="}, name="fleet pods",
        ).start()
        self.node_watch.wait_synced(30)
        self.pod_watch.wait_synced(30)
        self._operator.install_objects(daemonset=False)
        self.co_watch = ListWatch(
            self.api, resource_path(API_VERSION, PLURAL), on_event=self._operator.on_event,
            name="fleet clusteroperator",
        ).start()
        self._started = True
        with state.lock:
            pending = [n for n in self.nodes.values() if not n.uid]
        for node in pending:
            workers.submit(node.name, functools.partial(self._node_status.register, node))
        if not workers.wait_idle(timeout):
            raise TimeoutError(f"node registration not done after {timeout} s")
        # After the nodes, so the DaemonSet controller sees them all at once.
        self._operator.install_objects(daemonset=True)
        return self

    def stop(self, *, cleanup: bool = True, timeout: float = 60.0) -> None:
        """Stops the kubelet stand-in; with ``cleanup`` also deletes what the fleet created (its
        nodes and their pods, the driver DaemonSet, the ``cluster-operator`` object, workload
        pods and NodeNeedReboot events), so the next fleet starts from a clean cluster."""
        for watch in (self.co_watch, self.node_watch, self.pod_watch):
            if watch is not None:
                watch.stop()
        if self.timers is not None:
            self.timers.stop()
        if self.workers is not None:
            self.workers.stop()
        if cleanup and self._started:
            clean_away(self.api, fleet_id=self.fleet_id, nodes=set(self.nodes),
                       leases=self.lease_seconds is not None,
                       operator=self.should_install_operator, timeout=timeout)
        self._started = False

    def threads(self) -> list[threading.Thread]:
        """The fleet's threads that are still alive (none after ``stop()``)."""
        found: list[threading.Thread] = []
        for watch in (self.co_watch, self.node_watch, self.pod_watch):
            if watch is not None and watch._thread is not None:
                found.append(watch._thread)
        if self.timers is not None:
            found.append(self.timers.thread)
        if self.workers is not None:
            found.extend(self.workers.threads)
        return [t for t in found if t.is_alive()]

    @property
    def errors(self) -> list[str]:
        return list(self.workers.errors) if self.workers is not None else []

    @property
    def node_names(self) -> list[str]:
        with self._state.lock:
            return sorted(n.name for n in self.nodes.values() if not n.removed)

    def driver_pods(self) -> dict[str, DriverPodView]:
        """The live (not yet deleted) driver pod per node, from the fleet's own watch."""
        return self._pods.driver_views()

    def ready_driver_nodes(self, version: str | None = None) -> list[str]:
        """Nodes whose driver pod is Ready (on ``version`` when given)."""
        from reconciler.policy.payload import normalize_version

        wanted = normalize_version(version) if version else None
        return sorted(
            view.node for view in self.driver_pods().values()
            if view.ready and not view.deleting
            and (wanted is None or (view.version and normalize_version(view.version) == wanted))
        )

    def read_state(self, reader: Callable[[list[SimNode], list[SimPod]], T]) -> T:
        """``reader(nodes, pods)`` under the fleet's lock: a consistent view of every node and
        bound pod for observers such as the MX Exporter stand-in (they must not keep them)."""
        with self._state.lock:
            return reader(list(self.nodes.values()), list(self.pods.values()))

    def pod_view(self, node: str) -> DriverPodView | None:
        return self.driver_pods().get(node)

    def vbios(self, node: str) -> str:
        return self.nodes[node].vbios

    def boot_id(self, node: str) -> str:
        return self.nodes[node].boot_id

    def pending_firmware(self, node: str) -> str | None:
        return self.nodes[node].pending_firmware

    def add_node(self, name: str | None = None, *, labels: Mapping[str, str] | None = None,
                 gpu: bool = True) -> str:
        """Registers one more node (a GPU node unless ``gpu=False``); returns its name."""
        if self.workers is None:
            raise RuntimeError("start() the fleet before adding nodes")
        node = self._node_status.new_node(name, labels, gpu=gpu)
        done = threading.Event()
        failure: list[BaseException] = []

        def register() -> None:
            try:
                self._node_status.register(node)
            except BaseException as exc:
                failure.append(exc)
            finally:
                done.set()

        self.workers.submit(node.name, register)
        if not done.wait(60):
            raise TimeoutError(f"node {node.name} not registered after 60 s")
        if failure:
            raise RuntimeError(f"node {node.name} could not be registered: {failure[0]}")
        return node.name

    def remove_node(self, name: str) -> None:
        """The machine leaves: its Node and the pods bound to it are deleted."""
        self._node_status.remove(name)

    def set_fault(self, node: str, kind: FaultKind | str, version: str | None = None) -> None:
        """Adds a fault. Pod faults apply to the node's next driver pod; ``node-notready``
        applies at once."""
        fault = Fault(node, FaultKind(kind), version)
        with self._state.lock:
            self.nodes[node].faults.append(fault)
        self._node_status.submit_sync(node)

    def clear_faults(self, node: str, kind: FaultKind | str | None = None) -> None:
        with self._state.lock:
            record = self.nodes[node]
            record.faults = [
                f for f in record.faults if kind is not None and f.kind != FaultKind(kind)
            ]
        self._node_status.submit_sync(node)

    def add_workload(self, node: str, *, gpus: int = 8, name: str | None = None,
                     resource: str = GPU_RESOURCE) -> str:
        """Starts a GPU job pod on ``node`` (bound directly, as a scheduler would); returns its
        name (namespace ``gpu-workloads``)."""
        pod_name = name or f"gpu-job-{node}-{uuid.uuid4().hex[:6]}"
        self.api.create(resource_path("v1", "pods", namespace=WORKLOAD_NAMESPACE),
                        gpu_job(node, gpus=gpus, name=pod_name, resource=resource))
        return pod_name

    def remove_workload(self, name: str, *, namespace: str = WORKLOAD_NAMESPACE) -> None:
        """Deletes a GPU job pod gracefully (the kubelet stand-in completes the deletion)."""
        self.api.delete(resource_path("v1", "pods", name, namespace=namespace))

    def reboot(self, node: str) -> str:
        """A person reboots the machine; returns the token recorded when it is back."""
        token = f"manual-{uuid.uuid4().hex[:8]}"
        self._firmware.reboot(node, token)
        return token

    # -- watches ----------------------------------------------------------------------------

    def _on_node_event(self, event_type: str, obj: JSON) -> None:
        name = str(obj["metadata"]["name"])
        if name not in self.nodes or self.workers is None:
            return
        if event_type == "DELETED":
            with self._state.lock:
                self.nodes[name].removed = True
            return
        annotations = obj["metadata"].get("annotations") or {}
        token = annotations.get(REBOOT_REQUESTED_ANNOTATION)
        if token and token != annotations.get(REBOOTED_ANNOTATION):
            self._firmware.reboot(name, str(token))

    def _on_pod_event(self, event_type: str, obj: JSON) -> None:
        node = (obj.get("spec") or {}).get("nodeName")
        if node not in self.nodes or self.workers is None:
            return
        self.workers.submit(str(node), lambda: self._pods.on_event(event_type, obj))
