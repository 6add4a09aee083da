"""``reconciler.yaml`` of one commit (or ``--repo-config`` file), parsed and validated once.

``load`` runs the parse layer, the schema and the sections' rules (``reconciler.config.
validation``) once and keeps the located findings; whatever reads the file's settings then reads
them from the ``ConfigDocument``: ``resolve`` (``reconciler.config.settings``) for a cluster's
typed settings, locating a refused section with the findings kept here; ``reconciler validate``
and ``reconciler plan`` the findings themselves. Nothing validates the file again. Pure.

A file that cannot be a configuration at all (not YAML, not a mapping at the top level) is
``refused``, with the reason located where it can be; the signature mode is read even then
(the signature check runs before the file is judged).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from reconciler.config.sync import CONFIG_FILE as CONFIG_FILE
from reconciler.config.validation import checked, is_empty
from reconciler.policy.document import parse_document
from reconciler.policy.findings import Finding, join_pointer

#: the sections ``clusters.<name>`` may have, each replacing the repository-wide one
#: (docs/configuration.md#a-fleet-of-clusters-clustersname-windows-promotion): as a whole, but
#: ``rollout`` key by key (docs/live-clusters.md); ``promotion`` exists per cluster only
ClusterSection = Literal["rollout", "health", "windows", "promotion", "notify"]


@dataclass(frozen=True, slots=True)
class Section:
    """One section as it applies to a cluster: where it is written and what it holds."""

    #: for messages: ``rollout`` or ``clusters.<name>.rollout``
    label: str
    #: RFC 6901, for the findings in it
    pointer: str
    #: as written (None: absent)
    value: Any


@dataclass(frozen=True, slots=True)
class ConfigDocument:
    """The file's top-level mapping and validation's findings, located."""

    #: the file's name in located messages
    path: str = CONFIG_FILE
    #: the top-level mapping ({} when absent, empty or refused)
    obj: Mapping[str, Any] = field(default_factory=dict)
    #: every finding of validation, in file order (none for data given as such)
    findings: tuple[Finding, ...] = ()
    #: why the file cannot be a configuration at all (None: it can)
    refused: str | None = None
    #: ``signatures.mode`` as written, read even from a refused file (None: not set)
    signature_mode: str | None = None

    @classmethod
    def from_data(cls, data: object, path: str = CONFIG_FILE) -> ConfigDocument:
        """Data already parsed, without its text: nothing is validated, so a refused section
        is named by its key, not by its line."""
        if data is None:
            return cls(path)
        if not isinstance(data, Mapping):
            return cls(path, refused=f"{path}: expected a mapping at the top level")
        return cls(path, data, signature_mode=_signature_mode(data))

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.is_error)

    def section(self, key: ClusterSection, cluster: str | None) -> Section:
        """``clusters.<cluster>.<key>`` when that cluster has it, else the repository-wide
        ``<key>`` (``promotion``: the cluster's alone)."""
        clusters = self.obj.get("clusters")
        own = clusters.get(cluster) if isinstance(clusters, Mapping) and cluster else None
        if (isinstance(own, Mapping) and key in own) or key == "promotion":
            value = own.get(key) if isinstance(own, Mapping) else None
            return Section(f"clusters.{cluster}.{key}",
                           _pointer("clusters", str(cluster), key), value)
        return Section(key, _pointer(key), self.obj.get(key))

    def errors_in(self, pointer: str) -> tuple[str, ...]:
        """The errors validation found at ``pointer`` or below it, each located
        (``file:LINE:COL: message [rule]``)."""
        return tuple(f"{f.file}:{f.line}:{f.column}: {f.message} [{f.rule}]"
                     for f in self.errors
                     if f.pointer == pointer or f.pointer.startswith(pointer + "/"))

    def located(self, pointer: str, message: str) -> str:
        """``message`` about the value at ``pointer``: validation's first error there when it
        found one (with its place in the file), else the message as it is."""
        found = self.errors_in(pointer)
        return found[0] if found else f"{CONFIG_FILE}: {message}"

    def cluster_names(self) -> tuple[str, ...]:
        """The names of the ``clusters.<name>`` sections, sorted."""
        clusters = self.obj.get("clusters")
        return tuple(sorted(str(n) for n in clusters)) if isinstance(clusters, Mapping) else ()

    def seen_by(self, cluster: str) -> dict[str, Any]:
        """The file as ``cluster`` sees it, as written: every repository-wide key, each section
        of ``clusters.<cluster>`` in its place (``rollout`` key by key, the rest whole)."""
        seen = {key: value for key, value in self.obj.items() if key != "clusters"}
        clusters = self.obj.get("clusters")
        own = clusters.get(cluster) if isinstance(clusters, Mapping) else None
        for key, value in (own.items() if isinstance(own, Mapping) else ()):
            wide = seen.get(key)
            if key == "rollout" and value is None:
                value = wide
            elif key == "rollout" and isinstance(wide, Mapping) and isinstance(value, Mapping):
                value = {**wide, **value}
            seen[key] = value
        return seen


def load(text: bytes | str | None, path: str = CONFIG_FILE) -> ConfigDocument:
    """Parse and validate the file's text once (YAML 1.2; ``path`` names it in the findings).
    None or an empty text gives the defaults."""
    if not text:
        return ConfigDocument(path)
    doc = parse_document(text, path)
    findings = tuple(checked(doc))
    if is_empty(doc):
        return ConfigDocument(path)
    parse_errors = [f for f in doc.findings if f.is_error]
    if parse_errors or doc.obj is None:
        refused = (f"{parse_errors[0].file}:{parse_errors[0].line}:{parse_errors[0].column}: "
                   f"{parse_errors[0].message}" if parse_errors else f"{path}: not YAML")
        return ConfigDocument(path, findings=findings, refused=refused)
    if not isinstance(doc.obj, Mapping):
        return ConfigDocument(path, findings=findings,
                              refused=f"{path}: expected a mapping at the top level")
    return ConfigDocument(path, doc.obj, findings, signature_mode=_signature_mode(doc.obj))


def _signature_mode(obj: Mapping[str, Any]) -> str | None:
    section = obj.get("signatures")
    mode = section.get("mode") if isinstance(section, Mapping) else None
    return str(mode) if mode is not None else None


def _pointer(*tokens: str) -> str:
    pointer = ""
    for token in tokens:
        pointer = join_pointer(pointer, token)
    return pointer
