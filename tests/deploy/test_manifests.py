"""deploy/ is consistent with the code and accepted by a real API server."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from reconciler.kube.api import Conflict, KubeApi, resource_path
from reconciler.sim.crd import cluster_operator_crd
from tests.deploy.audit import DEPLOY, load_documents

KINDS = {
    "Namespace": ("v1", "namespaces", False),
    "ServiceAccount": ("v1", "serviceaccounts", True),
    "Secret": ("v1", "secrets", True),
    "Service": ("v1", "services", True),
    "Deployment": ("apps/v1", "deployments", True),
    "ClusterRole": ("rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("rbac.authorization.k8s.io/v1", "rolebindings", True),
    "CustomResourceDefinition": ("apiextensions.k8s.io/v1", "customresourcedefinitions", False),
    "ValidatingWebhookConfiguration": ("admissionregistration.k8s.io/v1",
                                       "validatingwebhookconfigurations", False),
}


def _all_documents() -> list[dict[str, Any]]:
    files = load_documents(DEPLOY / "kustomization.yaml")[0]["resources"]
    return [doc for name in files for doc in load_documents(DEPLOY / name)]


def _one(kind: str) -> dict[str, Any]:
    found = [d for d in _all_documents() if d["kind"] == kind]
    assert len(found) == 1, f"{kind}: {len(found)} documents"
    return found[0]


def test_crd_is_generated_from_the_schema() -> None:
    assert load_documents(DEPLOY / "crd.yaml") == [cluster_operator_crd()], (
        "deploy/crd.yaml is stale: run deploy/generate-crd")
    check = subprocess.run([sys.executable, str(DEPLOY / "generate-crd"), "--check"],
                           capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stderr


def test_kustomization_lists_every_manifest_but_the_secret_example() -> None:
    listed = set(load_documents(DEPLOY / "kustomization.yaml")[0]["resources"])
    present = {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present - {"secrets.example.yaml"}


def test_deployment_runs_two_replicas_with_leader_election_as_the_service_account() -> None:
    deployment = _one("Deployment")
    spec = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2
    assert spec["serviceAccountName"] == _one("ServiceAccount")["metadata"]["name"]
    container = spec["containers"][0]
    assert "--leader-elect" in container["args"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    env = {e["name"] for e in container["env"]}
    assert {"POD_NAME", "POD_NAMESPACE", "GIT_SSH_COMMAND"} <= env


def test_deployment_args_are_options_of_reconciler_run() -> None:
    from reconciler.cli.run import run

    options = {opt for param in run.params if isinstance(param, click.Option)
               for opt in param.opts}
    args = _one("Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "run"
    unknown = [a for a in args[1:] if a.split("=", 1)[0] not in options]
    assert unknown == [], f"not options of `reconciler run`: {unknown}"


def test_secrets_are_referenced_not_embedded() -> None:
    spec = _one("Deployment")["spec"]["template"]["spec"]
    secrets = {v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
    assert secrets == {"gpu-reconciler-git", "gpu-reconciler-webhook"}
    examples = {d["metadata"]["name"] for d in load_documents(DEPLOY / "secrets.example.yaml")}
    assert examples == secrets
    assert all(d["kind"] != "Secret" for d in _all_documents())
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    args = " ".join(spec["containers"][0]["args"])
    assert mounts["webhook-secret"]["mountPath"] + "/secret" in args


def test_service_targets_the_containers_named_ports() -> None:
    service = _one("Service")
    container = _one("Deployment")["spec"]["template"]["spec"]["containers"][0]
    names = {p["name"] for p in container["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= names
    assert service["spec"]["selector"].items() <= (
        _one("Deployment")["spec"]["template"]["metadata"]["labels"].items())


def test_bindings_bind_the_service_account_to_every_role() -> None:
    documents = _all_documents()
    account = _one("ServiceAccount")["metadata"]
    subject = {"kind": "ServiceAccount", "name": account["name"],
               "namespace": account["namespace"]}
    bound = {(b["roleRef"]["kind"], b["roleRef"]["name"], b["metadata"].get("namespace", ""))
             for b in documents if b["kind"] in ("ClusterRoleBinding", "RoleBinding")
             and subject in b["subjects"]}
    defined = {(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace", ""))
               for d in documents if d["kind"] in ("ClusterRole", "Role")}
    assert bound == defined


@pytest.mark.cluster
def test_the_api_server_accepts_every_manifest(audited_kube: KubeApi) -> None:
    """A server-side dry run of every document (the namespaces are created for real first, as
    `kubectl apply -k` would in that order)."""
    documents = _all_documents() + load_documents(DEPLOY / "secrets.example.yaml")
    for doc in documents:
        if doc["kind"] == "Namespace":
            with contextlib.suppress(Conflict):
                audited_kube.create(resource_path("v1", "namespaces"), doc)
    for doc in documents:
        api_version, plural, namespaced = KINDS[doc["kind"]]
        namespace = doc["metadata"].get("namespace") if namespaced else None
        if namespace:
            with contextlib.suppress(Conflict):
                audited_kube.create(resource_path("v1", "namespaces"),
                                    {"apiVersion": "v1", "kind": "Namespace",
                                     "metadata": {"name": namespace}})
        path = resource_path(api_version, plural, doc["metadata"]["name"], namespace=namespace)
        audited_kube.request("PATCH", path, body=doc,
                             content_type="application/apply-patch+yaml",
                             query={"dryRun": "All", "fieldManager": "deploy-test",
                                    "force": "true"})


def test_generate_crd_is_executable() -> None:
    assert (DEPLOY / "generate-crd").stat().st_mode & 0o111
    assert Path(DEPLOY / "generate-crd").read_text().startswith("#!")
