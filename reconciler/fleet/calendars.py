"""A cluster's maintenance-window calendar, built from ``reconciler.yaml`` as a commit holds it
(pure). Built here, above the policy package: the calendar itself (``windows.py``) knows no
config file, so the policy rules can check a section with it."""

from __future__ import annotations

from reconciler.errors import RepoConfigError
from reconciler.fleet.windows import WindowCalendar
from reconciler.policy.repo_config import RepoConfigFile


def windows_for(file: RepoConfigFile, cluster: str | None) -> WindowCalendar | None:
    """The cluster's maintenance windows; None: no ``windows`` section (always open). A
    section that does not validate fails closed (docs/health.md): a calendar that never opens and
    says why."""
    if file.yaml_error is not None:
        return WindowCalendar.failed(file.yaml_error)
    label, value = file.section_for("windows", cluster)
    if value is None:
        return None
    try:
        return WindowCalendar.from_config(value, label=label)
    except RepoConfigError as exc:
        return WindowCalendar.failed(file.located(label, str(exc)))
