"""A simulated GPU fleet: registers GPU nodes and plays their kubelets (in the spirit of kwok),
plus the vendor operator's install and the driver-manager's firmware behaviour.

Event-driven: it watches nodes, bound pods and the ``ClusterOperator``; work for one node runs
in order on a keyed worker, different nodes in parallel; delays (driver install, reboots,
firmware flashing) are timers, never polling.

What the kubelet stand-in does with a pod bound to one of its nodes:

- driver pod (owned by the ``metax-driver`` DaemonSet): Running (not Ready) after
  ``pull_seconds``, Ready after an install time drawn from ``install_seconds``; faults for the
  pod's driver version change that (image pull failure, crash loop, never Ready, node NotReady);
- any other pod (GPU workloads included): Running and Ready at once;
- a pod being deleted: the deletion completes after ``termination_seconds``;
- with ``workloads=True``, pods outside the operator's namespace are played as real workloads
  instead (reconciler/sim/workloads.py): their grace period, Jobs that complete.

Firmware: when ``spec.driver.fwUpgradePolicy`` becomes ``PreferCloud``, each GPU node whose
VBIOS differs from the payload's firmware records it as pending after ``firmware_seconds`` and
emits a ``NodeNeedReboot`` Event on the Node. A reboot (``reboot(node)``, or the node annotation
``gpu.metax-tech.com/reboot-requested=<token>``) makes the node NotReady for
``reboot_seconds``; it comes back with a new boot ID, the pending VBIOS version in its label and
``gpu.metax-tech.com/rebooted=<token>``.

Heartbeats (``lease_seconds``): like a kubelet with node leases, each node's Lease in
``kube-node-lease`` is renewed every ``lease_seconds`` (the fleet's renewals spread evenly over
the interval), none while the machine reboots; the Node's status is written only when its
readiness changes, never as a heartbeat. Without ``lease_seconds`` there is no Lease and no
heartbeat at all (the node lifecycle controller, which would read them, is off in the dev
cluster).

Deleting the ``cluster-operator`` object: like the vendor operator, the fleet removes its
finalizer (``gpu.metax-tech.com``) once the object is being deleted, so the deletion completes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from reconciler.kube.api import JSON, Conflict, KubeApi, KubeError, NotFound, resource_path
from reconciler.kube.watch import ListWatch
from reconciler.names import (
    API_VERSION,
    CLUSTER_OPERATOR_NAME,
    DRIVER_DAEMONSET,
    GPU_NODE_LABEL,
    GPU_RESOURCE,
    NODE_NEED_REBOOT_MESSAGE,
    NODE_NEED_REBOOT_REASON,
    NOT_READY_TAINT,
    OPERATOR_NAMESPACE,
    PLURAL,
    REBOOT_REQUESTED_ANNOTATION,
    REBOOTED_ANNOTATION,
    REVISION_HASH_LABEL,
    VBIOS_VERSION_LABEL,
    VFIO_GPU_RESOURCE,
)
from reconciler.policy.payload import Payload
from reconciler.sim.dispatch import KeyedWorkers, Timers
from reconciler.sim.faults import Fault, FaultKind
from reconciler.sim.operator_install import (
    DEFAULT_PAYLOAD,
    DRIVER_MODE_LABEL,
    FINALIZER,
    RUNTIME_READY_LABEL,
    install_operator,
    release_finalizer,
    release_minor,
    server_version,
)
from reconciler.sim.workloads import WorkloadPods

log = logging.getLogger(__name__)

FLEET_LABEL = "sim.metax-tech.com/fleet"
LEASE_NAMESPACE = "kube-node-lease"
#: a kubelet's lease lasts four renewal intervals (40 s renewed every 10 s by default)
LEASE_DURATION_INTERVALS = 4
WORKLOAD_NAMESPACE = "gpu-workloads"
EVENT_NAMESPACE = "default"
DRIVER_MANAGER = "driver-manager"

T = TypeVar("T")

# A duration: fixed seconds, a uniform (low, high) range, or a function of a seeded RNG.
Duration = float | tuple[float, float] | Callable[[random.Random], float]


def draw(duration: Duration, rng: random.Random) -> float:
    if callable(duration):
        return max(0.0, float(duration(rng)))
    if isinstance(duration, tuple):
        low, high = duration
        return rng.uniform(low, high)
    return float(duration)


#: the simulated kubelets' threads: 16, or one per 100 nodes once that is more, up to 64. At
#: 10,000 nodes a wave is 1,000 pods; each pod's writes wait on the API server (about 0.2 s a
#: DELETE there at that size), so 16 threads queued a wave's deletions and starts for 10-20 s
#: where real kubelets, one per node, do not queue at all
MIN_WORKERS = 16
MAX_WORKERS = 64


def default_workers(nodes: int) -> int:
    return max(MIN_WORKERS, min(MAX_WORKERS, nodes // 100))


def node_name(index: int, width: int = 4) -> str:
    """``node-0001``: at least four digits, like ``reconciler simulate``."""
    return f"node-{index:0{width}d}"


def image_version(image: str) -> str | None:
    """The tag of ``registry/name:tag`` (None without one)."""
    last = image.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def _gpu_limit(container: JSON) -> int:
    limit = ((container.get("resources") or {}).get("limits") or {}).get(GPU_RESOURCE, 0)
    try:
        return max(0, int(limit))
    except (TypeError, ValueError):
        return 0


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    """A Lease's ``renewTime`` (MicroTime)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_path(node: str) -> str:
    return resource_path("coordination.k8s.io/v1", "leases", node, namespace=LEASE_NAMESPACE)


