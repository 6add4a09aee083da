"""``rollout:`` of reconciler.yaml for one cluster (SPEC 13): the builtin controller's own
settings, typed and frozen. Read at every commit like the rest of the file (the live view in
``reconciler.settings`` carries them to the controller's passes): a key added here follows
commits with no other wiring. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from reconciler.policy.repo_config import RepoConfigError, parse_duration_setting

DEFAULT_READY_TIMEOUT = 600.0


@dataclass(frozen=True, slots=True)
class RolloutSettings:
    """The ``rollout`` section that applies to a cluster (``clusters.<name>.rollout`` replaces
    the repository-wide one, SPEC 10)."""

    #: seconds a new driver pod may take to become Ready before the node failed
    ready_timeout: float = DEFAULT_READY_TIMEOUT

    @classmethod
    def from_section(cls, value: object, *, label: str = "rollout") -> RolloutSettings:
        """From the section as written (None: every default). Raises ``RepoConfigError``
        naming the key."""
        if value is None:
            return cls()
        if not isinstance(value, Mapping):
            raise RepoConfigError(f"{label}: expected a mapping, got {type(value).__name__}")
        ready = value.get("readyTimeout")
        return cls(
            ready_timeout=(DEFAULT_READY_TIMEOUT if ready is None else
                           parse_duration_setting(ready, key=f"{label}.readyTimeout")),
        )
