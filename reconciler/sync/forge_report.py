"""The sync role's side of forge commit statuses (SPEC 15): each status snapshot it offers to
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
from reconciler.sync.record import SyncRecord, log
from reconciler.views.commit_status import CommitStatus, commit_status


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
            self._applied = applied
            version = payload_version(snapshot.get("spec"))
            if self._started is None or self._started[1] != version:
                found = self.repo.mirror.last_person_commit_touching(
                    applied, self._cluster_dir(applied))
                self._started = (found.sha if found is not None else applied, version)
        return self._started[0] if self._started is not None else None

    def _cluster_dir(self, commit: str) -> str:
        file = self.repo.reader.config_file(commit)
        return (file.config.cluster_dir(self.cluster) if file.config is not None
                else f"clusters/{self.cluster}")
