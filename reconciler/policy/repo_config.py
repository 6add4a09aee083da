"""The policy repository's own settings (``reconciler.yaml`` at its root) with their defaults.

Validated by ``schemas/repo-config.schema.json``; this module gives typed access for the code
that needs the values (validation's file discovery, the sync daemon).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

CONFIG_FILE = "reconciler.yaml"
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds in a duration like ``500ms``, ``30s``, ``10m`` or ``1h30m``. Raises ValueError."""
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"expected a duration like '30s', '10m' or '1h30m', got {text!r}")
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


@dataclass(frozen=True, slots=True)
class RepoConfig:
    clusters_dir: str = "clusters"
    status_path: str = "status"
    #: branch for status commits; None means the policy branch itself
    status_branch: str | None = None
    fetch_interval_s: float = 30.0
    status_min_interval_s: float = 5.0
    ready_timeout_s: float = 600.0
    #: the whole validated file, for sections other modules interpret (firmware, signatures, ...)
    raw: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_obj(cls, obj: Mapping[str, Any] | None) -> RepoConfig:
        """Build from a validated config (None or an empty file means all defaults)."""
        obj = obj or {}
        status = obj.get("status") or {}
        sync = obj.get("sync") or {}
        rollout = obj.get("rollout") or {}
        return cls(
            clusters_dir=str(obj.get("clustersDir", "clusters")).strip("/"),
            status_path=str(status.get("path", "status")).strip("/"),
            status_branch=status.get("branch"),
            fetch_interval_s=parse_duration(sync.get("fetchInterval", "30s")),
            status_min_interval_s=parse_duration(sync.get("statusMinInterval", "5s")),
            ready_timeout_s=parse_duration(rollout.get("readyTimeout", "10m")),
            raw=dict(obj),
        )

    def snapshot_path(self, cluster: str) -> str:
        return f"{self.status_path}/{cluster}.yaml"
