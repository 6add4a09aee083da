"""Workloads on the simulated fleet, as a live cluster has them (``dev-cluster up --workloads N``,
docs/dev-cluster.md "Workloads"):

- ``WorkloadPods``, the kubelet's part for workload pods (every pod outside the operator's
  namespace) on a ``Fleet(workloads=True)``: Running and Ready once bound; a pod whose
  ``restartPolicy`` is not ``Always`` and that carries ``sim.gpu.metax-tech.com/run-seconds``
  exits 0 that long after it starts (phase Succeeded, as a Job's pod); a deleted or evicted pod
  takes its whole grace period (``deletionGracePeriodSeconds``) to stop, then the deletion is
  finished with grace 0, as a kubelet does (a later deletion asking for less brings that
  forward); one that had stopped already goes at once. It plays the pods the fleet's one pod
  watch sees, on the fleet's keyed workers and timers: no watch or request of its own.
- ``domain_labels``: a zone and a rack label per node (``--domains K``).
- ``serving_objects``: N serving pods (a Deployment) behind a PodDisruptionBudget.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from reconciler.kube.api import JSON, Conflict, KubeApi, resource_path
from reconciler.names import GPU_RESOURCE, OPERATOR_NAMESPACE

if TYPE_CHECKING:
    from reconciler.sim.fleet_state import SimPod
    from reconciler.sim.pods import Pods

log = logging.getLogger(__name__)

#: seconds a pod runs before its containers exit 0 (pods that do not restart: Jobs' pods)
RUN_SECONDS_ANNOTATION = "sim.gpu.metax-tech.com/run-seconds"
ZONE_LABEL = "topology.kubernetes.io/zone"
RACK_LABEL = "gpu.metax-tech.com/rack"
#: the grace period of a pod that names none (the API server's default)
DEFAULT_GRACE_SECONDS = 30.0

SERVING_NAME = "gpu-serving"
SERVING_GRACE_SECONDS = 5


def run_seconds(pod: JSON) -> float | None:
    """The run time a pod asks for (None: it runs until it is deleted). Ignored, with a warning
    in the simulator's log, on a pod that restarts its containers or when not a number >= 0."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    value = (meta.get("annotations") or {}).get(RUN_SECONDS_ANNOTATION)
    if value is None:
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    where = f"pod {meta.get('namespace')}/{meta.get('name')}"
    if not 0 <= seconds < math.inf:  # False for nan
        log.warning("%s: %s=%r is not a number of seconds; it runs until deleted",
                    where, RUN_SECONDS_ANNOTATION, value)
        return None
    if spec.get("restartPolicy", "Always") == "Always":
        log.warning("%s: %s ignored, restartPolicy Always restarts what exits",
                    where, RUN_SECONDS_ANNOTATION)
        return None
    return seconds


class WorkloadPods:
    """The kubelet's part for the workload pods of one fleet (see the module docstring)."""

    def __init__(self, pods: Pods) -> None:
        self.pods = pods

    @staticmethod
    def plays(pod: SimPod) -> bool:
        """Pods of the GPU operator keep the fleet's own behaviour (driver install, faults)."""
        return not pod.driver and pod.namespace != OPERATOR_NAMESPACE

    def admit(self, pod: SimPod, obj: JSON) -> None:
        if self.plays(pod):
            pod.run_seconds = run_seconds(obj)

    def start(self, pod: SimPod, generation: int) -> None:
        if pod.finished:  # a node back from NotReady does not run a completed pod again
            return
        self.pods.write_status(pod, phase="Running", ready=True)
        if pod.run_seconds is not None:
            self.pods.state.later(pod.run_seconds, pod.node,
                                  functools.partial(self._exit, pod, generation))

    def _exit(self, pod: SimPod, generation: int) -> None:
        if not self.pods.alive(pod, generation):
            return
        pod.finished = True
        self.pods.write_status(pod, phase="Succeeded", ready=False, exited=True)

    def stop(self, pod: SimPod, meta: JSON) -> None:
        """A deletion (or eviction) seen: the deletion is finished once the grace period is
        over; a later deletion asking for a shorter one brings that forward, as on a kubelet."""
        grace = self.grace_seconds(pod, meta)
        due = time.monotonic() + grace
        if pod.deleting and pod.stops_at is not None and due >= pod.stops_at:
            return
        if not pod.deleting:
            pod.deleting = True
            pod.generation += 1  # its run ends with it
        pod.stops_at = due
        # a timer set before stays: it finds the pod gone (the deletion ignores that)
        self.pods.state.later(grace, pod.node, functools.partial(self.pods.finish_deletion, pod))

    @staticmethod
    def grace_seconds(pod: SimPod, meta: JSON) -> float:
        """How long a deleted pod takes to stop: its grace period while its containers run."""
        if pod.finished or not pod.started:
            return 0.0
        grace = meta.get("deletionGracePeriodSeconds")
        return DEFAULT_GRACE_SECONDS if grace is None else max(0.0, float(grace))


