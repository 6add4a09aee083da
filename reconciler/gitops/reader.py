"""Reading one commit of the policy repository: its config, its cluster folders and files.

Everything is read from the commit's tree in the mirror, never from a working copy, so what is
validated and applied is exactly what was committed. A tree entry that is a symbolic link (mode
120000), a submodule or a folder where a file should be, or a blob over the size limit, is
refused with the same reasons ``reconciler validate`` gives for the files of a work tree
(``reconciler.files``): the blob's size is known before it is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reconciler.config.document import ConfigDocument, load
from reconciler.config.sync import CONFIG_FILE, SyncSettings, read_sync_settings
from reconciler.files import MAX_FILE_BYTES, FileRefused, link_refusal, too_large
from reconciler.gitops.commits import CommitInfo
from reconciler.gitops.errors import GitOpsError, RepoConfigError
from reconciler.gitops.mirror import Mirror

POLICY_SUFFIXES = (".yaml", ".yml")
_SYMLINK_MODE = 0o120000
#: a link's text is a path; more than this is not one worth showing
_LINK_TEXT_BYTES = 4096


class PolicyFileRefused(GitOpsError):
    """A file of the commit cannot be a policy or config file (a link, a folder, a submodule,
    too large); ``refused`` says which and why, for a located rejection."""

    def __init__(self, refused: FileRefused) -> None:
        super().__init__(str(refused))
        self.refused = refused


def read_tree_file(commit: Any, path: str, *, limit: int = MAX_FILE_BYTES) -> bytes | None:
    """The bytes of ``path`` in the GitPython ``commit``'s tree, None when there is no entry;
    raises ``FileRefused`` for a link, a non-file entry or a blob over ``limit``."""
    try:
        item = commit.tree / path
    except KeyError:
        return None
    mode = int(getattr(item, "mode", 0))
    if item.type == "blob" and mode & 0o170000 == _SYMLINK_MODE:
        text = item.data_stream.read(_LINK_TEXT_BYTES).decode("utf-8", "replace")
        raise link_refusal(path, text)
    if item.type != "blob":
        what = {"tree": "a folder", "commit": "a submodule"}.get(item.type, item.type)
        raise FileRefused(path, "not-regular-file",
                          f"{what}, not a regular file; only regular files are read")
    size = int(item.size)
    if size > limit:
        raise too_large(path, size, limit)
    data: bytes = item.data_stream.read(limit + 1)
    if len(data) > limit:
        raise too_large(path, len(data), limit)
    return data


@dataclass(frozen=True, slots=True)
class PolicyFile:
    path: str
    data: bytes


class CommitReader:
    def __init__(self, mirror: Mirror) -> None:
        self.mirror = mirror

    def sync_settings(self, commit: str) -> SyncSettings:
        """The Git side's keys of ``reconciler.yaml`` at the commit, defaults when absent
        (raises RepoConfigError, also for a config that is a link or too large)."""
        try:
            data = self.read(commit, CONFIG_FILE)
        except PolicyFileRefused as exc:
            raise RepoConfigError(str(exc)) from exc
        return read_sync_settings(data)

    def config_document(self, commit: str) -> ConfigDocument:
        """``reconciler.yaml`` at the commit, parsed and validated once (a refused setting is
        in the result, not raised); raises ``PolicyFileRefused`` for a config that is a link
        or too large."""
        return load(self.read(commit, CONFIG_FILE))

    def clusters(self, commit: str, config: SyncSettings | None = None) -> list[str]:
        """Names of the cluster folders at the commit (``clusters/<name>/``), sorted."""
        config = config or self.sync_settings(commit)
        return [
            name for name in self.mirror.list_dir(commit, config.clusters_dir)
            if self.mirror.is_dir(commit, f"{config.clusters_dir}/{name}")
        ]

    def cluster_files(
        self, commit: str, cluster: str, config: SyncSettings | None = None
    ) -> list[PolicyFile]:
        """The policy files of one cluster (``clusters/<name>/*.yaml``) with their bytes.

        Raises ``PolicyFileRefused`` when the cluster folder is a link, or one of its
        ``*.yaml`` entries is a link, a folder, a submodule or too large: never a silent skip.
        """
        config = config or self.sync_settings(commit)
        directory = config.cluster_dir(cluster)
        self._refuse_links_above(commit, directory)
        files = []
        for name in self.mirror.list_dir(commit, directory):
            if not name.endswith(POLICY_SUFFIXES):
                continue
            path = f"{directory}/{name}"
            data = self.read(commit, path)
            if data is not None:
                files.append(PolicyFile(path, data))
        return files

    def _refuse_links_above(self, commit: str, directory: str) -> None:
        parts = [p for p in directory.split("/") if p]
        for end in range(1, len(parts) + 1):
            try:
                self.read(commit, "/".join(parts[:end]))
            except PolicyFileRefused as exc:
                if exc.refused.problem == "symlink":
                    raise

    def read(self, commit: str, path: str) -> bytes | None:
        """The file at the commit (None when absent); raises ``PolicyFileRefused`` for a link,
        a non-file entry or a blob over the size limit."""
        with self.mirror.read_lock:
            try:
                return read_tree_file(self.mirror.repo.commit(commit), path)
            except FileRefused as refused:
                raise PolicyFileRefused(refused) from None

    def info(self, commit: str) -> CommitInfo:
        """Author, committer, message, and whether it is the reconciler's own (``is_own``)."""
        return self.mirror.commit_info(commit)
