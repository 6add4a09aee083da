"""``reconciler.yaml`` resolved for one cluster: every section typed once, the repository-wide
sections with the cluster's own (``clusters.<name>.<key>``) in their place. Pure: a loaded file in
(``reconciler.config.document.load``: parsed and validated once), a frozen value (or the reason it
is refused) out. Each section is read by the ``from_obj`` of the package that owns its type; a
refused section is located with the findings the load kept, never by validating again.

Refused, so the last good settings stay: a file that is not YAML or not a mapping, a wrong key of
the Git side (``clustersDir``, ``status``, ``sync``), a ``rollout``, ``notify`` or ``firmware``
section that does not validate. ``health`` and ``windows`` never refuse a file: a section of
theirs that does not validate fails closed (docs/health.md and 10: no node starts, the status and
an Event say why), so they carry their error instead; so does ``promotion``, which the sync role's
promotion gate refuses the commit for (the other roles do not read it)."""

from __future__ import annotations

from dataclasses import astuple, dataclass, field

from reconciler.config.document import ConfigDocument
from reconciler.config.sync import SyncSettings
from reconciler.errors import RepoConfigError
from reconciler.firmware.model import FirmwareSettings, SettingsError
from reconciler.fleet.promotion import Promotion
from reconciler.fleet.windows import WindowCalendar
from reconciler.health.section import HealthSection
from reconciler.policy.forge_config import ForgeSection
from reconciler.policy.label_selector import label_key_error
from reconciler.policy.notify_config import NotifyConfigError, NotifySink, read_notify
from reconciler.policy.rollout_settings import RolloutSettings


class SettingsRefused(ValueError):
    """The file cannot replace the settings in force; the message is located where it can be."""


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """What every part reads of the repository config: the control loops at each pass, the sync
    role at each commit, ``simulate``, ``plan`` and the dashboard for their predictions."""

    rollout: RolloutSettings = field(default_factory=RolloutSettings)
    #: the health gates (``present`` False: no section)
    health: HealthSection = field(default_factory=HealthSection)
    #: the maintenance windows (None: no section, always open)
    windows: WindowCalendar | None = None
    firmware: FirmwareSettings = field(default_factory=FirmwareSettings)
    #: where they come from, for messages: a commit id or a file name (not compared)
    source: str = field(default="defaults", compare=False)
    #: where events go (docs/notifications.md; none: nothing is sent)
    notify: tuple[NotifySink, ...] = ()
    #: ``forge:`` (repository-wide; None: no section): where commit statuses go, with the
    #: daemon's flags winning key by key (docs/forges.md)
    forge: ForgeSection | None = None
    #: ``clustersDir``, ``status`` and ``sync``: the Git side's (repository-wide)
    sync: SyncSettings = field(default_factory=SyncSettings)
    #: ``clusters.<name>.promotion`` (None: no gate, or ``promotion_error``)
    promotion: Promotion | None = None
    #: why ``promotion`` cannot be used (the sync role's promotion gate rejects the commit)
    promotion_error: str | None = None
    #: ``signatures.mode`` as written (None: not set); ``trust.signatures`` judges the value
    signature_mode: str | None = None


def resolve(doc: ConfigDocument, cluster: str | None, *, source: str) -> ClusterSettings:
    """The settings ``doc`` gives ``cluster`` (None: the repository-wide sections alone);
    raises ``SettingsRefused``. ``source`` says where they come from, in messages."""
    if doc.refused is not None:
        raise SettingsRefused(doc.refused)
    try:
        sync = SyncSettings.from_obj(doc.obj)
    except RepoConfigError as exc:
        raise SettingsRefused(str(exc)) from None
    promotion, promotion_error = _promotion(doc, cluster)
    return ClusterSettings(
        rollout=_rollout(doc, cluster),
        notify=_notify(doc, cluster),
        firmware=_firmware(doc),
        health=_health(doc, cluster),
        windows=_windows(doc, cluster),
        forge=ForgeSection.read(doc.obj.get("forge")),
        sync=sync,
        promotion=promotion,
        promotion_error=promotion_error,
        signature_mode=doc.signature_mode,
        source=source,
    )


def _refuse_errors_in(doc: ConfigDocument, pointer: str) -> None:
    """A section in which validation found an error refuses the file, with the first one."""
    found = doc.errors_in(pointer)
    if found:
        raise SettingsRefused(found[0])


def _rollout(doc: ConfigDocument, cluster: str | None) -> RolloutSettings:
    """The cluster's section key by key over the repository-wide one (docs/live-clusters.md),
    each checked."""
    own = doc.section("rollout", cluster)
    _refuse_errors_in(doc, own.pointer)
    wide = None
    if own.label != "rollout":
        wide_section = doc.section("rollout", None)
        _refuse_errors_in(doc, wide_section.pointer)
        wide = wide_section.value
    try:
        return RolloutSettings.from_sections(wide, own.value, label=own.label)
    except RepoConfigError as exc:
        raise SettingsRefused(doc.located(own.pointer, str(exc))) from None


def _notify(doc: ConfigDocument, cluster: str | None) -> tuple[NotifySink, ...]:
    """docs/notifications.md: ``clusters.<cluster>.notify`` replaces the repository-wide list."""
    section = doc.section("notify", cluster)
    _refuse_errors_in(doc, section.pointer)
    try:
        return read_notify(section.value, label=section.label)
    except NotifyConfigError as exc:
        raise SettingsRefused(f"{doc.path}: {exc}") from None


def _firmware(doc: ConfigDocument) -> FirmwareSettings:
    try:
        firmware = FirmwareSettings.from_config(doc.obj.get("firmware"))
    except SettingsError as exc:
        raise SettingsRefused(f"{doc.path}: {exc}") from None
    for key in astuple(firmware.labels):
        if (problem := label_key_error(key)) is not None:
            raise SettingsRefused(doc.located("/firmware/nodeLabels", problem))
    return firmware


def _health(doc: ConfigDocument, cluster: str | None) -> HealthSection:
    section = doc.section("health", cluster)
    return HealthSection.from_obj(section.value, label=section.label, path=doc.path,
                                  errors=doc.errors_in(section.pointer))


def _windows(doc: ConfigDocument, cluster: str | None) -> WindowCalendar | None:
    """None: no ``windows`` section (always open). A section that does not validate fails
    closed (docs/health.md): a calendar that never opens and says why."""
    section = doc.section("windows", cluster)
    if section.value is None:
        return None
    try:
        return WindowCalendar.from_config(section.value, label=section.label)
    except RepoConfigError as exc:
        return WindowCalendar.failed(doc.located(section.pointer, str(exc)))


def _promotion(doc: ConfigDocument, cluster: str | None) -> tuple[Promotion | None, str | None]:
    section = doc.section("promotion", cluster)
    try:
        return Promotion.from_obj(section.value, label=section.label), None
    except RepoConfigError as exc:
        return None, str(exc)
