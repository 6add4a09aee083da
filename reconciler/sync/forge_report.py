"""The sync role's side of forge commit statuses (docs/forges.md): each status snapshot it offers to
Git is also turned into a commit status (``reconciler.views.commit_status``) and offered to the
poster (``reconciler.gitops.forge_status.CommitStatuses``), which never blocks this thread.

The status goes on the commit that started the rollout (``reconciler.sync.rollout_start``, the
same commit the notifications key their events by): the commit of a person that moved the
cluster's folder to the driver version it runs (a merged pull request: its merge commit); a gate
release or a settings change during the rollout gets no status of its own; write-back and status
commits are ours and never chosen. A rejected commit gets its ``failure`` on itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from reconciler.clock import Clock
from reconciler.gitops.errors import GitOpsError
from reconciler.gitops.reader import PolicyFileRefused
from reconciler.gitops.repository import PolicyRepository
from reconciler.sync.record import SyncRecord, log
from reconciler.sync.rollout_start import RolloutStart
from reconciler.views.commit_status import CommitStatus, commit_status


class Poster(Protocol):
    def offer(self, status: CommitStatus) -> None: ...


class ForgeReport:
    def __init__(self, repo: PolicyRepository, poster: Poster, *, cluster: str,
                 record: SyncRecord, wall: Clock, target_url: str | None = None,
                 start: RolloutStart | None = None) -> None:
        """``start``: the sync's own (one walk per applied commit for the statuses and the
        notifications); without it, one of this report's."""
        self.repo = repo
        self.poster = poster
        self.cluster = cluster
        self.record = record
        self.wall = wall
        self.target_url = target_url
        self.start = start or RolloutStart(repo, cluster=cluster, record=record)

    def snapshot(self, snapshot: Mapping[str, Any]) -> None:
        """Called by the sync worker with each status snapshot; never raises."""
        try:
            commit = self.start.commit()
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
