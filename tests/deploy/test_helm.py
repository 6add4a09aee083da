"""The Helm chart (deploy/helm/gpu-gitops-reconciler) with a real helm: linted, the source of the
kustomize manifests, accepted by the API server, installed with a whole rollout driven by exactly
its ServiceAccount and roles, uninstalled without leftovers, and the README's commands run."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from reconciler.kube.api import Conflict, KubeApi, resource_path
from reconciler.policy.payload import Payload
from reconciler.sim.control_plane import ControlPlane
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from tests.deploy.audit import DEPLOY, ROOT, AuditedControlPlane, grants, load_documents
from tests.deploy.helm import (
    CHART,
    NAMESPACE,
    RELEASE,
    helm,
    helm_binary,
    render_manifests,
    render_optional_parts,
)
from tests.deploy.rollout import IMAGE, OLD, REGISTRY, merge_to_upgrade

STANDARD_LABELS = {"app.kubernetes.io/name", "app.kubernetes.io/instance",
                   "app.kubernetes.io/version", "app.kubernetes.io/managed-by", "helm.sh/chart"}
#: what the reconciler makes itself, and so what `helm uninstall` leaves in the namespace
#: (deploy/README.md, "Uninstall"), beside what Kubernetes puts into every namespace
DAEMON_MADE = {"secret/gpu-reconciler-admission-tls", "lease.coordination.k8s.io/gpu-reconciler"}
EVERY_NAMESPACE = {"configmap/kube-root-ca.crt", "serviceaccount/default"}
OPTIONAL = ("--set", "admission.certManager.enabled=true",
            "--set", "metrics.prometheusRule.enabled=true")


def _documents(text: str) -> list[dict[str, Any]]:
    return [d for d in YAML(typ="safe").load_all(text) if d]


def _template(*args: str) -> list[dict[str, Any]]:
    return _documents(helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                           *args).stdout)


def _of(documents: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in documents if d["kind"] == kind]


def _args(documents: list[dict[str, Any]]) -> list[str]:
    (deployment,) = _of(documents, "Deployment")
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def test_helm_knows_its_version_and_the_kubernetes_version_it_assumes() -> None:
    shown = helm("version", "--template", "{{.Version}} {{.KubeClientVersion}}").stdout
    assert re.fullmatch(r"v4\.\d+\.\d+ v1\.\d+", shown), shown


@pytest.mark.parametrize("options", [(), OPTIONAL], ids=["defaults", "everything-on"])
def test_the_chart_passes_helm_lint_strict(options: tuple[str, ...]) -> None:
    result = helm("lint", "--strict", str(CHART), *options)
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout, result.stdout


def test_the_values_schema_refuses_a_misspelt_mode() -> None:
    result = helm("template", RELEASE, str(CHART), "--set", "mode=bultin", check=False)
    assert result.returncode != 0 and "/mode" in result.stderr, result.stderr


@pytest.mark.parametrize(("options", "says"), [
    (("--set", "leaderElection.enable=false"), "additional properties 'enable' not allowed"),
    (("--set", "replica=1"), "additional properties 'replica' not allowed"),
    (("--set", "leaderElection.leaseDuration=soon"), "/leaderElection/leaseDuration"),
    (("--set", "clusterOperator=Cluster Operator"), "/clusterOperator"),
    (("--set", "fullnameOverride=" + "a" * 64), "/fullnameOverride"),
    (("--set", "admission.certManager.issuerRef.kind=ClusterIssuer"), "missing property 'name'"),
    (("--set", "leaderElection.enabled=false"),
     "replicas: 2 needs leaderElection.enabled=true: without it every replica would sync"),
])
def test_values_that_would_change_nothing_or_run_two_leaders_are_refused(
        options: tuple[str, ...], says: str) -> None:
    """A misspelt key would silently keep the default; two replicas without leader election
    would both sync, write Git and drive the rollout."""
    result = helm("template", RELEASE, str(CHART), *options, check=False)
    assert result.returncode != 0 and says in result.stderr, result.stderr


def test_the_kustomize_manifests_are_the_chart_rendered() -> None:
    rendered = render_manifests()
    listed = set(load_documents(DEPLOY / "kustomization.yaml")[0]["resources"])
    assert set(rendered) == listed - {"crd.yaml"}
    drifted = [name for name, text in rendered.items() if (DEPLOY / name).read_text() != text]
    assert drifted == [], f"stale, run scripts/render-manifests: {drifted}"
    # the chart's CRD is deploy/crd.yaml itself (a link), and the manifests leave it out of
    # the rendering (crd.install: false): one file, from deploy/generate-crd
    assert (CHART / "files" / "crd.yaml").resolve() == (DEPLOY / "crd.yaml").resolve()
    assert not (CHART / "crds").exists(), "helm 4 would apply crds/ over the vendor's CRD"
    check = subprocess.run([str(ROOT / "scripts" / "render-manifests"), "--check"],
                           capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stderr


def test_the_drain_part_is_off_by_default_and_rendered_into_its_own_folder() -> None:
    """docs/live-clusters.md#the-drain: the eviction permissions are an optional part, on when drain
    is."""
    assert not [d for d in _template() if d["metadata"]["name"].endswith("-drain")]
    on = [d for d in _template("--set", "drain.enabled=true")
          if d["metadata"]["name"] == f"{RELEASE}-drain"]
    assert sorted(d["kind"] for d in on) == ["ClusterRole", "ClusterRoleBinding"]
    assert {str(g) for g in grants(on)} == {str(g) for g in grants(
        load_documents(DEPLOY / "drain" / "rbac-drain.yaml"))}
    rendered = render_optional_parts()
    assert set(rendered) == {"drain/rbac-drain.yaml"}
    drifted = [name for name, text in rendered.items() if (DEPLOY / name).read_text() != text]
    assert drifted == [], f"stale, run scripts/render-manifests: {drifted}"
    assert load_documents(DEPLOY / "drain" / "kustomization.yaml")[0]["resources"] == [
        "rbac-drain.yaml"]


def test_the_defaults_carry_helms_labels_and_need_no_other_projects_crds() -> None:
    documents = _template()
    assert {d["kind"] for d in documents} == {
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service",
        "Deployment", "ValidatingWebhookConfiguration", "CustomResourceDefinition"}
    unlabelled = [f"{d['kind']}/{d['metadata']['name']}" for d in documents
                  if not set(d["metadata"].get("labels") or {}) >= STANDARD_LABELS]
    assert unlabelled == []
    (deployment,) = _of(documents, "Deployment")
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector == {"app.kubernetes.io/name": "gpu-gitops-reconciler",
                        "app.kubernetes.io/instance": RELEASE}
    assert "--admission-self-signed" in _args(documents)
    # the CRD is a template (made only where none exists: tests/deploy/test_helm_crd.py), kept
    # on uninstall; nothing in crds/, which helm 4 would apply over the vendor's CRD
    assert helm("show", "crds", str(CHART)).stdout.strip() == ""
    (crd,) = _of(documents, "CustomResourceDefinition")
    assert crd["metadata"]["name"] == "clusteroperators.gpu.metax-tech.com"
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert {k: v for k, v in crd.items() if k != "metadata"} == {
        k: v for k, v in load_documents(DEPLOY / "crd.yaml")[0].items() if k != "metadata"}
    assert not _of(_template("--set", "crd.install=false"), "CustomResourceDefinition")


@pytest.mark.parametrize("options", [
    ("--set", "fullnameOverride=gitops"),
    ("--set", "leaderElection.enabled=false", "--set", "replicas=1",
     "--set", "clusterOperator=fleet-a"),
    ("--set", "admission.enabled=false", "--set", "webhook.enabled=false"),
], ids=["renamed", "no-leader-election", "no-admission-no-webhook"])
def test_the_roles_name_what_the_arguments_name(options: tuple[str, ...]) -> None:
    """Whatever the names and the parts turned off, each object a rule names is the one the
    reconciler is told to use, and a part turned off leaves no rule, flag or port behind."""
    documents = _template(*options)
    args = dict(a.partition("=")[::2] for a in _args(documents))
    named = {(g.resource, g.verb): set(g.names) for g in grants(documents) if g.names}
    assert named[("clusteroperators", "patch")] == {args["--cluster-operator"]}
    (service,) = _of(documents, "Service")
    (deployment,) = _of(documents, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == _of(documents, "ServiceAccount")[0]["metadata"]["name"]
    ports = {p["name"] for p in pod["containers"][0]["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports
    if "--leader-elect" in args:
        assert named[("leases", "update")] == {args["--leader-elect-lease"]}
    else:
        assert ("leases", "update") not in named
    configs = _of(documents, "ValidatingWebhookConfiguration")
    if "--admission-self-signed" in args:
        assert named[("secrets", "update")] == {args["--admission-secret"]}
        assert named[("validatingwebhookconfigurations", "patch")] == {
            args["--admission-webhook-config"]} == {configs[0]["metadata"]["name"]}
        target = configs[0]["webhooks"][0]["clientConfig"]["service"]
        assert args["--admission-host"] == f"{target['name']}.{target['namespace']}.svc"
        assert target["name"] == service["metadata"]["name"]
    else:
        assert configs == [] and "admission" not in ports
        assert ("secrets", "update") not in named
    assert ("--webhook-listen" in args) == ("webhook" in ports)


def test_cert_manager_and_the_alert_rules_when_asked() -> None:
    documents = _template(*OPTIONAL)
    (certificate,) = _of(documents, "Certificate")
    (issuer,) = _of(documents, "Issuer")
    (config,) = _of(documents, "ValidatingWebhookConfiguration")
    assert certificate["spec"]["secretName"] == f"{RELEASE}-admission-tls"
    assert f"{RELEASE}.{NAMESPACE}.svc" in certificate["spec"]["dnsNames"]
    assert certificate["spec"]["issuerRef"]["name"] == issuer["metadata"]["name"]
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        f"{NAMESPACE}/{certificate['metadata']['name']}")
    args = _args(documents)
    assert "--admission-cert-dir=/etc/gpu-reconciler/admission" in args
    assert "--admission-self-signed" not in args
    # the reconciler writes neither the Secret nor caBundle then
    assert {g.resource for g in grants(documents)}.isdisjoint(
        {"secrets", "validatingwebhookconfigurations"})
    (rule,) = _of(documents, "PrometheusRule")
    assert rule["spec"] == load_documents(DEPLOY / "monitoring" / "alerts.yaml")[0]


def _kubectl(plane: ControlPlane, *args: str, cwd: Path | None = None,
             stdin: str | None = None) -> str:
    kubectl = plane.binaries.kubectl
    assert kubectl, "no kubectl beside the control plane's binaries nor on PATH"
    result = subprocess.run([kubectl, f"--kubeconfig={plane.kubeconfig}", *args],
                            capture_output=True, text=True, input=stdin, cwd=cwd, check=False)
    assert result.returncode == 0, f"kubectl {' '.join(args)}:\n{result.stderr}"
    return result.stdout


def _ensure_namespaces(kube: KubeApi, *names: str) -> None:
    for name in names:
        with contextlib.suppress(Conflict):
            kube.create(resource_path("v1", "namespaces"),
                        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


@pytest.mark.cluster
def test_the_api_server_accepts_every_object_of_the_default_render(
    control_plane: ControlPlane, kube: KubeApi
) -> None:
    """The CRD applied first, for real; then a server-side dry run of every other object."""
    _kubectl(control_plane, "apply", "--server-side", "--force-conflicts",
             "--field-manager=deploy-test", "-f", str(DEPLOY / "crd.yaml"))
    _ensure_namespaces(kube, NAMESPACE, "metax-operator")
    text = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE).stdout
    accepted = _kubectl(control_plane, "apply", "--dry-run=server", "--server-side",
                        "--field-manager=deploy-test", "-o", "name", "-f", "-", stdin=text)
    names = {f"{d['kind'].lower()}/{d['metadata']['name']}" for d in _documents(text)}
    shown = {f"{kind.split('.')[0]}/{name}"
             for kind, name in (line.split("/", 1) for line in accepted.split())}
    assert shown == names


def _left_in_namespace(plane: ControlPlane) -> set[str]:
    return set(_kubectl(plane, "-n", NAMESPACE, "get", "-o", "name",
                        "all,secrets,configmaps,serviceaccounts,roles,rolebindings,leases,"
                        "endpointslices").split())


def _labelled(plane: ControlPlane) -> set[str]:
    """Everything else of the release: cluster-scoped, and Roles in the other namespaces."""
    return set(_kubectl(plane, "get", "-A", "-o", "name",
                        "-l", f"app.kubernetes.io/instance={RELEASE}",
                        "clusterroles,clusterrolebindings,roles,rolebindings,"
                        "validatingwebhookconfigurations,deployments,services").split())


@pytest.mark.cluster
@pytest.mark.slow
def test_a_release_drives_a_rollout_with_its_own_account_and_uninstalls_cleanly(
    audited_plane: AuditedControlPlane, audited_kube: KubeApi, tmp_path: Path
) -> None:
    """`helm install` makes the ServiceAccount and roles; the reconciler runs beside the API
    server with that account's token (no container runtime here, so the Deployment is scaled
    to 0) through a whole rollout: no 403, no granted verb unused. `helm uninstall` then leaves
    only the CRD and what the daemon made itself."""
    plane, kube = audited_plane, audited_kube
    fleet = Fleet(kube, nodes=4, install_seconds=0.3,
                  payload=Payload(REGISTRY, IMAGE, OLD)).start()  # the operator's namespace
    try:
        helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace",
             "--set", "replicas=0", kubeconfig=plane.kubeconfig)
        try:
            manifest = _documents(helm("get", "manifest", RELEASE, "--namespace", NAMESPACE,
                                       kubeconfig=plane.kubeconfig).stdout)
            kubeconfig = plane.service_account_kubeconfig(NAMESPACE, RELEASE)
            entries = merge_to_upgrade(plane, kube, fleet, kubeconfig,
                                       f"system:serviceaccount:{NAMESPACE}:{RELEASE}", tmp_path)
        finally:
            helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait",
                 "--cascade=foreground", kubeconfig=plane.kubeconfig)
        used = {e.permission for e in entries}
        excess = [str(g) for g in grants(manifest) if not any(g.covers(p) for p in used)]
        assert excess == [], f"granted but never used: {excess}"

        allowed = DAEMON_MADE | EVERY_NAMESPACE
        wait_for(lambda: _left_in_namespace(plane) <= allowed, timeout=30,
                 what="the namespace holding only what the daemon made",
                 observe=lambda: _left_in_namespace(plane) - allowed)
        assert "secret/gpu-reconciler-admission-tls" in _left_in_namespace(plane)
        assert _labelled(plane) == set()
        assert _kubectl(plane, "get", "crd", "-o", "name",
                        "clusteroperators.gpu.metax-tech.com").split() == [
            "customresourcedefinition.apiextensions.k8s.io/clusteroperators.gpu.metax-tech.com"]
    finally:
        fleet.stop(cleanup=True)


def _readme_commands() -> str:
    """The first sh block of the README's "Deploy" section."""
    readme = (ROOT / "README.md").read_text()
    section = re.search(r"^## Deploy\n(.*?)^## ", readme, re.S | re.M)
    assert section, "README.md has no Deploy section"
    block = re.search(r"^```sh\n(.*?)^```", section.group(1), re.S | re.M)
    assert block, "the Deploy section has no sh block"
    return block.group(1)


