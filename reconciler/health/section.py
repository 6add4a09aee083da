"""The ``health`` section of one ``reconciler.yaml`` as the controller uses it: validated by the
same rules as ``reconciler validate`` (schema and ``health_rules``), then read into a
``HealthConfig``. A section that does not validate fails closed: ``error`` carries the located
finding and the rollout starts no node (docs/health.md). Pure: text in, value out."""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.health.checks import HealthConfig
from reconciler.policy.validation import validate_repo_config


@dataclass(frozen=True, slots=True)
class HealthSection:
    """``config`` None and ``error`` None: no ``health`` section (no gates)."""

    config: HealthConfig | None = None
    error: str | None = None

    @property
    def present(self) -> bool:
        return self.config is not None or self.error is not None


def read_health(text: bytes | str | None, path: str = "reconciler.yaml",
                cluster: str | None = None) -> HealthSection:
    """The section that applies (``clusters.<cluster>.health`` replaces ``health`` as a whole
    when present)."""
    if not text:
        return HealthSection()
    result = validate_repo_config(text, path)
    obj = result.obj if isinstance(result.obj, dict) else {}
    pointer, section = "/health", obj.get("health")
    clusters = obj.get("clusters")
    if cluster is not None and isinstance(clusters, dict):
        own = clusters.get(cluster)
        if isinstance(own, dict) and "health" in own:
            pointer, section = f"/clusters/{cluster}/health", own["health"]
    errors = [f for f in result.findings if f.is_error
              and (f.pointer == pointer or f.pointer.startswith(pointer + "/"))]
    if result.obj is None:  # not YAML at all: whether a section exists is unknown
        errors = [f for f in result.findings if f.is_error]
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return HealthSection(error=f"{first.file}:{first.line}:{first.column}: "
                                   f"{first.message} [{first.rule}]{more}")
    if section is None:
        return HealthSection()
    if not isinstance(section, dict):
        return HealthSection(error=f"{path}: {pointer[1:].replace('/', '.')}: not a mapping")
    try:
        return HealthSection(HealthConfig.from_obj(section))
    except (KeyError, TypeError, ValueError) as exc:
        return HealthSection(error=f"{path}: {pointer[1:].replace('/', '.')}: {exc}")
