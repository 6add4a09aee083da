"""The parse layer: YAML 1.2 text to plain data, with every node's location kept for findings.

Parsing uses ruamel.yaml's composer (libyaml-based C parser when available; the pure-Python one
otherwise) and one walk over the composed nodes that builds plain ``dict``/``list`` data and
checks what a permissive loader lets through: duplicate keys, tags outside the YAML 1.2 core
schema, non-string keys, merge keys, recursive aliases, alias-expansion bombs and integers outside
the signed 64-bit range of Kubernetes integers. Locations are looked up in the composed nodes only
when a finding needs one, so valid files pay nothing for them; each mapping a lookup passes
through is indexed once, so locating every finding costs linear time overall. A value that an
alias (``*name``) put at a pointer is located at the alias, and the finding names the anchor.

Resource bounds (never unbounded memory, never a traceback): the file size is checked before
parsing; nesting depth is bounded before the C composer (which recurses on the C stack) sees the
text; aliases are never expanded (an alias is the same Python object) and the expanded size is
computed, not built.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    CollectionStartEvent,
    Event,
    MappingStartEvent,
    NodeEvent,
    ScalarEvent,
    SequenceStartEvent,
)
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.reader import ReaderError
from ruamel.yaml.resolver import VersionedResolver

from reconciler.files import MAX_FILE_BYTES
from reconciler.policy.findings import Finding, split_pointer

#: Nodes after alias expansion (what a consumer that walks the data would visit).
MAX_EXPANDED_NODES = 100_000
#: Collection nesting. Kubernetes objects stay far below; libyaml's composer recurses on the
#: C stack, so deeper input must never reach it.
MAX_DEPTH = 100
#: Below this bound on the nesting depth the C composer is safe without a precise check.
_SAFE_DEPTH_BOUND = 400
#: Kubernetes integers are signed 64-bit (docs/policy.md#the-fields): the API server and the
#: vendor's Go webhook cannot hold a value outside this range, so validation rejects it at that
#: value.
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
#: Decimal digits of INT64_MAX: a longer digit string is out of range without converting it
#: (Python refuses to convert more than 4300 digits at all).
_INT64_DIGITS = len(str(INT64_MAX))

_TAG = "tag:yaml.org,2002:"
_STR, _NULL, _BOOL, _INT, _FLOAT = (_TAG + t for t in ("str", "null", "bool", "int", "float"))
_MAP, _SEQ, _MERGE, _TIMESTAMP = (_TAG + t for t in ("map", "seq", "merge", "timestamp"))
_NULL_TEXTS = ("", "~", "null", "Null", "NULL")
_YAML_DIRECTIVE = re.compile(r"^%YAML[ \t]+(\S+)", re.MULTILINE)


class _Resolver12(VersionedResolver):
    """YAML 1.2 core resolution, looked up once instead of per scalar (directives other than
    ``%YAML 1.2`` are rejected before parsing)."""

    _table: Any = None

    @property
    def processing_version(self) -> Any:
        return (1, 2)

    @property
    def versioned_resolver(self) -> Any:
        if self._table is None:
            self._table = super().versioned_resolver
        return self._table


def _yaml(pure: bool) -> YAML:
    yaml = YAML(typ="safe", pure=pure)
    yaml.Resolver = _Resolver12
    return yaml


_FAST = _yaml(pure=False)
_PURE = _yaml(pure=True)


@dataclass(frozen=True, slots=True)
class Location:
    """1-based line and column of a key and of its value."""

    line: int
    column: int


#: A slot of a collection: (id of the mapping or sequence node, position, True for a mapping key).
_Slot = tuple[int, int, bool]
#: Where a value was put by an alias: the alias's mark, the anchor's name, the anchored node.
_AliasUse = tuple[Any, str, Node]


@dataclass(slots=True)
class ParsedDocument:
    """A parsed YAML document: plain data plus the composed nodes for locating findings."""

    file: str
    obj: Any
    root: Node | None
    findings: list[Finding] = field(default_factory=list)
    #: the text, kept only when an alias occurs (to find where each alias is written)
    alias_text: str | None = None
    _index: dict[int, dict[str, tuple[int, Node, Node]]] = field(default_factory=dict)
    _aliases: dict[_Slot, _AliasUse] | None = None

    def locate(self, pointer: str, *, key: bool = False) -> Location:
        """Where ``pointer`` is written: its value, or its key with ``key=True``.

        A pointer that does not exist (a missing field) resolves to its deepest existing
        ancestor's key, which is where a person adds the field. A pointer that passes through an
        alias resolves to the (first) alias on its path: that is where the value was put.
        """
        return self._resolve(pointer, key)[0]

    def finding(
        self, pointer: str, rule: str, message: str, *, key: bool = False, warning: bool = False,
        info: bool = False,
    ) -> Finding:
        loc, note = self._resolve(pointer, key)
        return Finding(
            self.file, loc.line, loc.column, pointer, rule,
            "info" if info else "warning" if warning else "error", message + note,
        )

    def _resolve(self, pointer: str, key: bool) -> tuple[Location, str]:
        node = self.root
        key_node: Node | None = None
        if node is None:
            return Location(1, 1), ""
        tokens = split_pointer(pointer)
        aliases = self._alias_uses() if tokens else None
        via: _AliasUse | None = None
        key_slot: _Slot | None = None
        for token in tokens:
            entry = self._child(node, token)
            if entry is None:
                key = True
                break
            position, child_key, child = entry
            if via is None and aliases:
                via = aliases.get((id(node), position, False))
            key_slot = (id(node), position, True) if child_key is not None else None
            key_node, node = child_key, child
        if via is None and aliases and key and key_slot is not None:
            via = aliases.get(key_slot)  # an aliased key (`*name: value`)
        target = key_node if key and key_node is not None else node
        mark = target.start_mark
        if via is None:
            return Location(mark.line + 1, mark.column + 1), ""
        alias_mark, anchor, anchored = via
        anchor_line = anchored.start_mark.line + 1
        if target is anchored:
            note = f" (the value of alias *{anchor}, anchored as &{anchor} at line {anchor_line})"
        else:
            note = (f" (put here by alias *{anchor}: written at line {mark.line + 1}, column "
                    f"{mark.column + 1}, inside &{anchor} at line {anchor_line})")
        return Location(alias_mark.line + 1, alias_mark.column + 1), note

    def _child(self, node: Node, token: str) -> tuple[int, Node | None, Node] | None:
        """The slot ``token`` names in ``node``; each mapping is indexed once, on first use."""
        if isinstance(node, MappingNode):
            index = self._index.get(id(node))
            if index is None:
                index = {}
                for position, (key_node, value_node) in enumerate(node.value):
                    if isinstance(key_node, ScalarNode):
                        # the last duplicate wins, as in the data
                        index[str(key_node.value)] = (position, key_node, value_node)
                self._index[id(node)] = index
            return index.get(token)
        if (isinstance(node, SequenceNode) and token.isascii() and token.isdigit()
                and len(token) <= len(str(len(node.value)))):
            position = int(token)
            if position < len(node.value):
                return (position, None, node.value[position])
        return None

    def _alias_uses(self) -> dict[_Slot, _AliasUse]:
        if self._aliases is None:
            self._aliases = {}
            if self.alias_text is not None and self.root is not None:
                self._aliases = _alias_slots(self.root, self.alias_text)
        return self._aliases


def _alias_slots(root: Node, text: str) -> dict[_Slot, _AliasUse]:
    """Every collection slot that holds an alias, found by walking the parser's events alongside
    the composed tree (the composer replaces an alias by the anchored node and forgets where the
    alias was written). The tree is at most MAX_DEPTH deep here. If the events do not line up
    with the tree (a text only the pure-Python parser reads), no alias is known and findings stay
    at the anchor."""
    for yaml in (_FAST, _PURE):
        try:
            return _align(root, yaml.parse(text))
        except (YAMLError, _Misaligned):
            continue
    return {}


class _Misaligned(Exception):
    """The event stream does not match the composed tree."""


def _align(root: Node, stream: Iterator[Event]) -> dict[_Slot, _AliasUse]:
    events: Iterator[Event] = (e for e in stream if isinstance(
        e, NodeEvent | CollectionEndEvent))
    slots: dict[_Slot, _AliasUse] = {}

    def walk(node: Node, slot: _Slot | None) -> None:
        event = next(events, None)
        if isinstance(event, AliasEvent):
            if slot is not None:
                slots[slot] = (event.start_mark, str(event.anchor), node)
        elif isinstance(event, MappingStartEvent) and isinstance(node, MappingNode):
            for position, (key_node, value_node) in enumerate(node.value):
                walk(key_node, (id(node), position, True))
                walk(value_node, (id(node), position, False))
            if not isinstance(next(events, None), CollectionEndEvent):
                raise _Misaligned
        elif isinstance(event, SequenceStartEvent) and isinstance(node, SequenceNode):
            for position, item in enumerate(node.value):
                walk(item, (id(node), position, False))
            if not isinstance(next(events, None), CollectionEndEvent):
                raise _Misaligned
        elif not (isinstance(event, ScalarEvent) and isinstance(node, ScalarNode)):
            raise _Misaligned

    walk(root, None)
    return slots


def rejected_number(value: object) -> bool:
    """A number the parse layer reports wherever it occurs (outside int64, or not finite), so
    later layers leave it alone instead of reporting it a second time."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return not INT64_MIN <= value <= INT64_MAX
    return isinstance(value, float) and not math.isfinite(value)


