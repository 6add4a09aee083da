"""deploy/admission-webhook.yaml and the Deployment's admission listener agree with the code and
with each other (the API server -> Service port 443 -> container port -> --admission-listen), and
the self-signed certificate's Secret and configuration are the ones the roles name."""

from __future__ import annotations

from typing import Any

from reconciler.admission.config import webhook_configuration
from reconciler.cli.run import run
from tests.deploy.audit import DEPLOY, grants, load_documents


def _one(name: str, kind: str) -> dict[str, Any]:
    (doc,) = [d for d in load_documents(DEPLOY / name) if d["kind"] == kind]
    return doc


def _container() -> dict[str, Any]:
    container: dict[str, Any] = _one("deployment.yaml", "Deployment")[
        "spec"]["template"]["spec"]["containers"][0]
    return container


def _args() -> dict[str, str]:
    return {a.split("=", 1)[0]: a.partition("=")[2] for a in _container()["args"]}


def _default(option: str) -> str:
    (param,) = [p for p in run.params if option in getattr(p, "opts", ())]
    return str(param.default)


def test_the_manifest_is_the_builders_configuration() -> None:
    manifest = _one("admission-webhook.yaml", "ValidatingWebhookConfiguration")
    service = manifest["webhooks"][0]["clientConfig"]["service"]
    assert manifest == webhook_configuration(
        service={k: service[k] for k in ("namespace", "name", "port")})
    hook = manifest["webhooks"][0]
    assert (hook["failurePolicy"], hook["sideEffects"], hook["timeoutSeconds"]) == (
        "Fail", "None", 5)
    assert hook["rules"][0]["resources"] == ["clusteroperators"]  # not clusteroperators/status
    assert hook["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    assert manifest["metadata"]["name"] == _default("--admission-webhook-config")


def test_the_service_port_reaches_the_admission_listener() -> None:
    hook = _one("admission-webhook.yaml", "ValidatingWebhookConfiguration")["webhooks"][0]
    target = hook["clientConfig"]["service"]
    service = _one("service.yaml", "Service")
    assert (target["namespace"], target["name"]) == (service["metadata"]["namespace"],
                                                     service["metadata"]["name"])
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == target["port"]]
    (container_port,) = [p for p in _container()["ports"] if p["name"] == port["targetPort"]]
    args = _args()
    assert args["--admission-listen"] == f":{container_port['containerPort']}"
    # the certificate names the Service the configuration calls
    assert args["--admission-host"] == f"{target['name']}.{target['namespace']}.svc"


def test_the_roles_name_the_self_signed_secret_and_configuration() -> None:
    assert "--admission-self-signed" in _args()
    granted = grants(load_documents(DEPLOY / "rbac.yaml"))
    secret = [g for g in granted if g.resource == "secrets"]
    assert {(g.namespace, g.verb, tuple(sorted(g.names))) for g in secret} == {
        ("gpu-reconciler", "create", ()),
        ("gpu-reconciler", "get", (_default("--admission-secret"),)),
        ("gpu-reconciler", "update", (_default("--admission-secret"),))}
    config = [g for g in granted if g.resource == "validatingwebhookconfigurations"]
    assert {(g.verb, tuple(g.names)) for g in config} == {
        ("get", (_default("--admission-webhook-config"),)),
        ("patch", (_default("--admission-webhook-config"),))}
