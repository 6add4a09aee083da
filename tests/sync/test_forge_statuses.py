"""Commit statuses of a real rollout (docs/forges.md): the sync role against the real control plane
posts to a forge played on 127.0.0.1: ``pending`` during the rollout and ``success`` at the end,
all on the merged commit (the gate release and our write-backs get none); a rejected commit
gets ``failure`` on itself; ``forge:`` changed in Git takes effect at the next commit, without a
restart."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from reconciler.controller.loop import RolloutController
from reconciler.gitops.forge_status import CommitStatuses
from reconciler.kube.api import KubeApi
from reconciler.policy.forge_config import ForgeConfig
from reconciler.sim.control_plane import ControlPlane
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from reconciler.sync.forge_report import ForgeReport
from reconciler.sync.loop import ClusterSync
from reconciler.views.commit_status import PostGate
from tests.gitops.forge_stub import ForgeStub, serve_forge
from tests.sync.conftest import (
    CLUSTER,
    NEW,
    POLICY_PATH,
    REPO_CONFIG,
    GitDaemon,
    Person,
    Remote,
    SyncFactory,
    policy,
)
from tests.sync.daemon import Daemon, metric_value, wait_port_ready
from tests.sync.helpers import release_gate_to_the_end, source_commit, subjects

pytestmark = pytest.mark.cluster


def _report_to(forge: ForgeStub, kind: str, sync: ClusterSync, tmp_path: Path, *,
               interval: float = 0.2, target_url: str | None = None) -> CommitStatuses:
    """The sync's snapshots as commit statuses to ``forge`` (as ``run --forge`` wires them)."""
    token = tmp_path / "token"
    token.write_text("forge-token\n")
    poster = CommitStatuses(ForgeConfig(kind, forge.url, "fleet/policy"), token,
                            gate=PostGate(interval=interval)).start()
    sync.shell.on_snapshot = ForgeReport(sync.repo, poster, cluster="prod-a",
                                         record=sync.record, wall=sync.clock,
                                         target_url=target_url).snapshot
    return poster


@contextlib.contextmanager
def _posting(make_sync: SyncFactory, remote: Remote, tmp_path: Path, kind: str, *,
             hang: bool = False, **report: Any,
             ) -> Iterator[tuple[ForgeStub, ClusterSync, CommitStatuses]]:
    """A forge played on 127.0.0.1 (never answering with ``hang``) and the sync role on
    ``remote`` reporting to it; on leaving, the forge released and the poster stopped."""
    with serve_forge() as forge:
        if hang:
            forge.hang = threading.Event()
        sync = make_sync(remote.url)
        poster = _report_to(forge, kind, sync, tmp_path, **report)
        try:
            yield forge, sync, poster
        finally:
            if forge.hang is not None:
                forge.hang.set()
            poster.stop()


def test_pending_during_the_rollout_and_success_at_the_end_on_the_merged_commit(
    kube: KubeApi, fleet10: Fleet, controller: RolloutController, policy_remote: Remote,
    alice: Person, make_sync: SyncFactory, tmp_path: Path,
) -> None:
    seed = policy_remote.head()
    with _posting(make_sync, policy_remote, tmp_path, "github",
                  target_url="https://dash.example.com/") as (forge, sync, _):
        wait_for(lambda: source_commit(kube) == seed, timeout=30, what="the seed applied")
        merge = alice.commit_and_push(f"Upgrade prod-a to {NEW}", {POLICY_PATH: policy(NEW)})
        sync.trigger()
        wait_for(lambda: any("manual gate" in r["body"]["description"]
                             for r in forge.requests), timeout=60,
                 what="pending at the manual gate", observe=lambda: forge.requests)
        # our write-back of pause: true changes the cluster's folder: it gets no status
        wait_for(lambda: any("pause the rollout at step 1/3: manual gate" in s
                             for s in subjects(policy_remote)),
                 timeout=30, what="the pause write-back")
        resume = release_gate_to_the_end(kube, alice, sync, POLICY_PATH,
                                         policy(NEW, pause=False))
        wait_for(lambda: any(r["body"]["state"] == "success" for r in forge.requests),
                 timeout=30, what="success posted", observe=lambda: forge.requests)
    posts = forge.requests
    shas = {r["path"].rsplit("/", 1)[1] for r in posts}
    assert shas == {merge}, (merge, resume, posts)
    assert resume not in shas
    assert all(r["path"] == f"/repos/fleet/policy/statuses/{merge}" for r in posts)
    assert all(r["body"]["context"] == "gpu-reconciler/prod-a" for r in posts)
    assert all(r["body"]["target_url"] == "https://dash.example.com/" for r in posts)
    assert posts[0]["body"]["state"] == "pending"
    assert posts[-1]["body"]["state"] == "success"
    assert posts[-1]["body"]["description"].startswith(f"completed {NEW}")
    gate = next(r for r in posts if "manual gate" in r["body"]["description"])
    assert gate["body"]["state"] == "pending"
    assert gate["body"]["description"].startswith("step 1/3")
    # no identical state was posted twice
    keys = [(r["body"]["state"], r["body"]["description"]) for r in posts]
    assert all(a != b for a, b in pairwise(keys))


