"""The ``health`` section that applies to one cluster, as the controllers use it: read into a
``HealthConfig`` once ``reconciler.config`` has validated the file (schema and
``reconciler.health.rules``). A section that does not validate fails closed: ``error`` carries the
located finding and the rollout starts no node (docs/health.md). Pure: values in, value out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reconciler.health.checks import HealthConfig


@dataclass(frozen=True, slots=True)
class HealthSection:
    """``config`` None and ``error`` None: no ``health`` section (no gates)."""

    config: HealthConfig | None = None
    error: str | None = None

    @property
    def present(self) -> bool:
        return self.config is not None or self.error is not None

    @classmethod
    def from_obj(cls, value: object, *, label: str, path: str,
                 errors: Sequence[str] = ()) -> HealthSection:
        """The section as written (``value``, None: absent; ``label`` names it), with the
        errors validation located in it: the first (and how many more) fails closed."""
        if errors:
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            return cls(error=f"{errors[0]}{more}")
        if value is None:
            return cls()
        if not isinstance(value, Mapping):
            return cls(error=f"{path}: {label}: not a mapping")
        try:
            return cls(HealthConfig.from_obj(value))
        except (KeyError, TypeError, ValueError) as exc:
            return cls(error=f"{path}: {label}: {exc}")
