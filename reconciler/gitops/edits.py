"""File edits the reconciler commits: spec write-backs (docs/gitops.md#git-stays-the-truth) and
status snapshot files.

Pure text in, text out. Spec write-backs go through ruamel.yaml's round-trip mode so the
policy file keeps its comments, quoting, key order and indentation; only the edited line changes.
An edit carries the value it expects to replace: when a person changed that field in Git in the
meantime, their value wins and the edit is dropped as a conflict (it is a rebase of our change,
never a rewrite of theirs).
"""

from __future__ import annotations

import copy
import enum
import io
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import YAMLError
from ruamel.yaml.scalarstring import ScalarString
from ruamel.yaml.tokens import CommentToken
from ruamel.yaml.util import load_yaml_guess_indent

from reconciler.fieldpath import MISSING, resolve
from reconciler.gitops.status_policy import snapshot_key
from reconciler.names import GROUP
from reconciler.policy.document import YamlRefused, parse_yaml
from reconciler.policy.payload import normalize_version

CLUSTER_OPERATOR_KIND = "ClusterOperator"

PAUSE_FIELD = ("spec", "driver", "upgradePolicy", "pause")
PAYLOAD_VERSION_FIELD = ("spec", "driver", "payload", "version")
FW_UPGRADE_POLICY_FIELD = ("spec", "driver", "fwUpgradePolicy")


class _Any:
    def __repr__(self) -> str:
        return "ANY"


#: ``expected`` that accepts whatever Git holds
ANY: Any = _Any()


class EditOutcome(enum.Enum):
    CHANGED = "changed"
    ALREADY = "already"  # Git already says so: no commit
    CONFLICT = "conflict"  # a person changed the field since: their value wins
    NOT_FOUND = "not-found"  # no ClusterOperator document in the file


@dataclass(frozen=True, slots=True)
class FieldEdit:
    field: tuple[str, ...]
    value: Any
    expected: Any = ANY

    def to_json(self) -> dict[str, Any]:
        return {"field": list(self.field), "value": self.value,
                "expected": _sentinel_out(self.expected)}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> FieldEdit:
        return cls(tuple(raw["field"]), raw["value"], _sentinel_in(raw.get("expected", "ANY")))


def _sentinel_out(value: Any) -> Any:
    if value is ANY:
        return {"$sentinel": "ANY"}
    if value is MISSING:
        return {"$sentinel": "MISSING"}
    return value


def _sentinel_in(value: Any) -> Any:
    if isinstance(value, Mapping) and set(value) == {"$sentinel"}:
        return ANY if value["$sentinel"] == "ANY" else MISSING
    return value


@dataclass(frozen=True, slots=True)
class EditResult:
    outcome: EditOutcome
    text: str | None = None
    detail: str = ""


def same_value(field: Sequence[str], a: Any, b: Any) -> bool:
    """Equality as the cluster sees it: ``2.33.0.9`` and ``2.33.0.9-amd64`` name one image."""
    if a is MISSING or b is MISSING:
        return a is b
    if tuple(field) == PAYLOAD_VERSION_FIELD and isinstance(a, str) and isinstance(b, str):
        return normalize_version(a) == normalize_version(b)
    if isinstance(a, bool) or isinstance(b, bool):  # True == 1 in Python, not in the policy
        return type(a) is type(b) and a == b
    return bool(a == b)


def _round_trip_yaml(text: str) -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096  # never re-wrap long lines
    mapping_indent = _mapping_indent(text)
    try:
        _, seq_indent, seq_offset = load_yaml_guess_indent(text)
    except YAMLError:
        seq_indent, seq_offset = None, None
    if seq_indent is None or seq_offset is None:
        seq_indent, seq_offset = mapping_indent, 0
    yaml.indent(mapping=mapping_indent, sequence=seq_indent, offset=seq_offset)
    yaml.explicit_start = text.lstrip().startswith("---")
    return yaml


def _mapping_indent(text: str) -> int:
    indents = [
        len(line) - len(line.lstrip(" "))
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith(("#", "-")) and line.startswith(" ")
    ]
    return min(indents) if indents else 2


def is_cluster_operator(doc: Any) -> bool:
    return (
        isinstance(doc, Mapping)
        and doc.get("kind") == CLUSTER_OPERATOR_KIND
        and str(doc.get("apiVersion", "")).startswith(GROUP + "/")
    )


