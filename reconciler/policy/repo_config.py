"""The policy repository's own settings (``reconciler.yaml`` at its root) with their defaults.

One set of values, two ways in:

- ``RepoConfig.from_obj``: a file that validation (``schemas/repo-config.schema.json``) already
  accepted, for ``reconciler validate``'s file discovery;
- ``RepoConfigFile.parse`` (and ``RepoConfig.from_yaml`` / ``from_mapping`` on top of it): the
  file as a commit holds it, unchecked, parsed once for everything that reads it: the sync pass
  (signature mode, folders), the Git side and the daemon's controller settings. Only the keys
  the Git side uses are checked, and a wrong one is a ``RepoConfigError`` naming the key, so a
  daemon never dies on a traceback for a typo in the config file (one class, from
  ``reconciler/errors.py``: the Git side raises the same). The signature mode is read even from a
  file whose other keys are wrong: the signature check runs before the config is judged. The
  controllers' sections (``rollout`` with ``rollout_for``, ``windows``, ``health``) are judged
  per cluster by ``reconciler.settings.cluster``, at every commit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from reconciler.durations import parse_duration as parse_duration
from reconciler.durations import parse_duration_setting as parse_duration_setting
from reconciler.errors import RepoConfigError as RepoConfigError
from reconciler.fieldpath import section
from reconciler.policy.document import YamlRefused, parse_yaml
from reconciler.policy.notify_config import NotifyConfigError, NotifySink, read_notify
from reconciler.policy.rollout_settings import RolloutSettings, merge_rollout_sections
from reconciler.policy.validation import validate_repo_config

CONFIG_FILE = "reconciler.yaml"
#: the sections ``clusters.<name>`` may replace as a whole (docs/configuration.md#promotion;
#: promotion lives only there)
CLUSTER_SECTIONS = ("rollout", "health", "windows", "promotion", "notify")
PROMOTION_MODES = ("hold", "branch", "auto")

@dataclass(frozen=True, slots=True)
class RepoConfig:
    clusters_dir: str = "clusters"
    status_path: str = "status"
    #: branch for status commits; None means the policy branch itself
    status_branch: str | None = None
    #: seconds
    fetch_interval: float = 30.0
    status_min_interval: float = 5.0
    ready_timeout: float = 600.0
    #: ``signatures.mode`` as written (None: not set); ``trust.signatures`` judges the value
    signature_mode: str | None = field(default=None, compare=False)
    #: the whole file, for sections other modules interpret (firmware, signatures, ...); not
    #: part of equality: two configs are equal when their settings are
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def status_file(self, cluster: str) -> str:
        """The cluster's status snapshot, relative to the repository root."""
        return f"{self.status_path}/{cluster}.yaml"

    def cluster_dir(self, cluster: str) -> str:
        """The cluster's policy folder, relative to the repository root."""
        return f"{self.clusters_dir}/{cluster}"

    @classmethod
    def from_obj(cls, obj: Mapping[str, Any] | None) -> RepoConfig:
        """Build from a validated config (None or an empty file means all defaults)."""
        obj = obj or {}
        status, sync, rollout = (section(obj, (key,)) for key in ("status", "sync", "rollout"))
        return cls(
            clusters_dir=str(obj.get("clustersDir", "clusters")).strip("/"),
            status_path=str(status.get("path", "status")).strip("/"),
            status_branch=status.get("branch"),
            fetch_interval=parse_duration(sync.get("fetchInterval", "30s")),
            status_min_interval=parse_duration(sync.get("statusMinInterval", "5s")),
            ready_timeout=parse_duration(rollout.get("readyTimeout", "10m")),
            signature_mode=_signature_mode(obj),
            raw=dict(obj),
        )

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> RepoConfig:
        """Build from an unchecked mapping (None means all defaults); raises RepoConfigError.

        ``rollout.readyTimeout`` is the controllers' setting, not the Git side's: an unusable
        value keeps the default here (``rollout_for`` refuses it, naming its place)."""
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
            fetch_interval=parse_duration_setting(
                sync.get("fetchInterval", defaults.fetch_interval), key="sync.fetchInterval"
            ),
            status_min_interval=parse_duration_setting(
                sync.get("statusMinInterval", defaults.status_min_interval),
                key="sync.statusMinInterval",
            ),
            ready_timeout=_ready_timeout_or_default(raw.get("rollout"), defaults.ready_timeout),
            signature_mode=_signature_mode(raw),
            raw=dict(raw),
        )

    @classmethod
    def from_yaml(cls, text: bytes | str | None) -> RepoConfig:
        """Parse the file's text (YAML 1.2); None or empty text gives the defaults."""
        return RepoConfigFile.parse(text).settings()


