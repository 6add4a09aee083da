"""A whole merge-to-upgrade carried through by the reconciler under a given identity on the
audited control plane: the least-privilege tests of deploy/rbac.yaml (test_rbac.py) and of the
roles `helm install` makes from the chart (test_helm.py) both drive it."""

from __future__ import annotations

import base64
import datetime
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from io import StringIO
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from reconciler.admission.certificates import issue_ca, issue_serving
from reconciler.admission.config import CONFIG_NAME, webhook_configuration
from reconciler.demo.gitwork import Person, Remote, WorkingCopy
from reconciler.gitops.edits import FieldEdit
from reconciler.kube.api import KubeApi, NotFound, resource_path
from reconciler.kube.objects import cluster_operator_path
from reconciler.names import CLUSTER_OPERATOR_NAME
from reconciler.sim.admission import PROBE_RULE, probe
from reconciler.sim.control_plane import free_ports
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from tests.deploy.audit import AuditedControlPlane, AuditEntry, audit_entries

RECONCILER = [sys.executable, "-m", "reconciler.cli.main"]
WEBHOOK_CONFIGS = resource_path("admissionregistration.k8s.io/v1",
                                "validatingwebhookconfigurations")
OLD, NEW = "2.32.0.6", "2.33.0.9"
REGISTRY, IMAGE = "registry.example.com/metax", "driver-image"
GATED_POLICY = {
    "enableRollout": True,
    "upgradeSteps": [{"replicas": 1},
                     {"replicas": "100%", "pauseDuration": 0}],
    "pause": False,
    "maxParallel": 2,
    "maxUnavailable": 0,
    "maxFailureThreshold": 1,
    "fallback": "pause",
}


def co(kube: KubeApi) -> dict[str, Any]:
    return kube.get(cluster_operator_path(CLUSTER_OPERATOR_NAME))


def inner(kube: KubeApi) -> dict[str, Any]:
    upgrade = (co(kube).get("status") or {}).get("upgradeStatus") or {}
    return {"phase": upgrade.get("phase"), **(upgrade.get("status") or {})}


def completed(kube: KubeApi) -> bool:
    now = inner(kube)
    return now["phase"] == "Idling" and now.get("currentStepState") == "Completed"


