"""The commit that started the rollout the cluster is in: what its commit statuses go on
(docs/forges.md) and the rollout part of each notification's key (docs/notifications.md).

Found in Git alone from the applied commit, so a restarted daemon or a new leader finds the same
one. The commits on the applied commit's first-parent line that changed the cluster's folder,
newest first: from the newest one of a person (a merged pull request: its merge commit; our own
write-backs and status commits are never chosen), back through every commit that names the same
driver version; the oldest commit of a person in that run started the rollout. So a gate release,
our ``pause: true`` write-back, a settings change or a window's pause during the rollout keep
it; a rollback's write-back (ours, naming the old version) ends the run, so a person merging the
same version again starts a new rollout with a new commit; an automatic promotion (a policy
change the sync applies like a person's) starts its own. Cached per applied commit (the walk
reads the policy of each commit in the run)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from reconciler.fleet.promotion import payload_version
from reconciler.gitops.repository import PolicyRepository
from reconciler.sync.baseline import Baseline
from reconciler.sync.record import SyncRecord

#: the most commits to the cluster's folder looked at
WALK_LIMIT = 50


class Touching(Protocol):
    """A commit that changed the cluster's folder (``reconciler.gitops.commits.CommitInfo``)."""

    @property
    def sha(self) -> str: ...

    @property
    def is_own(self) -> bool: ...


def rollout_start(touching: Sequence[Touching], version_at: Callable[[str], str | None]
                  ) -> str | None:
    """The commit that started the rollout, from the commits that changed the cluster's folder
    (newest first); None when none of them is a person's. Pure: ``version_at`` reads the driver
    version a commit's policy names."""
    first = next((i for i, c in enumerate(touching) if not c.is_own), None)
    if first is None:
        return None
    start = touching[first].sha
    version = version_at(start)
    for commit in touching[first + 1:]:
        if version_at(commit.sha) != version:
            break
        if not commit.is_own:
            start = commit.sha
    return start


class RolloutStart:
    """``commit()``: the commit that started the rollout at the applied commit (None before
    anything was applied). Called from the sync worker's thread."""

    def __init__(self, repo: PolicyRepository, *, cluster: str, record: SyncRecord,
                 limit: int = WALK_LIMIT) -> None:
        self.repo = repo
        self.cluster = cluster
        self.record = record
        self.limit = limit
        self._baseline = Baseline(repo, cluster=cluster, branch=repo.branch)
        #: (the applied commit, the commit that started its rollout)
        self._found: tuple[str, str] | None = None

    def commit(self) -> str | None:
        """Raises ``GitOpsError`` or ``PolicyFileRefused`` when Git cannot be read."""
        applied = self.record.applied_commit
        if applied is None:
            return None
        if self._found is not None and self._found[0] == applied:
            return self._found[1]
        config = self.repo.reader.sync_settings(applied)
        touching = self.repo.mirror.commits_touching(applied, config.cluster_dir(self.cluster),
                                                     limit=self.limit)
        start = rollout_start(touching, self._version_at) or applied
        self._found = (applied, start)
        return start

    def _version_at(self, commit: str) -> str | None:
        return payload_version(self._baseline.object_at(commit))
