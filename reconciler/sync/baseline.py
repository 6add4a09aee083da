"""The baseline of field ownership (docs/gitops.md#git-stays-the-truth): the object of the commit
the cluster runs, plus the reconciler's own write-back commits that landed after it.

Restart-safe: after a start, the commit the cluster runs is read from the object's
``gpu.metax-tech.com/source-commit`` annotation (else the status snapshot's ``sourceCommit``)
and its object is read from Git again. One lock guards the value: a write-back landing while
the baseline is rebuilt is then either in the branch head read or recorded afterwards, never
lost.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from reconciler.fieldpath import FieldPath, section
from reconciler.fieldpath import resolve as read_field
from reconciler.gitops.edits import same_value
from reconciler.gitops.errors import GitOpsError
from reconciler.gitops.ownership import CONTROLLER_FIELDS, record_write_back
from reconciler.gitops.repository import PolicyRepository
from reconciler.names import SOURCE_COMMIT_ANNOTATION
from reconciler.policy.validation import parse_only
from reconciler.sync.record import log


class Baseline:
    def __init__(self, repo: PolicyRepository, *, cluster: str, branch: str) -> None:
        self.repo = repo
        self.cluster = cluster
        self.branch = branch
        self._lock = threading.Lock()
        self._value: dict[str, Any] | None = None
        #: write-backs that landed before the baseline was restored after a start
        self._landed_early: list[tuple[FieldPath, Any]] = []
        self.restored = False

    def current(self) -> dict[str, Any] | None:
        """A copy of the baseline (None: not known)."""
        with self._lock:
            return copy.deepcopy(self._value)

    def landed(self, field: Sequence[str], value: Any) -> None:
        """Our write-back of ``field = value`` landed in Git (a publisher thread calls this)."""
        with self._lock:
            if self._value is not None:
                self._value = record_write_back(self._value, field, value)
            else:
                self._landed_early.append((tuple(field), value))

    def applied(self, obj: dict[str, Any], head: str) -> None:
        """The commit's object ``obj`` (read at ``head``) was applied."""
        with self._lock:
            self._value = self._replay_write_backs(copy.deepcopy(obj), head)

    def restore(self, live: Mapping[str, Any] | None) -> str | None:
        """After a start: which commit the cluster runs (returned; None: no record of it),
        and its object with our landed write-backs as the baseline."""
        self.restored = True
        annotations = section(live, ("metadata", "annotations"))
        commit = annotations.get(SOURCE_COMMIT_ANNOTATION) or self.repo.last_reported_commit()
        if not commit or self.repo.mirror.resolve(f"{commit}^{{commit}}") is None:
            log.info("%s: no record of the commit the cluster runs; a gate is released only "
                     "by a new commit that changes it", self.cluster)
            return None
        baseline = self.object_at(commit)
        if baseline is None:
            return None
        with self._lock:
            baseline = self._replay_write_backs(baseline, commit)
            for path, value in self._landed_early:
                baseline = record_write_back(baseline, path, value)
            self._landed_early.clear()
            self._value = baseline
        log.info("%s: the cluster runs %s (restored baseline)", self.cluster, commit[:12])
        return str(commit)

    def _replay_write_backs(self, baseline: dict[str, Any], since: str) -> dict[str, Any]:
        """``baseline`` plus the fields our own write-back commits after ``since`` set (call
        with the lock held)."""
        head = self.repo.mirror.head(self.branch)
        if head is None or head == since:
            return baseline
        for info in reversed(self.repo.mirror.commits_between(since, head, limit=500)):
            if not info.is_own or not info.subject.startswith("policy("):
                continue
            parent = self.repo.mirror.resolve(f"{info.sha}^")
            before = self.object_at(parent) if parent else None
            after = self.object_at(info.sha)
            if before is None or after is None:
                continue
            for path in CONTROLLER_FIELDS:
                value = read_field(after, path)
                if not same_value(path, read_field(before, path), value):
                    baseline = record_write_back(baseline, path, value)
        return baseline

    def object_at(self, commit: str) -> dict[str, Any] | None:
        """The cluster's ClusterOperator object at ``commit`` (None: none readable)."""
        try:
            config = self.repo.reader.sync_settings(commit)
            files = self.repo.reader.cluster_files(commit, self.cluster, config)
        except (GitOpsError, ValueError):
            return None
        for policy in files:
            obj = parse_only(policy.data, policy.path).obj
            if isinstance(obj, dict) and obj.get("kind") == "ClusterOperator":
                return obj
        return None