def _set_values(commands: str) -> dict[str, str]:
    return dict(v.split("=", 1) for v in re.findall(r"--set (\S+)", commands))


@pytest.mark.cluster
@pytest.mark.slow
def test_the_readme_deploy_commands_install_the_chart(
    audited_plane: AuditedControlPlane, audited_kube: KubeApi, tmp_path: Path
) -> None:
    commands = _readme_commands()
    assert commands.startswith("helm install "), "the Deploy section shows helm install first"
    # the files the commands read, in a folder where deploy/ is the repository's
    (tmp_path / "deploy").symlink_to(DEPLOY)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                    str(tmp_path / "deploy_key")], check=True)
    key = (tmp_path / "deploy_key.pub").read_text().split()
    (tmp_path / "known_hosts").write_text(f"github.com {key[0]} {key[1]}\n")
    _ensure_namespaces(audited_kube, "metax-operator")  # the vendor operator's, in the dev cluster
    kubectl = audited_plane.binaries.kubectl
    assert kubectl
    env = {**os.environ, "KUBECONFIG": str(audited_plane.kubeconfig), "PATH": os.pathsep.join(
        [os.path.dirname(helm_binary()), os.path.dirname(kubectl), os.environ["PATH"]])}
    try:
        run = subprocess.run(["bash", "-euo", "pipefail", "-c", commands], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=120, check=False)
        assert run.returncode == 0, f"{run.stdout}\n{run.stderr}"
        status = json.loads(helm("status", RELEASE, "--namespace", NAMESPACE, "-o", "json",
                                 kubeconfig=audited_plane.kubeconfig).stdout)
        assert status["info"]["status"] == "deployed"
        deployment = audited_kube.get(resource_path("apps/v1", "deployments", RELEASE,
                                                    namespace=NAMESPACE))
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        env_values = {e["name"]: e.get("value") for e in container["env"]}
        values = _set_values(commands)
        assert env_values["GIT_REPOSITORY"] == values["git.repository"]
        assert env_values["CLUSTER_NAME"] == values["cluster"]
        assert container["image"].startswith(values["image.repository"] + ":")
        for secret, keys in (("gpu-reconciler-git", {"ssh-privatekey", "known_hosts"}),
                             ("gpu-reconciler-webhook", {"secret"})):
            data = audited_kube.get(resource_path("v1", "secrets", secret, namespace=NAMESPACE))
            assert set(data["data"]) == keys
    finally:
        helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--ignore-not-found",
             kubeconfig=audited_plane.kubeconfig)
        for secret in ("gpu-reconciler-git", "gpu-reconciler-webhook"):
            _kubectl(audited_plane, "-n", NAMESPACE, "delete", "secret", secret,
                     "--ignore-not-found")


