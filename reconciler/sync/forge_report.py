"""The sync role's side of forge commit statuses (docs/forges.md): each status snapshot it offers to
Git is also turned into a commit status (``reconciler.views.commit_status``) and offered to the
poster (``reconciler.gitops.forge_status.CommitStatuses``), which never blocks this thread.

The status goes on the commit that started the rollout: the newest commit of a person on the
applied head's first-parent line that changed the cluster's folder (a merged pull request: its
merge commit). It is kept while the rollout moves to the same driver version, so a gate release
or a settings change during the rollout gets no status of its own; write-back and status
commits are ours and never chosen. A rejected commit gets its ``failure`` on itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from reconciler.clock import Clock
from reconciler.fleet.promotion import payload_version
from reconciler.gitops.errors import GitOpsError
from reconciler.gitops.reader import PolicyFileRefused
from reconciler.gitops.repository import PolicyRepository
from reconciler.sync.baseline import Baseline
from reconciler.sync.record import SyncRecord, log
from reconciler.views.commit_status import CommitStatus, commit_status

#: after a start, the most commits to the cluster's folder looked at for the rollout's first
WALK_LIMIT = 50


class Poster(Protocol):
    def offer(self, status: CommitStatus) -> None: ...


class ForgeReport:
    def __init__(self, repo: PolicyRepository, poster: Poster, *, cluster: str,
                 record: SyncRecord, wall: Clock, target_url: str | None = None) -> None:
        self.repo = repo
        self.poster = poster
        self.cluster = cluster
        self.record = record
        self.wall = wall
        self.target_url = target_url
        self._applied: str | None = None
        #: (the commit that started the rollout, the driver version it moves to)
        self._started: tuple[str, str | None] | None = None

    def snapshot(self, snapshot: Mapping[str, Any]) -> None:
        """Called by the sync worker with each status snapshot; never raises."""
        try:
            commit = self._rollout_commit(snapshot)
            status = commit_status(snapshot, cluster=self.cluster, commit=commit,
                                   now=self.wall(), target_url=self.target_url)
        except (GitOpsError, PolicyFileRefused) as exc:
            log.warning("%s: no commit status: %s", self.cluster, exc)
            return
        except Exception as exc:  # a status is never worth a failed sync pass
            log.warning("%s: no commit status: %s", self.cluster, type(exc).__name__,
                        exc_info=exc)
            return
        if status is not None:
            self.poster.offer(status)

    def _rollout_commit(self, snapshot: Mapping[str, Any]) -> str | None:
        applied = self.record.applied_commit
        if applied is None:
            return None
        if applied != self._applied:
            version = payload_version(snapshot.get("spec"))
            if self._started is None or self._started[1] != version:
                self._started = (self._first_at(applied, version, walk=self._started is None),
                                 version)
            self._applied = applied
        return self._started[0] if self._started is not None else None

    def _first_at(self, applied: str, version: str | None, *, walk: bool) -> str:
        """The newest commit of a person that changed the cluster's folder; after a start
        (``walk``), the oldest of the newest run of them that name ``version``, so a gate
        release found after a restart leads back to the commit that started the rollout."""
        config = self.repo.reader.config(applied)
        found = self.repo.mirror.person_commits_touching(
            applied, config.cluster_dir(self.cluster), limit=WALK_LIMIT)
        if not found:
            return applied
        start = found[0].sha
        for info in found[1:] if walk else ():
            if self._version_at(info.sha) != version:
                break
            start = info.sha
        return start

    def _version_at(self, commit: str) -> str | None:
        """The driver version the cluster's policy names at ``commit`` (None: unreadable)."""
        return payload_version(Baseline(self.repo, cluster=self.cluster,
                                        branch=self.repo.branch).object_at(commit))
