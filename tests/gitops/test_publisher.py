"""Status and spec write-backs against real remotes: races with people, outages, restarts."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from reconciler.config.sync import SyncSettings
from reconciler.gitops.commits import Identity, parse_trailers
from reconciler.gitops.errors import PushRejected
from reconciler.gitops.mirror import Mirror
from reconciler.gitops.publisher import PendingChange, Publisher
from reconciler.gitops.spec_writeback import SpecWriteBack
from tests.gitops.conftest import POLICY, GitDaemon, Person, Remote, git

POLICY_PATH = "clusters/prod-a/cluster-operator.yaml"


def snapshot(step: int, state: str, phase: str = "Progressing", ready: int = 0) -> dict[str, Any]:
    return {
        "cluster": "prod-a", "sourceCommit": "f" * 40, "observedAt": "2026-01-01T00:00:00Z",
        "upgradeStatus": {"phase": phase, "status": {
            "currentStepIndex": step, "currentStepState": state,
            "totalUpgradeReplicas": 10, "totalUpgradeReadyReplicas": ready}},
    }


def status_change(step: int, state: str, **kw: Any) -> PendingChange:
    snap = snapshot(step, state, **kw)
    return PendingChange(kind="status", cluster="prod-a", path="status/prod-a.yaml",
                         subject=f"status(prod-a): step {step} {state}",
                         trailers=(("Rollout-Step", str(step)), ("Phase", "Progressing")),
                         created_at=1_800_000_000.0, snapshot=snap)


def make_publisher(url: str, state: Path, **kw: Any) -> Publisher:
    return Publisher(Mirror(url, state), "main", state_dir=state, sleep=lambda _: None, **kw)


def status_states(remote: Remote) -> list[str]:
    """The step state of every status commit on main, oldest first."""
    states = []
    shas = git(remote.path, "rev-list", "--reverse", "main", "--", "status/prod-a.yaml").split()
    for sha in shas:
        data = YAML(typ="safe").load(remote.show(f"{sha}:status/prod-a.yaml"))
        status = data["upgradeStatus"]["status"]
        states.append(f"{status['currentStepIndex']}:{status['currentStepState']}")
    return states


def test_status_commit_is_pushed_with_trailers_and_own_identity(remote: Remote,
                                                                 tmp_path: Path) -> None:
    publisher = make_publisher(remote.url, tmp_path / "state")
    publisher.enqueue(status_change(1, "StepUpgrade"))
    result = publisher.flush()
    assert result.ok and len(result.landed) == 1
    log = remote.log("-1")
    assert "gpu-gitops-reconciler\tstatus(prod-a): step 1 StepUpgrade" in log
    trailers = parse_trailers(git(remote.path, "log", "-1", "--format=%B"))
    assert trailers["Reconciler-Commit"] == "true"
    assert trailers["Rollout-Step"] == "1"
    # the author date is when the state was observed, not when it could be pushed
    assert git(remote.path, "log", "-1", "--format=%at") == "1800000000"
    assert publisher.pending() == []


def test_a_person_pushing_between_fetch_and_push_is_kept(remote: Remote, alice: Person,
                                                         tmp_path: Path) -> None:
    class RacyMirror(Mirror):
        raced = 0

        def fetch(self) -> dict[str, str]:
            heads = super().fetch()
            if self.raced < 2:  # a person wins the race twice in a row
                self.raced += 1
                alice.commit_and_push(f"README edit {self.raced}",
                                      {"README.md": f"edit {self.raced}\n"})
            return heads

    state = tmp_path / "state"
    publisher = Publisher(RacyMirror(remote.url, state), "main", state_dir=state,
                          sleep=lambda _: None)
    publisher.enqueue(status_change(1, "StepUpgrade"))
    result = publisher.flush()
    assert result.ok
    subjects = git(remote.path, "log", "--format=%s", "main").splitlines()
    assert subjects[:3] == ["status(prod-a): step 1 StepUpgrade", "README edit 2", "README edit 1"]


@pytest.mark.parametrize("transport", ["file", "git-daemon"])
def test_people_and_the_writer_pushing_at_the_same_time_all_survive(
        remote: Remote, alice: Person, tmp_path: Path, transport: str,
        request: pytest.FixtureRequest) -> None:
    url = remote.url
    if transport == "git-daemon":
        url = request.getfixturevalue("git_daemon").url("policy.git")
    publisher = make_publisher(url, tmp_path / "state", max_attempts=50)
    person_shas: list[str] = []

    def person() -> None:
        for i in range(8):
            person_shas.append(alice.commit_and_push(f"note {i}", {f"notes/{i}.md": f"{i}\n"}))

    thread = threading.Thread(target=person)
    thread.start()
    states = ["StepUpgradeInit", "StepUpgrade", "StepPaused", "StepReady"]
    for i in range(8):
        publisher.enqueue(status_change(1 + i // 4, states[i % 4]))
        assert publisher.flush().ok
    thread.join()
    history = set(git(remote.path, "rev-list", "main").split())
    assert set(person_shas) <= history
    assert len(status_states(remote)) == 8
    assert status_states(remote)[-1] == "2:StepReady"


def test_remote_down_queues_then_drains_in_order_without_duplicates(
        remote: Remote, tmp_path: Path) -> None:
    state = tmp_path / "state"
    publisher = make_publisher(remote.url, state)
    publisher.enqueue(status_change(1, "StepUpgrade"))
    assert publisher.flush().ok
    remote.go_down()
    for step, stage in [(1, "StepPaused"), (2, "StepUpgrade"), (2, "StepPaused")]:
        publisher.enqueue(status_change(step, stage))
        result = publisher.flush()
        assert not result.ok and result.error and "failed" in result.error
    assert len(publisher.pending()) == 3
    # a restart while down: a new process finds the queue in the state directory
    restarted = make_publisher(remote.url, state)
    assert [c.snapshot["upgradeStatus"]["status"]["currentStepState"]  # type: ignore[index]
            for c in restarted.pending()] == ["StepPaused", "StepUpgrade", "StepPaused"]
    remote.come_back()
    result = restarted.flush()
    assert result.ok and len(result.landed) == 3
    assert status_states(remote) == ["1:StepUpgrade", "1:StepPaused", "2:StepUpgrade",
                                     "2:StepPaused"]
    assert restarted.flush().landed == []
    assert status_states(remote)[-1] == "2:StepPaused"


def test_a_crash_after_the_push_does_not_commit_twice(remote: Remote, tmp_path: Path) -> None:
    state = tmp_path / "state"
    publisher = make_publisher(remote.url, state)
    publisher.enqueue(status_change(1, "StepUpgrade"))
    publisher.enqueue(status_change(1, "StepPaused"))
    saved = tmp_path / "queue-before-push.json"
    shutil.copy(publisher.queue.path, saved)
    assert publisher.flush().ok
    shutil.copy(saved, publisher.queue.path)  # as if the process died before clearing it
    restarted = make_publisher(remote.url, state)
    result = restarted.flush()
    assert result.landed == []
    assert {s.reason for s in result.skipped} == {"already in Git"}
    assert status_states(remote) == ["1:StepUpgrade", "1:StepPaused"]


def test_a_state_already_in_git_is_not_committed_again(remote: Remote, tmp_path: Path) -> None:
    publisher = make_publisher(remote.url, tmp_path / "state")
    publisher.enqueue(status_change(1, "StepUpgrade"))
    publisher.flush()
    publisher.enqueue(status_change(1, "StepUpgrade", ready=5))  # counters only
    result = publisher.flush()
    assert result.landed == [] and "already holds" in result.skipped[0].reason
    assert status_states(remote) == ["1:StepUpgrade"]


def test_over_git_daemon_down_and_back(remote: Remote, git_daemon: GitDaemon,
                                       tmp_path: Path) -> None:
    url = git_daemon.url("policy.git")
    publisher = make_publisher(url, tmp_path / "state")
    publisher.enqueue(status_change(1, "StepUpgrade"))
    assert publisher.flush().ok
    git_daemon.stop()
    publisher.enqueue(status_change(1, "StepPaused"))
    result = publisher.flush()
    assert not result.ok and result.remaining == 1
    git_daemon.start()
    assert publisher.flush().ok
    assert status_states(remote) == ["1:StepUpgrade", "1:StepPaused"]


def test_a_push_from_a_stale_view_is_rejected_not_forced(remote: Remote,
                                                          tmp_path: Path) -> None:
    mirror = Mirror(remote.url, tmp_path / "state")
    mirror.fetch()
    stale = mirror.head("main")
    bob = Person(remote.url, tmp_path / "bob", name="Bob Builder")
    bob_sha = bob.commit_and_push("bob's change", {"README.md": "bob\n"})
    ours = mirror.create_commit(stale, {"status/prod-a.yaml": b"x: 1\n"}, "ours\n", Identity())
    with pytest.raises(PushRejected):
        mirror.push(ours, "main")
    assert remote.head() == bob_sha


# -- spec write-backs --------------------------------------------------------------------------

def test_pause_write_back_keeps_comments_and_says_why(remote: Remote, tmp_path: Path) -> None:
    publisher = make_publisher(remote.url, tmp_path / "state")
    writer = SpecWriteBack(publisher, config=SyncSettings())
    writer.pause("prod-a", reason="manual gate after step 1", step="1/3",
                 source_commit="a" * 40)
    assert publisher.flush().ok
    diff = git(remote.path, "show", "--format=", "-U0", "main", "--", POLICY_PATH)
    assert [line for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in
            ("+++", "---")] == ["+      pause: true"]
    message = git(remote.path, "log", "-1", "--format=%B")
    assert message.startswith("policy(prod-a): pause the rollout at step 1/3: manual gate")
    assert "Merge a change to `pause: false`" in message
    trailers = parse_trailers(message)
    assert trailers["Source-Commit"] == "a" * 40 and trailers["Rollout-Step"] == "1/3"
    # the file a person reads still has every comment
    text = remote.show(f"main:{POLICY_PATH}")
    assert "# mirrored registry" in text and "# one canary, then half" in text


def test_each_write_back_is_its_own_commit(remote: Remote, tmp_path: Path) -> None:
    publisher = make_publisher(remote.url, tmp_path / "state")
    writer = SpecWriteBack(publisher)
    writer.pause("prod-a", reason="failure fallback")
    writer.restore_payload_version("prod-a", version="2.32.0.6", rolled_back="2.33.0.9",
                                   reason="failure threshold reached")
    writer.firmware_never("prod-a")
    result = publisher.flush()
    assert result.ok and len(result.landed) == 3
    subjects = git(remote.path, "log", "-3", "--format=%s", "main").splitlines()
    assert subjects == [
        "policy(prod-a): set fwUpgradePolicy: Never: firmware upgrade finished",
        "policy(prod-a): restore driver 2.32.0.6 after rolling back 2.33.0.9",
        "policy(prod-a): pause the rollout: failure fallback",
    ]
    final = YAML(typ="safe").load(remote.show(f"main:{POLICY_PATH}"))["spec"]["driver"]
    assert final["upgradePolicy"]["pause"] is True
    assert final["payload"]["version"] == "2.32.0.6"
    assert final["fwUpgradePolicy"] == "Never"


def test_a_persons_newer_version_wins_over_a_queued_restore(
        remote: Remote, alice: Person, tmp_path: Path) -> None:
    publisher = make_publisher(remote.url, tmp_path / "state")
    remote.go_down()
    SpecWriteBack(publisher).restore_payload_version(
        "prod-a", version="2.32.0.6", rolled_back="2.33.0.9", reason="rollback")
    assert not publisher.flush().ok
    remote.come_back()
    alice.commit_and_push("Ask for 2.34.0.1", {
        POLICY_PATH: POLICY.replace("version: 2.33.0.9", "version: 2.34.0.1")})
    skipped: list[str] = []
    publisher.on_skipped = lambda s: skipped.append(s.reason)
    result = publisher.flush()
    assert result.ok and result.landed == []
    assert skipped and "conflict" in skipped[0] and "2.34.0.1" in skipped[0]
    assert "version: 2.34.0.1" in remote.show(f"main:{POLICY_PATH}")
    assert publisher.pending() == []


def test_write_back_to_a_cluster_without_policy_is_dropped(remote: Remote,
                                                           tmp_path: Path) -> None:
    publisher = make_publisher(remote.url, tmp_path / "state")
    SpecWriteBack(publisher).pause("prod-b", reason="gate")
    result = publisher.flush()
    assert result.landed == [] and "no ClusterOperator policy file" in result.skipped[0].reason


def test_status_on_its_own_branch_starts_an_orphan_branch(remote: Remote,
                                                          tmp_path: Path) -> None:
    state = tmp_path / "state"
    publisher = Publisher(Mirror(remote.url, state), "reconciler-status", state_dir=state,
                          identity=Identity("fleet-bot", "fleet-bot@example.com"))
    publisher.enqueue(status_change(1, "StepUpgrade"))
    assert publisher.flush().ok
    assert git(remote.path, "ls-tree", "-r", "--name-only", "reconciler-status") == (
        "status/prod-a.yaml"
    )
    assert git(remote.path, "log", "-1", "--format=%an", "reconciler-status") == "fleet-bot"


def test_local_working_copy_is_updated_only_when_clean(remote: Remote, tmp_path: Path) -> None:
    work = Person(remote.url, tmp_path / "work")
    state = tmp_path / "state"
    publisher = Publisher(Mirror(str(work.dir), state), "main", state_dir=state,
                          sleep=lambda _: None)
    publisher.enqueue(status_change(1, "StepUpgrade"))
    assert publisher.flush().ok
    assert "StepUpgrade" in work.read("status/prod-a.yaml")  # checked-out files follow
    assert git(work.dir, "status", "--porcelain") == ""
    work.write("README.md", "editing, not committed\n")
    publisher.enqueue(status_change(1, "StepPaused"))
    result = publisher.flush()
    assert not result.ok and result.error and "refused" in result.error
    assert work.read("README.md") == "editing, not committed\n"  # a person's edit is untouched
    git(work.dir, "checkout", "--", "README.md")
    assert publisher.flush().ok
    assert "StepPaused" in work.read("status/prod-a.yaml")


@pytest.mark.parametrize("broken", ["{not json", ""])
def test_an_unreadable_queue_is_set_aside_not_fatal(remote: Remote, tmp_path: Path,
                                                   broken: str) -> None:
    publisher = make_publisher(remote.url, tmp_path / "state")
    publisher.queue.path.parent.mkdir(parents=True, exist_ok=True)
    publisher.queue.path.write_text(broken)
    assert publisher.pending() == []
    assert list(publisher.queue.path.parent.glob("*.broken-*"))
