"""``reconciler.yaml`` resolved for one cluster: the repository-wide sections with the cluster's
own (``clusters.<name>.<key>``) in their place, each typed and built once per file. Pure: a
parsed file in, a frozen value (or the reason it is refused) out.

Refused, so the last good settings stay: a file that is not YAML, a wrong key the Git side uses,
a ``rollout``, ``firmware`` or ``notify`` section that does not validate. ``health`` and
``windows`` never refuse a file: a section of theirs that does not validate fails closed
(docs/health.md and 10: no node starts, the status and an Event say why), so they carry their error
instead."""

from __future__ import annotations

from dataclasses import astuple, dataclass, field

from reconciler.firmware.model import FirmwareSettings, SettingsError
from reconciler.fleet.calendars import windows_for
from reconciler.fleet.windows import WindowCalendar
from reconciler.health.section import HealthSection, read_health
from reconciler.policy.forge_config import ForgeSection
from reconciler.policy.label_selector import label_key_error
from reconciler.policy.notify_config import NotifySink
from reconciler.policy.repo_config import CONFIG_FILE, RepoConfigError, RepoConfigFile
from reconciler.policy.rollout_settings import RolloutSettings


class SettingsRefused(ValueError):
    """The file cannot replace the settings in force; the message is located where it can be."""


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """What the control loops read of the repository config at each pass."""

    rollout: RolloutSettings = field(default_factory=RolloutSettings)
    #: the health gates (``present`` False: no section)
    health: HealthSection = field(default_factory=HealthSection)
    #: the maintenance windows (None: no section, always open)
    windows: WindowCalendar | None = None
    firmware: FirmwareSettings = field(default_factory=FirmwareSettings)
    #: where they come from, for messages: a commit id or a file name (not compared)
    source: str = field(default="defaults", compare=False)
    #: where events go (docs/notifications.md; none: nothing is sent); last, so positional use stays
    #: as is
    notify: tuple[NotifySink, ...] = ()
    #: ``forge:`` (repository-wide; None: no section): where commit statuses go, with the
    #: daemon's flags winning key by key (docs/forges.md)
    forge: ForgeSection | None = None


def resolve_settings(file: RepoConfigFile, cluster: str | None, *, source: str,
            path: str = CONFIG_FILE) -> ClusterSettings:
    """The settings ``file`` gives ``cluster``; raises ``SettingsRefused``. ``path``: the
    file's name in located messages."""
    if file.config is None:
        raise SettingsRefused(str(file.error) if file.error is not None
                              else f"{path} cannot be read")
    try:
        rollout = file.rollout_for(cluster, path)
    except RepoConfigError as exc:
        raise SettingsRefused(str(exc)) from None
    try:
        notify = file.notify_for(cluster, path)
    except RepoConfigError as exc:
        raise SettingsRefused(str(exc)) from None
    try:
        firmware = FirmwareSettings.from_config(file.raw.get("firmware"))
    except SettingsError as exc:
        raise SettingsRefused(f"{path}: {exc}") from None
    for key in astuple(firmware.labels):
        if (problem := label_key_error(key)) is not None:
            raise SettingsRefused(file.located("firmware.nodeLabels", problem))
    return ClusterSettings(
        rollout=rollout,
        health=read_health(file.text, path, cluster),
        windows=windows_for(file, cluster),
        firmware=firmware,
        notify=notify,
        source=source,
        forge=ForgeSection.read(file.raw.get("forge")),
    )
