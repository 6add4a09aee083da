"""deploy/rbac.yaml is least privilege: the reconciler, run with an identity bound to exactly
those roles, carries a whole rollout through without a single 403 (a missing rule), and every verb
the roles grant is used during it (an excess rule fails the test).

The witness is the API server's audit log: it records each request's verb, resource, namespace
and object name under the identity that made it, which is what RBAC decides on.
"""

from __future__ import annotations

import datetime
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from reconciler.admission.config import CONFIG_NAME, webhook_configuration
from reconciler.demo.gitwork import Person, Remote, WorkingCopy
from reconciler.gitops.edits import FieldEdit
from reconciler.kube.api import KubeApi, resource_path
from reconciler.kube.objects import cluster_operator_path
from reconciler.names import CLUSTER_OPERATOR_NAME
from reconciler.policy.payload import Payload
from reconciler.sim.control_plane import MINTED_NAMESPACE, free_ports
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from tests.deploy.audit import (
    DEPLOY,
    AuditedControlPlane,
    AuditEntry,
    Grant,
    Permission,
    audit_entries,
    grants,
    load_documents,
)
from tests.deploy.conftest import install_roles

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

RECONCILER = [sys.executable, "-m", "reconciler.cli.main"]
WEBHOOK_CONFIGS = resource_path("admissionregistration.k8s.io/v1",
                                "validatingwebhookconfigurations")
OLD, NEW = "2.32.0.6", "2.33.0.9"
REGISTRY, IMAGE = "registry.example.com/metax", "driver-image"
ROLES = {"metax-operator": "gpu-reconciler-driver", "default": "gpu-reconciler-events",
         "gpu-reconciler": "gpu-reconciler-leader-election"}
GATED_POLICY = {
    "enableRollout": True,
    "upgradeSteps": [{"replicas": 1, "pauseDuration": {}},
                     {"replicas": "100%", "pauseDuration": 0}],
    "pause": False,
    "maxParallel": 2,
    "maxUnavailable": 0,
    "maxFailureThreshold": 1,
    "fallback": "pause",
}

def _co(kube: KubeApi) -> dict[str, Any]:
    return kube.get(cluster_operator_path(CLUSTER_OPERATOR_NAME))


def _inner(kube: KubeApi) -> dict[str, Any]:
    upgrade = (_co(kube).get("status") or {}).get("upgradeStatus") or {}
    return {"phase": upgrade.get("phase"), **(upgrade.get("status") or {})}


def _completed(kube: KubeApi) -> bool:
    inner = _inner(kube)
    return inner["phase"] == "Idling" and inner.get("currentStepState") == "Completed"


@contextmanager
def _reconciler(args: list[str], log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECONCILER_")}
    env.pop("KUBECONFIG", None)
    with log_path.open("wb") as log:
        process = subprocess.Popen([*RECONCILER, *args], stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True,
                                   env={**env, "PYTHONUNBUFFERED": "1", "POD_NAME": "replica-a"})
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)


def _denied(entries: list[AuditEntry]) -> list[str]:
    return sorted({f"{e.permission} ({e.uri})" for e in entries if e.code == 403})


def _progress(kube: KubeApi, plane: AuditedControlPlane, username: str,
              log_path: Path) -> dict[str, Any]:
    """What a wait shows when it times out: the status, the denials so far, the log's tail."""
    return {"status": _inner(kube),
            "denied": _denied(audit_entries(plane.audit_log, username)),
            "log": log_path.read_text()[-1500:]}


