"""deploy/rbac.yaml is least privilege: the reconciler, run with an identity bound to exactly
those roles, carries a whole rollout through without a single 403 (a missing rule), and every verb
the roles grant is used during it (an excess rule fails the test).

The witness is the API server's audit log: it records each request's verb, resource, namespace
and object name under the identity that made it, which is what RBAC decides on.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest

from reconciler.kube.api import KubeApi
from reconciler.kube.objects import cluster_operator_path
from reconciler.names import CLUSTER_OPERATOR_NAME
from reconciler.policy.payload import Payload
from reconciler.sim.control_plane import MINTED_NAMESPACE
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from tests.deploy.audit import (
    DEPLOY,
    AuditedControlPlane,
    Grant,
    Permission,
    audit_entries,
    grants,
    load_documents,
)
from tests.deploy.conftest import install_roles
from tests.deploy.rollout import (
    GATED_POLICY,
    IMAGE,
    NEW,
    OLD,
    REGISTRY,
    assert_clean_log,
    co,
    completed,
    denied,
    inner,
    merge_to_upgrade,
    progress,
    reconciler,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ROLES = {"metax-operator": "gpu-reconciler-driver", "default": "gpu-reconciler-events",
         "gpu-reconciler": "gpu-reconciler-leader-election"}


def _identity(plane: AuditedControlPlane, kube: KubeApi, name: str) -> tuple[Path, str]:
    install_roles(kube)
    kubeconfig = plane.mint_kubeconfig("gpu-reconciler", name=name, namespace_roles=ROLES)
    return kubeconfig, f"system:serviceaccount:{MINTED_NAMESPACE}:{name}"


def test_the_rollout_controller_alone_is_never_denied(
    audited_plane: AuditedControlPlane, audited_kube: KubeApi, tmp_path: Path
) -> None:
    kube = audited_kube
    kubeconfig, username = _identity(audited_plane, kube, "controller-only")
    fleet = Fleet(kube, nodes=4, install_seconds=0.3).start()
    log_path = tmp_path / "controller.log"
    try:
        wait_for(lambda: len(fleet.ready_driver_nodes()) == 4, timeout=60,
                 what="4 Ready driver pods", observe=fleet.driver_pods)
        with reconciler(["run", "--role", "controller", "--kubeconfig", str(kubeconfig),
                          "--ready-timeout", "60s", "--ops-listen", "off"], log_path) as process:
            wait_for(lambda: inner(kube)["phase"], timeout=60,
                     what="the controller's first status", observe=log_path.read_text)
            kube.patch(cluster_operator_path(CLUSTER_OPERATOR_NAME), {"spec": {"driver": {
                "payload": {"version": NEW}, "upgradePolicy": GATED_POLICY}}})
            wait_for(lambda: co(kube)["spec"]["driver"]["upgradePolicy"].get("pause") is True,
                     timeout=60, what="pause: true at the gate",
                     observe=lambda: progress(kube, audited_plane, username, log_path))
            # controller-only mode: a person releases the gate the seed's way
            kube.patch(cluster_operator_path(CLUSTER_OPERATOR_NAME),
                       {"spec": {"driver": {"upgradePolicy": {"pause": False}}}})
            wait_for(lambda: completed(kube), timeout=90, what="the rollout Completed",
                     observe=lambda: progress(kube, audited_plane, username, log_path))
            assert sorted(fleet.ready_driver_nodes(NEW)) == fleet.node_names
            os.killpg(process.pid, signal.SIGTERM)
            code = process.wait(30)
    finally:
        fleet.stop(cleanup=True)
    assert_clean_log(log_path, code)
    entries = audit_entries(audited_plane.audit_log, username)
    assert entries, "the audit log recorded nothing for the reconciler's identity"
    assert denied(entries) == [], "missing permissions"


def test_merge_to_upgrade_with_exactly_the_deployed_roles(
    audited_plane: AuditedControlPlane, audited_kube: KubeApi, tmp_path: Path
) -> None:
    kube = audited_kube
    kubeconfig, username = _identity(audited_plane, kube, "least-privilege")
    fleet = Fleet(kube, nodes=4, install_seconds=0.3,
                  payload=Payload(REGISTRY, IMAGE, OLD)).start()
    try:
        entries = merge_to_upgrade(audited_plane, kube, fleet, kubeconfig, username, tmp_path)
    finally:
        fleet.stop(cleanup=True)
    granted = grants(load_documents(DEPLOY / "rbac.yaml"))
    used = {e.permission for e in entries}
    excess = [str(g) for g in granted if not any(g.covers(p) for p in used)]
    assert excess == [], f"granted but never used: {excess}"


def test_grants_cover_by_namespace_and_name() -> None:
    grant = Grant("apps", "daemonsets", "metax-operator", "patch", frozenset({"metax-driver"}))
    assert grant.covers(Permission("apps", "daemonsets", "metax-operator", "patch",
                                   "metax-driver"))
    assert not grant.covers(Permission("apps", "daemonsets", "metax-operator", "patch", "other"))
    assert not grant.covers(Permission("apps", "daemonsets", "kube-system", "patch",
                                       "metax-driver"))
    assert not grant.covers(Permission("apps", "daemonsets", "metax-operator", "delete",
                                       "metax-driver"))
    cluster_wide = Grant("", "pods", "", "list", frozenset())
    assert cluster_wide.covers(Permission("", "pods", "", "list"))
    assert cluster_wide.covers(Permission("", "pods", "metax-operator", "list"))


DAEMON_CODE = ("controller", "sync", "firmware", "ops", "gitops", "trust", "admission",
               "cli/run.py")


def test_every_resource_the_daemon_code_names_is_in_the_roles() -> None:
    """A static cross-check for code paths a rollout does not take: every resource the daemon's
    modules address (resource_path, /api/v1/... watches, the ClusterOperator, Leases) has a
    rule in deploy/rbac.yaml."""
    root = Path(__file__).resolve().parents[2] / "reconciler"
    files = [p for name in DAEMON_CODE for p in
             ((root / name).rglob("*.py") if (root / name).is_dir() else [root / name])]
    named: set[str] = set()
    for path in files:
        text = path.read_text()
        named.update(re.findall(r'resource_path\(\s*"[^"]+",\s*"([a-z]+)"', text))
        named.update(re.findall(r'"/api/v1/([a-z]+)"', text))
        if "cluster_operator_path(" in text:
            named.add("clusteroperators")
        if re.search(r'subresource="status"|cluster_operator_path\([^)]*subresource', text):
            named.add("clusteroperators/status")
        if "_namespaced_lease" in text:
            named.add("leases")
    assert {"nodes", "pods", "events", "clusteroperators", "leases"} <= named, named
    # with the optional parts (deploy/drain: the drain's budgets, evictions, pod deletions)
    granted = {g.resource for path in (DEPLOY / "rbac.yaml", DEPLOY / "drain" / "rbac-drain.yaml")
               for g in grants(load_documents(path))}
    assert named - granted == set(), f"named in the code, missing from rbac.yaml: {named - granted}"
