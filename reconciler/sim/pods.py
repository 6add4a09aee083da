"""The simulated kubelets' part for the pods bound to the fleet's nodes.

- driver pod (owned by the ``metax-driver`` DaemonSet): Running (not Ready) after
  ``pull_seconds``, Ready after an install time drawn from ``install_seconds`` (the node's driver
  labels first, as the vendor's labeller would); faults for the pod's driver version change that
  (image pull failure, crash loop, never Ready, node NotReady);
- any other pod (GPU workloads included): Running and Ready at once;
- a pod being deleted: the deletion completes after ``termination_seconds``;
- with ``workloads=True``, pods outside the operator's namespace are played as real workloads
  instead (reconciler/sim/workloads.py): their grace period, Jobs that complete.

A node going NotReady stops its pods being Ready; once it is back they start over.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass

from reconciler.kube.api import JSON, Conflict, NotFound, resource_path
from reconciler.names import DRIVER_DAEMONSET, GPU_RESOURCE, OPERATOR_NAMESPACE, REVISION_HASH_LABEL
from reconciler.sim.faults import FaultKind
from reconciler.sim.fleet_state import (
    WORKLOAD_NAMESPACE,
    Duration,
    FleetState,
    SimNode,
    SimPod,
    draw,
    node_ip,
    timestamp,
)
from reconciler.sim.node_status import NodeStatus
from reconciler.sim.workloads import WorkloadPods


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


def gpu_job(node: str, *, gpus: int, name: str, resource: str) -> JSON:
    """A GPU job pod bound to ``node`` directly, as a scheduler would (``Fleet.add_workload``)."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": WORKLOAD_NAMESPACE,
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


