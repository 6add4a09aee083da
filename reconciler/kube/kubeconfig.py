"""Writing kubeconfig files (self-contained: certificates are embedded), and the in-cluster
config of a pod."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ruamel.yaml import YAML

if TYPE_CHECKING:
    from reconciler.kube.api import KubeApi


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def write_kubeconfig(
    path: Path,
    *,
    server: str,
    ca_cert: bytes,
    user: str,
    client_cert: bytes | None = None,
    client_key: bytes | None = None,
    token: str | None = None,
    cluster: str = "gpu-reconciler-local",
) -> Path:
    """Writes a one-context kubeconfig (mode 0600) authenticating with a client certificate or
    a bearer token."""
    credentials: dict[str, str] = {}
    if client_cert is not None and client_key is not None:
        credentials = {
            "client-certificate-data": _b64(client_cert),
            "client-key-data": _b64(client_key),
        }
    elif token is not None:
        credentials = {"token": token}
    else:
        raise ValueError("a kubeconfig needs a client certificate and key, or a token")
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster,
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_cert)},
            }
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": f"{user}@{cluster}", "context": {"cluster": cluster, "user": user}}],
        "current-context": f"{user}@{cluster}",
        "preferences": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        yaml = YAML(typ="safe", pure=True)
        yaml.default_flow_style = False
        yaml.dump(document, handle)
    tmp.replace(path)
    return path


def in_cluster_api(*, pool_size: int) -> KubeApi | None:
    """A client from the pod's service account (in-cluster config), or None when this process
    does not run in a pod; ``pool_size`` bounds concurrent connections."""
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    from reconciler.kube.api import KubeApi

    try:
        k8s_config.load_incluster_config()  # type: ignore[no-untyped-call]
    except k8s_config.ConfigException:
        return None
    configuration = k8s_client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = pool_size
    return KubeApi(k8s_client.ApiClient(configuration))
