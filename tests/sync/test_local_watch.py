"""A local working copy as the repository: a commit is applied at once through the watch (no
fetch interval involved), an uncommitted edit never is, and status snapshots land in the
working copy's branch."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from reconciler.kube.api import KubeApi
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from tests.sync.conftest import NEW, PAYLOAD, POLICY_PATH, REPO_CONFIG, SyncFactory, git, policy
from tests.sync.helpers import driver, source_commit

pytestmark = pytest.mark.cluster


def test_a_local_commit_is_applied_through_the_watch(
    kube: KubeApi, fleet_factory: Callable[..., Fleet], make_sync: SyncFactory, tmp_path: Path,
) -> None:
    fleet_factory(nodes=2, payload=PAYLOAD, install_seconds=0.2)
    work = tmp_path / "policy"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    (work / "clusters/prod-a").mkdir(parents=True)
    (work / "reconciler.yaml").write_text(REPO_CONFIG)
    (work / POLICY_PATH).write_text(policy(enable=False))
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "seed")
    seed = git(work, "rev-parse", "HEAD")  # status snapshots are committed on top of it
    sync = make_sync(str(work), fetch_interval=3600.0)
    wait_for(lambda: source_commit(kube) == seed, timeout=30,
             what="the seed applied")
    # A snapshot is committed when the rollout's state changes, not for a new source commit
    # alone; the seed's is the one this test can count on: it lands in the working copy's branch.
    wait_for(lambda: "status(prod-a)" in git(work, "log", "-1", "--format=%s"), timeout=20,
             what="the seed's status snapshot committed in the working copy",
             observe=lambda: git(work, "log", "-3", "--format=%s"))
    assert (work / "status/prod-a.yaml").exists()
    snapshot_commit = git(work, "rev-parse", "HEAD")
    git(work, "merge-base", "--is-ancestor", seed, snapshot_commit)  # on top of the seed
    assert git(work, "status", "--porcelain") == ""

    (work / POLICY_PATH).write_text(policy(NEW, enable=False))
    assert sync.worker.wait_passes(2, timeout=30), "two passes after the edit"
    assert driver(kube)["payload"]["version"] != NEW, "an uncommitted edit is never applied"
    git(work, "commit", "-q", "-am", f"Move to {NEW}")
    sha = git(work, "rev-parse", "HEAD")
    wait_for(lambda: source_commit(kube) == sha, timeout=10, what="the watched commit applied")
    assert driver(kube)["payload"]["version"] == NEW
    assert sync.repo.source.fetches < 10, "found by the watch, not by polling"
    git(work, "merge-base", "--is-ancestor", snapshot_commit, "HEAD")