@dataclass
class SimNode:
    name: str
    index: int
    labels: dict[str, str]
    gpu: bool
    uid: str = ""
    boot_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    vbios: str = ""
    pending_firmware: str | None = None
    rebooting: bool = False
    reboot_token: str | None = None
    reported_ready: bool | None = None  # what the API server was last told
    faults: list[Fault] = field(default_factory=list)
    removed: bool = False


@dataclass
class SimPod:
    uid: str
    namespace: str
    name: str
    node: str
    driver: bool
    version: str | None
    revision: str | None
    containers: list[str]
    images: dict[str, str]
    created: str
    generation: int = 0  # bumped to cancel pending timers
    started: bool = False
    ready: bool = False
    restarts: int = 0
    deleting: bool = False
    waiting_reason: str | None = None
    gpu_requests: dict[str, int] = field(default_factory=dict)  # container -> GPUs it asked for
    run_seconds: float | None = None  # a workload that exits 0 this long after it starts
    finished: bool = False  # its containers exited (phase Succeeded)
    stops_at: float | None = None  # a terminating workload's end of grace (monotonic)


@dataclass(frozen=True, slots=True)
class DriverPodView:
    """What a test sees of a node's driver pod."""

    name: str
    node: str
    version: str | None
    revision: str | None
    ready: bool
    waiting_reason: str | None
    restarts: int
    deleting: bool


