"""The commit that started a rollout (``reconciler.sync.rollout_start``): the key of its
notifications and the commit its statuses go on. A table of histories on the pure walk, then a
real Git repository read by a fresh mirror (a restart): the gate's write-back and its release keep
the merge; a retry of the same version after a rollback is a rollout of its own. And the sync
pass's side: Git unreadable, nothing is offered and no transition is lost."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from reconciler.gitops.errors import GitOpsError
from reconciler.gitops.repository import PolicyRepository
from reconciler.notify.events import Event
from reconciler.notify.notifier import Notifier
from reconciler.policy.notify_config import NotifySink
from reconciler.sync.loop import ClusterSync
from reconciler.sync.record import SyncRecord
from reconciler.sync.rollout_start import RolloutStart, rollout_start
from tests.sync.conftest import NEW, OLD, POLICY_PATH, Person, Remote, policy
from tests.views.test_read_model import snap

OWN = "\n\nReconciler-Commit: true\n"
OTHER = "2.34.0.1"


@dataclass(frozen=True)
class C:
    sha: str
    is_own: bool = False


#: (case, commits that changed the folder newest first with the version each names, expected)
HISTORIES: list[tuple[str, list[tuple[C, str]], str | None]] = [
    ("the merge alone", [(C("merge"), NEW), (C("seed"), OLD)], "merge"),
    ("our pause write-back at the gate",
     [(C("pause", True), NEW), (C("merge"), NEW), (C("seed"), OLD)], "merge"),
    ("the gate released by a person",
     [(C("release"), NEW), (C("pause", True), NEW), (C("merge"), NEW), (C("seed"), OLD)],
     "merge"),
    ("a window's pause (applied like a person's)",
     [(C("window"), NEW), (C("merge"), NEW), (C("seed"), OLD)], "merge"),
    ("our rollback's write-back: still the rollout it rolled back",
     [(C("restore", True), OLD), (C("merge"), NEW), (C("seed"), OLD)], "merge"),
    ("the same version again after a rollback: a new rollout",
     [(C("retry"), NEW), (C("restore", True), OLD), (C("merge"), NEW), (C("seed"), OLD)],
     "retry"),
    ("an automatic promotion (applied like a person's)",
     [(C("promote"), OTHER), (C("merge"), NEW), (C("seed"), OLD)], "promote"),
    ("nothing of a person", [(C("pause", True), NEW)], None),
]


@pytest.mark.parametrize(("case", "history", "expected"), HISTORIES,
                         ids=[h[0] for h in HISTORIES])
def test_the_walk_finds_the_commit_that_started_the_rollout(
        case: str, history: list[tuple[C, str]], expected: str | None) -> None:
    versions = {commit.sha: version for commit, version in history}
    assert rollout_start([c for c, _ in history], versions.get) == expected


def _start(url: str, state: Path, applied: str) -> str | None:
    """A new mirror and walk, as a restarted daemon has."""
    repo = PolicyRepository(url, cluster="prod-a", on_commit=lambda new: None, state_dir=state)
    repo.mirror.fetch()
    return RolloutStart(repo, cluster="prod-a", record=SyncRecord(applied_commit=applied)).commit()


def test_a_restart_finds_the_same_commit_and_a_retry_is_its_own_rollout(
        policy_remote: Remote, alice: Person, tmp_path: Path) -> None:
    merge = alice.commit(f"Upgrade prod-a to {NEW}", {POLICY_PATH: policy(NEW)})
    pause = alice.commit("policy(prod-a): pause the rollout at step 1/3" + OWN,
                         {POLICY_PATH: policy(NEW, pause=True)})
    alice.push()
    assert _start(policy_remote.url, tmp_path / "a", pause) == merge
    release = alice.commit("Release the rest of prod-a", {POLICY_PATH: policy(NEW)})
    alice.commit("Document", {"README.md": "notes\n"})  # another folder: not looked at
    alice.push()
    assert _start(policy_remote.url, tmp_path / "b", release) == merge
    restore = alice.commit(f"policy(prod-a): restore driver {OLD} after rolling back {NEW}" + OWN,
                           {POLICY_PATH: policy(OLD)})
    alice.push()
    assert _start(policy_remote.url, tmp_path / "c", restore) == merge
    retry = alice.commit(f"Upgrade prod-a to {NEW} again", {POLICY_PATH: policy(NEW)})
    alice.push()
    assert _start(policy_remote.url, tmp_path / "d", retry) == retry


class _Flaky:
    """``RolloutStart`` whose Git read fails while ``broken``."""

    def __init__(self) -> None:
        self.broken = False

    def commit(self) -> str:
        if self.broken:
            raise GitOpsError("git log failed: the mirror is being repacked")
        return "d" * 40


class _Recording(Notifier):
    def __init__(self) -> None:
        super().__init__("prod-a", sinks=lambda: (NotifySink("team", "slack", url_file="/u"),),
                         ledger=cast(Any, None), is_leader=lambda: False)
        self.offered: list[list[str]] = []

    def observe(self, snapshot: Mapping[str, Any], *, rollout: str = "") -> list[Event]:
        events = super().observe(snapshot, rollout=rollout)
        self.offered.append([e.key for e in events])
        return events


def test_git_unreadable_offers_nothing_and_the_completion_is_seen_at_the_next_pass() -> None:
    """The sync pass's side (``ClusterSync._notify``): no key without the rollout's commit, and
    the snapshot before is kept, so a completion in between is still a transition."""
    sync = SimpleNamespace(cluster="prod-a", rollout_start=_Flaky(), notifier=_Recording())
    try:
        ClusterSync._notify(cast(Any, sync), snap("StepUpgrade", index=3))
        sync.rollout_start.broken = True
        ClusterSync._notify(cast(Any, sync), snap("Completed", phase="Idling", index=3))
        assert sync.notifier.offered == [[]]
        sync.rollout_start.broken = False
        ClusterSync._notify(cast(Any, sync), snap("Completed", phase="Idling", index=3))
        assert sync.notifier.offered == [[], [f"prod-a/{'d' * 12}/completed/-"]]
    finally:
        sync.notifier.stop()