def test_a_rejected_commit_gets_failure_on_itself(
    kube: KubeApi, fleet10: Fleet, policy_remote: Remote, alice: Person,
    make_sync: SyncFactory, tmp_path: Path,
) -> None:
    with _posting(make_sync, policy_remote, tmp_path, "gitlab") as (forge, sync, _):
        bad = alice.commit_and_push("Break prod-a", {
            POLICY_PATH: policy(NEW, max_parallel='"-3"')})
        sync.trigger()
        wait_for(lambda: any(bad in r["path"] for r in forge.requests), timeout=60,
                 what="the rejection posted", observe=lambda: forge.requests)
    post = next(r for r in forge.requests if bad in r["path"])
    assert post["path"] == f"/projects/fleet%2Fpolicy/statuses/{bad}"
    assert post["body"]["state"] == "failed"
    assert post["body"]["name"] == "gpu-reconciler/prod-a"
    assert post["body"]["description"].startswith(
        f"rejected, nothing applied: {POLICY_PATH}:")


def test_reconciler_run_posts_with_its_forge_flags_and_never_logs_the_token(
    kube: KubeApi, control_plane: ControlPlane, fleet10: Fleet, policy_remote: Remote,
    alice: Person, tmp_path: Path,
) -> None:
    token = tmp_path / "forge-token"
    token.write_text("gitea-token-6b1e0c\n")
    seed = policy_remote.head()  # before the sync role pushes status snapshots
    with serve_forge() as forge:
        daemon = Daemon(["--repo", policy_remote.url, "--cluster", CLUSTER, "--kubeconfig",
                         str(control_plane.kubeconfig), "--fetch-interval", "1s",
                         "--forge", "gitea", "--forge-url", forge.url + "/api/v1",
                         "--forge-token-file", str(token), "--forge-repository", "fleet/policy",
                         "--dashboard-url", "https://dash.example.com/",
                         "--log-level", "debug"], workdir=tmp_path, name="forge")
        try:
            wait_port_ready(daemon)
            wait_for(lambda: source_commit(kube) == seed, timeout=30, what="the seed applied")
            merge = alice.commit_and_push(f"Upgrade prod-a to {NEW}", {POLICY_PATH: policy(NEW)})
            wait_for(lambda: any(merge in r["path"] and "manual gate" in r["body"]["description"]
                                 for r in forge.requests), timeout=60,
                     what="pending at the manual gate", observe=lambda: forge.requests)
            wait_for(lambda: (metric_value(daemon.metrics(),
                                           "gpu_reconciler_forge_status_posts_total",
                                           forge="gitea", outcome="posted") or 0) >= 1,
                     timeout=10, what="the posts counted")
        finally:
            code = daemon.stop()
    assert code == 0, daemon.log()[-2000:]
    post = next(r for r in forge.requests if "manual gate" in r["body"]["description"])
    assert post["path"] == f"/api/v1/repos/fleet/policy/statuses/{merge}"
    assert post["headers"]["authorization"] == "token gitea-token-6b1e0c"
    assert post["body"]["state"] == "pending"
    assert post["body"]["target_url"] == "https://dash.example.com/"
    log = daemon.log()
    assert "commit status gpu-reconciler/prod-a" in log
    assert "gitea-token-6b1e0c" not in log