def test_install_helm_builds_once_into_the_cache(tmp_path: Path) -> None:
    """A second run finds the complete binary and builds nothing (the first run's build is what
    the tests above use), as it does when a helm v4 is on PATH; sourcing install-kubernetes for
    its functions runs none of it."""
    version = re.search(r"HELM_VERSION:-([\d.]+)", (ROOT / "scripts" / "install-helm").read_text())
    assert version
    built = tmp_path / "cache" / f"helm-{version.group(1)}" / "bin" / "helm"
    on_path = tmp_path / "path" / "helm"
    for path, says in ((built, "v3.0.0"), (on_path, "v4.9.9")):
        path.parent.mkdir(parents=True)
        path.write_text(f"#!/bin/sh\necho {says}\n")
        path.chmod(0o755)
    path_dirs = [d for d in os.environ["PATH"].split(os.pathsep)
                 if not os.access(os.path.join(d, "helm"), os.X_OK)]
    for extra, said in (([], f"cached helm in {built.parent}"),
                        ([str(on_path.parent)], f"using {on_path} (v4.9.9)")):
        result = subprocess.run(
            [str(ROOT / "scripts" / "install-helm")], capture_output=True, text=True,
            env={**os.environ, "RECONCILER_CACHE": str(tmp_path / "cache"),
                 "PATH": os.pathsep.join([*extra, *path_dirs])}, timeout=60, check=False)
        assert (result.returncode, result.stdout) == (0, "")
        assert result.stderr == f"[install-helm] {said}\n"
