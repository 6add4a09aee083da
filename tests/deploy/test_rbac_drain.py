"""The drain's optional RBAC part (deploy/drain/, the chart's drain.enabled) is exactly what a
drain needs (docs/live-clusters.md#the-drain): the rollout controller, run with an identity bound to
the roles of deploy/rbac.yaml and deploy/drain/rbac-drain.yaml and nothing else, carries a drain
rollout through (an eviction, a budget that holds, ``onTimeout: delete``) without a single 403, and
every rule of the drain part is used in it (the audit log is the witness, as in test_rbac)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from reconciler.kube.api import KubeApi, resource_path
from reconciler.kube.objects import cluster_operator_path
from reconciler.names import CLUSTER_OPERATOR_NAME
from reconciler.sim.control_plane import MINTED_NAMESPACE
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from tests.controller.drain_objects import budget, budget_status, create, deployment
from tests.deploy.audit import DEPLOY, AuditedControlPlane, audit_entries, grants, load_documents
from tests.deploy.conftest import RBAC, install_roles
from tests.deploy.rollout import (
    NEW,
    assert_clean_log,
    co,
    completed,
    denied,
    inner,
    progress,
    reconciler,
)
from tests.deploy.test_rbac import ROLES
from tests.planes import serve_plane

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

DRAIN_RBAC = DEPLOY / "drain" / "rbac-drain.yaml"
NAMESPACE = "drain-rbac"


@pytest.fixture(scope="module")
def workload_plane(request: pytest.FixtureRequest) -> Iterator[AuditedControlPlane]:
    """An audited control plane with the controllers of Deployments and budgets."""
    yield from serve_plane(request, AuditedControlPlane(workload_controllers=True),
                           "audited control plane")


def _identity(plane: AuditedControlPlane, kube: KubeApi, name: str) -> tuple[Path, str]:
    """rbac.yaml's roles and the drain part's ClusterRole, bound to a new identity."""
    install_roles(kube)
    for doc in load_documents(DRAIN_RBAC):
        if doc["kind"] == "ClusterRole":
            kube.apply(resource_path(RBAC, "clusterroles", doc["metadata"]["name"]), doc,
                       field_manager="deploy-test")
    kubeconfig = plane.mint_kubeconfig("gpu-reconciler", name=name, namespace_roles=ROLES)
    kube.create(resource_path(RBAC, "clusterrolebindings"), {
        "apiVersion": RBAC, "kind": "ClusterRoleBinding",
        "metadata": {"name": f"{MINTED_NAMESPACE}:{name}:drain"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "gpu-reconciler-drain"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": MINTED_NAMESPACE}]})
    return kubeconfig, f"system:serviceaccount:{MINTED_NAMESPACE}:{name}"


def test_a_drain_rollout_with_exactly_the_drain_part(
    workload_plane: AuditedControlPlane, tmp_path: Path
) -> None:
    kube = workload_plane.api(pool_size=16)
    kubeconfig, username = _identity(workload_plane, kube, "drain-controller")
    fleet = Fleet(kube, nodes=2, install_seconds=0.3, workloads=True).start()
    log_path = tmp_path / "controller.log"
    repo_config = tmp_path / "reconciler.yaml"
    repo_config.write_text(yaml.safe_dump({"rollout": {
        "drain": {"timeout": "2s", "onTimeout": "delete"}}}))
    try:
        kube.create(resource_path("v1", "namespaces"), {
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        # one pod per node (8 GPUs each): the budget allows one eviction, then holds the other
        # node until its drain times out (before the evicted pod's grace period is over) and
        # the pod is deleted
        web = deployment("web", NAMESPACE, 2, gpus=8)
        web["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 5
        create(kube, web)
        create(kube, budget("web", NAMESPACE, min_available=1))
        wait_for(lambda: len(fleet.ready_driver_nodes()) == 2
                 and budget_status(kube, "web", NAMESPACE).get("disruptionsAllowed") == 1,
                 timeout=60, what="2 Ready driver pods, one disruption allowed",
                 observe=lambda: budget_status(kube, "web", NAMESPACE))
        with reconciler(["run", "--role", "controller", "--kubeconfig", str(kubeconfig),
                         "--repo-config", str(repo_config), "--ready-timeout", "60s",
                         "--ops-listen", "off"], log_path) as process:
            wait_for(lambda: inner(kube)["phase"], timeout=60,
                     what="the controller's first status", observe=log_path.read_text)
            kube.patch(cluster_operator_path(CLUSTER_OPERATOR_NAME), {"spec": {"driver": {
                "payload": {"version": NEW}, "upgradePolicy": {
                    "enableRollout": True, "pause": False, "maxParallel": 2,
                    "maxUnavailable": 0, "maxFailureThreshold": 1, "fallback": "pause",
                    "upgradeSteps": [{"replicas": "100%", "pauseDuration": 0}]}}}})
            wait_for(lambda: completed(kube), timeout=90, what="the drain rollout Completed",
                     observe=lambda: progress(kube, workload_plane, username, log_path))
            assert sorted(fleet.ready_driver_nodes(NEW)) == fleet.node_names
            assert co(kube)["status"]["upgradeStatus"].get("draining") is None
            os.killpg(process.pid, signal.SIGTERM)
            code = process.wait(30)
    finally:
        kube.request("DELETE", resource_path("apps/v1", "deployments", namespace=NAMESPACE))
        kube.request("DELETE", resource_path("v1", "pods", namespace=NAMESPACE),
                     query={"gracePeriodSeconds": 0})
        fleet.stop(cleanup=True)
        kube.close()
    assert_clean_log(log_path, code)
    entries = audit_entries(workload_plane.audit_log, username)
    assert denied(entries) == [], "missing permissions"
    used = {e.permission for e in entries}
    unused = [str(g) for g in grants(load_documents(DRAIN_RBAC))
              if not any(g.covers(p) for p in used)]
    assert unused == [], f"granted by the drain part but never used: {unused}"
    evictions = [e.permission for e in entries if e.permission.resource == "pods/eviction"]
    deletions = [e.permission for e in entries
                 if e.permission.resource == "pods" and e.permission.verb == "delete"
                 and e.permission.namespace == NAMESPACE]
    assert evictions and deletions, "an eviction and onTimeout's deletion both happened"


def test_drain_without_the_drain_part_says_so_and_drains_nothing(
    workload_plane: AuditedControlPlane, tmp_path: Path
) -> None:
    kube = workload_plane.api(pool_size=8)
    install_roles(kube)
    name = "no-drain-part"
    kubeconfig = workload_plane.mint_kubeconfig("gpu-reconciler", name=name,
                                                namespace_roles=ROLES)
    username = f"system:serviceaccount:{MINTED_NAMESPACE}:{name}"
    fleet = Fleet(kube, nodes=1, install_seconds=0.3).start()
    log_path = tmp_path / "controller.log"
    repo_config = tmp_path / "reconciler.yaml"
    repo_config.write_text(yaml.safe_dump({"rollout": {"drain": {}}}))

    def reasons() -> list[str]:
        uid = co(kube)["metadata"]["uid"]
        events = kube.list(resource_path("v1", "events", namespace="default"),
                           query={"fieldSelector": f"involvedObject.uid={uid}"})
        return [str(e.get("reason")) for e in events["items"]]

    try:
        wait_for(lambda: len(fleet.ready_driver_nodes()) == 1, timeout=60,
                 what="1 Ready driver pod", observe=fleet.driver_pods)
        with reconciler(["run", "--role", "controller", "--kubeconfig", str(kubeconfig),
                         "--repo-config", str(repo_config), "--ops-listen", "off"],
                        log_path) as process:
            wait_for(lambda: "DrainNotPermitted" in reasons(), timeout=60,
                     what="the DrainNotPermitted Event", observe=log_path.read_text)
            assert not (co(kube).get("status") or {}).get("upgradeStatus"), \
                "no pass planned on a guess about the budgets"
            os.killpg(process.pid, signal.SIGTERM)
            assert process.wait(30) == 0
    finally:
        fleet.stop(cleanup=True)
        kube.close()
    denials = denied(audit_entries(workload_plane.audit_log, username))
    assert denials and all("poddisruptionbudgets" in d for d in denials), denials