def test_a_hanging_forge_does_not_hold_the_rollout(
    kube: KubeApi, fleet10: Fleet, controller: RolloutController, policy_remote: Remote,
    alice: Person, make_sync: SyncFactory, tmp_path: Path,
) -> None:
    seed = policy_remote.head()
    # the forge never answers while the rollout runs
    with _posting(make_sync, policy_remote, tmp_path, "gitea", hang=True,
                  interval=0.0) as (forge, sync, poster):
        wait_for(lambda: source_commit(kube) == seed, timeout=30, what="the seed applied")
        alice.commit_and_push(f"Upgrade prod-a to {NEW}", {POLICY_PATH: policy(NEW)})
        sync.trigger()
        forge.wait_for(1, timeout=60)  # the poster is stuck in the forge from here on
        wait_for(lambda: any("pause the rollout at step 1/3: manual gate" in s
                             for s in subjects(policy_remote)),
                 timeout=60, what="the pause write-back")
        resume = release_gate_to_the_end(kube, alice, sync, POLICY_PATH,
                                         policy(NEW, pause=False))
        assert poster.posted == []  # the whole rollout ran while the forge hung
        assert source_commit(kube) == resume
        # every commit was applied as fast as without a forge (merge-to-apply, docs/gitops.md)
        assert all(seconds < 5.0 for _, seconds in sync.stats.applies), sync.stats.applies


def test_a_change_of_forge_in_git_takes_effect_at_the_next_commit_without_a_restart(
    kube: KubeApi, control_plane: ControlPlane, fleet10: Fleet, policy_remote: Remote,
    alice: Person, tmp_path: Path,
) -> None:
    """``reconciler run`` with a token file and no other forge flag: the commit that adds
    ``forge:`` turns the statuses on; a later commit that renames the repository moves them
    there, the same process posting."""
    token = tmp_path / "forge-token"
    token.write_text("gitea-token-8d2f\n")
    server = GitDaemon(policy_remote.root)  # on 127.0.0.1: forge.url in Git may point there
    server.start()
    with serve_forge() as forge:
        def section(repository: str) -> str:
            return (REPO_CONFIG + f"forge:\n  type: gitea\n  url: {forge.url}/api/v1\n"
                    f"  repository: {repository}\n")

        daemon = Daemon(["--repo", server.url("policy.git"), "--cluster", CLUSTER,
                         "--kubeconfig", str(control_plane.kubeconfig), "--fetch-interval", "1s",
                         "--forge-token-file", str(token)], workdir=tmp_path, name="forge-live")
        try:
            wait_port_ready(daemon)
            merge = alice.commit_and_push(f"Upgrade prod-a to {NEW}, with statuses", {
                "reconciler.yaml": section("fleet/policy"), POLICY_PATH: policy(NEW)})
            wait_for(lambda: any(r["path"] == f"/api/v1/repos/fleet/policy/statuses/{merge}"
                                 and "manual gate" in r["body"]["description"]
                                 for r in forge.requests), timeout=60,
                     what="pending at the gate, where the commit says",
                     observe=lambda: forge.requests)
            pid = daemon.proc.pid if daemon.proc is not None else None
            alice.pull()
            alice.commit_and_push("Statuses go to the renamed repository",
                                  {"reconciler.yaml": section("fleet/renamed")})
            wait_for(lambda: any(r["path"] == f"/api/v1/repos/fleet/renamed/statuses/{merge}"
                                 for r in forge.requests), timeout=60,
                     what="the status at the renamed repository", observe=lambda: forge.requests)
            assert daemon.alive() and daemon.proc is not None and daemon.proc.pid == pid
        finally:
            code = daemon.stop()
            server.stop()
    assert code == 0, daemon.log()[-3000:]
    moved = next(r for r in forge.requests if "/fleet/renamed/" in r["path"])
    assert moved["body"]["state"] == "pending"
    assert "manual gate" in moved["body"]["description"]
    assert moved["headers"]["authorization"] == "token gitea-token-8d2f"
    log = daemon.log()
    assert "commit statuses to gitea fleet/policy" in log
    assert "commit statuses to gitea fleet/renamed" in log
    assert "gitea-token-8d2f" not in log
