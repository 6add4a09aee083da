"""A control plane whose API server writes an audit log of what our minted identities do, and
the RBAC arithmetic the least-privilege tests need (what a role grants, what was used)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from reconciler.kube.api import resource_path
from reconciler.kube.kubeconfig import write_kubeconfig
from reconciler.sim.control_plane import MINTED_NAMESPACE, ControlPlane

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
#: where deploy/ and the chart's release put the reconciler's ServiceAccount
DEPLOYED_NAMESPACE = "gpu-reconciler"

AUDIT_POLICY = f"""\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    userGroups: ["system:serviceaccounts:{MINTED_NAMESPACE}",
                 "system:serviceaccounts:{DEPLOYED_NAMESPACE}"]
  - level: None
"""


class AuditedControlPlane(ControlPlane):
    """The project's control plane, with kube-apiserver auditing the requests of identities made
    by ``mint_kubeconfig`` and of the ServiceAccounts in ``DEPLOYED_NAMESPACE`` (everything else,
    the fleet and the admin, is not logged)."""

    def service_account_kubeconfig(self, namespace: str, name: str) -> Path:
        """A kubeconfig with a token of an existing ServiceAccount (the one `helm install` made),
        so a test acts with exactly that account's bindings."""
        api = self.api(pool_size=1)
        try:
            token = api.create(
                resource_path("v1", "serviceaccounts", name, namespace=namespace,
                              subresource="token"),
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                 "spec": {"expirationSeconds": 3600}})["status"]["token"]
        finally:
            api.close()
        assert self.pki is not None
        return write_kubeconfig(
            self.workdir / "identities" / f"{namespace}-{name}.kubeconfig", server=self.server,
            ca_cert=self.pki.ca.cert.read_bytes(),
            user=f"system:serviceaccount:{namespace}:{name}", token=str(token))

    @property
    def audit_log(self) -> Path:
        return self.workdir / "logs" / "audit.log"

    def _launch(self, name: str, args: list[str], **options: Any) -> None:
        if name == "kube-apiserver" and not any(a.startswith("--audit-") for a in args):
            policy = self.workdir / "audit-policy.yaml"
            policy.write_text(AUDIT_POLICY)
            args = [*args, f"--audit-policy-file={policy}",
                    f"--audit-log-path={self.audit_log}", "--audit-log-format=json",
                    "--audit-log-mode=blocking"]
        super()._launch(name, args, **options)


@dataclass(frozen=True, order=True)
class Permission:
    """One authorisation decision: verb on group/resource[/subresource], in a namespace ("" for
    cluster scope), on a named object ("" for a collection)."""

    group: str
    resource: str
    namespace: str
    verb: str
    name: str = ""

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        named = f" {self.name}" if self.name else ""
        group = self.group or "core"
        return f"{self.verb} {group}/{self.resource}{named}{where}"


@dataclass(frozen=True)
class AuditEntry:
    permission: Permission
    code: int
    uri: str


def audit_entries(log: Path, username: str) -> list[AuditEntry]:
    entries = []
    for line in log.read_text().splitlines():
        event = json.loads(line)
        if event.get("user", {}).get("username") != username:
            continue
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", "")
        if ref.get("subresource"):
            resource += "/" + ref["subresource"]
        permission = Permission(ref.get("apiGroup", ""), resource, ref.get("namespace", ""),
                                event["verb"], ref.get("name", ""))
        code = int((event.get("responseStatus") or {}).get("code") or 0)
        entries.append(AuditEntry(permission, code, event.get("requestURI", "")))
    return entries


def load_documents(path: Path) -> list[dict[str, Any]]:
    yaml = YAML(typ="safe")
    return [doc for doc in yaml.load_all(path.read_text()) if doc]


@dataclass(frozen=True)
class Grant:
    """One (group, resource, verb) a rule grants, in a namespace ("" = every namespace, for a
    ClusterRole), limited to ``names`` when the rule has resourceNames."""

    group: str
    resource: str
    namespace: str
    verb: str
    names: frozenset[str]

    def covers(self, used: Permission) -> bool:
        if (self.group, self.resource, self.verb) != (used.group, used.resource, used.verb):
            return False
        if self.namespace and self.namespace != used.namespace:
            return False
        return not self.names or used.name in self.names

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        names = f" {sorted(self.names)}" if self.names else ""
        return f"{self.verb} {self.group or 'core'}/{self.resource}{names}{where}"


def grants(documents: Iterable[Mapping[str, Any]]) -> list[Grant]:
    found = []
    for doc in documents:
        if doc.get("kind") not in ("ClusterRole", "Role"):
            continue
        namespace = doc["metadata"].get("namespace", "") if doc["kind"] == "Role" else ""
        for rule in doc.get("rules") or []:
            for group in rule.get("apiGroups") or [""]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        found.append(Grant(group, resource, namespace, verb,
                                           frozenset(rule.get("resourceNames") or ())))
    return found


def roles(documents: Iterable[Mapping[str, Any]]) -> Iterator[tuple[str, str]]:
    """(kind, name) of each role, with the namespace for Roles as ``namespace/name``."""
    for doc in documents:
        if doc.get("kind") == "ClusterRole":
            yield "ClusterRole", doc["metadata"]["name"]
        elif doc.get("kind") == "Role":
            yield "Role", f"{doc['metadata']['namespace']}/{doc['metadata']['name']}"
