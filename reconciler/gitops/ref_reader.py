"""Files at a Git ref of a person's working copy, read the way the daemon reads a commit.

``reconciler validate --against REF`` reads the previous spec and the last status snapshot at
the target branch with this (a link or an oversized blob is refused by ``read_tree_file``, as
in the daemon); the promotion gate reads upstream snapshots at one commit the same way, never
walking history.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import git
from git.exc import BadName, GitCommandError, InvalidGitRepositoryError, NoSuchPathError

from reconciler.gitops.errors import GitOpsError, NotARepository
from reconciler.gitops.mirror import list_tree
from reconciler.gitops.reader import read_tree_file

__all__ = ["NotARepository", "RefReader", "UnknownRef"]


class UnknownRef(GitOpsError):
    """The ref names no commit."""


class RefReader:
    """Reads files below ``root`` (a folder inside a working copy) at ``ref``."""

    def __init__(self, root: Path, ref: str) -> None:
        try:
            self._repo = git.Repo(root, search_parent_directories=True)
        except (InvalidGitRepositoryError, NoSuchPathError) as exc:
            raise NotARepository(f"{root} is not in a git repository") from exc
        #: the working copy's top folder
        self.top = Path(self._repo.working_tree_dir or root).resolve()
        try:
            self._root_in_top = PurePosixPath(root.resolve().relative_to(self.top).as_posix())
        except ValueError:
            self._root_in_top = PurePosixPath()
        self.ref = ref
        self._commit = self._resolve(ref)

    def _resolve(self, ref: str) -> git.Commit:
        try:
            return self._repo.commit(ref)
        except (BadName, ValueError, GitCommandError) as exc:
            raise UnknownRef(f"unknown git ref '{ref}'") from exc

    def read(self, relative: PurePosixPath, ref: str | None = None) -> bytes | None:
        """The file at ``root/relative`` at ``ref`` (default: the reader's), None when that ref
        is unknown or has no file there; a link or an oversized blob raises ``FileRefused``."""
        try:
            commit = self._commit if ref is None else self._resolve(ref)
        except UnknownRef:
            return None
        try:
            return read_tree_file(commit, (self._root_in_top / relative).as_posix())
        except (ValueError, GitCommandError):
            return None

    def list_dir(self, relative: PurePosixPath) -> list[str]:
        """Names of the entries of the folder ``root/relative`` at the reader's ref, sorted
        (``[]`` when the ref has no folder there)."""
        return list_tree(self._repo, self._commit.hexsha,
                         (self._root_in_top / relative).as_posix())
