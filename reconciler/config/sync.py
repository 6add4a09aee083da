"""The Git side's keys of ``reconciler.yaml`` (docs/gitops.md): ``clustersDir``, ``status`` and
``sync``, typed and frozen. Repository-wide: a ``clusters.<name>`` section cannot replace them.

Read from the file as a commit holds it, unchecked: a wrong key is a ``RepoConfigError`` naming
it, so a daemon never dies on a traceback for a typo (the one class of ``reconciler/errors.py``,
which the Git side raises too). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.durations import parse_duration_setting
from reconciler.errors import RepoConfigError
from reconciler.policy.document import YamlRefused, parse_yaml

#: the file's name in the repository's root
CONFIG_FILE = "reconciler.yaml"


@dataclass(frozen=True, slots=True)
class SyncSettings:
    """Where the sync role reads policy and writes status, and how often it looks."""

    clusters_dir: str = "clusters"
    status_path: str = "status"
    #: branch for status commits; None means the policy branch itself
    status_branch: str | None = None
    #: seconds
    fetch_interval: float = 30.0
    status_min_interval: float = 5.0

    def status_file(self, cluster: str) -> str:
        """The cluster's status snapshot, relative to the repository root."""
        return f"{self.status_path}/{cluster}.yaml"

    def cluster_dir(self, cluster: str) -> str:
        """The cluster's policy folder, relative to the repository root."""
        return f"{self.clusters_dir}/{cluster}"

    @classmethod
    def from_obj(cls, raw: Mapping[str, Any]) -> SyncSettings:
        """From the file's top-level mapping; raises ``RepoConfigError`` naming the key."""
        status = _section(raw, "status")
        sync = _section(raw, "sync")
        defaults = cls()
        return cls(
            clusters_dir=_path(raw.get("clustersDir", defaults.clusters_dir), key="clustersDir"),
            status_path=_path(status.get("path", defaults.status_path), key="status.path"),
            status_branch=_optional_str(status.get("branch"), key="status.branch"),
            fetch_interval=parse_duration_setting(
                sync.get("fetchInterval", defaults.fetch_interval), key="sync.fetchInterval"
            ),
            status_min_interval=parse_duration_setting(
                sync.get("statusMinInterval", defaults.status_min_interval),
                key="sync.statusMinInterval",
            ),
        )


def _section(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RepoConfigError(f"{key}: expected a mapping, got {type(value).__name__}")
    return value


def _optional_str(value: object, *, key: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise RepoConfigError(f"{key}: expected a string, got {value!r}")
    return value


def _path(value: object, *, key: str) -> str:
    if not isinstance(value, str) or not value.strip("/"):
        raise RepoConfigError(f"{key}: expected a non-empty relative path, got {value!r}")
    if value.startswith("/") or ".." in value.split("/"):
        raise RepoConfigError(f"{key}: must be a path inside the repository, got {value!r}")
    return value.strip("/")


def read_sync_settings(text: bytes | str | None) -> SyncSettings:
    """The Git side's keys of the file's text (None: absent, the defaults), parsed without
    validating the other sections: what the Git side needs to find the policy and status files
    at any commit. Raises ``RepoConfigError``, located when the text is not YAML. A commit's
    settings as a whole are ``reconciler.config.document.load``'s, validated once."""
    if not text:
        return SyncSettings()
    try:
        data = parse_yaml(text, CONFIG_FILE)
    except YamlRefused as exc:  # located: "reconciler.yaml:LINE:COL: what is wrong"
        raise RepoConfigError(str(exc)) from None
    if data is None:
        return SyncSettings()
    if not isinstance(data, Mapping):
        raise RepoConfigError(f"{CONFIG_FILE}: expected a mapping at the top level")
    return SyncSettings.from_obj(data)
