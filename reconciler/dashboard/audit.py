"""The audit trail from Git: policy commits, who merged them, who released each gate, the
reconciler's write-backs, status snapshots and rejections, for one cluster.

``classify`` is pure (a commit's facts in, an entry out); ``GitAudit`` reads the facts from the
repository (a local path read in place, or a URL fetched into a mirror), read-only.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.config.settings import ClusterSettings
from reconciler.views.waits import GitContext, pause_line

log = logging.getLogger(__name__)

#: newest commits looked at per branch
HISTORY_LIMIT = 200


@dataclass(frozen=True, slots=True)
class CommitFacts:
    sha: str
    author: str
    committer: str
    at: int  # committer time, epoch seconds
    subject: str
    own: bool  # the reconciler's (Reconciler-Commit: true)
    merge: bool
    kind: str  # "policy" (the cluster's folder changed) or "status" (its snapshot)
    pause_before: Any = None
    pause_after: Any = None
    version_before: Any = None
    version_after: Any = None
    rejected: str | None = None  # the rejected commit a new rejection names
    rejection_reason: str = ""


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def classify(commit: CommitFacts) -> dict[str, Any]:
    """One audit entry: ``kind`` is policy, gate-release, pause, version, write-back, status or
    rejection."""
    entry: dict[str, Any] = {
        "sha": commit.sha,
        "short": commit.sha[:12],
        "at": commit.at,
        "subject": commit.subject,
        "author": commit.author,
        "mergedBy": commit.committer if not commit.own else None,
        "merge": commit.merge,
    }
    if commit.kind == "status":
        if commit.rejected:
            entry.update(kind="rejection", detail=f"rejected {commit.rejected[:12]}: "
                                                  f"{commit.rejection_reason}")
        else:
            entry.update(kind="status", detail="status snapshot")
        return entry
    if commit.own:
        entry.update(kind="write-back", detail="the rollout's own change, written back to Git")
        return entry
    if commit.pause_before is True and commit.pause_after is False:
        entry.update(kind="gate-release", detail=f"released by {commit.author}: pause: false")
    elif commit.pause_after is True and commit.pause_before is not True:
        entry.update(kind="pause", detail="pause: true")
    elif commit.version_before != commit.version_after and commit.version_after:
        entry.update(kind="version", detail=f"driver {commit.version_before or '?'} -> "
                                            f"{commit.version_after}")
    else:
        entry.update(kind="policy", detail="policy change")
    return entry


def _load_all(text: bytes | None) -> list[Any]:
    if not text:
        return []
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        return list(YAML(typ="safe", pure=True).load_all(text.decode("utf-8", "replace")))
    except YAMLError:
        return []


def _policy_fields(files: Mapping[str, bytes | None]) -> tuple[Any, Any, str | None]:
    """(pause, version, the file holding upgradePolicy) across a cluster's policy files."""
    for path, data in sorted(files.items()):
        for doc in _load_all(data):
            if not isinstance(doc, Mapping):
                continue
            driver = ((doc.get("spec") or {}) if isinstance(doc.get("spec"), Mapping)
                      else {}).get("driver")
            if not isinstance(driver, Mapping):
                continue
            policy = driver.get("upgradePolicy")
            payload = driver.get("payload")
            pause = policy.get("pause") if isinstance(policy, Mapping) else None
            version = payload.get("version") if isinstance(payload, Mapping) else None
            if isinstance(policy, Mapping) or version is not None:
                return pause, version, path
    return None, None, None


