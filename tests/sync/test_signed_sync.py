"""Signature verification in the sync with real ssh-keygen signatures: a commit signed by a
trusted key applies; unsigned and untrusted ones are refused, visibly (status snapshot, Event,
log); the reconciler's own commits are signed with its key so that they pass the same check."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from reconciler.kube.api import KubeApi, resource_path
from reconciler.kube.events import EVENT_NAMESPACE
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from reconciler.trust.signatures import (
    CommitVerifier,
    Method,
    TrustedKeys,
    signing_config,
)
from tests.sync.conftest import (
    NEW,
    PAYLOAD,
    POLICY_PATH,
    REPO_CONFIG,
    Person,
    Remote,
    SyncFactory,
    git,
    policy,
)
from tests.sync.helpers import driver, source_commit, status_file

pytestmark = pytest.mark.cluster


def _key(directory: Path, name: str) -> Path:
    path = directory / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(path)],
                   check=True)
    return path


def _signing_clone(person: Person, key: Path) -> Person:
    for option, value in (("gpg.format", "ssh"), ("user.signingkey", str(key)),
                          ("commit.gpgsign", "true")):
        git(person.dir, "config", option, value)
    return person


def test_only_commits_signed_by_trusted_keys_are_applied(
    kube: KubeApi, fleet_factory: Callable[..., Fleet], make_sync: SyncFactory, tmp_path: Path,
) -> None:
    fleet_factory(nodes=2, payload=PAYLOAD, install_seconds=0.2)
    keys = tmp_path / "keys"
    keys.mkdir()
    alice_key, mallory_key, own_key = (_key(keys, n) for n in ("alice", "mallory", "reconciler"))
    allowed = keys / "allowed_signers"
    allowed.write_text("".join(
        f"{who}@example.com namespaces=\"git\" {(k.with_suffix('.pub')).read_text()}"
        for who, k in (("alice", alice_key), ("reconciler", own_key))))
    remote = Remote(tmp_path / "server")
    alice = _signing_clone(Person(remote.url, tmp_path / "alice"), alice_key)
    alice.commit("Add the prod-a policy", {"reconciler.yaml": REPO_CONFIG,
                                           POLICY_PATH: policy()})
    alice.push()
    verifier = CommitVerifier(TrustedKeys(allowed_signers_file=allowed,
                                          methods=frozenset({Method.SSH})), tmp_path / "trust")
    signing = signing_config(ssh_key_file=own_key)
    seed = remote.head()  # before the sync role pushes status snapshots
    sync = make_sync(remote.url, verifier=verifier, signature_mode="ssh",
                     signing=(signing.git_args(), signing.commit_tree_args(), dict(signing.env)))
    wait_for(lambda: source_commit(kube) == seed, timeout=30, what="the signed seed applied")

    mallory = _signing_clone(Person(remote.url, tmp_path / "mallory", name="Mallory Evil"),
                             mallory_key)
    bad = mallory.commit_and_push("Upgrade, signed by an untrusted key",
                                  {POLICY_PATH: policy(NEW)})
    sync.trigger()
    rejection = wait_for(lambda: (status_file(remote) or {}).get("rejection"), timeout=20,
                         what="the refusal in Git")
    assert rejection["commit"] == bad
    assert rejection["findings"][0]["rule"] == "CommitSignerUntrusted"
    assert "not in the allowed signers file" in rejection["findings"][0]["message"]
    assert driver(kube)["payload"]["version"] == PAYLOAD.version
    assert source_commit(kube) == seed

    bob = Person(remote.url, tmp_path / "bob", name="Bob Unsigned")
    unsigned = bob.commit_and_push("Upgrade, unsigned", {POLICY_PATH: policy(NEW, pause=True)})
    sync.trigger()
    wait_for(lambda: (status_file(remote) or {}).get("rejection", {}).get("commit") == unsigned,
             timeout=20, what="the unsigned commit refused")
    assert (status_file(remote) or {})["rejection"]["findings"][0]["rule"] == "CommitUnsigned"
    assert driver(kube)["payload"]["version"] == PAYLOAD.version
    events = kube.list(resource_path("v1", "events", namespace=EVENT_NAMESPACE))["items"]
    # An Event may name no object: 1.37's API server records KubernetesDefaultServiceCIDR...
    # warnings about the cluster-scoped default ServiceCIDR without its name.
    reasons = {e["reason"] for e in events
               if e["involvedObject"].get("name") == "cluster-operator"}
    assert {"CommitSignerUntrusted", "CommitUnsigned"} <= reasons

    alice.pull()
    good = alice.commit_and_push("Upgrade, signed by Alice", {POLICY_PATH: policy(NEW)})
    sync.trigger()
    wait_for(lambda: source_commit(kube) == good, timeout=20, what="Alice's signed commit")
    assert driver(kube)["payload"]["version"] == NEW
    # the reconciler's status commits carry its signature (so a verifying reader accepts them)
    wait_for(lambda: "rejection" not in (status_file(remote) or {"rejection": 1}), timeout=20,
             what="a snapshot after the applied commit")
    head = git(remote.path, "-c", f"gpg.ssh.allowedSignersFile={allowed}", "log", "-1",
               "--format=%an %G?", "main")
    assert head == "gpu-gitops-reconciler G", head