def edit_policy_text(text: str, edits: Sequence[FieldEdit]) -> EditResult:
    """Apply ``edits`` to the ``ClusterOperator`` document of a policy file, all or nothing."""
    from reconciler.policy.document import parse_document

    # the round-trip loader recurses once per nesting level: bound the file first
    bounds = [f for f in parse_document(text, "policy file").findings
              if f.rule in ("too-deep", "file-too-large", "alias-bomb")]
    if bounds:
        return EditResult(EditOutcome.NOT_FOUND, detail=f"policy file is not usable: "
                                                        f"{bounds[0].message}")
    yaml = _round_trip_yaml(text)
    try:
        docs = list(yaml.load_all(text))
    except YAMLError as exc:
        return EditResult(EditOutcome.NOT_FOUND, detail=f"policy file is not valid YAML: {exc}")
    target = next((doc for doc in docs if is_cluster_operator(doc)), None)
    if target is None:
        return EditResult(EditOutcome.NOT_FOUND, detail="no ClusterOperator document")
    changed = False
    for edit in edits:
        current = resolve(target, edit.field)
        if same_value(edit.field, current, edit.value):
            continue
        if edit.expected is not ANY and not same_value(edit.field, current, edit.expected):
            return EditResult(
                EditOutcome.CONFLICT,
                detail=f"{'.'.join(edit.field)} is {current!r} in Git, expected "
                f"{edit.expected!r}: a person changed it, their value wins",
            )
        _set_field(target, edit.field, edit.value)
        changed = True
    if not changed:
        return EditResult(EditOutcome.ALREADY, text=text)
    out = io.StringIO()
    if len(docs) == 1:
        yaml.dump(docs[0], out)
    else:
        yaml.dump_all(docs, out)
    return EditResult(EditOutcome.CHANGED, text=_like(text, out.getvalue()))


def _like(original: str, dumped: str) -> str:
    """Line endings and the final newline as the original file had them."""
    if not original.endswith(("\n", "\r")):
        dumped = dumped.rstrip("\n")
    if "\r\n" in original:
        dumped = dumped.replace("\r\n", "\n").replace("\n", "\r\n")
    return dumped


def _set_field(doc: CommentedMap, field: Sequence[str], value: Any) -> None:
    node = doc
    for name in field[:-1]:
        if not isinstance(node.get(name), Mapping):
            _append_key(node, name, CommentedMap())
        node = node[name]
    if field[-1] in node:
        current = node[field[-1]]
        if isinstance(current, ScalarString) and isinstance(value, str):
            value = type(current)(value)  # keep the quoting style a person chose
        node[field[-1]] = value
    else:
        _append_key(node, field[-1], value)


def _append_key(node: CommentedMap, key: str, value: Any) -> None:
    """Append a key, keeping blank lines and comments that follow the previous last key below it.

    ruamel stores what follows a value (inline comment, then blank lines and comments up to the
    next key) on that value; a plain append would put the new key after all of it.
    """
    last = next(reversed(node), None) if len(node) else None
    node[key] = value
    if last is None or not hasattr(node, "ca"):
        return
    slots = node.ca.items.get(last)
    token = slots[2] if slots and len(slots) > 2 else None
    if not isinstance(token, CommentToken) or "\n" not in token.value:
        return
    own_line, _, rest = token.value.partition("\n")
    if own_line.strip():
        token.value = own_line + "\n"
    else:
        slots[2] = None
    if rest:
        node.ca.items[key] = [None, None, CommentToken("\n" + rest, copy.copy(token.start_mark),
                                                      None), None]


# -- status files ------------------------------------------------------------------------------

STATUS_HEADER = (
    "# Status snapshot written by gpu-gitops-reconciler. Do not edit: the next status\n"
    "# commit replaces this file. Read it with `reconciler status --from git`.\n"
)
_SECRET_KEY_RE = re.compile(
    r"secret|password|passwd|token|credential|private.?key|api.?key|authorization",
    re.IGNORECASE,
)


def scrub_secrets(data: Any) -> Any:
    """Drop keys that look like credentials: a status snapshot in Git must never carry them."""
    if isinstance(data, Mapping):
        return {str(k): scrub_secrets(v) for k, v in data.items()
                if not _SECRET_KEY_RE.search(str(k))}
    if isinstance(data, list | tuple):
        return [scrub_secrets(v) for v in data]
    return data


def render_status(snapshot: Mapping[str, Any]) -> str:
    yaml = YAML(typ="rt")
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    out = io.StringIO()
    yaml.dump(_to_commented(scrub_secrets(snapshot)), out)
    return STATUS_HEADER + out.getvalue()


def _to_commented(data: Any) -> Any:
    if isinstance(data, Mapping):
        result = CommentedMap()
        for key, value in data.items():
            result[key] = _to_commented(value)
        return result
    if isinstance(data, list | tuple):
        return [_to_commented(v) for v in data]
    return data


def parse_status(text: bytes | str | None) -> dict[str, Any] | None:
    """A status file's data; None when absent or unreadable (it is ours: we rewrite it)."""
    if not text:
        return None
    try:
        data = parse_yaml(text, "status")
    except YamlRefused:
        return None
    return data if isinstance(data, dict) else None


def status_change(current: bytes | str | None, snapshot: Mapping[str, Any]) -> str | None:
    """The new status file text, or None when Git already holds a snapshot of the same state
    (so a restart or a replayed queue never commits a state twice)."""
    existing = parse_status(current)
    if existing is not None and snapshot_key(existing) == snapshot_key(snapshot):
        return None
    return render_status(snapshot)


EditFunction = Callable[[str], EditResult]
