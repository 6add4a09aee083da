"""The promotion gate's ``hold`` (docs/configuration.md#promotion) against a real remote and the
real control plane: a merged payload change the gate does not allow yet is not applied, an Event and
the status snapshot say "held by promotion gate", and it is applied by itself, without a new commit,
once the soak has passed."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from reconciler.kube.api import KubeApi, resource_path
from reconciler.kube.events import EVENT_NAMESPACE
from reconciler.policy.validation import validate_status_snapshot
from reconciler.sim.control_plane import ControlPlane
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from reconciler.timefmt import format_seconds
from tests.sync.conftest import (
    CLUSTER,
    NEW,
    OLD,
    PAYLOAD,
    POLICY_PATH,
    REPO_CONFIG,
    Person,
    Remote,
    SyncFactory,
    git,
    policy,
)
from tests.sync.daemon import Daemon, wait_port_ready
from tests.sync.helpers import driver, file_at_head, source_commit, status_file, subjects

pytestmark = pytest.mark.cluster
SOAK = 10


@pytest.fixture
def small_fleet(fleet_factory: Callable[..., Fleet]) -> Fleet:
    return fleet_factory(nodes=2, payload=PAYLOAD, install_seconds=0.2)


def _events(kube: KubeApi, reason: str) -> list[str]:
    items = kube.list(resource_path("v1", "events", namespace=EVENT_NAMESPACE))["items"]
    return [e["message"] for e in items if e.get("reason") == reason]


def lab_snapshot(finished: float) -> str:
    return (f"cluster: lab-1\nobservedAt: '{format_seconds(finished)}'\n"
            "upgradeStatus: {phase: Idling, status: {currentStepState: Completed}}\n"
            f"lastRollout: {{version: {NEW}, result: Completed, "
            f"finishedAt: '{format_seconds(finished)}'}}\n"
            f"spec: {{driver: {{payload: {{version: {NEW}}}}}}}\n")


def push_gated(alice: Person, subject: str, *, soak: int = SOAK, mode: str | None = None,
               promote: bool = True) -> tuple[str, float]:
    """Alice pushes prod-a's promotion gate after lab-1 (lab-1's snapshot: it completed NEW
    just now) and, with ``promote``, prod-a's bump to NEW; returns the commit and lab-1's
    ``finishedAt``."""
    finished = float(int(time.time()))
    extra = f", mode: {mode}" if mode else ""
    files = {
        "reconciler.yaml": REPO_CONFIG + ("clusters:\n  prod-a:\n    promotion: "
                                          f"{{after: lab-1, soak: {soak}s{extra}}}\n"),
        "status/lab-1.yaml": lab_snapshot(finished),
    }
    if promote:
        files[POLICY_PATH] = policy(NEW, enable=False)
    return alice.commit_and_push(subject, files), finished


def test_a_held_change_is_applied_by_itself_once_the_soak_passed(
    kube: KubeApi, small_fleet: Fleet, policy_remote: Remote, alice: Person,
    make_sync: SyncFactory,
) -> None:
    seed = policy_remote.head()
    sync = make_sync(policy_remote.url)
    wait_for(lambda: source_commit(kube) == seed, timeout=30, what="the seed applied")
    alice.pull()
    sha, finished = push_gated(alice, f"Promote {NEW} to prod-a")
    sync.trigger()
    wait_for(lambda: sync.record.handled_source == sha, timeout=20, what="the commit judged")
    assert time.time() < finished + SOAK, "judged inside the soak"
    assert driver(kube)["payload"]["version"] == OLD
    assert source_commit(kube) == seed
    events = wait_for(lambda: _events(kube, "PromotionHeld"), timeout=10, what="the Event")
    assert any(sha[:12] in m and "held by promotion gate" in m for m in events)
    held = wait_for(lambda: ((status_file(policy_remote) or {}).get("promotion") or {}).get(
        "held"), timeout=SOAK, what="the hold in Git")
    assert held["version"] == NEW and held["upstream"] == "lab-1"
    assert held["earliest"] == format_seconds(finished + SOAK)
    text = file_at_head(policy_remote, "status/prod-a.yaml")
    assert validate_status_snapshot(text, "status/prod-a.yaml").ok
    assert driver(kube)["payload"]["version"] == OLD
    # applied without a new commit by a person, once the soak passed
    wait_for(lambda: source_commit(kube) == sha, timeout=SOAK + 20, what="the held change applied")
    assert driver(kube)["payload"]["version"] == NEW
    assert time.time() >= finished + SOAK
    wait_for(lambda: "promotion" not in (status_file(policy_remote) or {"promotion": 1}),
             timeout=20, what="a snapshot without the hold")
    # no new commit by a person: only the reconciler's status commits followed the merge
    after = subjects(policy_remote, f"{sha}..main")
    assert after and all(s.startswith("gpu-gitops-reconciler: status(prod-a)") for s in after)


def test_a_sync_restarted_while_a_change_is_held_applies_it_exactly_once(
    kube: KubeApi, small_fleet: Fleet, policy_remote: Remote, alice: Person,
    make_sync: SyncFactory, tmp_path: Path,
) -> None:
    seed = policy_remote.head()
    first = make_sync(policy_remote.url, state_dir=tmp_path / "state")
    wait_for(lambda: source_commit(kube) == seed, timeout=30, what="the seed applied")
    alice.pull()
    sha, finished = push_gated(alice, f"Promote {NEW} to prod-a")
    first.trigger()
    wait_for(lambda: first.record.held is not None, timeout=20, what="the change held")
    applied_before = first.stats.applied
    first.stop()  # killed while the change is held
    assert first.stats.applied == applied_before
    assert driver(kube)["payload"]["version"] == OLD
    second = make_sync(policy_remote.url, state_dir=tmp_path / "state")
    wait_for(lambda: source_commit(kube) == sha, timeout=SOAK + 20, what="the held change applied")
    assert time.time() >= finished + SOAK
    # later passes (status commits, rechecks) apply nothing again
    assert second.worker.wait_passes(2, timeout=30), "two more passes"
    assert [commit for commit, _ in second.stats.applies].count(sha) == 1
    assert second.record.held is None


def test_a_daemon_sigkilled_while_a_change_is_held_applies_it_exactly_once_after_restart(
    kube: KubeApi, control_plane: ControlPlane, small_fleet: Fleet, policy_remote: Remote,
    alice: Person, tmp_path: Path,
) -> None:
    """The held change lives only in Git and the cluster: a process killed with no chance to
    save anything finds it again and applies it once, when the soak has passed."""
    seed = policy_remote.head()
    args = ["--role", "sync", "--repo", policy_remote.url, "--cluster", CLUSTER,
            "--kubeconfig", str(control_plane.kubeconfig), "--fetch-interval", "300ms"]
    daemon = Daemon(args, workdir=tmp_path, name="sync")
    try:
        wait_port_ready(daemon)
        wait_for(lambda: source_commit(kube) == seed, timeout=30, what="the seed applied")
        alice.pull()
        sha, finished = push_gated(alice, f"Promote {NEW} to prod-a")
        wait_for(lambda: any(sha[:12] in m for m in _events(kube, "PromotionHeld")), timeout=30,
                 what="the change held")
        assert daemon.stop(signal.SIGKILL) == -signal.SIGKILL
        assert driver(kube)["payload"]["version"] == OLD
        assert time.time() < finished + SOAK, "killed before the soak ended"
        daemon.start()
        wait_port_ready(daemon)
        wait_for(lambda: source_commit(kube) == sha, timeout=SOAK + 30,
                 what="the held change applied")
        assert time.time() >= finished + SOAK
        assert driver(kube)["payload"]["version"] == NEW
        # later passes (status commits, rechecks) apply nothing again: one of them committed
        # the snapshot without the hold
        def unheld() -> bool:
            snapshot = status_file(policy_remote) or {}
            return snapshot.get("sourceCommit") == sha and "promotion" not in snapshot

        wait_for(unheld, timeout=30, what="a snapshot of the applied change without the hold",
                 observe=lambda: status_file(policy_remote))
        applied = [m for m in _events(kube, "PolicyApplied") if sha[:12] in m]
        assert len(applied) == 1, applied
    finally:
        assert daemon.stop() == 0, daemon.log()[-2000:]


def test_branch_mode_pushes_a_promotion_branch_once_the_version_passes_upstream(
    kube: KubeApi, small_fleet: Fleet, policy_remote: Remote, alice: Person,
    make_sync: SyncFactory,
) -> None:
    seed = policy_remote.head()
    sync = make_sync(policy_remote.url)
    wait_for(lambda: source_commit(kube) == seed, timeout=30, what="the seed applied")
    alice.pull()
    soak = 4
    sha, finished = push_gated(alice, "prod-a follows lab-1 by promotion branches", soak=soak,
                               mode="branch", promote=False)
    sync.trigger()
    wait_for(lambda: sync.record.handled_source == sha, timeout=20, what="the commit judged")
    branch = f"promote/prod-a/{NEW}"
    assert branch not in git(policy_remote.path, "branch", "--list", branch), "inside the soak"
    wait_for(lambda: branch in git(policy_remote.path, "branch", "--list", branch),
             timeout=soak + 20, what="the promotion branch pushed")
    assert time.time() >= finished + soak
    promoted = policy_remote.show(f"{branch}:{POLICY_PATH}")
    assert f"version: {NEW}   # the driver the fleet should run" in promoted  # comments kept
    assert promoted.replace(NEW, OLD, 1).rstrip("\n") == policy().rstrip("\n")  # one line
    assert f"version: {OLD}" in policy_remote.show(f"main:{POLICY_PATH}")  # main untouched
    assert driver(kube)["payload"]["version"] == OLD  # nothing applied: a person merges
    events = wait_for(lambda: _events(kube, "PromotionBranchPushed"), timeout=10,
                      what="the Event")
    assert any(branch in m for m in events)
    tip = git(policy_remote.path, "rev-parse", branch)
    assert sync.worker.wait_passes(2, timeout=30), "later passes leave the branch alone"
    assert git(policy_remote.path, "rev-parse", branch) == tip


def test_auto_mode_commits_the_promotion_and_applies_it_like_a_persons_commit(
    kube: KubeApi, small_fleet: Fleet, policy_remote: Remote, alice: Person,
    make_sync: SyncFactory,
) -> None:
    seed = policy_remote.head()
    sync = make_sync(policy_remote.url)
    wait_for(lambda: source_commit(kube) == seed, timeout=30, what="the seed applied")
    alice.pull()
    soak = 4
    sha, finished = push_gated(alice, "prod-a follows lab-1 by itself", soak=soak,
                               mode="auto", promote=False)
    sync.trigger()
    wait_for(lambda: source_commit(kube) == sha, timeout=20, what="the config commit applied")
    assert time.time() < finished + soak, "judged inside the soak"
    assert f"version: {OLD}" in file_at_head(policy_remote, POLICY_PATH)
    # once the soak passed: committed to main, then applied like a person's commit
    promoted = wait_for(lambda: git(policy_remote.path, "log", "--format=%H", "--grep",
                                    "promote the driver", "main").split(),
                        timeout=soak + 20, what="the promotion commit")
    assert len(promoted) == 1
    commit = promoted[0]
    assert time.time() >= finished + soak
    message = git(policy_remote.path, "log", "-1", "--format=%B", commit)
    assert "Reconciler-Promotion: prod-a" in message
    assert "Reconciler-Commit" not in message  # a policy change, not one to ignore
    text = policy_remote.show(f"{commit}:{POLICY_PATH}")
    assert f"version: {NEW}   # the driver the fleet should run" in text  # comments kept
    assert text.replace(NEW, OLD, 1).rstrip("\n") == policy().rstrip("\n")  # one line
    wait_for(lambda: source_commit(kube) == commit, timeout=30, what="the promotion applied")
    assert driver(kube)["payload"]["version"] == NEW
    events = wait_for(lambda: _events(kube, "PromotionCommitted"), timeout=10, what="the Event")
    assert any(NEW in m and "lab-1" in m for m in events)
    # later passes (status commits, rechecks) commit and apply nothing again
    assert sync.worker.wait_passes(2, timeout=30), "two more passes"
    assert git(policy_remote.path, "log", "--format=%H", "--grep", "promote the driver",
               "main").split() == [commit]
    assert [c for c, _ in sync.stats.applies].count(commit) == 1