@dataclass(frozen=True, slots=True)
class Promotion:
    """``clusters.<name>.promotion``: a payload reaches the cluster only after ``after``
    completed it at least ``soak`` seconds ago and still runs it."""

    after: str
    soak: float = 0.0
    mode: Literal["hold", "branch", "auto"] = "hold"


@dataclass(frozen=True, slots=True)
class RepoConfigFile:
    """``reconciler.yaml`` of one commit, parsed once; each reader takes what it needs."""

    #: the top-level mapping ({} when absent, not YAML or not a mapping)
    raw: Mapping[str, Any] = field(default_factory=dict)
    #: the settings (None when ``error``)
    config: RepoConfig | None = field(default_factory=RepoConfig)
    #: why the settings are refused, naming the key or the line
    error: RepoConfigError | None = None
    #: the YAML refusal (located) when the text is not usable YAML at all
    yaml_error: str | None = None
    #: the text parsed (None for data given as such): sections validated on their own, such as
    #: ``health``, are read from it with their locations
    text: bytes | str | None = field(default=None, compare=False, repr=False)

    @classmethod
    def parse(cls, text: bytes | str | None) -> RepoConfigFile:
        """The file's text (YAML 1.2); None or empty text gives the defaults."""
        if not text:
            return cls()
        try:
            data = parse_yaml(text, CONFIG_FILE)
        except YamlRefused as exc:  # located: "reconciler.yaml:LINE:COL: what is wrong"
            return cls(config=None, error=RepoConfigError(str(exc)), yaml_error=str(exc),
                       text=text)
        return dataclasses.replace(cls.from_data(data), text=text)

    @classmethod
    def from_data(cls, data: object) -> RepoConfigFile:
        """An already parsed document (e.g. ``--repo-config``)."""
        raw = data if isinstance(data, Mapping) else {}
        try:
            config = RepoConfig.from_mapping(cast("Mapping[str, Any] | None", data))
            return cls(raw=raw, config=config)
        except RepoConfigError as exc:
            return cls(raw=raw, config=None, error=exc)

    def settings(self) -> RepoConfig:
        """The settings; raises ``RepoConfigError`` when refused."""
        if self.config is None:
            assert self.error is not None
            raise self.error
        return self.config

    # -- per-cluster sections
    # (docs/configuration.md#a-fleet-of-clusters-clustersname-windows-promotion)
    # --------------------------------------------------

    def section_for(self, key: str, cluster: str | None) -> tuple[str, Any]:
        """``clusters.<cluster>.<key>`` when that cluster has it, else the repository-wide
        ``<key>`` (a replacement as a whole, never a deep merge), with the key's label for
        messages; ``promotion`` exists per cluster only. (label, None) when absent."""
        assert key in CLUSTER_SECTIONS
        clusters = self.raw.get("clusters")
        settings = clusters.get(cluster) if isinstance(clusters, Mapping) and cluster else None
        if isinstance(settings, Mapping) and key in settings:
            return f"clusters.{cluster}.{key}", settings[key]
        if key == "promotion":
            return f"clusters.{cluster}.{key}", None
        return key, self.raw.get(key)

    def ready_timeout_for(self, cluster: str | None) -> float:
        """``rollout.readyTimeout`` for the cluster (an unusable value keeps the default)."""
        label, own = self.section_for("rollout", cluster)
        value = (merge_rollout_sections(self.raw.get("rollout"), own)
                 if label != "rollout" else own)
        return _ready_timeout_or_default(value, RepoConfig().ready_timeout)

    def rollout_for(self, cluster: str | None, path: str = CONFIG_FILE) -> RolloutSettings:
        """The cluster's ``rollout`` section, typed. Raises ``RepoConfigError`` with the place
        in the file (named ``path``) when the section does not validate (the live view then
        keeps the last good settings)."""
        label, value = self._checked_section("rollout", cluster, path)
        # key by key over the repository-wide section (docs/live-clusters.md), itself checked
        wide = self._checked_section("rollout", None, path)[1] if label != "rollout" else None
        try:
            return RolloutSettings.from_sections(wide, value, label=label)
        except RepoConfigError as exc:
            raise RepoConfigError(self.located(label, str(exc))) from None

    def notify_for(self, cluster: str | None, path: str = CONFIG_FILE) -> tuple[NotifySink, ...]:
        """The cluster's notification sinks (docs/notifications.md: ``clusters.<cluster>.notify``
        replaces the repository-wide list). Raises ``RepoConfigError`` with the place in the
        file."""
        label, value = self._checked_section("notify", cluster, path)
        try:
            return read_notify(value, label=label)
        except NotifyConfigError as exc:
            raise RepoConfigError(f"{path}: {exc}") from None

    def _checked_section(self, key: str, cluster: str | None, path: str) -> tuple[str, Any]:
        """``section_for``, refused (``RepoConfigError``, located in the file named ``path``)
        when the text is not YAML or the schema finds an error in the section."""
        if self.yaml_error is not None:
            raise RepoConfigError(self.yaml_error)
        label, value = self.section_for(key, cluster)
        located = self._schema_error(label, path)
        if located is not None:
            raise RepoConfigError(located)
        return label, value

    def located(self, label: str, message: str) -> str:
        """``message`` about the section ``label`` with its place in the file (``reconciler.yaml:
        LINE:COL: ... [rule]``) when validation of the text finds an error there."""
        return self._schema_error(label) or f"{CONFIG_FILE}: {message}"

    def _schema_error(self, label: str, path: str = CONFIG_FILE) -> str | None:
        """The first error validation of the text finds in the section ``label``, located in
        the file named ``path``; None: none (or no text to validate)."""
        if self.text is None:
            return None
        pointer = "/" + label.replace(".", "/")
        found = [f for f in validate_repo_config(self.text, path).findings
                 if f.is_error and (f.pointer == pointer or f.pointer.startswith(pointer + "/"))]
        if not found:
            return None
        first = found[0]
        return f"{first.file}:{first.line}:{first.column}: {first.message} [{first.rule}]"

    def promotion_for(self, cluster: str | None) -> Promotion | None:
        """``clusters.<cluster>.promotion``; None when not set. Raises RepoConfigError."""
        label, value = self.section_for("promotion", cluster)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise RepoConfigError(f"{label}: expected a mapping")
        after = value.get("after")
        if not isinstance(after, str) or not after:
            raise RepoConfigError(f"{label}.after: expected the upstream cluster's name")
        soak = parse_duration_setting(value.get("soak", 0), key=f"{label}.soak")
        mode = value.get("mode", "hold")
        if mode not in PROMOTION_MODES:
            raise RepoConfigError(f"{label}.mode: expected one of hold, branch, auto, got "
                                  f"{mode!r}")
        return Promotion(after=after, soak=soak, mode=mode)

    @property
    def signature_mode(self) -> str | None:
        """``signatures.mode``, read even when other settings are refused."""
        return _signature_mode(self.raw)

    @property
    def ready_timeout(self) -> float:
        """``rollout.readyTimeout`` in seconds (an unusable value keeps the default)."""
        return _ready_timeout_or_default(self.raw.get("rollout"), RepoConfig().ready_timeout)

    @property
    def ready_timeout_error(self) -> str | None:
        """Why ``rollout.readyTimeout`` is set but unusable (the daemon warns); None: usable
        or not set."""
        rollout = self.raw.get("rollout")
        if not isinstance(rollout, Mapping) or "readyTimeout" not in rollout:
            return None
        try:
            parse_duration_setting(rollout["readyTimeout"], key="rollout.readyTimeout")
        except RepoConfigError as exc:
            return str(exc)
        return None


def _signature_mode(raw: Mapping[str, Any]) -> str | None:
    section = raw.get("signatures")
    mode = section.get("mode") if isinstance(section, Mapping) else None
    return str(mode) if mode is not None else None


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


def _ready_timeout_or_default(rollout: object, default: float) -> float:
    if not isinstance(rollout, Mapping) or "readyTimeout" not in rollout:
        return default
    try:
        return parse_duration_setting(rollout["readyTimeout"], key="rollout.readyTimeout")
    except RepoConfigError:
        return default
