"""Reading one commit of the policy repository: its config, its cluster folders and files.

Everything is read from the commit's tree in the mirror, never from a working copy, so what is
validated and applied is exactly what was committed.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.gitops.commits import CommitInfo
from reconciler.gitops.errors import RepoConfigError
from reconciler.gitops.mirror import Mirror
from reconciler.policy.repo_config import CONFIG_FILE, RepoConfig
from reconciler.policy.repo_config import RepoConfigError as InvalidRepoConfig

POLICY_SUFFIXES = (".yaml", ".yml")


def parse_config(data: bytes | None) -> RepoConfig:
    """``reconciler.yaml``'s bytes at a commit (None: absent, the defaults); a bad file raises
    the Git side's ``RepoConfigError`` (a ``GitOpsError``) naming the key."""
    try:
        return RepoConfig.from_yaml(data)
    except InvalidRepoConfig as exc:
        raise RepoConfigError(str(exc)) from exc


@dataclass(frozen=True, slots=True)
class PolicyFile:
    path: str
    data: bytes


class CommitReader:
    def __init__(self, mirror: Mirror) -> None:
        self.mirror = mirror

    def config(self, commit: str) -> RepoConfig:
        """``reconciler.yaml`` at the commit, defaults when absent (raises RepoConfigError)."""
        return parse_config(self.mirror.read_file(commit, CONFIG_FILE))

    def clusters(self, commit: str, config: RepoConfig | None = None) -> list[str]:
        """Names of the cluster folders at the commit (``clusters/<name>/``), sorted."""
        config = config or self.config(commit)
        return [
            name for name in self.mirror.list_dir(commit, config.clusters_dir)
            if self.mirror.is_dir(commit, f"{config.clusters_dir}/{name}")
        ]

    def cluster_files(
        self, commit: str, cluster: str, config: RepoConfig | None = None
    ) -> list[PolicyFile]:
        """The policy files of one cluster (``clusters/<name>/*.yaml``) with their bytes."""
        config = config or self.config(commit)
        directory = config.cluster_dir(cluster)
        files = []
        for name in self.mirror.list_dir(commit, directory):
            if not name.endswith(POLICY_SUFFIXES):
                continue
            path = f"{directory}/{name}"
            data = self.mirror.read_file(commit, path)
            if data is not None:
                files.append(PolicyFile(path, data))
        return files

    def read(self, commit: str, path: str) -> bytes | None:
        return self.mirror.read_file(commit, path)

    def info(self, commit: str) -> CommitInfo:
        """Author, committer, message, and whether it is the reconciler's own (``is_own``)."""
        return self.mirror.commit_info(commit)