class Fleet:
    """``Fleet(api, nodes=10).start()`` ... ``stop()``. See the module docstring."""

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
        self.api = api
        #: the kubelet's part for workload pods (``workloads=True``); None: they run at once
        #: and stop after ``termination_seconds``, the fleet's behaviour before workloads
        self.workloads = WorkloadPods(self) if workloads else None
        self.payload = payload
        self.install_seconds = install_seconds
        self.pull_seconds = pull_seconds
        self.termination_seconds = termination_seconds
        self.crash_seconds = crash_seconds
        self.firmware_seconds = firmware_seconds
        self.reboot_seconds = reboot_seconds
        self.vbios_version = vbios_version
        self.firmware_version = firmware_version
        self.fleet_id = fleet_id
        self.should_install_operator = install_operator
        self.rng = random.Random(seed)
        self.lease_seconds = lease_seconds
        self._lease_rng = random.Random(f"{seed}-leases")  # the install draws stay as they were
        #: Lease renewals sent (heartbeats; the creations not counted)
        self.lease_renewals = 0
        self.requests = 0
        self._lock = threading.RLock()
        self._width = max(4, len(str(nodes)))
        self.nodes: dict[str, SimNode] = {}
        self.pods: dict[str, SimPod] = {}
        #: node -> its pods by uid (a pod event must not scan the whole fleet's pods)
        self._on_node: dict[str, dict[str, SimPod]] = {}
        self._extra_labels = {k: dict(v) for k, v in (node_labels or {}).items()}
        self._next_index = 1
        for _ in range(nodes):
            self._new_node_record(None, None, gpu=True)
        for fault in faults:
            if fault.node not in self.nodes:
                raise ValueError(f"fault for unknown node {fault.node} (nodes are "
                                 f"{node_name(1, self._width)}..{node_name(nodes, self._width)})")
            self.nodes[fault.node].faults.append(fault)
        self._workers_count = workers if workers is not None else default_workers(nodes)
        self.workers: KeyedWorkers | None = None
        self.timers: Timers | None = None
        self.node_watch: ListWatch | None = None
        self.pod_watch: ListWatch | None = None
        self.co_watch: ListWatch | None = None
        self._firmware_epoch = 0
        self._firmware_active = False
        self._started = False
        #: what the nodes report as their kubelet: the API server's own release (start())
        self.kubelet_version = ""

    # -- public API -------------------------------------------------------------------------

    def start(self, *, timeout: float = 600.0) -> Fleet:
        """Installs the operator objects (unless told not to), starts the watches and registers
        every node; returns once all nodes are registered and schedulable."""
        self.workers = KeyedWorkers(self._workers_count, name=f"fleet-{self.fleet_id}")
        self.timers = Timers(self.workers)
        # A kubelet runs the control plane's release (a newer one is not allowed to join).
        self.kubelet_version = server_version(self.api)
        self._ensure_namespace(WORKLOAD_NAMESPACE)
        if self.lease_seconds is not None:
            self._ensure_namespace(LEASE_NAMESPACE)  # the API server makes it, in its own time
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
        if self.should_install_operator:
            install_operator(self.api, self.payload, daemonset=False)
        self.co_watch = ListWatch(
            self.api, resource_path(API_VERSION, PLURAL), on_event=self._on_co_event,
            name="fleet clusteroperator",
        ).start()
        self._started = True
        with self._lock:
            pending = [n for n in self.nodes.values() if not n.uid]
        for node in pending:
            self.workers.submit(node.name, functools.partial(self._register, node))
        if not self.workers.wait_idle(timeout):
            raise TimeoutError(f"node registration not done after {timeout} s")
        if self.should_install_operator:
            # After the nodes, so the DaemonSet controller sees them all at once.
            install_operator(self.api, self.payload)
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
            self._cleanup(timeout)
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
        with self._lock:
            return sorted(n.name for n in self.nodes.values() if not n.removed)

    def driver_pods(self) -> dict[str, DriverPodView]:
        """The live (not yet deleted) driver pod per node, from the fleet's own watch."""
        views: dict[str, DriverPodView] = {}
        with self._lock:
            for pod in self.pods.values():
                if pod.driver:
                    view = DriverPodView(pod.name, pod.node, pod.version, pod.revision, pod.ready,
                                         pod.waiting_reason, pod.restarts, pod.deleting)
                    if pod.node not in views or views[pod.node].deleting:
                        views[pod.node] = view
        return views

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
        with self._lock:
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
        node = self._new_node_record(name, labels, gpu=gpu)
        done = threading.Event()
        failure: list[BaseException] = []

        def register() -> None:
            try:
                self._register(node)
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
        with self._lock:
            node = self.nodes[name]
            node.removed = True
            pods = [p for p in self.pods.values() if p.node == name]
        self._call("DELETE", resource_path("v1", "nodes", name), ok_missing=True)
        for pod in pods:
            self.api.delete(resource_path("v1", "pods", pod.name, namespace=pod.namespace),
                            grace_period_seconds=0)

    def set_fault(self, node: str, kind: FaultKind | str, version: str | None = None) -> None:
        """Adds a fault. Pod faults apply to the node's next driver pod; ``node-notready``
        applies at once."""
        fault = Fault(node, FaultKind(kind), version)
        with self._lock:
            self.nodes[node].faults.append(fault)
        self._submit_node_sync(node)

    def clear_faults(self, node: str, kind: FaultKind | str | None = None) -> None:
        with self._lock:
            record = self.nodes[node]
            record.faults = [
                f for f in record.faults if kind is not None and f.kind != FaultKind(kind)
            ]
        self._submit_node_sync(node)

    def add_workload(self, node: str, *, gpus: int = 8, name: str | None = None,
                     resource: str = GPU_RESOURCE) -> str:
        """Starts a GPU job pod on ``node`` (bound directly, as a scheduler would); returns its
        name (namespace ``gpu-workloads``)."""
        pod_name = name or f"gpu-job-{node}-{uuid.uuid4().hex[:6]}"
        body = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name, "namespace": WORKLOAD_NAMESPACE,
                         "labels": {"app": "gpu-job"}},
            "spec": {
                "nodeName": node,
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 5,
                "containers": [{
                    "name": "train", "image": "registry.local/train:1",
                    "resources": {"limits": {resource: str(gpus)},
                                  "requests": {resource: str(gpus)}},
                }],
            },
        }
        self.api.create(resource_path("v1", "pods", namespace=WORKLOAD_NAMESPACE), body)
        return pod_name

    def remove_workload(self, name: str, *, namespace: str = WORKLOAD_NAMESPACE) -> None:
        """Deletes a GPU job pod gracefully (the kubelet stand-in completes the deletion)."""
        self.api.delete(resource_path("v1", "pods", name, namespace=namespace))

    def reboot(self, node: str) -> str:
        """A person reboots the machine; returns the token recorded when it is back."""
        token = f"manual-{uuid.uuid4().hex[:8]}"
        assert self.workers is not None
        self.workers.submit(node, lambda: self._begin_reboot(node, token))
        return token

    # -- registration -----------------------------------------------------------------------

    def _new_node_record(self, name: str | None, labels: Mapping[str, str] | None, *,
                         gpu: bool) -> SimNode:
        with self._lock:
            index = self._next_index
            self._next_index += 1
            name = name or node_name(index, self._width)
            if name in self.nodes and not self.nodes[name].removed:
                raise ValueError(f"node {name} exists")
            major, minor, patch = ([*self.payload.version.split("-")[0].split("."), "0", "0"])[:3]
            node_labels = {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                FLEET_LABEL: self.fleet_id,
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
            self.nodes[name] = node
            return node

    def _node_ip(self, node: SimNode) -> str:
        i = node.index
        return f"10.{128 + (i >> 16) % 64}.{(i >> 8) & 255}.{i & 255}"

    def _node_status(self, node: SimNode, ready: bool) -> JSON:
        now = _now()
        gpus = "8" if node.gpu else "0"
        resources = {"cpu": "128", "memory": "1056000Mi", "pods": "110",
                     "ephemeral-storage": "1800Gi", GPU_RESOURCE: gpus, VFIO_GPU_RESOURCE: "0"}
        return {
            "capacity": resources,
            "allocatable": resources,
            "conditions": self._conditions(ready, now),
            "addresses": [{"type": "InternalIP", "address": self._node_ip(node)},
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

    @staticmethod
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

    def _register(self, node: SimNode) -> None:
        ready = self._should_be_ready(node)
        body = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node.name, "labels": node.labels},
            "spec": {},
            "status": self._node_status(node, ready),
        }
        try:
            created = self._call("POST", resource_path("v1", "nodes"), body)
        except Conflict:
            created = self._call("GET", resource_path("v1", "nodes", node.name))
        node.uid = str(created["metadata"]["uid"])
        node.reported_ready = ready
        # The TaintNodesByCondition admission plugin taints every new node not-ready; a ready
        # kubelet's node lifecycle lifts it (the node lifecycle controller is off here).
        self._set_not_ready_taint(node, created, present=not ready)
        if self.lease_seconds is not None:
            self._create_lease(node)

    # -- heartbeats -------------------------------------------------------------------------

    def _create_lease(self, node: SimNode) -> None:
        assert self.lease_seconds is not None and self.timers is not None
        spec = {"holderIdentity": node.name, "renewTime": _micro_now(),
                "leaseDurationSeconds": max(1, round(LEASE_DURATION_INTERVALS
                                                     * self.lease_seconds))}
        owners = [{"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node.uid}]
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": node.name, "namespace": LEASE_NAMESPACE,
                             "labels": {FLEET_LABEL: self.fleet_id}, "ownerReferences": owners},
                "spec": spec}
        try:
            self._call("POST", resource_path("coordination.k8s.io/v1", "leases",
                                             namespace=LEASE_NAMESPACE), body)
        except Conflict:  # a node of that name before (its Node's garbage not collected yet)
            self._call("PATCH", lease_path(node.name),
                       {"metadata": {"ownerReferences": owners}, "spec": spec},
                       content_type="application/merge-patch+json")
        # the first renewal at a random point of the interval: the fleet's heartbeats spread
        self.timers.call_later(self._lease_rng.uniform(0, self.lease_seconds), node.name,
                               functools.partial(self._renew_lease, node))

    def _renew_lease(self, node: SimNode) -> None:
        """One heartbeat (the kubelet's lease renewal), then the next one an interval later."""
        if node.removed or self.timers is None or self.lease_seconds is None:
            return
        if not node.rebooting:  # no kubelet runs while the machine boots
            try:
                self._call("PATCH", lease_path(node.name), {"spec": {"renewTime": _micro_now()}},
                           content_type="application/merge-patch+json")
                self.lease_renewals += 1
            except NotFound:
                if not node.removed:
                    self._create_lease(node)  # deleted by someone: the kubelet makes it again
                return
        self.timers.call_later(self.lease_seconds, node.name,
                               functools.partial(self._renew_lease, node))

    def _set_not_ready_taint(self, node: SimNode, current: JSON | None, *, present: bool) -> None:
        for _ in range(10):
            if current is None:
                current = self._call("GET", resource_path("v1", "nodes", node.name))
            before = (current.get("spec") or {}).get("taints") or []
            taints = [t for t in before if t.get("key") != NOT_READY_TAINT]
            if present:
                taints.append({"key": NOT_READY_TAINT, "effect": "NoSchedule", "timeAdded": _now()})
            if [t.get("key") for t in before] == [t.get("key") for t in taints]:
                return
            try:
                # resourceVersion makes the list replacement safe against concurrent cordons.
                self._call("PATCH", resource_path("v1", "nodes", node.name),
                           {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                            "spec": {"taints": taints}},
                           content_type="application/merge-patch+json")
                return
            except Conflict:
                current = None
        raise RuntimeError(f"could not update the taints of {node.name}: too many conflicts")

    # -- node readiness ---------------------------------------------------------------------

    def _should_be_ready(self, node: SimNode) -> bool:
        if node.rebooting:
            return False
        for fault in node.faults:
            if fault.kind != FaultKind.NODE_NOT_READY:
                continue
            if fault.version is None:
                return False
            with self._lock:
                running = [p.version for p in self.pods.values()
                           if p.driver and p.node == node.name and not p.deleting]
            if any(fault.applies_to(v) for v in running):
                return False
        return True

    def _submit_node_sync(self, name: str) -> None:
        if self.workers is not None:
            self.workers.submit(name, lambda: self._sync_node_ready(name))

    def _sync_node_ready(self, name: str) -> None:
        node = self.nodes.get(name)
        if node is None or node.removed or not node.uid:
            return
        ready = self._should_be_ready(node)
        if ready == node.reported_ready:
            return
        self._report_node(node, ready)

    def _report_node(self, node: SimNode, ready: bool, *, extra_status: JSON | None = None) -> None:
        status = {"conditions": self._conditions(ready, _now()), **(extra_status or {})}
        self._call("PATCH", resource_path("v1", "nodes", node.name, subresource="status"),
                   {"status": status}, content_type="application/strategic-merge-patch+json")
        node.reported_ready = ready
        self._set_not_ready_taint(node, None, present=not ready)
        if not ready:
            # What the node lifecycle controller (off here) and a stopped kubelet amount to:
            # the node's pods stop being Ready and start over when it is back.
            with self._lock:
                pods = [p for p in self.pods.values() if p.node == node.name and not p.deleting]
            for pod in pods:
                pod.generation += 1
                pod.started = False
                if pod.ready:
                    self._write_pod_status(pod, phase="Running", ready=False)
        else:
            # Pods that were waiting for the kubelet start now.
            with self._lock:
                waiting = [p for p in self.pods.values()
                           if p.node == node.name and not p.started and not p.deleting]
            for pod in waiting:
                self._start_pod(pod)

    # -- watches ----------------------------------------------------------------------------

    def _on_node_event(self, event_type: str, obj: JSON) -> None:
        name = str(obj["metadata"]["name"])
        if name not in self.nodes or self.workers is None:
            return
        if event_type == "DELETED":
            with self._lock:
                self.nodes[name].removed = True
            return
        annotations = obj["metadata"].get("annotations") or {}
        token = annotations.get(REBOOT_REQUESTED_ANNOTATION)
        if token and token != annotations.get(REBOOTED_ANNOTATION):
            self.workers.submit(name, lambda: self._begin_reboot(name, str(token)))

    def _on_pod_event(self, event_type: str, obj: JSON) -> None:
        node = (obj.get("spec") or {}).get("nodeName")
        if node not in self.nodes or self.workers is None:
            return
        self.workers.submit(str(node), lambda: self._sync_pod(event_type, obj))

    def _on_co_event(self, event_type: str, obj: JSON) -> None:
        if obj["metadata"].get("name") != CLUSTER_OPERATOR_NAME or self.workers is None:
            return
        meta = obj["metadata"]
        if (event_type != "DELETED" and meta.get("deletionTimestamp") is not None
                and FINALIZER in (meta.get("finalizers") or [])):
            # the vendor operator's cleanup is done at once: nothing of its own to remove here
            self.workers.submit(CLUSTER_OPERATOR_NAME, self._release_finalizer)
        driver = ((obj.get("spec") or {}).get("driver") or {}) if event_type != "DELETED" else {}
        active = driver.get("fwUpgradePolicy") == "PreferCloud"
        version = str((driver.get("payload") or {}).get("version") or self.payload.version)
        with self._lock:
            if active == self._firmware_active:
                return
            self._firmware_active = active
            self._firmware_epoch += 1
            epoch = self._firmware_epoch
            nodes = [n for n in self.nodes.values() if n.gpu and not n.removed]
        if not active:
            return
        target = (self.firmware_version(version) if callable(self.firmware_version)
                  else self.firmware_version)
        assert self.timers is not None
        for node in nodes:
            delay = draw(self.firmware_seconds, self.rng)
            self.timers.call_later(
                delay, node.name, functools.partial(self._flash_firmware, node, target, epoch)
            )

    def _release_finalizer(self) -> None:
        release_finalizer(self.api)

    # -- pods -------------------------------------------------------------------------------

    def _sync_pod(self, event_type: str, obj: JSON) -> None:
        meta = obj["metadata"]
        uid = str(meta["uid"])
        with self._lock:
            pod = self.pods.get(uid)
        if event_type == "DELETED":
            if pod is not None:
                with self._lock:
                    self.pods.pop(uid, None)
                    self._on_node.get(pod.node, {}).pop(uid, None)
                if pod.driver:
                    self._driver_gone(pod)
            return
        if pod is None:
            pod = self._new_pod(obj)
            if self.workloads is not None:
                self.workloads.admit(pod, obj)
            with self._lock:
                self.pods[uid] = pod
                self._on_node.setdefault(pod.node, {})[uid] = pod
            if meta.get("deletionTimestamp") is None:
                node = self.nodes[pod.node]
                if node.reported_ready and not node.rebooting:
                    self._start_pod(pod)
        if meta.get("deletionTimestamp") is None:
            return
        if self.workloads is not None and self.workloads.plays(pod):
            self.workloads.stop(pod, meta)
        elif not pod.deleting:
            pod.deleting = True
            pod.generation += 1
            delay = draw(self.termination_seconds, self.rng)
            assert self.timers is not None
            self.timers.call_later(delay, pod.node, lambda: self._finish_deletion(pod))

    def _new_pod(self, obj: JSON) -> SimPod:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        owners = meta.get("ownerReferences") or []
        driver = meta.get("namespace") == OPERATOR_NAMESPACE and any(
            o.get("kind") == "DaemonSet" and o.get("name") == DRIVER_DAEMONSET for o in owners
        )
        containers = spec.get("containers") or []
        images = {str(c["name"]): str(c.get("image") or "") for c in containers}
        first_image = next(iter(images.values()), "")
        return SimPod(
            uid=str(meta["uid"]), namespace=str(meta["namespace"]), name=str(meta["name"]),
            node=str(spec["nodeName"]), driver=driver,
            version=image_version(first_image) if driver else None,
            revision=(meta.get("labels") or {}).get(REVISION_HASH_LABEL),
            containers=list(images), images=images,
            created=str(meta.get("creationTimestamp") or _now()),
            gpu_requests={str(c["name"]): _gpu_limit(c) for c in containers if _gpu_limit(c)},
        )

    def _pod_faults(self, pod: SimPod) -> set[FaultKind]:
        node = self.nodes[pod.node]
        return {f.kind for f in node.faults if f.applies_to(pod.version)}

    def _start_pod(self, pod: SimPod) -> None:
        pod.started = True
        pod.generation += 1
        generation = pod.generation
        assert self.timers is not None
        if self.workloads is not None and self.workloads.plays(pod):
            self.workloads.start(pod, generation)
            return
        if not pod.driver:
            self._write_pod_status(pod, phase="Running", ready=True)
            return
        faults = self._pod_faults(pod)
        pull = draw(self.pull_seconds, self.rng)
        if FaultKind.IMAGE_PULL in faults:
            self.timers.call_later(pull, pod.node,
                                   lambda: self._image_pull_failure(pod, generation, 0))
            return
        self.timers.call_later(pull, pod.node, lambda: self._container_started(pod, generation))

    def _alive(self, pod: SimPod, generation: int) -> bool:
        return pod.generation == generation and not pod.deleting and pod.uid in self.pods

    def _image_pull_failure(self, pod: SimPod, generation: int, attempt: int) -> None:
        if not self._alive(pod, generation):
            return
        reason = "ErrImagePull" if attempt % 2 == 0 else "ImagePullBackOff"
        image = next(iter(pod.images.values()), "")
        message = (f'rpc error: code = NotFound desc = failed to pull and unpack image "{image}": '
                   "not found") if reason == "ErrImagePull" else f'Back-off pulling image "{image}"'
        self._write_pod_status(pod, phase="Pending", ready=False, waiting=(reason, message))
        delay = min(self.crash_seconds * (2 ** (attempt // 2)), 300.0)
        assert self.timers is not None
        self.timers.call_later(delay, pod.node,
                               lambda: self._image_pull_failure(pod, generation, attempt + 1))

    def _container_started(self, pod: SimPod, generation: int) -> None:
        if not self._alive(pod, generation):
            return
        self._write_pod_status(pod, phase="Running", ready=False)
        faults = self._pod_faults(pod)
        self._sync_node_ready(pod.node)  # a driver that breaks the node
        assert self.timers is not None
        if FaultKind.CRASH_LOOP in faults:
            self.timers.call_later(self.crash_seconds, pod.node,
                                   lambda: self._crash(pod, generation))
        elif FaultKind.NEVER_READY in faults or FaultKind.NODE_NOT_READY in faults:
            return
        else:
            delay = draw(self.install_seconds, self.rng)
            self.timers.call_later(delay, pod.node, lambda: self._driver_ready(pod, generation))

    def _crash(self, pod: SimPod, generation: int) -> None:
        if not self._alive(pod, generation):
            return
        pod.restarts += 1
        message = (f"back-off {min(10 * 2 ** (pod.restarts - 1), 300)}s restarting failed "
                   f"container={pod.containers[0] if pod.containers else 'driver'} pod={pod.name}")
        self._write_pod_status(pod, phase="Running", ready=False,
                               waiting=("CrashLoopBackOff", message), crashed=True)
        delay = min(self.crash_seconds * (2 ** min(pod.restarts, 8)), 300.0)
        assert self.timers is not None
        self.timers.call_later(delay, pod.node, lambda: self._crash(pod, generation))

    def _driver_ready(self, pod: SimPod, generation: int) -> None:
        if not self._alive(pod, generation):
            return
        # The node's labels first (as the vendor's labeller would), so that whoever sees the pod
        # Ready also sees the node labelled.
        node = self.nodes[pod.node]
        labels: dict[str, str] = {"metax-tech.com/driver.ready": "true"}
        if pod.version:
            parts = ([*pod.version.split("-")[0].split("."), "0", "0"])[:3]
            labels.update(zip(("metax-tech.com/gpu.driver.major", "metax-tech.com/gpu.driver.minor",
                               "metax-tech.com/gpu.driver.patch"), parts, strict=True))
        self._update_labels(node, labels)
        self._write_pod_status(pod, phase="Running", ready=True)

    def _driver_gone(self, pod: SimPod) -> None:
        node = self.nodes.get(pod.node)
        if node is None or node.removed:
            return
        with self._lock:
            others = any(p.driver and p.ready for p in self._on_node.get(pod.node, {}).values())
        if not others:
            self._update_labels(node, {"metax-tech.com/driver.ready": "false"})
        self._sync_node_ready(pod.node)

    def _update_labels(self, node: SimNode, labels: Mapping[str, str]) -> None:
        changed = {k: v for k, v in labels.items() if node.labels.get(k) != v}
        if not changed or node.removed:
            return
        node.labels.update(changed)
        try:
            self._call("PATCH", resource_path("v1", "nodes", node.name),
                       {"metadata": {"labels": changed}},
                       content_type="application/merge-patch+json")
        except NotFound:
            node.removed = True

    def _finish_deletion(self, pod: SimPod) -> None:
        # through _call: a kubelet's final deletion outlives an API server restart too; a
        # Conflict is a newer pod of the same name, not ours to finish
        with contextlib.suppress(Conflict):
            self._call("DELETE", resource_path("v1", "pods", pod.name, namespace=pod.namespace),
                       {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                        "preconditions": {"uid": pod.uid}}, ok_missing=True)

    def _write_pod_status(self, pod: SimPod, *, phase: str, ready: bool,
                          waiting: tuple[str, str] | None = None, crashed: bool = False,
                          exited: bool = False) -> None:
        """``exited``: the containers ended with exit code 0 (phase Succeeded)."""
        now = _now()
        pod.ready = ready
        pod.waiting_reason = waiting[0] if waiting else None
        ip = self._node_ip(self.nodes[pod.node])
        statuses = []
        for name in pod.containers:
            status: JSON = {
                "name": name, "image": pod.images[name],
                "imageID": "" if phase == "Pending" else f"{pod.images[name]}@sha256:{'0' * 64}",
                "ready": ready, "restartCount": pod.restarts,
                "started": phase == "Running" and waiting is None,
            }
            if waiting is not None:
                status["state"] = {"waiting": {"reason": waiting[0], "message": waiting[1]}}
            elif exited:
                status["state"] = {"terminated": {
                    "exitCode": 0, "reason": "Completed", "startedAt": pod.created,
                    "finishedAt": now}}
            else:
                status["state"] = {"running": {"startedAt": now}}
                status["containerID"] = f"containerd://{uuid.uuid4().hex}"
            if crashed:
                status["lastState"] = {"terminated": {
                    "exitCode": 1, "reason": "Error", "startedAt": now, "finishedAt": now}}
            statuses.append(status)
        flag = "True" if ready else "False"
        not_ready: JSON = {} if ready else {"reason": "PodCompleted"} if exited else {
            "reason": "ContainersNotReady",
            "message": f"containers with unready status: [{' '.join(pod.containers)}]"}
        conditions = [
            {"type": "Initialized", "status": "True", "lastTransitionTime": pod.created},
            {"type": "Ready", "status": flag, "lastTransitionTime": now, **not_ready},
            {"type": "ContainersReady", "status": flag, "lastTransitionTime": now, **not_ready},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": pod.created},
        ]
        # no qosClass: the API server sets it at creation and refuses a change
        body = {"status": {
            "phase": phase, "conditions": conditions, "hostIP": ip, "podIP": ip,
            "podIPs": [{"ip": ip}], "startTime": pod.created, "containerStatuses": statuses,
        }}
        try:
            self._call("PATCH", resource_path("v1", "pods", pod.name, namespace=pod.namespace,
                                              subresource="status"),
                       body, content_type="application/merge-patch+json")
        except NotFound:
            pod.generation += 1  # gone meanwhile

    # -- firmware and reboots -----------------------------------------------------------------

    def _flash_firmware(self, node: SimNode, target: str, epoch: int) -> None:
        if epoch != self._firmware_epoch or node.removed or node.rebooting:
            return
        if node.vbios == target or node.pending_firmware == target:
            return
        if any(f.kind == FaultKind.FIRMWARE_NO_REPORT for f in node.faults):
            return
        node.pending_firmware = target
        now = _now()
        self._call("POST", resource_path("v1", "events", namespace=EVENT_NAMESPACE), {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{node.name}.{uuid.uuid4().hex[:16]}",
                         "namespace": EVENT_NAMESPACE},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node.name,
                               "uid": node.uid},
            "reason": NODE_NEED_REBOOT_REASON,
            "message": NODE_NEED_REBOOT_MESSAGE,
            "type": "Normal",
            "source": {"component": DRIVER_MANAGER, "host": node.name},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "reportingComponent": DRIVER_MANAGER, "reportingInstance": node.name,
        })

    def _begin_reboot(self, name: str, token: str) -> None:
        node = self.nodes.get(name)
        if node is None or node.removed or node.rebooting or node.reboot_token == token:
            return
        node.rebooting = True
        node.reboot_token = token
        self._report_node(node, False)  # every container stops with the machine
        assert self.timers is not None
        self.timers.call_later(draw(self.reboot_seconds, self.rng), name,
                               lambda: self._end_reboot(node, token))

    def _end_reboot(self, node: SimNode, token: str) -> None:
        if node.removed or node.reboot_token != token:
            return
        node.boot_id = str(uuid.uuid4())
        if node.pending_firmware is not None:
            if not any(f.kind == FaultKind.FIRMWARE_WRONG_VERSION for f in node.faults):
                node.vbios = node.pending_firmware
            node.pending_firmware = None
        node.rebooting = False
        self._call("PATCH", resource_path("v1", "nodes", node.name),
                   {"metadata": {"labels": {VBIOS_VERSION_LABEL: node.vbios},
                                 "annotations": {REBOOTED_ANNOTATION: token}}},
                   content_type="application/merge-patch+json")
        node.labels[VBIOS_VERSION_LABEL] = node.vbios
        with self._lock:
            for pod in self.pods.values():
                if pod.node == node.name and not pod.deleting:
                    pod.restarts += 1
        self._report_node(node, self._should_be_ready(node),
                          extra_status={"nodeInfo": {"bootID": node.boot_id}})

    # -- API plumbing -----------------------------------------------------------------------

    def _call(self, method: str, path: str, body: Any = None, *, content_type: str | None = None,
              ok_missing: bool = False, retry_conflict: bool = False) -> JSON:
        # about 9 s of retries: a kubelet outlives an API server restart (a boot takes ~4 s,
        # longer on a loaded machine)
        attempts = 10
        for attempt in range(attempts):
            try:
                self.requests += 1
                result = self.api.request(method, path, body=body, content_type=content_type)
                return result if isinstance(result, dict) else {}
            except NotFound:
                if ok_missing:
                    return {}
                raise
            except Conflict:
                if not retry_conflict or attempt == attempts - 1:
                    raise
            except KubeError as exc:
                if exc.status not in (0, 429, 500, 502, 503, 504) or attempt == attempts - 1:
                    raise
                time.sleep(min(0.2 * (attempt + 1), 2.0))
        raise AssertionError("unreachable")

    def _ensure_namespace(self, name: str) -> None:
        with contextlib.suppress(Conflict):
            self.api.create(resource_path("v1", "namespaces"),
                            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def _cleanup(self, timeout: float) -> None:
        api = self.api
        # Orphan the DaemonSet's pods so that nothing recreates them, then remove everything
        # at once with a zero grace period (no kubelet is left to finish graceful deletions).
        api.delete(resource_path("apps/v1", "daemonsets", DRIVER_DAEMONSET,
                                 namespace=OPERATOR_NAMESPACE), propagation="Orphan")
        ours = {name for name in self.nodes}
        pods = api.list(resource_path("v1", "pods"), query={"fieldSelector": "spec.nodeName!="})
        for pod in pods.get("items") or []:
            if pod["spec"].get("nodeName") in ours:
                meta = pod["metadata"]
                api.delete(resource_path("v1", "pods", meta["name"], namespace=meta["namespace"]),
                           grace_period_seconds=0)
        api.request("DELETE", resource_path("v1", "pods", namespace=WORKLOAD_NAMESPACE),
                    query={"gracePeriodSeconds": 0})
        api.request("DELETE", resource_path("v1", "nodes"),
                    query={"labelSelector": f"{FLEET_LABEL}={self.fleet_id}"})
        if self.lease_seconds is not None:
            api.request("DELETE", resource_path("coordination.k8s.io/v1", "leases",
                                                namespace=LEASE_NAMESPACE),
                        query={"labelSelector": f"{FLEET_LABEL}={self.fleet_id}"})
        api.request("DELETE", resource_path("apps/v1", "controllerrevisions",
                                            namespace=OPERATOR_NAMESPACE))
        api.request("DELETE", resource_path("v1", "events", namespace=EVENT_NAMESPACE),
                    query={"fieldSelector": f"reason={NODE_NEED_REBOOT_REASON}"})
        co_path = resource_path(API_VERSION, PLURAL, CLUSTER_OPERATOR_NAME)
        if self.should_install_operator:
            api.delete(co_path)
            # the operator stand-in's watch is stopped: do its part of the deletion here
            release_finalizer(api)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left_nodes = api.get(resource_path("v1", "nodes"),
                                 query={"labelSelector": f"{FLEET_LABEL}={self.fleet_id}"})
            try:
                api.get(resource_path("apps/v1", "daemonsets", DRIVER_DAEMONSET,
                                      namespace=OPERATOR_NAMESPACE))
                daemonset_left = True
            except NotFound:
                daemonset_left = False
            driver_pods = api.get(resource_path("v1", "pods", namespace=OPERATOR_NAMESPACE))
            co_left = False
            if self.should_install_operator:
                try:
                    co = api.get(co_path)
                    co_left = True
                    # a component still running (a sync role) may have created it again
                    if co["metadata"].get("deletionTimestamp") is None:
                        api.delete(co_path)
                    release_finalizer(api)
                except NotFound:
                    pass
            if (not left_nodes.get("items") and not daemonset_left
                    and not driver_pods.get("items") and not co_left):
                return
            time.sleep(0.1)
        raise TimeoutError("fleet cleanup did not finish")
