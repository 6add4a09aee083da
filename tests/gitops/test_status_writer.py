"""The status writer against a real remote, on a virtual clock; restarts never duplicate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from reconciler.config.sync import SyncSettings, read_sync_settings
from reconciler.gitops.commits import parse_trailers
from reconciler.gitops.mirror import Mirror
from reconciler.gitops.publisher import Publisher
from reconciler.gitops.status_policy import WriterTiming
from reconciler.gitops.status_reader import read_status_snapshots, status_from_git
from reconciler.gitops.status_writer import StatusWriter
from reconciler.sim.waiting import wait_for
from tests.gitops.conftest import GitDaemon, Person, Remote, git


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def upgrade(step: int, state: str, phase: str = "Progressing", ready: int = 0) -> dict[str, Any]:
    return {
        "sourceCommit": "c" * 40,
        "upgradeStatus": {"phase": phase, "upgrading": phase == "Progressing", "status": {
            "currentStepIndex": step, "currentStepState": state,
            "totalUpgradeReplicas": 10, "totalUpgradeReadyReplicas": ready}},
        "spec": {"upgradePolicy": {"upgradeSteps": [{}, {}, {}]}},
    }


def writer_for(url: str, state: Path, clock: Clock) -> StatusWriter:
    publisher = Publisher(Mirror(url, state), "main", state_dir=state, sleep=lambda _: None)
    return StatusWriter(publisher, "prod-a", config=SyncSettings(), clock=clock)


def status_subjects(remote: Remote) -> list[str]:
    return git(remote.path, "log", "--reverse", "--format=%s", "main", "--",
               "status/prod-a.yaml").splitlines()


def test_transitions_become_coalesced_commits(remote: Remote, tmp_path: Path) -> None:
    clock = Clock()
    writer = writer_for(remote.url, tmp_path / "state", clock)
    timeline = {
        0.0: upgrade(1, "StepUpgradeInit"),
        0.1: upgrade(1, "StepUpgrade"),
        2.0: upgrade(1, "StepUpgrade", ready=1),
        10.0: upgrade(1, "StepPaused", ready=1),
        30.0: upgrade(1, "StepPaused", ready=1),
        40.0: upgrade(3, "Completed", phase="Idling", ready=10),
    }
    for tenth in range(450):  # the writer's loop, looking every 0.1 s
        at = tenth / 10
        clock.now = 1_800_000_000.0 + at
        if at in timeline:
            writer.offer(timeline[at])
        writer.poll()
    assert writer.publisher.flush().ok
    assert status_subjects(remote) == [
        "status(prod-a): step 1/3 upgrading (1/10 nodes on the new driver)",
        "status(prod-a): step 1/3 paused: waiting (1/10 nodes on the new driver)",
        "status(prod-a): rollout completed at step 3/3 (10/10 nodes on the new driver)",
    ]
    trailers = parse_trailers(git(remote.path, "log", "-1", "--format=%B", "main"))
    assert trailers["Source-Commit"] == "c" * 40
    assert trailers["Rollout-Step"] == "3/3"
    assert trailers["Phase"] == "Idling"
    data = YAML(typ="safe").load(remote.show("main:status/prod-a.yaml"))
    assert data["cluster"] == "prod-a"
    assert data["observedAt"] == "2027-01-15T08:00:40Z"
    assert data["upgradeStatus"]["status"]["totalUpgradeReadyReplicas"] == 10


def test_restart_does_not_recommit_a_state_already_in_git(remote: Remote,
                                                          tmp_path: Path) -> None:
    clock = Clock()
    state = tmp_path / "state"
    writer = writer_for(remote.url, state, clock)
    writer.offer(upgrade(1, "StepPaused"))
    clock.now += 10
    assert writer.poll() is not None
    assert writer.publisher.flush().ok
    restarted = writer_for(remote.url, state, clock)
    restarted.offer(upgrade(1, "StepPaused", ready=3))
    clock.now += 60
    assert restarted.poll() is None
    assert restarted.publisher.pending() == []
    assert len(status_subjects(remote)) == 1


def test_restart_while_the_remote_is_down_uses_the_queue(remote: Remote,
                                                         tmp_path: Path) -> None:
    clock = Clock()
    state = tmp_path / "state"
    writer = writer_for(remote.url, state, clock)
    remote.go_down()
    writer.offer(upgrade(2, "StepUpgrade"))
    clock.now += 10
    assert writer.poll() is not None
    assert not writer.publisher.flush().ok
    restarted = writer_for(remote.url, state, clock)  # still down
    restarted.offer(upgrade(2, "StepUpgrade", ready=4))
    clock.now += 60
    assert restarted.poll() is None
    remote.come_back()
    assert restarted.publisher.flush().ok
    assert status_subjects(remote) == ["status(prod-a): step 2/3 upgrading (0/10 nodes on the "
                                       "new driver)"]


def test_background_threads_commit_a_terminal_state_promptly(remote: Remote,
                                                             tmp_path: Path) -> None:
    state = tmp_path / "state"
    publisher = Publisher(Mirror(remote.url, state), "main", state_dir=state)
    writer = StatusWriter(publisher, "prod-a", timing=WriterTiming(min_interval=0.2))
    publisher.start()
    writer.start()
    try:
        writer.offer(upgrade(3, "Completed", phase="Idling", ready=10))
        wait_for(lambda: status_subjects(remote), timeout=15, what="a status commit")
        assert status_subjects(remote) == [
            "status(prod-a): rollout completed at step 3/3 (10/10 nodes on the new driver)"]
    finally:
        writer.stop()
        publisher.stop()


def test_status_from_git_reads_the_branch_head(remote: Remote, git_daemon: GitDaemon,
                                               tmp_path: Path) -> None:
    clock = Clock()
    writer = writer_for(remote.url, tmp_path / "state", clock)
    writer.offer(upgrade(1, "StepPaused"))
    clock.now += 10
    writer.poll()
    assert writer.publisher.flush().ok
    local = Person(remote.url, tmp_path / "clone")
    from_local = status_from_git(str(local.dir), "prod-a")
    from_url = status_from_git(git_daemon.url("policy.git"), "prod-a",
                               state_dir=tmp_path / "cli-state")
    assert from_local == from_url
    assert from_local["upgradeStatus"]["status"]["currentStepState"] == "StepPaused"
    assert from_local["git"] == {"branch": "main", "commit": remote.head()}
    assert set(read_status_snapshots(str(local.dir)).snapshots) == {"prod-a"}


def test_status_from_git_explains_what_is_missing(remote: Remote, tmp_path: Path) -> None:
    import pytest

    from reconciler.gitops.errors import GitOpsError, StatusNotFound

    with pytest.raises(StatusNotFound, match="no status snapshot for cluster 'prod-a'"):
        status_from_git(remote.url, "prod-a", state_dir=tmp_path / "s")
    with pytest.raises(StatusNotFound, match="has no branch 'dev'"):
        status_from_git(str(remote.path), "prod-a", branch="dev")
    with pytest.raises(GitOpsError, match="is not a Git repository"):
        status_from_git(str(tmp_path / "nowhere"), "prod-a")


def test_status_on_a_configured_branch_and_path(remote: Remote, alice: Person,
                                                tmp_path: Path) -> None:
    alice.commit_and_push("Status elsewhere", {
        "reconciler.yaml": "status: {path: fleet-status, branch: status}\n"})
    config = read_sync_settings(alice.read("reconciler.yaml"))
    state = tmp_path / "state"
    publisher = Publisher(Mirror(remote.url, state), config.status_branch or "main",
                          state_dir=state)
    writer = StatusWriter(publisher, "prod-a", config=config)
    writer.offer(upgrade(1, "Completed", phase="Idling"))
    writer.poll()
    assert publisher.flush().ok
    snapshot = status_from_git(remote.url, "prod-a", state_dir=tmp_path / "cli")
    assert snapshot["git"]["branch"] == "status"
    assert git(remote.path, "ls-tree", "-r", "--name-only", "status") == "fleet-status/prod-a.yaml"


def test_committed_status_files_pass_the_status_snapshot_schema(remote: Remote,
                                                                tmp_path: Path) -> None:
    """The file ``reconciler validate --against`` reads back is what the schema describes."""
    from reconciler.policy.validation import validate_status_snapshot

    clock = Clock()
    writer = writer_for(remote.url, tmp_path / "state", clock)
    paused = upgrade(1, "StepPaused", ready=1)
    paused["upgradeStatus"]["condition"] = [{
        "type": "Paused", "status": "True", "reason": "ManualGate",
        "lastTransitionTime": "2027-01-15T08:00:00Z", "message": "waiting for a person"}]
    paused["spec"] = {"driver": {"payload": {"version": "2.33.0.9"},
                                 "upgradePolicy": {"upgradeSteps": [{}, {}, {}]}}}
    rejected = upgrade(1, "StepPaused", ready=1)
    rejected["spec"] = paused["spec"]
    rejected["rejection"] = {"commit": "e" * 40, "findings": [{
        "file": "clusters/prod-a/cluster-operator.yaml", "line": 22, "column": 7,
        "pointer": "/spec/driver/upgradePolicy/maxParallel", "rule": "transition-locked-field",
        "severity": "error", "message": "maxParallel may not change while Progressing"}]}
    for snapshot in (paused, rejected):
        writer.offer(snapshot)
        clock.now += 10
        assert writer.poll() is not None
        assert writer.publisher.flush().ok
        text = remote.show("main:status/prod-a.yaml")
        result = validate_status_snapshot(text, "status/prod-a.yaml")
        assert [f.message for f in result.findings if f.severity == "error"] == []
    subject = git(remote.path, "log", "-1", "--format=%s", "main")
    assert subject == ("status(prod-a): rejected eeeeeeeeeeee: "
                       "clusters/prod-a/cluster-operator.yaml:22 maxParallel may not change "
                       "while Progressing")


def test_snapshot_built_from_the_live_object_passes_the_schema() -> None:
    from reconciler.gitops.edits import render_status
    from reconciler.gitops.status_policy import build_snapshot, describe
    from reconciler.policy.validation import validate_status_snapshot

    live = {
        "apiVersion": "gpu.metax-tech.com/v1alpha1", "kind": "ClusterOperator",
        "metadata": {"name": "cluster-operator", "resourceVersion": "42", "uid": "u"},
        "spec": {"driver": {"payload": {"name": "driver-image", "version": "2.33.0.9"},
                            "upgradePolicy": {"enableRollout": True, "upgradeSteps": [
                                {"replicas": 1},
                                {"replicas": "100%", "pauseDuration": 0}]},
                            "log": {"level": "info"}},
                 "devicePlugin": {"deploy": True}},
        "status": {"upgradeStatus": {"phase": "Progressing", "upgrading": True,
                                     "status": {"currentStepIndex": 1,
                                                "currentStepState": "StepPaused"}}},
    }
    snapshot = build_snapshot(live, source_commit="a" * 40,
                              firmware={"phase": "Idle", "nodes": {}})
    full = {"cluster": "prod-a", "observedAt": "2027-01-15T08:00:00Z", **snapshot}
    result = validate_status_snapshot(render_status(full), "status/prod-a.yaml")
    assert [f.message for f in result.findings if f.severity == "error"] == []
    assert set(snapshot["spec"]["driver"]) == {"payload", "upgradePolicy"}
    assert describe(full) == "status(prod-a): step 1/2 paused: waiting"
