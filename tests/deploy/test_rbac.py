"""deploy/rbac.yaml is least privilege: the reconciler, run with an identity bound to exactly
those roles, carries a whole rollout (gate released by a person, every node upgraded) through
without a single 403, and every verb the roles grant was used (or is on a documented rare path).

The API server's audit log is the witness: it records each request's verb, resource, namespace
and name under the identity that made it, which is what RBAC decides on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from reconciler.kube.api import KubeApi
from reconciler.kube.objects import CLUSTER_OPERATOR_NAME, cluster_operator_path
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

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

RECONCILER = str(Path(sys.executable).parent / "reconciler")
NEW = "2.33.0.9"
POLICY = {
    "enableRollout": True,
    "upgradeSteps": [{"replicas": 1, "pauseDuration": {}},
                     {"replicas": "100%", "pauseDuration": 0}],
    "pause": False,
    "maxParallel": 2,
    "maxUnavailable": 0,
    "maxFailureThreshold": 1,
    "fallback": "pause",
}

# Granted verbs a normal rollout need not exercise, with the code path that uses them.
RARE_PATHS: dict[tuple[str, str, str], str] = {
    ("gpu.metax-tech.com", "clusteroperators", "get"):
        "controller/loop.py _refetch_cluster_operator: after a status write conflict",
}


def _status(kube: KubeApi) -> dict[str, Any]:
    co = kube.get(cluster_operator_path(CLUSTER_OPERATOR_NAME))
    return dict((co.get("status") or {}).get("upgradeStatus") or {})


def _inner(kube: KubeApi) -> dict[str, Any]:
    return dict(_status(kube).get("status") or {})


def _driver(kube: KubeApi) -> dict[str, Any]:
    co = kube.get(cluster_operator_path(CLUSTER_OPERATOR_NAME))
    return dict(co["spec"]["driver"])


def test_a_whole_rollout_with_exactly_the_deployed_roles(
    audited_plane: AuditedControlPlane, audited_kube: KubeApi, tmp_path: Path
) -> None:
    kube = audited_kube
    install_roles(kube)
    fleet = Fleet(kube, nodes=4, install_seconds=0.3).start()
    log_path = tmp_path / "reconciler.log"
    process: subprocess.Popen[bytes] | None = None
    try:
        wait_for(lambda: len(fleet.ready_driver_nodes()) == 4, timeout=60,
                 what="4 Ready driver pods", observe=fleet.driver_pods)
        kubeconfig = audited_plane.mint_kubeconfig(
            "gpu-reconciler", name="least-privilege",
            namespace_roles={"metax-operator": "gpu-reconciler-driver",
                             "default": "gpu-reconciler-events",
                             "gpu-reconciler": "gpu-reconciler-leader-election"},
        )
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [RECONCILER, "run", "--role", "controller", "--kubeconfig", str(kubeconfig),
                 "--ready-timeout", "60s", "--log-level", "debug"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        wait_for(lambda: _status(kube).get("phase"), timeout=60,
                 what="the controller's first status", observe=log_path.read_text)
        # a merged pull request: new version, a gate after the first node
        kube.patch(cluster_operator_path(CLUSTER_OPERATOR_NAME),
                   {"spec": {"driver": {"payload": {"version": NEW}, "upgradePolicy": POLICY}}})
        wait_for(lambda: _driver(kube)["upgradePolicy"].get("pause") is True,
                 timeout=60, what="pause: true at the gate",
                 observe=lambda: (_inner(kube), log_path.read_text()[-2000:]))
        kube.patch(cluster_operator_path(CLUSTER_OPERATOR_NAME),
                   {"spec": {"driver": {"upgradePolicy": {"pause": False}}}})
        wait_for(lambda: _status(kube).get("phase") == "Idling"
                 and _inner(kube).get("currentStepState") == "Completed",
                 timeout=90, what="the rollout Completed",
                 observe=lambda: (_inner(kube), log_path.read_text()[-2000:]))
        assert sorted(fleet.ready_driver_nodes(NEW)) == fleet.node_names
    finally:
        if process is not None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(30)
        fleet.stop(cleanup=True)

    log_text = log_path.read_text()
    assert process is not None and process.returncode == 0, log_text[-3000:]
    assert "403" not in log_text and "Forbidden" not in log_text, log_text[-3000:]

    username = f"system:serviceaccount:{MINTED_NAMESPACE}:least-privilege"
    entries = audit_entries(audited_plane.audit_log, username)
    assert entries, "the audit log recorded nothing for the reconciler's identity"
    denied = sorted({f"{e.permission} ({e.uri})" for e in entries if e.code == 403})
    assert denied == [], f"missing permissions: {denied}"

    granted = grants(load_documents(DEPLOY / "rbac.yaml"))
    used = {e.permission for e in entries}
    excess = [str(g) for g in granted
              if not any(g.covers(p) for p in used)
              and (g.group, g.resource, g.verb) not in RARE_PATHS]
    assert excess == [], f"granted but never used (remove them, or document a rare path): {excess}"


def test_rare_paths_name_code_that_exists() -> None:
    root = Path(__file__).resolve().parents[2] / "reconciler"
    for reason in RARE_PATHS.values():
        file, function = reason.split(" ", 2)[:2]
        assert function in (root / file).read_text(), reason


def test_grants_cover_by_namespace_and_name() -> None:
    grant = Grant("apps", "daemonsets", "metax-operator", "patch", frozenset({"metax-driver"}))
    assert grant.covers(Permission("apps", "daemonsets", "metax-operator", "patch", "metax-driver"))
    assert not grant.covers(Permission("apps", "daemonsets", "metax-operator", "patch", "other"))
    assert not grant.covers(Permission("apps", "daemonsets", "kube-system", "patch",
                                       "metax-driver"))
    assert not grant.covers(Permission("apps", "daemonsets", "metax-operator", "delete",
                                       "metax-driver"))
