"""The Git side wired together, on a local working copy, as the sync loop will use it."""

from __future__ import annotations

import queue
from pathlib import Path
from typing import Any

from reconciler.gitops.publisher import PendingChange
from reconciler.gitops.repository import PolicyRepository
from reconciler.gitops.source import NewCommit
from reconciler.sim.waiting import wait_for
from tests.gitops.conftest import POLICY, Person, Remote, git


def snapshot(state: str, phase: str = "Progressing") -> dict[str, Any]:
    return {"sourceCommit": "d" * 40, "upgradeStatus": {"phase": phase, "status": {
        "currentStepIndex": 1, "currentStepState": state}}}


def test_local_working_copy_end_to_end(remote: Remote, tmp_path: Path) -> None:
    work = Person(remote.url, tmp_path / "work")
    work.commit("Faster status", {"reconciler.yaml": "sync: {statusMinInterval: 200ms}\n"})
    commits: queue.Queue[NewCommit] = queue.Queue()
    landed: list[tuple[PendingChange, str]] = []
    repo = PolicyRepository(str(work.dir), cluster="prod-a", on_commit=commits.put,
                            state_dir=tmp_path / "state",
                            on_landed=lambda c, sha: landed.append((c, sha)))
    assert repo.config.status_min_interval == 0.2
    repo.start()
    try:
        first = commits.get(timeout=10)
        assert first.sha == git(work.dir, "rev-parse", "HEAD")
        assert repo.last_reported_commit() is None
        # the rollout paused at a gate: status and the pause write-back land in the working copy
        repo.status.offer(snapshot("StepPaused"))
        repo.spec.pause("prod-a", reason="manual gate after step 1", step="1/3",
                        source_commit=first.sha)
        wait_for(lambda: len(landed) == 2, timeout=15, what="2 changes landed",
                 observe=lambda: landed)
        assert "pause: true" in work.read("clusters/prod-a/cluster-operator.yaml")
        assert "StepPaused" in work.read("status/prod-a.yaml")
        assert repo.last_reported_commit() == "d" * 40
        # a fetch of our own: whatever the landings brought in has been looked at (and, were
        # it reported, reported) once it returns
        repo.source.poll()
        assert commits.empty(), "the reconciler's own commits retriggered a sync"
        # a person releases the gate with a commit of their own: reported at once
        released = work.commit("Release step 2", {
            "clusters/prod-a/cluster-operator.yaml":
                work.read("clusters/prod-a/cluster-operator.yaml").replace(
                    "pause: true", "pause: false")})
        new = commits.get(timeout=10)
        assert new.sha == released
        assert [c.subject for c in new.commits] == ["Release step 2"]
        assert repo.reader.info(released).author.name == "Alice Operator"
        # a state that had no time to be committed is queued and pushed on stop
        repo.status.offer(snapshot("Completed", phase="Idling"))
        repo.status.offer(snapshot("StepUpgrade"))
    finally:
        repo.stop()
    assert "StepUpgrade" in work.read("status/prod-a.yaml")
    subjects = git(work.dir, "log", "--format=%s").splitlines()
    assert subjects[0] == "status(prod-a): step 1 upgrading"
    assert "policy(prod-a): pause the rollout at step 1/3: manual gate after step 1" in subjects
    assert POLICY.splitlines()[0] in work.read("clusters/prod-a/cluster-operator.yaml")


def test_a_health_pause_is_a_policy_change_to_apply_not_an_own_commit(
        remote: Remote, tmp_path: Path) -> None:
    """Operator mode's health pause (docs/health.md) is reported like a person's commit, so the sync
    applies it once it landed; the rollout's write-backs are not (the cluster made them)."""
    work = Person(remote.url, tmp_path / "work")
    commits: queue.Queue[NewCommit] = queue.Queue()
    landed: list[tuple[PendingChange, str]] = []
    repo = PolicyRepository(str(work.dir), cluster="prod-a", on_commit=commits.put,
                            state_dir=tmp_path / "state", fetch_interval=0.1,
                            on_landed=lambda c, sha: landed.append((c, sha)))
    repo.start()
    try:
        first = commits.get(timeout=10)
        change = repo.spec.health_pause("prod-a", reason="health check failed: gpu-3",
                                        step="1/3", source_commit=first.sha)
        assert change.kind == "health"
        wait_for(lambda: len(landed) == 1, timeout=15, what="1 change landed",
                 observe=lambda: landed)
        sha = landed[0][1]
        new = commits.get(timeout=10)
        assert new.sha == sha
        assert [c.subject for c in new.commits] == [
            "policy(prod-a): pause the rollout at step 1/3: health check failed: gpu-3"]
        assert "pause: true" in work.read("clusters/prod-a/cluster-operator.yaml")
        message = git(work.dir, "log", "-1", "--format=%B", sha)
        assert f"Source-Commit: {first.sha}" in message
        assert "Reconciler-Commit:" not in message
    finally:
        repo.stop()
