"""docs/gitops.md#metadata-what-the-sync-applies-and-what-it-leaves-alone against the real control
plane: the sync role applies a policy file to the object a Helm install of the vendor operator
created, and keeps what it does not own (the vendor's finalizer, Helm's labels and annotations, the
spec sections Git does not name), even when the file tries to set Helm's ownership metadata or
the reconciler's own annotations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from reconciler.kube.api import KubeApi
from reconciler.names import DONE_ANNOTATION, REQUEST_ANNOTATION, SYNC_FIELD_MANAGER
from reconciler.sim.fleet import Fleet
from reconciler.sim.operator_install import FINALIZER, HELM_ANNOTATIONS, HELM_LABELS
from reconciler.sim.waiting import wait_for
from tests.sync.conftest import NEW, PAYLOAD, POLICY_PATH, Person, Remote, SyncFactory, policy
from tests.sync.helpers import cluster_operator, driver, source_commit

pytestmark = pytest.mark.cluster

OURS = {"app.kubernetes.io/part-of": "metax-operator", "team": "gpu-platform"}


def with_metadata(text: str, labels: dict[str, str], annotations: dict[str, str]) -> str:
    """The policy file with these labels and annotations under its metadata."""
    lines = ["  name: cluster-operator"]
    for section, values in (("labels", labels), ("annotations", annotations)):
        if values:
            lines.append(f"  {section}:")
            lines += [f"    {key}: {value}" for key, value in values.items()]
    return text.replace("  name: cluster-operator", "\n".join(lines), 1)


def sync_manages(co: dict[str, Any]) -> dict[str, Any]:
    entries = [e for e in co["metadata"].get("managedFields") or []
               if e.get("manager") == SYNC_FIELD_MANAGER and e.get("operation") == "Apply"]
    assert len(entries) == 1, co["metadata"].get("managedFields")
    tree: dict[str, Any] = entries[0]["fieldsV1"]
    return tree


def test_the_finalizer_and_helm_metadata_survive_a_sync_that_tries_to_set_managed_by(
    kube: KubeApi, fleet_factory: Callable[..., Fleet], policy_remote: Remote, alice: Person,
    make_sync: SyncFactory,
) -> None:
    fleet_factory(nodes=2, payload=PAYLOAD, install_seconds=0.2)
    installed = cluster_operator(kube)
    assert installed["metadata"]["finalizers"] == [FINALIZER]

    alice.pull()
    text = with_metadata(policy(NEW, enable=False),
                         {"app.kubernetes.io/managed-by": "gpu-gitops-reconciler", **OURS},
                         {"meta.helm.sh/release-name": "someone-else", "note": "from Git",
                          # the reconciler's own: a request from a file starts no firmware flow
                          REQUEST_ANNOTATION: "'{\"fwUpgradePolicy\": \"PreferCloud\"}'",
                          DONE_ANNOTATION: "copied:Succeeded"})
    sha = alice.commit_and_push("Upgrade prod-a, and label it", {POLICY_PATH: text})
    sync = make_sync(policy_remote.url)
    sync.trigger()
    wait_for(lambda: source_commit(kube) == sha, timeout=30, what="the commit applied",
             observe=lambda: sync.rejection)

    co = cluster_operator(kube)
    meta = co["metadata"]
    assert meta["finalizers"] == [FINALIZER]
    assert meta["labels"] == {**HELM_LABELS, **OURS}, "Helm's labels kept, managed-by is Helm's"
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    for key, value in HELM_ANNOTATIONS.items():
        assert meta["annotations"][key] == value
    assert meta["annotations"]["note"] == "from Git"
    assert REQUEST_ANNOTATION not in meta["annotations"]
    assert DONE_ANNOTATION not in meta["annotations"]
    assert driver(kube)["payload"]["version"] == NEW
    # what Git does not name stays as installed
    assert co["spec"]["devicePlugin"] == installed["spec"]["devicePlugin"]
    assert driver(kube)["log"] == installed["spec"]["driver"]["log"]
    # the sync's apply never claimed any of it
    owned = sync_manages(co)["f:metadata"]
    assert "f:finalizers" not in owned
    assert "f:app.kubernetes.io/managed-by" not in owned.get("f:labels", {})
    assert not any(k.startswith("f:meta.helm.sh/") for k in owned.get("f:annotations", {}))
    assert f"f:{REQUEST_ANNOTATION}" not in owned["f:annotations"]

    # a label of ours that leaves the file leaves the cluster; Helm's stay
    alice.pull()
    text = with_metadata(policy(NEW, enable=False), {"team": "gpu-platform"}, {})
    dropped = alice.commit_and_push("Drop the part-of label", {POLICY_PATH: text})
    sync.trigger()
    wait_for(lambda: source_commit(kube) == dropped, timeout=30, what="the second commit applied",
             observe=lambda: sync.rejection)
    meta = cluster_operator(kube)["metadata"]
    assert meta["labels"] == {**HELM_LABELS, "team": "gpu-platform"}
    assert meta["finalizers"] == [FINALIZER]
    assert "note" not in meta["annotations"]