def _assert_clean_log(log_path: Path, code: int | None) -> None:
    text = log_path.read_text()
    assert code == 0, text[-3000:]
    assert " 403" not in text and "Forbidden" not in text, text[-3000:]


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
        with _reconciler(["run", "--role", "controller", "--kubeconfig", str(kubeconfig),
                          "--ready-timeout", "60s", "--ops-listen", "off"], log_path) as process:
            wait_for(lambda: _inner(kube)["phase"], timeout=60,
                     what="the controller's first status", observe=log_path.read_text)
            kube.patch(cluster_operator_path(CLUSTER_OPERATOR_NAME), {"spec": {"driver": {
                "payload": {"version": NEW}, "upgradePolicy": GATED_POLICY}}})
            wait_for(lambda: _co(kube)["spec"]["driver"]["upgradePolicy"].get("pause") is True,
                     timeout=60, what="pause: true at the gate",
                     observe=lambda: _progress(kube, audited_plane, username, log_path))
            # controller-only mode: a person releases the gate the seed's way
            kube.patch(cluster_operator_path(CLUSTER_OPERATOR_NAME),
                       {"spec": {"driver": {"upgradePolicy": {"pause": False}}}})
            wait_for(lambda: _completed(kube), timeout=90, what="the rollout Completed",
                     observe=lambda: _progress(kube, audited_plane, username, log_path))
            assert sorted(fleet.ready_driver_nodes(NEW)) == fleet.node_names
            os.killpg(process.pid, signal.SIGTERM)
            code = process.wait(30)
    finally:
        fleet.stop(cleanup=True)
    _assert_clean_log(log_path, code)
    entries = audit_entries(audited_plane.audit_log, username)
    assert entries, "the audit log recorded nothing for the reconciler's identity"
    assert _denied(entries) == [], "missing permissions"


def _policy_file(version: str) -> str:
    body = {
        "apiVersion": "gpu.metax-tech.com/v1alpha1",
        "kind": "ClusterOperator",
        "metadata": {"name": CLUSTER_OPERATOR_NAME},
        "spec": {"driver": {
            "payload": {"name": IMAGE, "registry": REGISTRY, "version": version},
            "fwUpgradePolicy": "Never",
            "upgradePolicy": GATED_POLICY,
        }},
    }
    from io import StringIO

    out = StringIO()
    YAML().dump(body, out)
    return "# rbac-lab: four GPU nodes\n" + out.getvalue()


