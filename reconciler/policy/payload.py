"""Driver payload identity (docs/policy.md#the-objects-in-the-cluster):
``<registry>/<name>:<version>``, where a version without an arch suffix means ``-amd64``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.names import ARCH_SUFFIXES

DEFAULT_ARCH_SUFFIX = "-amd64"


def normalize_version(version: str) -> str:
    """``2.33.0.9`` and ``2.33.0.9-amd64`` name the same image."""
    if version.endswith(ARCH_SUFFIXES):
        return version
    return version + DEFAULT_ARCH_SUFFIX


@dataclass(frozen=True, slots=True)
class Payload:
    registry: str
    name: str
    version: str

    @classmethod
    def from_spec(cls, payload: Mapping[str, Any]) -> Payload:
        return cls(
            registry=str(payload.get("registry", "")),
            name=str(payload.get("name", "driver-image")),
            version=str(payload.get("version", "")),
        )

    @property
    def image(self) -> str:
        prefix = f"{self.registry}/" if self.registry else ""
        return f"{prefix}{self.name}:{normalize_version(self.version)}"

    def same_image(self, other: Payload) -> bool:
        """True when both name the same image, so changing one into the other starts no rollout."""
        return self.image == other.image
