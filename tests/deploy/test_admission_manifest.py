"""deploy/admission-webhook.yaml and the Deployment's admission listener agree with the code and
with each other (the API server -> Service port 443 -> container port -> --admission-listen)."""

from __future__ import annotations

from typing import Any

from reconciler.admission.config import webhook_configuration
from tests.deploy.audit import DEPLOY, load_documents


def _one(name: str, kind: str) -> dict[str, Any]:
    (doc,) = [d for d in load_documents(DEPLOY / name) if d["kind"] == kind]
    return doc


def _container() -> dict[str, Any]:
    container: dict[str, Any] = _one("deployment.yaml", "Deployment")[
        "spec"]["template"]["spec"]["containers"][0]
    return container


def _args() -> dict[str, str]:
    return dict(a.split("=", 1) for a in _container()["args"] if "=" in a)


def test_the_manifest_is_the_builders_configuration_with_the_ca_injector_annotation() -> None:
    manifest = _one("admission-webhook.yaml", "ValidatingWebhookConfiguration")
    service = manifest["webhooks"][0]["clientConfig"]["service"]
    expected = webhook_configuration(service={k: service[k] for k in ("namespace", "name",
                                                                        "port")})
    annotations = manifest["metadata"].pop("annotations")
    assert manifest == expected
    assert annotations == {"cert-manager.io/inject-ca-from":
                           "gpu-reconciler/gpu-reconciler-admission"}
    hook = manifest["webhooks"][0]
    assert (hook["failurePolicy"], hook["sideEffects"], hook["timeoutSeconds"]) == (
        "Fail", "None", 5)
    assert hook["rules"][0]["resources"] == ["clusteroperators"]  # not clusteroperators/status
    assert hook["rules"][0]["operations"] == ["CREATE", "UPDATE"]


def test_the_service_port_reaches_the_admission_listener() -> None:
    hook = _one("admission-webhook.yaml", "ValidatingWebhookConfiguration")["webhooks"][0]
    target = hook["clientConfig"]["service"]
    service = _one("service.yaml", "Service")
    assert (target["namespace"], target["name"]) == (service["metadata"]["namespace"],
                                                     service["metadata"]["name"])
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == target["port"]]
    (container_port,) = [p for p in _container()["ports"] if p["name"] == port["targetPort"]]
    assert _args()["--admission-listen"] == f":{container_port['containerPort']}"


def test_the_certificate_secret_is_mounted_whole_where_the_daemon_reads_it() -> None:
    spec = _one("deployment.yaml", "Deployment")["spec"]["template"]["spec"]
    (mount,) = [m for m in _container()["volumeMounts"]
                if m["mountPath"] == _args()["--admission-cert-dir"]]
    assert "subPath" not in mount  # a subPath mount never sees a renewed certificate
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert "items" not in volume["secret"]
    certificate_secret = "gpu-reconciler-admission-tls"
    assert volume["secret"]["secretName"] == certificate_secret
    example = [d for d in load_documents(DEPLOY / "secrets.example.yaml")
               if d["metadata"]["name"] == certificate_secret]
    assert example[0]["type"] == "kubernetes.io/tls"
    assert set(example[0]["stringData"]) == {"tls.crt", "tls.key"}
