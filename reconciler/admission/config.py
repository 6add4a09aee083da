"""The ``ValidatingWebhookConfiguration`` that sends ClusterOperator changes to the webhook.

One builder for both places that register it: the dev cluster (``clientConfig.url`` on
loopback) and ``deploy/admission-webhook.yaml`` (``clientConfig.service``; checked against this
builder by tests/deploy). Fail closed: a change nobody could check is refused.
"""

from __future__ import annotations

import base64
from typing import Any

from reconciler.admission.review import GROUP, PLURAL
from reconciler.admission.server import PATH

CONFIG_NAME = "gpu-reconciler-admission"
#: the webhook's name, which the API server quotes in every denial
WEBHOOK_NAME = "clusteroperators.gpu.metax-tech.com"
TIMEOUT_SECONDS = 5


def webhook_rules() -> list[dict[str, Any]]:
    """CREATE and UPDATE of the resource itself; ``clusteroperators/status`` is not matched."""
    return [{
        "apiGroups": [GROUP],
        "apiVersions": ["*"],
        "operations": ["CREATE", "UPDATE"],
        "resources": [PLURAL],
        "scope": "Cluster",
    }]


def webhook_configuration(*, url: str | None = None,
                          service: dict[str, Any] | None = None,
                          ca_bundle_pem: bytes | None = None,
                          name: str = CONFIG_NAME) -> dict[str, Any]:
    """The configuration for a webhook at ``url``, or at ``service`` (namespace, name, port)."""
    if (url is None) == (service is None):
        raise ValueError("give the webhook's url or its service, not both")
    client: dict[str, Any] = {"url": url} if url is not None else {
        "service": {**(service or {}), "path": PATH}}
    if ca_bundle_pem is not None:
        client["caBundle"] = base64.b64encode(ca_bundle_pem).decode("ascii")
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "gpu-gitops-reconciler"}},
        "webhooks": [{
            "name": WEBHOOK_NAME,
            "clientConfig": client,
            "rules": webhook_rules(),
            "failurePolicy": "Fail",
            "matchPolicy": "Equivalent",
            "sideEffects": "None",
            "timeoutSeconds": TIMEOUT_SECONDS,
            "admissionReviewVersions": ["v1"],
        }],
    }