class GitAudit:
    """Reads one cluster's trail from the policy repository; ``refresh()`` fetches (for a URL)
    and reads what is new. Commits are immutable, so each is read once."""

    def __init__(self, repo: str, *, cluster: str, branch: str = "main",
                 state_dir: Path | str | None = None) -> None:
        from reconciler.gitops.mirror import (
            Mirror,
            default_state_dir,
            is_local_path,
            open_local_repository,
        )

        self.cluster = cluster
        self.branch = branch
        self._mirror: Mirror | None = None
        if is_local_path(repo):
            self._repo = open_local_repository(Path(repo))
        else:
            self._mirror = Mirror(repo, state_dir or default_state_dir())
            self._repo = self._mirror.repo
        self._cache: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.entries: list[dict[str, Any]] = []
        self.context = GitContext(branch=branch)
        #: the cluster's status snapshot at the status branch's head (None: none yet)
        self.snapshot: Mapping[str, Any] | None = None
        #: reconciler.yaml at the branch head resolved for the cluster, as the daemon reads it
        #: (None: not read yet): the prediction plans with its ``rollout`` section
        self.settings: ClusterSettings | None = None
        self.error: str | None = None
        self._heads: tuple[str | None, str | None] = (None, None)

    def _head(self, branch: str) -> str | None:
        for ref in (f"refs/heads/{branch}", f"refs/remotes/origin/{branch}"):
            try:
                return str(self._repo.rev_parse(ref).hexsha)
            except Exception:  # BadName, ValueError: not this ref
                continue
        return None

    def refresh(self) -> bool:
        """Read the trail again if a branch moved; True when something changed."""
        from reconciler.config.document import load
        from reconciler.config.settings import SettingsRefused, resolve
        from reconciler.config.sync import CONFIG_FILE, read_sync_settings
        from reconciler.gitops.edits import parse_status
        from reconciler.gitops.errors import GitOpsError
        from reconciler.gitops.mirror import read_blob

        with self._lock:
            try:
                if self._mirror is not None:
                    self._mirror.fetch()
                head = self._head(self.branch)
                if head is None:
                    self.error = f"no branch {self.branch!r}"
                    return False
                config_text = read_blob(self._repo, head, CONFIG_FILE)
                config = read_sync_settings(config_text)
                status_branch = config.status_branch or self.branch
                status_head = self._head(status_branch)
                if (head, status_head) == self._heads:
                    return False
                cluster_dir = config.cluster_dir(self.cluster)
                status_file = config.status_file(self.cluster)
                entries = self._history(head, "policy", cluster_dir)
                snapshot = None
                if status_head is not None:
                    entries += self._history(status_head, "status", status_file)
                    snapshot = parse_status(read_blob(self._repo, status_head, status_file))
                if status_head == head:  # one branch: its own order, newest first
                    rank = {c.hexsha: i for i, c in enumerate(self._repo.iter_commits(
                        head, paths=[cluster_dir, status_file], first_parent=True,
                        max_count=2 * HISTORY_LIMIT))}
                    entries.sort(key=lambda e: rank.get(e["sha"], len(rank)))
                else:
                    entries.sort(key=lambda e: e["at"], reverse=True)
                files = self._files(head, cluster_dir)
                _, _, policy_path = _policy_fields(files)
                self.context = GitContext(
                    policy_file=policy_path,
                    pause_line=pause_line(files.get(policy_path)) if policy_path else None,
                    branch=self.branch)
                try:
                    self.settings = resolve(load(config_text), self.cluster, source=head)
                except SettingsRefused as exc:  # the settings read before stay
                    log.warning("reconciler.yaml at %s refused: %s", head[:12], exc)
                self.entries = entries
                self.snapshot = snapshot
                self._heads = (head, status_head)
                self.error = None
                return True
            except (GitOpsError, OSError, ValueError) as exc:
                self.error = str(exc)
                log.warning("reading the Git audit trail: %s", exc)
                return False

    def _files(self, commit: str, directory: str) -> dict[str, bytes | None]:
        from reconciler.gitops.mirror import list_tree, read_blob

        out: dict[str, bytes | None] = {}
        for name in list_tree(self._repo, commit, directory):
            if name.endswith((".yaml", ".yml")):
                path = f"{directory}/{name}"
                out[path] = read_blob(self._repo, commit, path)
        return out

    def _history(self, head: str, kind: str, path: str) -> list[dict[str, Any]]:
        from reconciler.gitops.commits import is_own_message
        from reconciler.gitops.edits import parse_status
        from reconciler.gitops.mirror import read_blob

        out = []
        for commit in self._repo.iter_commits(head, paths=[path], first_parent=True,
                                              max_count=HISTORY_LIMIT):
            key = (kind, commit.hexsha)
            cached = self._cache.get(key)
            if cached is None:
                parent = commit.parents[0].hexsha if commit.parents else None
                message = str(commit.message)
                fields: dict[str, Any] = {}
                if kind == "policy":
                    after = _policy_fields(self._files(commit.hexsha, path))
                    before = _policy_fields(self._files(parent, path)) if parent else (
                        None, None, None)
                    fields = {"pause_before": before[0], "pause_after": after[0],
                              "version_before": before[1], "version_after": after[1]}
                else:
                    now = parse_status(read_blob(self._repo, commit.hexsha, path)) or {}
                    was = (parse_status(read_blob(self._repo, parent, path)) or {}) if parent \
                        else {}
                    rejection = _mapping(now.get("rejection"))
                    rejected = rejection.get("commit")
                    if rejected and rejected != _mapping(was.get("rejection")).get("commit"):
                        findings = rejection.get("findings") or [{}]
                        first = findings[0] if isinstance(findings[0], Mapping) else {}
                        fields = {"rejected": str(rejected),
                                  "rejection_reason": f"{first.get('file', '')}:"
                                                      f"{first.get('line', '')} "
                                                      f"{first.get('message', '')}".strip()}
                facts = CommitFacts(
                    sha=commit.hexsha,
                    author=f"{commit.author.name} <{commit.author.email}>",
                    committer=f"{commit.committer.name} <{commit.committer.email}>",
                    at=int(commit.committed_date),
                    subject=message.split("\n", 1)[0],
                    own=is_own_message(message),
                    merge=len(commit.parents) > 1,
                    kind=kind,
                    **fields,
                )
                cached = classify(facts)
                self._cache[key] = cached
            out.append(cached)
        return out
