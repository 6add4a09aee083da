"""``reconciler status --from git``: the status snapshots at the head of a branch.

A local repository is read in place (read-only: nothing is fetched or written); a URL is
fetched into the mirror in the state directory first.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git
from git.exc import BadName, GitCommandError, InvalidGitRepositoryError, NoSuchPathError

from reconciler.config.sync import CONFIG_FILE, read_sync_settings
from reconciler.files import FileRefused
from reconciler.gitops.credentials import redact
from reconciler.gitops.edits import parse_status
from reconciler.gitops.errors import GitOpsError, StatusNotFound
from reconciler.gitops.mirror import (
    Mirror,
    default_state_dir,
    is_local_path,
    list_tree,
)
from reconciler.gitops.reader import PolicyFileRefused, read_tree_file


@dataclass(frozen=True, slots=True)
class GitStatus:
    branch: str
    commit: str
    snapshots: dict[str, dict[str, Any]]


def read_status_snapshots(
    repo: str, *, branch: str = "main", state_dir: Path | str | None = None
) -> GitStatus:
    """Every cluster's snapshot at the head of the status branch (the policy branch's
    ``reconciler.yaml`` says which branch and folder)."""
    reader: _LocalReader | _MirrorReader
    if is_local_path(repo):
        reader = _LocalReader(repo)
    else:
        mirror = Mirror(repo, state_dir or default_state_dir())
        mirror.fetch()
        reader = _MirrorReader(mirror)
    policy_head = reader.head(branch)
    if policy_head is None:
        raise StatusNotFound(f"{redact(repo)} has no branch {branch!r}")
    config = read_sync_settings(reader.read(policy_head, CONFIG_FILE))
    status_branch = config.status_branch or branch
    head = reader.head(status_branch)
    if head is None:
        raise StatusNotFound(f"{redact(repo)} has no status branch {status_branch!r}")
    snapshots: dict[str, dict[str, Any]] = {}
    for name in reader.list_dir(head, config.status_path):
        if not name.endswith(".yaml"):
            continue
        data = parse_status(reader.read(head, f"{config.status_path}/{name}"))
        if data is not None:
            snapshots[str(data.get("cluster") or name.removesuffix(".yaml"))] = data
    return GitStatus(branch=status_branch, commit=head, snapshots=snapshots)


def status_from_git(
    repo: str, cluster: str, *, branch: str = "main", state_dir: Path | str | None = None
) -> dict[str, Any]:
    """One cluster's snapshot as a dict, with ``git: {branch, commit}`` saying where it was read.

    Raises ``StatusNotFound`` (a clear message for the CLI) when there is none.
    """
    status = read_status_snapshots(repo, branch=branch, state_dir=state_dir)
    snapshot = status.snapshots.get(cluster)
    if snapshot is None:
        known = ", ".join(sorted(status.snapshots)) or "none"
        raise StatusNotFound(
            f"no status snapshot for cluster {cluster!r} on {status.branch} "
            f"({status.commit[:12]}); clusters with a snapshot: {known}"
        )
    return {**snapshot, "git": {"branch": status.branch, "commit": status.commit}}


class _LocalReader:
    def __init__(self, path: str) -> None:
        try:
            self.repo = git.Repo(Path(path).expanduser(), search_parent_directories=False)
        except (InvalidGitRepositoryError, NoSuchPathError) as exc:
            raise GitOpsError(f"{path} is not a Git repository") from exc

    def head(self, branch: str) -> str | None:
        for ref in (f"refs/heads/{branch}", f"refs/remotes/origin/{branch}"):
            try:
                return str(self.repo.rev_parse(ref).hexsha)
            except (BadName, ValueError, GitCommandError):
                continue
        return None

    def read(self, commit: str, path: str) -> bytes | None:
        """Bounded, links refused (``PolicyFileRefused``), as the daemon reads a commit."""
        try:
            return read_tree_file(self.repo.commit(commit), path)
        except FileRefused as refused:
            raise PolicyFileRefused(refused) from None

    def list_dir(self, commit: str, directory: str) -> list[str]:
        return list_tree(self.repo, commit, directory)


class _MirrorReader:
    def __init__(self, mirror: Mirror) -> None:
        self.mirror = mirror

    def head(self, branch: str) -> str | None:
        return self.mirror.head(branch)

    def read(self, commit: str, path: str) -> bytes | None:
        with self.mirror.read_lock:
            try:
                return read_tree_file(self.mirror.repo.commit(commit), path)
            except FileRefused as refused:
                raise PolicyFileRefused(refused) from None

    def list_dir(self, commit: str, directory: str) -> list[str]:
        return self.mirror.list_dir(commit, directory)
