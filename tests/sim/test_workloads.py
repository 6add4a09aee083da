"""Workloads on the simulated fleet (``Fleet(workloads=True)``): pods of Deployments and Jobs
created by the real controllers, placed by the real scheduler, played by the fleet's kubelets;
budgets computed by the real disruption controller and enforced by the API server on eviction."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from reconciler.kube.api import JSON, KubeApi, KubeError, resource_path
from reconciler.names import GPU_RESOURCE
from reconciler.sim.control_plane import WORKLOAD_SCHEDULER_PLUGINS, scheduler_configuration
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from reconciler.sim.workloads import (
    RACK_LABEL,
    RUN_SECONDS_ANNOTATION,
    ZONE_LABEL,
    domain_labels,
    run_seconds,
)
from tests.conftest import FleetFactory

GRACE = 2


def test_domains_are_contiguous_even_blocks_whose_values_sort_in_order() -> None:
    nodes = [f"node-{i:04d}" for i in range(1, 13)]
    labels = domain_labels(nodes, 3)
    assert [labels[n][ZONE_LABEL] for n in nodes] == (
        ["zone-1"] * 4 + ["zone-2"] * 4 + ["zone-3"] * 4)
    assert all(labels[n][RACK_LABEL] == labels[n][ZONE_LABEL].replace("zone", "rack")
               for n in nodes)
    many = domain_labels(nodes, 12)
    values = [many[n][ZONE_LABEL] for n in nodes]
    assert values == sorted(values) and values[0] == "zone-01" and values[-1] == "zone-12"
    uneven = domain_labels(nodes[:7], 3)
    sizes = [sum(1 for n in nodes[:7] if uneven[n][ZONE_LABEL] == f"zone-{d}") for d in (1, 2, 3)]
    assert sizes in ([2, 2, 3], [2, 3, 2], [3, 2, 2])
    with pytest.raises(ValueError):
        domain_labels(nodes, 0)


def _pod(annotation: str | None, restart: str | None) -> JSON:
    meta: JSON = {"name": "p", "namespace": "n"}
    if annotation is not None:
        meta["annotations"] = {RUN_SECONDS_ANNOTATION: annotation}
    return {"metadata": meta, "spec": {} if restart is None else {"restartPolicy": restart}}


def test_run_time_is_read_from_pods_that_do_not_restart() -> None:
    assert run_seconds(_pod("30", "Never")) == 30.0
    assert run_seconds(_pod("0.5", "OnFailure")) == 0.5
    assert run_seconds(_pod(None, "Never")) is None
    assert run_seconds(_pod("30", "Always")) is None
    assert run_seconds(_pod("30", None)) is None  # Always is the default
    for bad in ("soon", "-1", "nan", "inf"):
        assert run_seconds(_pod(bad, "Never")) is None


def test_the_scheduler_spreads_workloads_only_when_they_run() -> None:
    def plugins(workloads: bool) -> list[str]:
        config = json.loads(scheduler_configuration(Path("k"), "127.0.0.1:1", current=True,
                                                    workloads=workloads))
        return [p["name"] for p in config["profiles"][0]["plugins"]["filter"]["enabled"]]

    assert not set(WORKLOAD_SCHEDULER_PLUGINS) & set(plugins(False))
    assert set(WORKLOAD_SCHEDULER_PLUGINS) <= set(plugins(True))
    assert plugins(True)[0] == "NodeAffinity"


# -- against the real control plane ------------------------------------------------------------


def _deployment(name: str, namespace: str, replicas: int) -> JSON:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"terminationGracePeriodSeconds": GRACE, "containers": [{
                "name": "serve", "image": "registry.local/serve:1",
                "resources": {"limits": {GPU_RESOURCE: "2"}, "requests": {"cpu": "1"}}}]},
        }},
    }


def _evict(kube: KubeApi, namespace: str, pod: str) -> JSON:
    return kube.create(
        resource_path("v1", "pods", pod, namespace=namespace, subresource="eviction"),
        {"apiVersion": "policy/v1", "kind": "Eviction",
         "metadata": {"name": pod, "namespace": namespace}})


def _ready(pod: JSON) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _set_unschedulable(kube: KubeApi, fleet: Fleet, value: bool) -> None:
    for node in fleet.node_names:
        kube.patch(resource_path("v1", "nodes", node), {"spec": {"unschedulable": value}})


@pytest.mark.cluster
def test_a_deployment_behind_a_budget_runs_on_the_fleet_and_evictions_honour_it(
    kube: KubeApi, fleet_factory: FleetFactory, workload_namespace: str,
) -> None:
    namespace = workload_namespace
    fleet = fleet_factory(nodes=4, workloads=True)
    kube.create(resource_path("apps/v1", "deployments", namespace=namespace),
                _deployment("serve", namespace, 4))
    budget_path = resource_path("policy/v1", "poddisruptionbudgets", "serve",
                                namespace=namespace)
    kube.create(resource_path("policy/v1", "poddisruptionbudgets", namespace=namespace), {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "serve", "namespace": namespace},
        "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": "serve"}}}})

    def budget() -> dict[str, Any]:
        return dict(kube.get(budget_path).get("status") or {})

    def pods() -> list[JSON]:
        return list(kube.list(resource_path("v1", "pods", namespace=namespace))["items"])

    wait_for(lambda: budget().get("currentHealthy") == 4 and budget().get("disruptionsAllowed")
             == 1, timeout=30, what="4 healthy pods, one disruption allowed", observe=budget)
    running = pods()
    assert len(running) == 4
    for pod in running:  # placed by the scheduler (nothing set nodeName), played by the fleet
        assert pod["spec"]["nodeName"] in fleet.node_names
        assert pod["status"]["phase"] == "Running" and _ready(pod)
        assert pod["status"]["qosClass"] == "Burstable"  # the API server's, left alone

    # No node takes the replacement yet: the budget stays spent.
    _set_unschedulable(kube, fleet, True)
    first, second = sorted(p["metadata"]["name"] for p in running)[:2]
    evicted_at = time.monotonic()
    assert _evict(kube, namespace, first).get("code") == 201
    with pytest.raises(KubeError) as refused:
        _evict(kube, namespace, second)
    assert refused.value.status == 429
    assert "disruption budget" in refused.value.message
    terminating = kube.get(resource_path("v1", "pods", first, namespace=namespace))
    assert terminating["metadata"]["deletionGracePeriodSeconds"] == GRACE

    _set_unschedulable(kube, fleet, False)
    wait_for(lambda: budget().get("disruptionsAllowed") == 1, timeout=30,
             what="the replacement Ready, one disruption allowed again", observe=budget)
    replacements = [p for p in pods() if p["metadata"]["name"] not in
                    {r["metadata"]["name"] for r in running}]
    assert len(replacements) == 1 and _ready(replacements[0])
    assert _evict(kube, namespace, second).get("code") == 201

    # The evicted pod stopped after its grace period, then the kubelet finished the deletion.
    wait_for(lambda: first not in {p["metadata"]["name"] for p in pods()}, timeout=30,
             what=f"{first} deleted", observe=lambda: [p["metadata"]["name"] for p in pods()])
    assert time.monotonic() - evicted_at >= GRACE


@pytest.mark.cluster
def test_a_job_pod_completes_after_its_run_time_and_the_job_is_complete(
    kube: KubeApi, fleet_factory: FleetFactory, workload_namespace: str,
) -> None:
    namespace = workload_namespace
    fleet = fleet_factory(nodes=2, workloads=True)
    run = 1.5
    started = time.monotonic()
    kube.create(resource_path("batch/v1", "jobs", namespace=namespace), {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train", "namespace": namespace},
        "spec": {"backoffLimit": 0, "template": {
            "metadata": {"annotations": {RUN_SECONDS_ANNOTATION: str(run)}},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "train", "image": "registry.local/train:1",
                "resources": {"limits": {GPU_RESOURCE: "8"}}}]},
        }},
    })
    job_path = resource_path("batch/v1", "jobs", "train", namespace=namespace)

    def conditions() -> dict[str, str]:
        status = kube.get(job_path).get("status") or {}
        return {c["type"]: c["status"] for c in status.get("conditions") or []}

    wait_for(lambda: conditions().get("Complete") == "True", timeout=30,
             what="the Job Complete", observe=conditions)
    assert time.monotonic() - started >= run
    assert kube.get(job_path)["status"]["succeeded"] == 1
    [pod] = kube.list(resource_path("v1", "pods", namespace=namespace))["items"]
    assert pod["spec"]["nodeName"] in fleet.node_names
    assert pod["status"]["phase"] == "Succeeded"
    [container] = pod["status"]["containerStatuses"]
    assert container["state"]["terminated"]["exitCode"] == 0
    assert not _ready(pod)


@pytest.mark.cluster
def test_a_deletion_asking_for_a_shorter_grace_period_ends_it_sooner(
    kube: KubeApi, fleet_factory: FleetFactory, workload_namespace: str,
) -> None:
    namespace = workload_namespace
    fleet = fleet_factory(nodes=1, workloads=True)
    pod_path = resource_path("v1", "pods", "slow", namespace=namespace)
    kube.create(resource_path("v1", "pods", namespace=namespace), {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "slow", "namespace": namespace},
        "spec": {"terminationGracePeriodSeconds": 600, "containers": [{
            "name": "serve", "image": "registry.local/serve:1"}]}})
    wait_for(lambda: _ready(kube.get(pod_path)), timeout=30, what="the pod Ready",
             observe=lambda: kube.get(pod_path).get("status"))
    assert kube.get(pod_path)["spec"]["nodeName"] in fleet.node_names
    kube.delete(pod_path)
    assert kube.get(pod_path)["metadata"]["deletionGracePeriodSeconds"] == 600
    kube.delete(pod_path, grace_period_seconds=1)

    def gone() -> bool:
        return not kube.list(resource_path("v1", "pods", namespace=namespace))["items"]

    wait_for(gone, timeout=30, what="the pod deleted after 1 s, not 600")