def parse_document(
    data: bytes | str, file: str, *, max_bytes: int = MAX_FILE_BYTES
) -> ParsedDocument:
    """Parse one YAML document. Problems become findings; ``obj`` is None when nothing usable."""
    doc = ParsedDocument(file, None, None)
    size = len(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
    if size > max_bytes:
        doc.findings.append(Finding(
            file, 1, 1, "", "file-too-large", "error",
            f"file is {size} bytes, more than the limit of {max_bytes} bytes for a policy file",
        ))
        return doc
    text = _decode(data, doc)
    if text is None:
        return doc
    if not _check_directives(text, doc) or not _check_depth(text, doc):
        return doc
    root = _compose_single(text, doc)
    if root is None:
        return doc
    doc.root = root
    builder = _Builder(doc)
    doc.obj = builder.build(root)
    if builder.too_deep:
        doc.obj = None
        return doc
    if builder.aliased:
        doc.alias_text = text
    # without an alias ('*') every node is built once: the file size bounds the work
    if "*" in text and builder.expanded_size(root) > MAX_EXPANDED_NODES:
        doc.findings.append(doc.finding(
            "", "alias-bomb",
            f"aliases expand this document to more than {MAX_EXPANDED_NODES} nodes; "
            "write the values out instead of nesting aliases",
        ))
        doc.obj = None
    return doc


def _decode(data: bytes | str, doc: ParsedDocument) -> str | None:
    if isinstance(data, str):
        try:
            data.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate: text that came from bad bytes
            prefix = data[: exc.start]
            doc.findings.append(Finding(
                doc.file, prefix.count("\n") + 1, len(prefix) - (prefix.rfind("\n") + 1) + 1,
                "", "not-utf8", "error",
                f"expected UTF-8 text, found {_codepoint(data[exc.start])}, which UTF-8 cannot "
                "encode; save the file as UTF-8",
            ))
            return None
        return data.removeprefix("\ufeff")
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        before = data[: exc.start]
        line = before.count(b"\n") + 1
        column = len(before) - (before.rfind(b"\n") + 1) + 1
        encoding = " (it starts with a UTF-16 byte order mark)" if data[:2] in (
            b"\xff\xfe", b"\xfe\xff") else ""
        doc.findings.append(Finding(
            doc.file, line, column, "", "not-utf8", "error",
            f"expected UTF-8 text, found byte 0x{data[exc.start]:02x} that is not valid UTF-8"
            f"{encoding}; save the file as UTF-8",
        ))
        return None


def _check_directives(text: str, doc: ParsedDocument) -> bool:
    if "%YAML" not in text:
        return True
    for match in _YAML_DIRECTIVE.finditer(text):
        if match.group(1) != "1.2":
            line = text.count("\n", 0, match.start()) + 1
            doc.findings.append(Finding(
                doc.file, line, 1, "", "yaml-version", "error",
                f"policy files are YAML 1.2, found a '%YAML {match.group(1)}' directive; "
                "remove it (YAML 1.1 would read yes/no/on/off as booleans)",
            ))
            return False
    return True


def _depth_bound(text: str) -> int:
    """An upper bound on collection nesting, cheap enough for every file.

    Each flow level needs a bracket; block levels need indentation or a '- '/'? ' indicator,
    so the widest line prefix bounds them (twice, for a block sequence under a mapping key at the
    same indentation).
    """
    prefix = max((len(line) - len(line.lstrip(" -?\t")) for line in text.splitlines()), default=0)
    return text.count("[") + text.count("{") + 2 * (prefix + 2)


def _check_depth(text: str, doc: ParsedDocument) -> bool:
    if _depth_bound(text) <= _SAFE_DEPTH_BOUND:
        return True
    depth = 0
    try:
        for event in _FAST.parse(text):
            if isinstance(event, CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    mark = event.start_mark
                    doc.findings.append(Finding(
                        doc.file, mark.line + 1, mark.column + 1, "", "too-deep", "error",
                        f"collections nested more than {MAX_DEPTH} levels deep",
                    ))
                    return False
            elif isinstance(event, CollectionEndEvent):
                depth -= 1
    except YAMLError:
        pass  # the composer reports syntax errors with their location
    return True


def _compose_single(text: str, doc: ParsedDocument) -> Node | None:
    try:
        nodes = list(_FAST.compose_all(text))
    except YAMLError:
        # The pure-Python parser words syntax errors better (it names the offending character).
        try:
            nodes = list(_PURE.compose_all(text))
        except RecursionError:
            doc.findings.append(Finding(
                doc.file, 1, 1, "", "too-deep", "error",
                f"collections nested more than {MAX_DEPTH} levels deep",
            ))
            return None
        except YAMLError as exc:
            doc.findings.append(_syntax_finding(exc, text, doc.file))
            return None
    # A trailing '---' with nothing after it is an empty document, not a second object.
    while len(nodes) > 1 and _is_empty(nodes[-1]):
        nodes.pop()
    if not nodes or (len(nodes) == 1 and _is_empty(nodes[0])):
        doc.findings.append(Finding(
            doc.file, 1, 1, "", "empty-document", "error",
            "the file holds no YAML document (it is empty or only comments)",
        ))
        return None
    if len(nodes) > 1:
        mark = nodes[1].start_mark
        doc.findings.append(Finding(
            doc.file, mark.line + 1, mark.column + 1, "", "multiple-documents", "error",
            f"expected one YAML document, found {len(nodes)} (separated by '---'); "
            "put each object in its own file",
        ))
        return None
    root: Node = nodes[0]
    return root


def _is_empty(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag == _NULL and node.value in ("", "~", "null")


def _syntax_finding(exc: YAMLError, text: str, file: str) -> Finding:
    if isinstance(exc, MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        problem = exc.problem or "invalid YAML"
        context = ""
        if exc.context:
            context = f" ({exc.context}"
            if exc.context_mark is not None and exc.context_mark.line != mark.line:
                context += f" that starts at line {exc.context_mark.line + 1}"
            context += ")"
        return Finding(
            file, mark.line + 1, mark.column + 1, "", "yaml-syntax", "error",
            f"invalid YAML{context}: {problem}",
        )
    if isinstance(exc, ReaderError):
        before = text[: exc.position]
        line = before.count("\n") + 1
        column = len(before) - (before.rfind("\n") + 1) + 1
        return Finding(
            file, line, column, "", "yaml-syntax", "error",
            f"invalid YAML: control character {_codepoint(exc.character)} is not allowed; "
            "remove it",
        )
    return Finding(file, 1, 1, "", "yaml-syntax", "error", f"invalid YAML: {exc}")


def _codepoint(character: object) -> str:
    code = character if isinstance(character, int) else ord(str(character)[:1] or "\0")
    return f"U+{code:04X}"


def _describe_tag(tag: str | None) -> str:
    if tag is None:
        return "(none)"
    return "!!" + tag[len(_TAG):] if tag.startswith(_TAG) else tag


class _Builder:
    """Builds plain data from composed nodes; an alias becomes the same Python object."""

    def __init__(self, doc: ParsedDocument) -> None:
        self.doc = doc
        self.built: dict[int, Any] = {}
        self.sizes: dict[int, int] = {}
        self.active: set[int] = set()
        self.too_deep = False
        self.aliased = False

    def build(self, root: Node) -> Any:
        return self._node(root, "", 1)

    def _error(self, node: Node, pointer: str, rule: str, message: str) -> None:
        mark = node.start_mark
        self.doc.findings.append(Finding(
            self.doc.file, mark.line + 1, mark.column + 1, pointer, rule, "error", message
        ))

    def _node(self, node: Node, pointer: str, depth: int) -> Any:
        key = id(node)
        if key in self.built:
            self.aliased = True  # a composed node is reached twice only through an alias
            return self.built[key]
        if key in self.active:
            self._error(node, pointer, "recursive-alias",
                        "the collection anchored here contains an alias to itself; "
                        "recursive structures cannot be applied")
            return None
        if depth > MAX_DEPTH and not isinstance(node, ScalarNode):
            self.too_deep = True
            self._error(node, pointer, "too-deep",
                        f"collections nested more than {MAX_DEPTH} levels deep")
            return None
        tag = node.tag
        if isinstance(node, ScalarNode):
            value = self._scalar(node, pointer)
        else:
            if tag not in (_MAP, _SEQ):
                self._error(node, pointer, "custom-tag",
                            f"tag '{_describe_tag(tag)}' is not allowed: policy files use plain "
                            "YAML 1.2 (strings, numbers, booleans, null, mappings, lists); "
                            "remove the tag")
            self.active.add(key)
            if isinstance(node, MappingNode):
                value = self._mapping(node, pointer, depth)
            else:
                value = [self._node(item, f"{pointer}/{i}", depth + 1)
                         for i, item in enumerate(node.value)]
            self.active.discard(key)
        self.built[key] = value
        return value

    def _mapping(self, node: MappingNode, pointer: str, depth: int) -> dict[str, Any]:
        result: dict[str, Any] = {}
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                self._error(key_node, pointer, "merge-key",
                            "merge keys ('<<') are not part of YAML 1.2 and Kubernetes tools "
                            "disagree on them; write the keys out")
                continue
            if not isinstance(key_node, ScalarNode):
                self._error(key_node, pointer, "key-type",
                            "expected a string key, found a mapping or list used as a key")
                continue
            name = str(key_node.value)
            child = f"{pointer}/{name.replace('~', '~0').replace('/', '~1')}"
            if key_node.tag != _STR:
                self._error(key_node, child, "key-type",
                            f"expected a string key, found {_describe_tag(key_node.tag)[2:]} "
                            f"{name!r}; quote it")
            if name in seen:
                self._error(key_node, child, "duplicate-key",
                            f"duplicate key '{name}' (first at line {seen[name]}); "
                            "a YAML mapping cannot repeat a key: keep one")
            seen[name] = key_node.start_mark.line + 1
            result[name] = self._node(value_node, child, depth + 1)
        return result

    def _scalar(self, node: ScalarNode, pointer: str) -> Any:
        tag, text = node.tag, node.value
        if tag in (_STR, _TIMESTAMP):
            return text  # a timestamp stays the text written, as Kubernetes reads it
        if tag == _NULL:
            return None if text in _NULL_TEXTS else self._tag_mismatch(node, pointer, "null")
        if tag == _BOOL:
            if text.lower() not in ("true", "false"):
                return self._tag_mismatch(node, pointer, "a boolean")
            return text.lower() == "true"
        if tag == _INT:
            number = _to_int(text)
            if number is None:
                return self._tag_mismatch(node, pointer, "an integer")
            if not INT64_MIN <= number <= INT64_MAX:
                self._error(node, pointer, "integer-range",
                            f"integer {_shorten(text)} is outside the range of Kubernetes "
                            f"integers (signed 64-bit: {INT64_MIN} to {INT64_MAX}); the API "
                            "server cannot store it")
            return number
        if tag == _FLOAT:
            value = _to_float(text)
            if value is None:
                return self._tag_mismatch(node, pointer, "a number")
            if not math.isfinite(value):
                self._error(node, pointer, "non-finite-number",
                            f"{_shorten(text)} is not a finite number and cannot be applied")
            return value
        self._error(node, pointer, "custom-tag",
                    f"tag '{_describe_tag(tag)}' is not allowed: policy files use plain YAML 1.2 "
                    "(strings, numbers, booleans, null, mappings, lists); remove the tag")
        return text

    def _tag_mismatch(self, node: ScalarNode, pointer: str, kind: str) -> str:
        """An explicit core tag on text it does not fit (``!!int abc``): never coerced."""
        self._error(node, pointer, "tag-value",
                    f"tag '{_describe_tag(node.tag)}' needs {kind}, but the value is "
                    f"{_shorten(node.value)!r}; remove the tag or write {kind}")
        return str(node.value)

    def expanded_size(self, root: Node) -> int:
        """Node count with every alias expanded, computed without expanding (memoised)."""
        stack: list[tuple[Node, bool]] = [(root, False)]
        sizes = self.sizes
        pending: set[int] = set()
        while stack:
            node, children_done = stack.pop()
            key = id(node)
            if key in sizes:
                continue
            if isinstance(node, ScalarNode):
                sizes[key] = 1
                continue
            if children_done:
                pending.discard(key)
                sizes[key] = 1 + sum(sizes.get(id(c), 0) for c in _children(node))
                if sizes[key] > MAX_EXPANDED_NODES:
                    return sizes[key]
                continue
            if key in pending:
                continue  # recursion through an alias, reported by the builder
            pending.add(key)
            stack.append((node, True))
            stack.extend((c, False) for c in _children(node) if id(c) not in sizes)
        return sizes.get(id(root), 0)


def _children(node: Node) -> Iterator[Node]:
    if isinstance(node, MappingNode):
        for key_node, value_node in node.value:
            yield key_node
            yield value_node
    elif isinstance(node, SequenceNode):
        yield from node.value


def _to_int(text: str) -> int | None:
    """The integer written, None if the text is no integer (only an explicit ``!!int`` tag puts
    such text here). A decimal too long for int64 becomes one past the range instead of being
    converted (its size would not matter, only that it is out of range)."""
    digits = text.replace("_", "")
    sign = -1 if digits.startswith("-") else 1
    digits = digits[1:] if digits[:1] in ("-", "+") else digits
    lowered = digits.lower()
    for prefix, base in (("0x", 16), ("0o", 8), ("0b", 2)):
        if lowered.startswith(prefix):
            if not (digits[2:].isascii() and digits[2:].isalnum()):
                return None
            try:
                return sign * int(digits[2:], base)  # power-of-two bases: linear time
            except ValueError:
                return None
    if not digits.isascii() or not digits.isdigit():
        return None
    digits = digits.lstrip("0") or "0"
    if len(digits) > _INT64_DIGITS:
        return sign * (INT64_MAX + 2)
    return sign * int(digits, 10)


def _to_float(text: str) -> float | None:
    lowered = text.replace("_", "").lower()
    if lowered in (".inf", "+.inf", "-.inf"):
        return -math.inf if lowered.startswith("-") else math.inf
    if lowered == ".nan":
        return math.nan
    try:
        return float(lowered)
    except ValueError:
        return None


def _shorten(text: str) -> str:
    return text if len(text) <= 60 else f"{text[:20]}...{text[-8:]} ({len(text)} characters)"


# -- YAML ----------------------------------------------------------------------------------------

class YamlRefused(ValueError):
    """The text is not one usable YAML document; the message is located (``file:line:col``)."""


def parse_yaml(data: bytes | str, file: str) -> Any:
    """One YAML document as plain data, parsed with the policy files' bounds (size, nesting
    depth before the C parser sees it, aliases), so a file nested 10,000 deep is a located
    error, not a crash of the C parser's stack. An empty document is None."""
    doc = parse_document(data, file)
    errors = [f for f in doc.findings if f.is_error]
    if errors and not (len(errors) == 1 and errors[0].rule == "empty-document"):
        first = errors[0]
        raise YamlRefused(f"{first.file}:{first.line}:{first.column}: {first.message}")
    return None if errors else doc.obj