def test_merge_to_upgrade_with_exactly_the_deployed_roles(
    audited_plane: AuditedControlPlane, audited_kube: KubeApi, tmp_path: Path
) -> None:
    kube = audited_kube
    kubeconfig, username = _identity(audited_plane, kube, "least-privilege")
    fleet = Fleet(kube, nodes=4, install_seconds=0.3,
                  payload=Payload(REGISTRY, IMAGE, OLD)).start()
    remote = Remote.create(tmp_path / "remote.git")
    person = WorkingCopy.clone(remote, tmp_path / "person",
                               Person("Pat Person", "pat@example.com"))
    policy = "clusters/rbac-lab/cluster-operator.yaml"
    (person.path / "clusters" / "rbac-lab").mkdir(parents=True)
    (person.path / policy).write_text(_policy_file(OLD))
    person.git("checkout", "--quiet", "-B", "main")
    person.git("add", "--all")
    person.git("commit", "--quiet", "-m", "rbac-lab policy")
    person.push()
    log_path = tmp_path / "reconciler.log"
    # the admission webhook with its self-signed certificate: the configuration as `kubectl
    # apply -k deploy/` creates it (no caBundle), pointed at the daemon's loopback listener
    admission_port = free_ports(1)[0]
    config_path = f"{WEBHOOK_CONFIGS}/{CONFIG_NAME}"
    kube.apply(config_path, webhook_configuration(
        url=f"https://127.0.0.1:{admission_port}/validate-clusteroperator"),
        field_manager="deploy-test")
    try:
        wait_for(lambda: len(fleet.ready_driver_nodes()) == 4, timeout=60,
                 what="4 Ready driver pods", observe=fleet.driver_pods)
        args = ["run", "--repo", remote.url, "--cluster", "rbac-lab",
                "--admission-listen", f"127.0.0.1:{admission_port}", "--admission-self-signed",
                "--admission-host", "127.0.0.1", "--admission-cert-interval", "1s",
                "--kubeconfig", str(kubeconfig), "--state-dir", str(tmp_path / "state"),
                "--fetch-interval", "1s", "--status-min-interval", "1s",
                "--ready-timeout", "60s", "--ops-listen", "off",
                "--leader-elect", "--leader-elect-namespace", "gpu-reconciler",
                "--lease-duration", "4s", "--renew-deadline", "3s", "--retry-period", "1s"]
        with _reconciler(args, log_path) as process:
            wait_for(lambda: _co(kube)["spec"]["driver"]["upgradePolicy"].get("enableRollout")
                     is True and bool(_inner(kube)["phase"]), timeout=60,
                     what="the repository's policy applied",
                     observe=lambda: _progress(kube, audited_plane, username, log_path))
            person.edit_policy(policy, [FieldEdit(("spec", "driver", "payload", "version"), NEW)],
                               f"rbac-lab: driver {NEW}")
            person.push()

            def at_gate_in_git() -> bool:
                text = remote.show(f"main:{policy}") or ""
                data = YAML(typ="safe").load(text) or {}
                upgrade = (_co(kube).get("status") or {}).get("upgradeStatus") or {}
                gate = any(c.get("type") == "ManualGate" and c.get("status") == "True"
                           for c in upgrade.get("condition") or [])
                return gate and data["spec"]["driver"]["upgradePolicy"].get("pause") is True

            wait_for(at_gate_in_git, timeout=90,
                     what="the gate reached and its pause: true written back to Git",
                     observe=lambda: _progress(kube, audited_plane, username, log_path))
            person.pull()
            person.edit_policy(policy,
                               [FieldEdit(("spec", "driver", "upgradePolicy", "pause"), False)],
                               "rbac-lab: release the gate")
            person.push()
            wait_for(lambda: _completed(kube), timeout=90, what="the rollout Completed",
                     observe=lambda: _progress(kube, audited_plane, username, log_path))
            assert sorted(fleet.ready_driver_nodes(NEW)) == fleet.node_names

            def completed_in_git() -> bool:
                data = YAML(typ="safe").load(remote.show("main:status/rbac-lab.yaml") or "{}")
                inner = ((data or {}).get("upgradeStatus") or {}).get("status") or {}
                return inner.get("currentStepState") == "Completed"

            wait_for(completed_in_git, timeout=60, what="the completed snapshot in Git")
            _rotated_by_the_leader(kube, log_path)
            os.killpg(process.pid, signal.SIGTERM)
            code = process.wait(30)
    finally:
        kube.delete(config_path)  # fail closed: without the daemon no finalizer could go
        fleet.stop(cleanup=True)
    _assert_clean_log(log_path, code)

    entries = audit_entries(audited_plane.audit_log, username)
    assert entries, "the audit log recorded nothing for the reconciler's identity"
    assert _denied(entries) == [], "missing permissions"
    granted = grants(load_documents(DEPLOY / "rbac.yaml"))
    used = {e.permission for e in entries}
    excess = [str(g) for g in granted if not any(g.covers(p) for p in used)]
    assert excess == [], f"granted but never used: {excess}"


def _rotated_by_the_leader(kube: KubeApi, log_path: Path) -> None:
    """The admission webhook took every ClusterOperator change of the rollout (the caBundle
    the leader set verifies); a certificate that no longer names the host is reissued."""
    import base64

    from reconciler.admission.certificates import issue_ca, issue_serving
    from reconciler.sim.admission import PROBE_RULE, probe

    assert PROBE_RULE in probe(kube)
    secret_path = resource_path("v1", "secrets", "gpu-reconciler-admission-tls",
                                namespace="gpu-reconciler")
    now = datetime.datetime.now(datetime.UTC)
    stranger = issue_serving(issue_ca("someone else", now=now), ["other.example"], now=now)
    kube.patch(secret_path, {"data": {
        "tls.crt": base64.b64encode(stranger.cert_pem).decode(),
        "tls.key": base64.b64encode(stranger.key_pem).decode()}})

    def reissued() -> bool:
        data = kube.get(secret_path)["data"]
        return base64.b64decode(data["tls.crt"]) != stranger.cert_pem
    wait_for(reissued, timeout=30, what="the leader reissuing the serving certificate",
             observe=lambda: log_path.read_text()[-1500:])
    wait_for(lambda: PROBE_RULE in probe(kube), timeout=30,
             what="the API server calling the webhook with the reissued certificate")


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
    granted = {g.resource for g in grants(load_documents(DEPLOY / "rbac.yaml"))}
    assert named - granted == set(), f"named in the code, missing from rbac.yaml: {named - granted}"