class Pods:
    """The pods bound to the fleet's nodes, as their kubelets run them (see the module
    docstring)."""

    def __init__(self, state: FleetState, node_status: NodeStatus, *, install_seconds: Duration,
                 pull_seconds: Duration, termination_seconds: Duration, crash_seconds: float,
                 workloads: bool) -> None:
        self.state = state
        self._node_status = node_status
        self.install_seconds = install_seconds
        self.pull_seconds = pull_seconds
        self.termination_seconds = termination_seconds
        self.crash_seconds = crash_seconds
        #: the kubelet's part for workload pods (``workloads=True``); None: they run at once
        #: and stop after ``termination_seconds``, the fleet's behaviour before workloads
        self.workloads = WorkloadPods(self) if workloads else None

    def driver_views(self) -> dict[str, DriverPodView]:
        """The live (not yet deleted) driver pod per node."""
        views: dict[str, DriverPodView] = {}
        with self.state.lock:
            for pod in self.state.pods.values():
                if pod.driver:
                    view = DriverPodView(pod.name, pod.node, pod.version, pod.revision, pod.ready,
                                         pod.waiting_reason, pod.restarts, pod.deleting)
                    if pod.node not in views or views[pod.node].deleting:
                        views[pod.node] = view
        return views

    def on_event(self, event_type: str, obj: JSON) -> None:
        """A pod bound to one of the fleet's nodes was seen (on the node's worker)."""
        state = self.state
        meta = obj["metadata"]
        uid = str(meta["uid"])
        with state.lock:
            pod = state.pods.get(uid)
        if event_type == "DELETED":
            if pod is not None:
                with state.lock:
                    state.pods.pop(uid, None)
                    state.on_node.get(pod.node, {}).pop(uid, None)
                if pod.driver:
                    self._driver_gone(pod)
            return
        if pod is None:
            pod = self._new_pod(obj)
            if self.workloads is not None:
                self.workloads.admit(pod, obj)
            with state.lock:
                state.pods[uid] = pod
                state.on_node.setdefault(pod.node, {})[uid] = pod
            if meta.get("deletionTimestamp") is None:
                node = state.nodes[pod.node]
                if node.reported_ready and not node.rebooting:
                    self._start(pod)
        if meta.get("deletionTimestamp") is None:
            return
        if self.workloads is not None and self.workloads.plays(pod):
            self.workloads.stop(pod, meta)
        elif not pod.deleting:
            pod.deleting = True
            pod.generation += 1
            delay = draw(self.termination_seconds, state.rng)
            state.later(delay, pod.node, lambda: self.finish_deletion(pod))

    def readiness_changed(self, node: SimNode, ready: bool) -> None:
        state = self.state
        if not ready:
            # What the node lifecycle controller (off here) and a stopped kubelet amount to:
            # the node's pods stop being Ready and start over when it is back.
            with state.lock:
                pods = [p for p in state.pods.values() if p.node == node.name and not p.deleting]
            for pod in pods:
                pod.generation += 1
                pod.started = False
                if pod.ready:
                    self.write_status(pod, phase="Running", ready=False)
        else:
            # Pods that were waiting for the kubelet start now.
            with state.lock:
                waiting = [p for p in state.pods.values()
                           if p.node == node.name and not p.started and not p.deleting]
            for pod in waiting:
                self._start(pod)

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
            created=str(meta.get("creationTimestamp") or timestamp()),
            gpu_requests={str(c["name"]): _gpu_limit(c) for c in containers if _gpu_limit(c)},
        )

    def _faults(self, pod: SimPod) -> set[FaultKind]:
        node = self.state.nodes[pod.node]
        return {f.kind for f in node.faults if f.applies_to(pod.version)}

    def _start(self, pod: SimPod) -> None:
        pod.started = True
        pod.generation += 1
        generation = pod.generation
        if self.workloads is not None and self.workloads.plays(pod):
            self.workloads.start(pod, generation)
            return
        if not pod.driver:
            self.write_status(pod, phase="Running", ready=True)
            return
        faults = self._faults(pod)
        pull = draw(self.pull_seconds, self.state.rng)
        if FaultKind.IMAGE_PULL in faults:
            self.state.later(pull, pod.node, lambda: self._image_pull_failure(pod, generation, 0))
            return
        self.state.later(pull, pod.node, lambda: self._container_started(pod, generation))

    def alive(self, pod: SimPod, generation: int) -> bool:
        """The pod still runs the start ``generation`` was drawn for."""
        return pod.generation == generation and not pod.deleting and pod.uid in self.state.pods

    def _image_pull_failure(self, pod: SimPod, generation: int, attempt: int) -> None:
        if not self.alive(pod, generation):
            return
        reason = "ErrImagePull" if attempt % 2 == 0 else "ImagePullBackOff"
        image = next(iter(pod.images.values()), "")
        message = (f'rpc error: code = NotFound desc = failed to pull and unpack image "{image}": '
                   "not found") if reason == "ErrImagePull" else f'Back-off pulling image "{image}"'
        self.write_status(pod, phase="Pending", ready=False, waiting=(reason, message))
        delay = min(self.crash_seconds * (2 ** (attempt // 2)), 300.0)
        self.state.later(delay, pod.node,
                         lambda: self._image_pull_failure(pod, generation, attempt + 1))

    def _container_started(self, pod: SimPod, generation: int) -> None:
        if not self.alive(pod, generation):
            return
        self.write_status(pod, phase="Running", ready=False)
        faults = self._faults(pod)
        self._node_status.sync(pod.node)  # a driver that breaks the node
        if FaultKind.CRASH_LOOP in faults:
            self.state.later(self.crash_seconds, pod.node, lambda: self._crash(pod, generation))
        elif FaultKind.NEVER_READY in faults or FaultKind.NODE_NOT_READY in faults:
            return
        else:
            delay = draw(self.install_seconds, self.state.rng)
            self.state.later(delay, pod.node, lambda: self._driver_ready(pod, generation))

    def _crash(self, pod: SimPod, generation: int) -> None:
        if not self.alive(pod, generation):
            return
        pod.restarts += 1
        message = (f"back-off {min(10 * 2 ** (pod.restarts - 1), 300)}s restarting failed "
                   f"container={pod.containers[0] if pod.containers else 'driver'} pod={pod.name}")
        self.write_status(pod, phase="Running", ready=False,
                          waiting=("CrashLoopBackOff", message), crashed=True)
        delay = min(self.crash_seconds * (2 ** min(pod.restarts, 8)), 300.0)
        self.state.later(delay, pod.node, lambda: self._crash(pod, generation))

    def _driver_ready(self, pod: SimPod, generation: int) -> None:
        if not self.alive(pod, generation):
            return
        # The node's labels first (as the vendor's labeller would), so that whoever sees the pod
        # Ready also sees the node labelled.
        node = self.state.nodes[pod.node]
        labels: dict[str, str] = {"metax-tech.com/driver.ready": "true"}
        if pod.version:
            parts = ([*pod.version.split("-")[0].split("."), "0", "0"])[:3]
            labels.update(zip(("metax-tech.com/gpu.driver.major", "metax-tech.com/gpu.driver.minor",
                               "metax-tech.com/gpu.driver.patch"), parts, strict=True))
        self._node_status.update_labels(node, labels)
        self.write_status(pod, phase="Running", ready=True)

    def _driver_gone(self, pod: SimPod) -> None:
        node = self.state.nodes.get(pod.node)
        if node is None or node.removed:
            return
        with self.state.lock:
            others = any(p.driver and p.ready
                         for p in self.state.on_node.get(pod.node, {}).values())
        if not others:
            self._node_status.update_labels(node, {"metax-tech.com/driver.ready": "false"})
        self._node_status.sync(pod.node)

    def finish_deletion(self, pod: SimPod) -> None:
        # through call: a kubelet's final deletion outlives an API server restart too; a
        # Conflict is a newer pod of the same name, not ours to finish
        with contextlib.suppress(Conflict):
            self.state.call("DELETE",
                            resource_path("v1", "pods", pod.name, namespace=pod.namespace),
                            {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                             "preconditions": {"uid": pod.uid}}, ok_missing=True)

    def write_status(self, pod: SimPod, *, phase: str, ready: bool,
                     waiting: tuple[str, str] | None = None, crashed: bool = False,
                     exited: bool = False) -> None:
        """``exited``: the containers ended with exit code 0 (phase Succeeded)."""
        now = timestamp()
        pod.ready = ready
        pod.waiting_reason = waiting[0] if waiting else None
        ip = node_ip(self.state.nodes[pod.node])
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
            self.state.call("PATCH", resource_path("v1", "pods", pod.name, namespace=pod.namespace,
                                                   subresource="status"),
                            body, content_type="application/merge-patch+json")
        except NotFound:
            pod.generation += 1  # gone meanwhile
