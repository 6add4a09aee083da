"""The Git side of the sync role for one cluster, wired together.

The sync loop composes this with validation and the cluster: ``on_commit`` tells it a new
commit is there, ``reader`` reads the commit, ``status`` takes every status update, ``spec``
commits the rollout's own changes, ``last_reported_commit()`` says which commit the cluster ran
when it stopped (the baseline of field ownership after a restart).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from reconciler import clock as clocks
from reconciler.clock import Clock
from reconciler.config.sync import CONFIG_FILE, SyncSettings
from reconciler.gitops.commits import Identity
from reconciler.gitops.credentials import GitCredentials
from reconciler.gitops.edits import parse_status
from reconciler.gitops.errors import RemoteUnavailable
from reconciler.gitops.mirror import Mirror, default_state_dir, is_local_path
from reconciler.gitops.publisher import PendingChange, Publisher, Skipped
from reconciler.gitops.reader import CommitReader
from reconciler.gitops.source import CommitSource, NewCommit
from reconciler.gitops.spec_writeback import SpecWriteBack
from reconciler.gitops.status_policy import WriterTiming
from reconciler.gitops.status_writer import StatusWriter

log = logging.getLogger(__name__)


class PolicyRepository:
    def __init__(
        self,
        repo: str,
        *,
        cluster: str,
        on_commit: Callable[[NewCommit], None],
        branch: str = "main",
        state_dir: Path | str | None = None,
        identity: Identity | None = None,
        config: SyncSettings | None = None,
        fetch_interval: float | None = None,
        status_min_interval: float | None = None,
        on_landed: Callable[[PendingChange, str], None] | None = None,
        on_skipped: Callable[[Skipped], None] | None = None,
        credentials: GitCredentials | None = None,
        monotonic: Clock = clocks.monotonic,
    ) -> None:
        """``repo``: a local working copy (watched for commits) or a URL (fetched).

        ``config`` defaults to ``reconciler.yaml`` at the branch head; the explicit
        ``fetch_interval``/``status_min_interval`` (command line, environment) override it.
        """
        self.cluster = cluster
        self.branch = branch
        state = Path(state_dir) if state_dir is not None else default_state_dir()
        self.mirror = Mirror(repo, state, credentials=credentials)
        self.reader = CommitReader(self.mirror)
        self.config = config or self._config_at_head()
        identity = identity or Identity()
        self.policy_publisher = Publisher(self.mirror, branch, state_dir=state, identity=identity,
                                          on_landed=on_landed, on_skipped=on_skipped)
        status_branch = self.config.status_branch or branch
        self.status_publisher = (
            self.policy_publisher if status_branch == branch else
            Publisher(self.mirror, status_branch, state_dir=state, identity=identity,
                      on_landed=on_landed, on_skipped=on_skipped)
        )
        min_interval = (status_min_interval if status_min_interval is not None
                        else self.config.status_min_interval)
        self.status = StatusWriter(self.status_publisher, cluster, config=self.config,
                                   timing=WriterTiming(min_interval=min_interval))
        self.spec = SpecWriteBack(self.policy_publisher, config=self.config)
        self.source = CommitSource(
            self.mirror, [branch], on_commit,
            interval=fetch_interval if fetch_interval is not None else self.config.fetch_interval,
            watch=repo if is_local_path(repo) else None, monotonic=monotonic,
        )

    def _config_at_head(self) -> SyncSettings:
        try:
            self.mirror.fetch()
        except RemoteUnavailable as exc:
            log.warning("%s; using the mirror's last copy of %s", exc, CONFIG_FILE)
        head = self.mirror.head(self.branch)
        return self.reader.sync_settings(head) if head else SyncSettings()

    def last_reported_commit(self) -> str | None:
        """The ``sourceCommit`` of this cluster's status snapshot in Git, if any."""
        head = self.mirror.head(self.config.status_branch or self.branch)
        if head is None:
            return None
        data = parse_status(self.mirror.read_file(head, self.config.status_file(self.cluster)))
        source = data.get("sourceCommit") if data else None
        return str(source) if source else None

    def trigger(self) -> None:
        """Fetch now (the webhook receiver calls this)."""
        self.source.trigger()

    def start(self) -> None:
        self.policy_publisher.start()
        self.status_publisher.start()
        self.status.start()
        self.source.start()

    def stop(self) -> None:
        self.source.stop()
        self.status.stop()
        self.status_publisher.stop()
        self.policy_publisher.stop()
