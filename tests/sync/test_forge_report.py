"""Which commit a rollout's statuses go on (docs/forges.md), read from a real Git repository: the
merge commit of the pull request that started the rollout; not a gate release, not our
write-backs, not a commit to another folder; found again after a restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reconciler.gitops.repository import PolicyRepository
from reconciler.sync.forge_report import ForgeReport
from reconciler.sync.record import SyncRecord
from reconciler.views.commit_status import CommitStatus
from tests.gitops.conftest import git
from tests.sync.conftest import NEW, OLD, POLICY_PATH, Person, Remote, policy

OWN = "\n\nReconciler-Commit: true\n"


def running(version: str) -> dict[str, Any]:
    return {"upgradeStatus": {"phase": "Progressing", "status": {
        "currentStepIndex": 1, "currentStepState": "StepUpgrade"}},
        "spec": {"driver": {"payload": {"version": version}}}}


class Offers:
    def __init__(self) -> None:
        self.statuses: list[CommitStatus] = []

    def offer(self, status: CommitStatus) -> None:
        self.statuses.append(status)


def _report(url: str, tmp_path: Path, record: SyncRecord) -> tuple[ForgeReport, Offers]:
    repo = PolicyRepository(url, cluster="prod-a", on_commit=lambda new: None,
                            state_dir=tmp_path / "state")
    repo.mirror.fetch()
    offers = Offers()
    return ForgeReport(repo, offers, cluster="prod-a", record=record, wall=lambda: 0.0), offers


def test_the_merge_commit_that_started_the_rollout_keeps_the_statuses(
    policy_remote: Remote, alice: Person, tmp_path: Path,
) -> None:
    # a pull request merged with a merge commit
    git(alice.dir, "checkout", "-q", "-b", "upgrade")
    alice.commit(f"Upgrade prod-a to {NEW}", {POLICY_PATH: policy(NEW)})
    git(alice.dir, "checkout", "-q", "main")
    git(alice.dir, "merge", "-q", "--no-ff", "-m", "Merge pull request #7", "upgrade")
    alice.push()
    merge = git(alice.dir, "rev-parse", "HEAD")
    record = SyncRecord(applied_commit=merge)
    report, offers = _report(policy_remote.url, tmp_path, record)
    report.snapshot(running(NEW))
    # our pause write-back, the gate release and a change elsewhere follow
    alice.commit("policy(prod-a): pause" + OWN, {POLICY_PATH: policy(NEW, pause=True)})
    release = alice.commit("Release the rest of prod-a", {POLICY_PATH: policy(NEW)})
    alice.commit("Document", {"README.md": "notes\n"})
    alice.push()
    head = git(alice.dir, "rev-parse", "HEAD")
    report.repo.mirror.fetch()
    record.applied_commit = head
    report.snapshot(running(NEW))
    assert [s.commit for s in offers.statuses] == [merge, merge]
    # a restart finds the merge commit again behind the gate release
    restarted, again = _report(policy_remote.url, tmp_path / "restarted", SyncRecord(
        applied_commit=head))
    restarted.snapshot(running(NEW))
    assert [s.commit for s in again.statuses] == [merge]
    assert release != merge
    # a new version is a new rollout on its own commit
    downgrade = alice.commit(f"Back to {OLD}", {POLICY_PATH: policy(OLD)})
    alice.push()
    report.repo.mirror.fetch()
    record.applied_commit = downgrade
    report.snapshot(running(OLD))
    assert offers.statuses[-1].commit == downgrade