def domain_labels(nodes: Sequence[str], domains: int) -> dict[str, dict[str, str]]:
    """Zone and rack labels spreading ``nodes`` in order over ``domains`` contiguous, even
    blocks (``zone-1``/``rack-1`` first; one rack per zone; numbers padded so that the values
    sort as strings in domain order)."""
    if domains < 1:
        raise ValueError(f"domains must be at least 1, got {domains}")
    width = len(str(domains))
    labels: dict[str, dict[str, str]] = {}
    for position, name in enumerate(nodes):
        domain = f"{position * domains // max(1, len(nodes)) + 1:0{width}d}"
        labels[name] = {ZONE_LABEL: f"zone-{domain}", RACK_LABEL: f"rack-{domain}"}
    return labels


def serving_objects(replicas: int, *, namespace: str, policy_version: str = "policy/v1",
                    name: str = SERVING_NAME) -> list[tuple[str, JSON]]:
    """A Deployment of ``replicas`` serving pods (one GPU each, spread over the nodes) and a
    PodDisruptionBudget allowing one of them down: (collection path, body) pairs."""
    labels = {"app": name}
    deployment: JSON = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": SERVING_GRACE_SECONDS,
                    "topologySpreadConstraints": [{
                        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {
                            "matchLabels": labels}}],
                    "containers": [{
                        "name": "serve", "image": "registry.local/serve:1",
                        "resources": {"limits": {GPU_RESOURCE: "1"},
                                      "requests": {GPU_RESOURCE: "1"}},
                    }],
                },
            },
        },
    }
    budget: JSON = {
        "apiVersion": policy_version, "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}},
    }
    return [
        (resource_path("apps/v1", "deployments", namespace=namespace), deployment),
        (resource_path(policy_version, "poddisruptionbudgets", namespace=namespace), budget),
    ]


def deploy_serving(api: KubeApi, replicas: int, *, namespace: str, policy_version: str) -> None:
    """Creates the serving Deployment and its budget (left alone when they exist)."""
    for collection, body in serving_objects(replicas, namespace=namespace,
                                            policy_version=policy_version):
        with contextlib.suppress(Conflict):
            api.create(collection, body)


def policy_version(kube_minor: int) -> str:
    """``policy/v1`` from Kubernetes 1.21 on; 1.20 serves budgets as ``policy/v1beta1``."""
    return "policy/v1" if kube_minor >= 21 else "policy/v1beta1"


def serving_status(api: KubeApi, *, namespace: str, policy: str,
                   name: str = SERVING_NAME) -> Mapping[str, int]:
    """The serving Deployment's available pods and its budget's view (for waiting on both)."""
    deployment = api.get(resource_path("apps/v1", "deployments", name, namespace=namespace))
    budget = api.get(resource_path(policy, "poddisruptionbudgets", name, namespace=namespace))
    status = budget.get("status") or {}
    return {
        "available": int((deployment.get("status") or {}).get("availableReplicas") or 0),
        "currentHealthy": int(status.get("currentHealthy") or 0),
        "disruptionsAllowed": int(status.get("disruptionsAllowed") or 0),
    }
