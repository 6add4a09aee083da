"""A merged commit whose policy file is a symbolic link (a blob of mode 120000), against the
real control plane: the daemon rejects it naming the file, as ``reconciler validate`` does, and
applies nothing; the link is never followed on the daemon's disk."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from reconciler.kube.api import KubeApi
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from tests.sync.conftest import PAYLOAD, POLICY_PATH, Person, Remote, SyncFactory
from tests.sync.helpers import cluster_operator, source_commit, status_file, subjects

pytestmark = pytest.mark.cluster


def test_a_policy_link_to_dev_zero_is_rejected_by_name_and_nothing_is_applied(
    kube: KubeApi, fleet_factory: Callable[..., Fleet], policy_remote: Remote, alice: Person,
    make_sync: SyncFactory,
) -> None:
    fleet_factory(nodes=1, payload=PAYLOAD, install_seconds=0.2)
    seed = policy_remote.head()
    sync = make_sync(policy_remote.url)
    wait_for(lambda: source_commit(kube) == seed, timeout=30, what="the seed applied")
    before = cluster_operator(kube)

    link = alice.dir / POLICY_PATH
    link.unlink()
    link.symlink_to("/dev/zero")
    # the sync pushes status commits meanwhile: push as a person does (pull --rebase on a race)
    sha = alice.commit_and_push("Policy as a link", {})
    sync.trigger()
    wait_for(lambda: sync.handled_commit == sha, timeout=20, what="the linked commit handled")

    after = cluster_operator(kube)
    assert after["spec"] == before["spec"], "a rejected commit changes nothing in the cluster"
    assert source_commit(kube) == seed
    snapshot = wait_for(lambda: (status_file(policy_remote) or {}).get("rejection"), timeout=20,
                        what="the rejection in Git", observe=lambda: subjects(policy_remote))
    assert snapshot["commit"] == sha
    finding = snapshot["findings"][0]
    assert (finding["file"], finding["rule"]) == (POLICY_PATH, "symlink")
    assert finding["message"].startswith("a symbolic link (to '/dev/zero'), not followed")
