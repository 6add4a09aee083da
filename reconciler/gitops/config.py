"""The values of the repository's ``reconciler.yaml`` that the Git side needs, with defaults.

The full schema (``schemas/repo-config.schema.json``) is checked by validation; here we only read
what we use and fail with the key's name when a value has the wrong type, so a daemon never dies
on a traceback for a typo in the config file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from reconciler.gitops.errors import RepoConfigError
from reconciler.policy.repo_config import parse_duration as parse_schema_duration

CONFIG_FILE = "reconciler.yaml"

def parse_duration(raw: object, *, key: str) -> float:
    """Seconds from ``"30s"``, ``"500ms"``, ``"10m"``, ``"1h30m"`` (the schema's format) or a
    plain number of seconds."""
    if isinstance(raw, bool):
        raise RepoConfigError(f"{key}: expected a duration like '30s', got boolean {raw!r}")
    if isinstance(raw, int | float):
        seconds = float(raw)
    elif isinstance(raw, str):
        try:
            seconds = parse_schema_duration(raw.strip())
        except ValueError:
            raise RepoConfigError(
                f"{key}: expected a duration like '30s', '500ms' or '1h30m', got {raw!r}"
            ) from None
    else:
        raise RepoConfigError(f"{key}: expected a duration like '30s', got {raw!r}")
    if seconds < 0:
        raise RepoConfigError(f"{key}: a duration cannot be negative, got {raw!r}")
    return seconds


@dataclass(frozen=True, slots=True)
class RepoConfig:
    clusters_dir: str = "clusters"
    status_path: str = "status"
    #: None: status snapshots go to the branch the policy is read from
    status_branch: str | None = None
    fetch_interval: float = 30.0
    status_min_interval: float = 5.0

    def status_file(self, cluster: str) -> str:
        return f"{self.status_path}/{cluster}.yaml"

    def cluster_dir(self, cluster: str) -> str:
        return f"{self.clusters_dir}/{cluster}"

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> RepoConfig:
        raw = raw or {}
        if not isinstance(raw, Mapping):
            raise RepoConfigError(f"{CONFIG_FILE}: expected a mapping at the top level")
        status = _section(raw, "status")
        sync = _section(raw, "sync")
        defaults = cls()
        return cls(
            clusters_dir=_path(raw.get("clustersDir", defaults.clusters_dir), key="clustersDir"),
            status_path=_path(status.get("path", defaults.status_path), key="status.path"),
            status_branch=_optional_str(status.get("branch"), key="status.branch"),
            fetch_interval=parse_duration(
                sync.get("fetchInterval", defaults.fetch_interval), key="sync.fetchInterval"
            ),
            status_min_interval=parse_duration(
                sync.get("statusMinInterval", defaults.status_min_interval),
                key="sync.statusMinInterval",
            ),
        )

    @classmethod
    def from_yaml(cls, text: bytes | str | None) -> RepoConfig:
        """Parse the file's text (YAML 1.2); None or empty text gives the defaults."""
        if not text:
            return cls()
        try:
            data = YAML(typ="safe").load(text)
        except YAMLError as exc:
            raise RepoConfigError(f"{CONFIG_FILE}: not valid YAML: {exc}") from exc
        return cls.from_mapping(data)


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
