"""Merge-to-upgrade end to end: a commit bumping the driver ends with every node on it, and
``git log`` reads as the audit trail (docs/gitops.md and docs/gitops.md#git-stays-the-truth)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.controller.loop import RolloutController
from reconciler.kube.api import KubeApi
from reconciler.sim.control_plane import ControlPlane
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from tests.sync.conftest import (
    NEW,
    OLD,
    POLICY_PATH,
    Person,
    Remote,
    SyncFactory,
    git,
    policy,
)
from tests.sync.helpers import (
    driver,
    file_at_head,
    release_gate_to_the_end,
    source_commit,
    status_file,
    step_state,
    subjects,
)

pytestmark = pytest.mark.cluster


@pytest.mark.compat
def test_merge_to_upgrade_with_git_log_as_the_audit_trail(
    kube: KubeApi, fleet10: Fleet, controller: RolloutController, policy_remote: Remote,
    alice: Person, make_sync: SyncFactory, control_plane: ControlPlane, tmp_path: Path,
) -> None:
    seed = policy_remote.head()  # before the sync role pushes status snapshots
    sync = make_sync(policy_remote.url)
    wait_for(lambda: source_commit(kube) == seed, timeout=30, what="the seed commit applied",
             observe=lambda: source_commit(kube))

    merge = alice.commit_and_push(f"Upgrade prod-a to {NEW}", {POLICY_PATH: policy(NEW)})
    sync.trigger()
    wait_for(lambda: step_state(kube) == ("Progressing", 1, "StepPaused"), timeout=60,
             what="step 1 paused at the manual gate", observe=lambda: step_state(kube))
    assert source_commit(kube) == merge
    assert len(fleet10.ready_driver_nodes(NEW)) == 1
    # the controller's pause: true reaches Git as the reconciler's own commit
    wait_for(lambda: any("pause the rollout at step 1/3: manual gate" in s
                         for s in subjects(policy_remote)),
             timeout=30, what="the pause write-back", observe=lambda: subjects(policy_remote))
    text = file_at_head(policy_remote, POLICY_PATH)
    assert "pause: true" in text
    assert "a person confirms the canary" in text  # round trip kept the comments

    # `reconciler status` tells what the rollout waits for, from Git and from the cluster
    wait_for(lambda: (status_file(policy_remote) or {}).get("upgradeStatus", {}).get("status", {})
             .get("currentStepState") == "StepPaused", timeout=30, what="the gate in Git")
    reconciler = str(Path(sys.executable).parent / "reconciler")
    for source in (["--from", "git", "--repo", policy_remote.url, "--state-dir",
                    str(tmp_path / "status-state")],
                   ["--from", "cluster", "--kubeconfig", str(control_plane.kubeconfig)]):
        shown = subprocess.run([reconciler, "status", "--cluster", "prod-a", "--format", "json",
                                *source], capture_output=True, text=True)
        assert shown.returncode == 0, shown.stderr
        data = json.loads(shown.stdout)
        assert (data["phase"], data["step"], data["stepState"]) == ("Progressing", "1/3",
                                                                   "StepPaused")
        assert data["sourceCommit"] == merge
        assert "merge `pause: false`" in data["waitingFor"][0]
        assert [row["state"] for row in data["steps"]] == ["StepPaused", "pending", "pending"]
    text = subprocess.run([reconciler, "status", "--from", "cluster", "--kubeconfig",
                           str(control_plane.kubeconfig)], capture_output=True, text=True)
    assert text.returncode == 0 and "waiting for" in text.stdout, text.stderr

    # a pull request that edits maxParallel during the rollout fails the offline check, which
    # reads the phase from the status snapshot in Git
    alice.pull()
    alice.write(POLICY_PATH, policy(NEW, pause=True, max_parallel="3"))
    check = subprocess.run(
        [str(Path(sys.executable).parent / "reconciler"), "validate", "--against", "origin/main",
         POLICY_PATH], cwd=alice.dir, capture_output=True, text=True)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "maxParallel cannot change while the rollout is Progressing" in check.stdout
    git(alice.dir, "checkout", "--", POLICY_PATH)

    # an unrelated commit (still saying nothing about pause) releases nothing
    alice.pull()
    notes = alice.commit_and_push("Document the canary", {"README.md": "prod-a policy\n"})
    sync.trigger()
    wait_for(lambda: sync.handled_source == notes, timeout=20,
             what="the unrelated commit handled")
    assert step_state(kube) == ("Progressing", 1, "StepPaused")
    assert driver(kube)["upgradePolicy"]["pause"] is True

    # a person resumes by merging pause: false
    resume = release_gate_to_the_end(kube, alice, sync, POLICY_PATH,
                                     policy(NEW, pause=False))
    assert source_commit(kube) == resume
    assert sorted(fleet10.ready_driver_nodes(NEW)) == sorted(fleet10.node_names)
    assert not fleet10.ready_driver_nodes(OLD)

    wait_for(lambda: (status_file(policy_remote) or {}).get("upgradeStatus", {})
             .get("status", {}).get("currentStepState") == "Completed",
             timeout=30, what="the completed snapshot in Git")
    log = subjects(policy_remote)
    print("\n".join(log))

    def position(text: str) -> int:
        return next(i for i, s in enumerate(log) if text in s)

    merged = position(f"Alice Operator: Upgrade prod-a to {NEW}")
    step1 = position("status(prod-a): step 1/3")
    paused = position("gpu-gitops-reconciler: policy(prod-a): pause the rollout at step 1/3")
    resumed = position("Alice Operator: Release the rest of prod-a")
    completed = position("status(prod-a): rollout completed at step 3/3 (10/10")
    assert merged < step1 < resumed < completed
    assert merged < paused < resumed
    snapshot = status_file(policy_remote)
    assert snapshot is not None
    assert snapshot["sourceCommit"] == resume
    assert "rejection" not in snapshot
    # status commits stay within the budget of 3 x steps + 3
    own = [s for s in log if s.startswith("gpu-gitops-reconciler: status(")]
    assert len(own) <= 3 * 3 + 3, own
    assert sync.stats.rejected == 0
