"""Files at a Git ref of a person's working copy, read the way the daemon reads a commit.

``reconciler validate --against REF`` reads the previous spec and the last status snapshot at
the target branch with this (a link or an oversized blob is refused by ``read_tree_file``, as
in the daemon); the promotion gate reads upstream snapshots at one commit the same way, never
walking history.
"""

from __future__ import annotations

import hashlib
from pathlib import Path, PurePosixPath

import git
from git.exc import BadName, GitCommandError, InvalidGitRepositoryError, NoSuchPathError

from reconciler.gitops.errors import GitOpsError, NotARepository
from reconciler.gitops.reader import read_tree_file

__all__ = ["NotARepository", "RefReader", "UnknownRef", "blob_id"]

#: the mode Git records for a symbolic link
LINK_MODE = "120000"


def blob_id(data: bytes) -> str:
    """The id Git gives a file of ``data`` (SHA-1 object format): equal ids, equal files."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def origin_url(root: Path) -> str | None:
    """The URL of the ``origin`` remote of the work tree at ``root``; None without one."""
    try:
        repo = git.Repo(root, search_parent_directories=True)
    except (InvalidGitRepositoryError, NoSuchPathError):
        return None
    with repo:
        url = repo.config_reader().get_value('remote "origin"', "url", default="")
    return str(url) or None


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

    def blobs(self, relative: PurePosixPath) -> dict[str, tuple[str, str]]:
        """Every file below the folder ``root/relative`` at the reader's ref, from one ``git
        ls-tree``: its path relative to ``root`` -> (mode, blob id). Cheaper than reading each
        file when most are unchanged."""
        where = (self._root_in_top / relative).as_posix()
        try:
            listing = self._repo.git.ls_tree("-r", "-z", "--full-name", self._commit.hexsha,
                                             "--", where)
        except GitCommandError:
            return {}
        found: dict[str, tuple[str, str]] = {}
        for entry in listing.split("\0"):
            meta, _, path = entry.partition("\t")
            fields = meta.split()
            if len(fields) != 3 or not path:
                continue
            try:
                shown = PurePosixPath(path).relative_to(self._root_in_top).as_posix()
            except ValueError:
                continue
            found[shown] = (fields[0], fields[2])
        return found