@contextmanager
def reconciler(args: list[str], log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECONCILER_")}
    env.pop("KUBECONFIG", None)
    with log_path.open("wb") as log:
        process = subprocess.Popen([*RECONCILER, *args], stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True,
                                   env={**env, "PYTHONUNBUFFERED": "1", "POD_NAME": "replica-a"})
    try:
        yield process
    finally:
        _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process group, SIGKILL when it still runs 30 s later."""
    for sig, grace in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        if process.poll() is not None:
            return
        os.killpg(process.pid, sig)
        with suppress(subprocess.TimeoutExpired):
            process.wait(grace)


def denied(entries: list[AuditEntry]) -> list[str]:
    return sorted({f"{e.permission} ({e.uri})" for e in entries if e.code == 403})


def progress(kube: KubeApi, plane: AuditedControlPlane, username: str,
             log_path: Path) -> dict[str, Any]:
    """What a wait shows when it times out: the status, the denials so far, the log's tail."""
    return {"status": inner(kube),
            "denied": denied(audit_entries(plane.audit_log, username)),
            "log": log_path.read_text()[-1500:]}


def assert_clean_log(log_path: Path, code: int | None) -> None:
    text = log_path.read_text()
    assert code == 0, text[-3000:]
    assert " 403" not in text and "Forbidden" not in text, text[-3000:]


def policy_file(version: str) -> str:
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
    out = StringIO()
    YAML().dump(body, out)
    return "# rbac-lab: four GPU nodes\n" + out.getvalue()


def _point_admission_at(kube: KubeApi, url: str) -> bool:
    """The admission webhook's configuration calling the daemon's loopback listener: as `kubectl
    apply -k deploy/` creates it (no caBundle), or the one `helm install` made, redirected.
    True when it was created here (and is to be deleted here)."""
    path = f"{WEBHOOK_CONFIGS}/{CONFIG_NAME}"
    try:
        kube.get(path)
    except NotFound:
        kube.apply(path, webhook_configuration(url=url), field_manager="deploy-test")
        return True
    kube.patch(path, [{"op": "replace", "path": "/webhooks/0/clientConfig",
                       "value": {"url": url}}], patch_type="json")
    return False


def merge_to_upgrade(plane: AuditedControlPlane, kube: KubeApi, fleet: Fleet,
                     kubeconfig: Path, username: str, tmp_path: Path) -> list[AuditEntry]:
    """A person merges a new driver version, the rollout stops at its gate (written back to
    Git), the person releases it, every node ends on the new version with the completed snapshot
    in Git, and the leader reissues a broken admission certificate: all by the reconciler run
    with ``kubeconfig``. Returns the audit log's entries of ``username``, none of them denied."""
    remote = Remote.create(tmp_path / "remote.git")
    person = WorkingCopy.clone(remote, tmp_path / "person",
                               Person("Pat Person", "pat@example.com"))
    policy = "clusters/rbac-lab/cluster-operator.yaml"
    (person.path / "clusters" / "rbac-lab").mkdir(parents=True)
    (person.path / policy).write_text(policy_file(OLD))
    person.git("checkout", "--quiet", "-B", "main")
    person.git("add", "--all")
    person.git("commit", "--quiet", "-m", "rbac-lab policy")
    person.push()
    log_path = tmp_path / "reconciler.log"
    admission_port = free_ports(1)[0]
    created = _point_admission_at(
        kube, f"https://127.0.0.1:{admission_port}/validate-clusteroperator")
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
        with reconciler(args, log_path) as process:
            wait_for(lambda: co(kube)["spec"]["driver"]["upgradePolicy"].get("enableRollout")
                     is True and bool(inner(kube)["phase"]), timeout=60,
                     what="the repository's policy applied",
                     observe=lambda: progress(kube, plane, username, log_path))
            person.edit_policy(policy, [FieldEdit(("spec", "driver", "payload", "version"), NEW)],
                               f"rbac-lab: driver {NEW}")
            person.push()

            def at_gate_in_git() -> bool:
                text = remote.show(f"main:{policy}") or ""
                data = YAML(typ="safe").load(text) or {}
                upgrade = (co(kube).get("status") or {}).get("upgradeStatus") or {}
                gate = any(c.get("type") == "ManualGate"
                           for c in upgrade.get("conditions") or [])
                return gate and data["spec"]["driver"]["upgradePolicy"].get("pause") is True

            wait_for(at_gate_in_git, timeout=90,
                     what="the gate reached and its pause: true written back to Git",
                     observe=lambda: progress(kube, plane, username, log_path))
            person.pull()
            person.edit_policy(policy,
                               [FieldEdit(("spec", "driver", "upgradePolicy", "pause"), False)],
                               "rbac-lab: release the gate")
            person.push()
            wait_for(lambda: completed(kube), timeout=90, what="the rollout Completed",
                     observe=lambda: progress(kube, plane, username, log_path))
            assert sorted(fleet.ready_driver_nodes(NEW)) == fleet.node_names

            def completed_in_git() -> bool:
                data = YAML(typ="safe").load(remote.show("main:status/rbac-lab.yaml") or "{}")
                status = ((data or {}).get("upgradeStatus") or {}).get("status") or {}
                return status.get("currentStepState") == "Completed"

            wait_for(completed_in_git, timeout=60, what="the completed snapshot in Git")
            _rotated_by_the_leader(kube, log_path)
            os.killpg(process.pid, signal.SIGTERM)
            code = process.wait(30)
    finally:
        if created:  # fail closed: without the daemon no finalizer could go
            kube.delete(f"{WEBHOOK_CONFIGS}/{CONFIG_NAME}")
    assert_clean_log(log_path, code)

    entries = audit_entries(plane.audit_log, username)
    assert entries, "the audit log recorded nothing for the reconciler's identity"
    assert denied(entries) == [], "missing permissions"
    return entries


def _rotated_by_the_leader(kube: KubeApi, log_path: Path) -> None:
    """The admission webhook took every ClusterOperator change of the rollout (the caBundle
    the leader set verifies); a certificate that no longer names the host is reissued."""
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
