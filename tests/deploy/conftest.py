"""An audited control plane for the least-privilege tests (one per test module that asks)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from reconciler.kube.api import Conflict, KubeApi, resource_path
from tests.deploy.audit import DEPLOY, AuditedControlPlane, load_documents
from tests.planes import serve_plane

RBAC = "rbac.authorization.k8s.io/v1"


@pytest.fixture(scope="module")
def audited_plane(request: pytest.FixtureRequest) -> Iterator[AuditedControlPlane]:
    yield from serve_plane(request, AuditedControlPlane(), "audited control plane")


@pytest.fixture(scope="module")
def audited_kube(audited_plane: AuditedControlPlane) -> Iterator[KubeApi]:
    api = audited_plane.api(pool_size=32)
    yield api
    api.close()


def install_roles(api: KubeApi) -> None:
    """deploy/namespace.yaml and the roles of deploy/rbac.yaml (not its bindings: the test binds
    the roles to an identity of its own with ``mint_kubeconfig``)."""
    for doc in load_documents(DEPLOY / "namespace.yaml"):
        with contextlib.suppress(Conflict):
            api.create(resource_path("v1", "namespaces"), doc)
    for doc in load_documents(DEPLOY / "rbac.yaml"):
        meta = doc["metadata"]
        if doc["kind"] == "ClusterRole":
            path = resource_path(RBAC, "clusterroles", meta["name"])
        elif doc["kind"] == "Role":
            _ensure_namespace(api, meta["namespace"])
            path = resource_path(RBAC, "roles", meta["name"], namespace=meta["namespace"])
        else:
            continue
        api.apply(path, doc, field_manager="deploy-test")


def _ensure_namespace(api: KubeApi, name: str) -> None:
    with contextlib.suppress(Conflict):
        api.create(resource_path("v1", "namespaces"),
                   {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
