"""Writing kubeconfig files (self-contained: certificates are embedded)."""

from __future__ import annotations

import base64
import os
from pathlib import Path

from ruamel.yaml import YAML


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
