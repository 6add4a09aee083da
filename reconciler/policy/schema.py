"""The schema layer: JSON Schema 2020-12 validation, each error mapped back to its line.

The schemas in ``schemas/`` are the single source: editors use them directly, the CRD's
structural schema is generated from ``clusteroperator.schema.json``, and this module turns each
jsonschema error into a finding that says what was expected and what was found, with a hint for
the known mistakes (quoted booleans, YAML 1.1 booleans, bare numbers where a percentage is meant).
A hint suggests a replacement only if that field accepts it: each candidate value is checked
against the field's own schema (and its percentage range) before it is offered.
"""

from __future__ import annotations

import difflib
import itertools
import json
import re
import sysconfig
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, ValidationError
from jsonschema.validators import extend

from reconciler.policy.crd_schema import ACTED_ON, FORMAT_RANGES, INT64
from reconciler.policy.document import ParsedDocument, rejected_number
from reconciler.policy.findings import Finding, join_pointer
from reconciler.policy.quantity import digits_value

SCHEMA_FILES = {
    "clusteroperator": "clusteroperator.schema.json",
    "repo-config": "repo-config.schema.json",
    "status-snapshot": "status-snapshot.schema.json",
}

PERCENT_PATTERN = "^[0-9]+%$"
_PATTERN_PHRASES = {
    PERCENT_PATTERN: "a percentage like '50%' (digits followed by '%')",
    "^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$": "an image tag like '2.33.0.9'",
    "^[a-z0-9]+([._/-][a-z0-9]+)*$": "a lowercase image name like 'driver-image'",
    "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$":
        "a lowercase DNS name like 'cluster-operator'",
    "^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$": "a duration like '30s', '10m' or '1h30m'",
    "^([0-9a-f]{40}|[0-9a-f]{64})$": "a full commit hash",
    "^[A-Za-z0-9]([-_.A-Za-z0-9]*[A-Za-z0-9])?$":
        "a name of letters, digits, '-', '_' and '.', starting and ending with a letter or a digit",
    "^(100|[1-9][0-9]?)%$": "a percentage from '1%' to '100%'",
    "^https?://": "an http:// or https:// URL",
    "^(https://[^/?#@\\s]+|http://(localhost|127(\\.[0-9]{1,3}){3}|\\[::1\\])(:[0-9]+)?)"
    "(/[^?#\\s]*)?$": "an https:// URL without credentials, query or fragment (http:// only to "
                      "a loopback address)",
    "^[^/\\s]+(/[^/\\s]+)+$": "a repository path like 'owner/name'",
    # the vendor CRD's own patterns (read as the API server reads them: searched, not anchored)
    "[a-zA-Z0-9\\-]+": "a string holding at least one letter, digit or '-'",
    "^[1-9][0-9]*[wWdDhH]$": "a duration like '26w', '7d' or '24h' (a whole number of weeks, "
                             "days or hours)",
    "^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?"
    "(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$": "a quantity like '1Gi', '500m' or '2'",
}
#: the units of the vendor CRD's log durations, as a hint offers them
_LOG_UNITS = (("h", "hours"), ("d", "days"), ("w", "weeks"))
_TYPE_NAMES = {
    "boolean": "boolean", "integer": "integer", "number": "number", "string": "string",
    "object": "mapping", "array": "list", "null": "null",
}
_YAML11_BOOLEANS = {"yes", "no", "on", "off", "y", "n"}
_DURATION = re.compile(r"^\s*([0-9]+)\s*(ms|s|m|h)\s*$")
_DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


#: Where a wheel installs the schemas (pyproject's data-files), for non-editable installs such
#: as the environment pre-commit builds for the hook.
INSTALLED_SCHEMAS = Path("share") / "gpu-gitops-reconciler" / "schemas"


def schemas_dir() -> Path:
    """``schemas/`` of the source tree, else the copy a wheel installed under the prefix."""
    source = Path(__file__).resolve().parents[2] / "schemas"
    installed = Path(sysconfig.get_path("data")) / INSTALLED_SCHEMAS
    for folder in (source, installed):
        if (folder / SCHEMA_FILES["clusteroperator"]).is_file():
            return folder
    raise SchemasMissingError(
        f"the JSON Schemas are missing (looked in {source} and {installed}); "
        "the installation is incomplete: reinstall gpu-gitops-reconciler"
    )


class SchemasMissingError(RuntimeError):
    """The package was installed without its schemas."""


@cache
def load_schema(kind: str) -> dict[str, Any]:
    with (schemas_dir() / SCHEMA_FILES[kind]).open(encoding="utf-8") as handle:
        schema: dict[str, Any] = json.load(handle)
    return schema


def _is_integer(_checker: object, instance: object) -> bool:
    # No coercion: 3.0 is a number, not an integer; a boolean is neither.
    return isinstance(instance, int) and not isinstance(instance, bool)


def _is_number(_checker: object, instance: object) -> bool:
    return isinstance(instance, int | float) and not isinstance(instance, bool)


@cache
def ecma_pattern(pattern: str) -> re.Pattern[str]:
    """``pattern`` as JSON Schema (ECMA-262) and the API server's RE2 read it: ``$`` ends the
    text. Python's ``$`` also matches before a final newline, so ``2.33.0.9`` with a newline
    after it passed an image tag's pattern here while the cluster refused it."""
    out: list[str] = []
    in_class = escaped = False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "$":
            char = r"\Z"
        out.append(char)
    return re.compile("".join(out))


def _pattern(validator: Any, pattern: str, instance: object, _schema: object,
             ) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not ecma_pattern(pattern).search(
            str(instance)):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


_StrictValidator = extend(
    Draft202012Validator,
    validators={"pattern": _pattern},
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine_many(
        {"integer": _is_integer, "number": _is_number}
    ),
)


def matches_definition(kind: str, name: str, value: object) -> bool:
    """Whether ``value`` is valid as the schema ``kind``'s ``$defs/<name>`` (a flag's value
    checked as the field it stands for)."""
    schema = load_schema(kind)
    definition = inline_refs(schema["$defs"][name], schema["$defs"])
    return bool(_StrictValidator(definition).is_valid(value))


def inline_refs(schema: Any, defs: Mapping[str, Any]) -> Any:
    """The schema with every local ``$ref`` replaced by its target (the schemas are not
    recursive). Validation is faster without reference lookups; the CRD generator does the same."""
    if isinstance(schema, dict):
        if "$ref" in schema:
            target = defs[str(schema["$ref"]).rsplit("/", 1)[-1]]
            merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
            return inline_refs(merged, defs)
        return {k: inline_refs(v, defs) for k, v in schema.items() if k != "$defs"}
    if isinstance(schema, list):
        return [inline_refs(item, defs) for item in schema]
    return schema


@cache
def validator(kind: str) -> Any:
    schema = load_schema(kind)
    return _StrictValidator(inline_refs(schema, schema.get("$defs", {})))


def schema_findings(doc: ParsedDocument, kind: str, *, whole_object: bool = False
                    ) -> list[Finding]:
    """Every schema error of ``doc.obj`` against the schema ``kind``, located in the file.

    A ``ClusterOperator`` is checked as the API server checks a server-side apply of it
    (docs/validation.md#the-layers): ``status`` is not checked (never applied), a key under
    ``spec`` the CRD does not have is an error and a null is an error (server-side apply refuses
    both), and a field the CRD requires that has no default is, for a policy file (applied over
    the installed object), one info finding; for the ``whole_object`` (the admission webhook's
    merged object) it is an error, as the API server would refuse it.
    """
    mapper = _ErrorMapper(doc, load_schema(kind), whole_object=whole_object)
    crd = kind == "clusteroperator"
    findings: list[Finding] = []
    for error in validator(kind).iter_errors(doc.obj):
        if rejected_number(error.instance):
            continue  # the parse layer already said why this value cannot be applied
        if crd and error.absolute_path and error.absolute_path[0] == "status":
            continue  # never applied: the server-populated-field warning says so
        findings.extend(mapper.map(error))
    if crd:
        findings.extend(mapper.unknown_crd_fields(load_schema(kind), doc.obj, ""))
        findings.extend(mapper.missing_crd_fields())
        findings.extend(mapper.null_fields())
    return findings


def _pointer(path: Iterable[str | int]) -> str:
    return "".join(join_pointer("", token) for token in path)


def describe_value(value: object) -> str:
    """How a value is named in messages: its YAML type and the value as written."""
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if value is None:
        return "null (an empty value)"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"number {value!r}"
    if isinstance(value, str):
        return f"string {_quote(value)}"
    if isinstance(value, dict):
        if not value:
            return "an empty mapping {}"
        keys = ", ".join(_quote(str(k)) for k in itertools.islice(value, 3))
        more = ", ..." if len(value) > 3 else ""
        return f"a mapping with keys {keys}{more}"
    if isinstance(value, list):
        return f"a list of {len(value)} item{'s' if len(value) != 1 else ''}"
    return type(value).__name__


def _quote(text: str) -> str:
    shown = text if len(text) <= 60 else text[:57] + "..."
    return "'" + shown.replace("\n", "\\n") + "'"


def field_label(path: Sequence[str | int]) -> str:
    """``upgradeSteps[1].replicas`` style name of a value for messages: the last two levels."""
    parts: list[str] = []
    for token in path:
        if isinstance(token, int) and parts:
            parts[-1] += f"[{token}]"
        else:
            parts.append(str(token))
    return ".".join(parts[-2:]) if parts else "the document"


def _acted_on(pointer: str) -> bool:
    """A field the reconciler acts on (:data:`ACTED_ON`), where an empty value is refused even
    when the API server would put the field's default in its place (our stricter rule)."""
    return any(pointer == place or pointer.startswith(place + "/") for place in ACTED_ON)


def _crd_field(path: Sequence[str | int]) -> bool:
    """A place under ``spec`` reached through mappings only: a policy file applied over the
    installed object (server-side apply) keeps what the installed object has there."""
    return bool(path) and path[0] == "spec" and all(isinstance(t, str) for t in path)


class _ErrorMapper:
    def __init__(self, doc: ParsedDocument, root_schema: Mapping[str, Any], *,
                 whole_object: bool = False) -> None:
        self.doc = doc
        self.defs: Mapping[str, Any] = root_schema.get("$defs", {})
        self.whole_object = whole_object
        #: fields the CRD requires that a policy file leaves out (dotted, under spec)
        self.missing: list[str] = []
        #: empty values (null) of fields the reconciler does not act on (dotted, under spec)
        self.nulls: list[str] = []

    # -- schema helpers -------------------------------------------------------------------
    def resolve(self, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        while "$ref" in schema:
            ref = str(schema["$ref"])
            target = self.defs[ref.rsplit("/", 1)[-1]]
            schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        return schema

    def expected(self, schema: Mapping[str, Any]) -> str:
        """Human phrase for what ``schema`` accepts."""
        schema = self.resolve(schema)
        if "oneOf" in schema:
            return " or ".join(self.expected(branch) for branch in schema["oneOf"])
        if "enum" in schema:
            return "one of " + ", ".join(_quote(str(v)) for v in schema["enum"])
        if "const" in schema:
            return json.dumps(schema["const"])
        kind = schema.get("type")
        if isinstance(kind, list):
            return " or ".join(_TYPE_NAMES.get(str(k), str(k)) for k in kind)
        if kind == "integer" and ("minimum" in schema or "maximum" in schema):
            return self.integer_range(schema)
        if kind in ("string", None) and schema.get("pattern") in _PATTERN_PHRASES:
            return _PATTERN_PHRASES[schema["pattern"]]
        if kind == "object" and schema.get("maxProperties") == 0:
            return "{} (an empty mapping)"
        if isinstance(kind, str):
            return _TYPE_NAMES.get(kind, kind)
        return "a valid value"

    @staticmethod
    def integer_range(schema: Mapping[str, Any]) -> str:
        """``an integer >= 1``; with a maximum below int64's (a ``format: int32`` field)
        ``an integer from 1 to 2147483647 (int32)``."""
        low, high = schema.get("minimum", INT64[0]), schema.get("maximum", INT64[1])
        if high < INT64[1]:
            size = next((f" ({name})" for name, bounds in FORMAT_RANGES.items()
                         if bounds[1] == high), "")
            return f"an integer from {low} to {high}{size}"
        if low > INT64[0]:
            return f"an integer >= {low}"
        return "integer"

    # -- mapping ----------------------------------------------------------------------------
    def map(self, error: ValidationError) -> Iterator[Finding]:
        path = list(error.absolute_path)
        pointer = _pointer(path)
        label = field_label(path)
        value = error.instance
        schema: Mapping[str, Any] = error.schema if isinstance(error.schema, Mapping) else {}
        kind = error.validator

        if kind == "additionalProperties":
            allowed = list(schema.get("properties", {}))
            known = set(allowed)
            for name in value if isinstance(value, dict) else ():
                if name in known:
                    continue
                yield self.doc.finding(
                    join_pointer(pointer, name), "unknown-field",
                    self.unknown_field_message(name, path, allowed), key=True,
                )
            return
        if kind == "required":
            properties: Mapping[str, Any] = schema.get("properties", {})
            for name in error.validator_value:
                if not isinstance(value, dict) or name in value:
                    continue
                if "default" in self.resolve(properties.get(name, {})):
                    continue  # the API server fills it in before it validates
                crd = _crd_field(path)
                if crd and not self.whole_object:
                    dotted = ".".join(str(t) for t in (*path[1:], name))
                    if dotted not in self.missing:  # jsonschema says it once per missing name
                        self.missing.append(dotted)
                    continue
                where = f"in {label}" if path else "at the top level"
                message = f"missing required field '{name}' {where}"
                if crd:
                    message += ("; the vendor's CRD requires it: the API server refuses a "
                                "ClusterOperator without it")
                yield self.doc.finding(join_pointer(pointer, name), "required-field", message,
                                       key=True)
            return
        if kind == "oneOf":
            yield from self.map_one_of(error, path, pointer, label)
            return
        if value is None and "default" in schema and not _acted_on(pointer):
            return  # the API server puts the field's default in place of a null
        if (value is None and not self.whole_object and _crd_field(path)
                and not _acted_on(pointer)):
            # the sync applies a null as a key left out (as a create stores it): Helm renders
            # an unset value so
            dotted = ".".join(str(p) for p in path)
            if dotted not in self.nulls:
                self.nulls.append(dotted)
            return
        if kind == "enum" and value is None and "type" in schema:
            return  # the type error says the value is empty
        if kind == "pattern" and isinstance(value, str) and any(
                not ecma_pattern(str(part["pattern"])).search(value)
                for part in schema.get("allOf", ()) if "pattern" in part):
            return  # our stricter pattern (allOf) fails too and says more
        expected = self.expected(schema)
        if kind == "pattern" and schema.get("pattern") in _PATTERN_PHRASES:
            expected = _PATTERN_PHRASES[schema["pattern"]]
        yield self.simple(kind, schema, value, path, pointer, label, expected)

    def simple(
        self, kind: str, schema: Mapping[str, Any], value: Any, path: list[str | int],
        pointer: str, label: str, expected: str, field: Mapping[str, Any] | None = None,
    ) -> Finding:
        """One finding for error ``kind`` of ``schema`` (a branch of ``field`` when the field
        is a oneOf; hints are checked against the whole ``field``)."""
        field = schema if field is None else field
        got = describe_value(value)
        rule = "schema-" + re.sub(r"(?<!^)(?=[A-Z])", "-", kind).lower()
        message = f"{label}: expected {expected}, got {got}"
        if kind == "type":
            message += self.type_hint(field, value, path)
        elif kind == "enum":
            rule = "schema-enum"
            message += self.enum_hint(schema, value)
        elif kind == "pattern":
            if schema.get("pattern") == PERCENT_PATTERN:
                rule = "percent-format"
            message += self.type_hint(field, value, path)
        elif kind == "minItems":
            got = "an empty list" if value == [] else got
            message = f"{label}: expected at least {schema['minItems']} item(s), got {got}"
            if path and path[-1] == "upgradeSteps":
                message += "; add the batches, the last one with replicas: 100%"
        elif kind == "minLength":
            message = (f"{label}: expected a string of at least {schema['minLength']} "
                       f"character(s), got {got}")
        elif kind == "maxLength":
            message = (f"{label}: expected a string of at most {schema['maxLength']} "
                       f"characters, got one of {len(value)}")
        elif kind == "maxProperties" and schema.get("maxProperties") == 0:
            message = f"{label}: expected {expected}, got {got}; write {{}} with nothing inside"
        return self.doc.finding(pointer, rule, message)

    def null_fields(self) -> Iterator[Finding]:
        """One info finding for the empty values (null) the sync leaves out when it applies."""
        if not self.nulls:
            return
        first = "/" + "/".join(self.nulls[0].split("."))
        yield self.doc.finding(
            first, "null-left-out",
            ", ".join(self.nulls) + ": empty values (null), left out when applied (as the API "
            "server's create stores them; server-side apply would refuse a null), so the "
            "installed object keeps its own", info=True,
        )

    def missing_crd_fields(self) -> Iterator[Finding]:
        """One info finding for every field the CRD requires that a policy file leaves out."""
        if not self.missing:
            return
        yield self.doc.finding(
            "/spec", "crd-required-field",
            "spec: leaves out fields the vendor's CRD requires ("
            + ", ".join(sorted(self.missing, key=lambda name: (name.count("."), name)))
            + "); the API server refuses to create a new ClusterOperator without them, but a "
            "policy is applied over the installed object (server-side apply), which keeps its "
            "own values for them", key=True, info=True,
        )

    def map_one_of(
        self, error: ValidationError, path: list[str | int], pointer: str, label: str
    ) -> Iterator[Finding]:
        schema = self.resolve(error.schema)
        expected = self.expected(schema)
        value = error.instance
        # The branch whose type matches says what is wrong (e.g. below its minimum).
        for index, branch in enumerate(schema.get("oneOf", [])):
            branch = self.resolve(branch)
            types = branch.get("type")  # a branch without one ({"const": 0}) names no type
            if not any(_StrictValidator(branch).is_type(value, t) for t in (
                    [types] if isinstance(types, str) else types or [])):
                continue
            sub = [e for e in error.context or () if e.relative_schema_path
                   and e.relative_schema_path[0] == index]
            for sub_error in sub:
                if sub_error.absolute_path != error.absolute_path:
                    yield from self.map(sub_error)
                    continue
                sub_schema = sub_error.schema if isinstance(sub_error.schema, Mapping) else {}
                yield self.simple(str(sub_error.validator), sub_schema, value, path, pointer,
                                  label, expected, schema)
            return
        message = f"{label}: expected {expected}, got {describe_value(value)}"
        message += self.type_hint(schema, value, path)
        yield self.doc.finding(pointer, "schema-type", message)

    # -- hints -----------------------------------------------------------------------------
    def accepts(self, field: Mapping[str, Any], candidate: object) -> bool:
        """Whether ``field`` takes ``candidate``: its schema, the int64 range of Kubernetes
        integers, and for an int-or-percent field the percentage range
        docs/policy.md#how-the-numbers-resolve gives it (from the integer branch's minimum to 100%,
        which the semantic rules check)."""
        if rejected_number(candidate):
            return False
        field = self.resolve(field)
        if not _StrictValidator(inline_refs(field, self.defs)).is_valid(candidate):
            return False
        if (isinstance(candidate, str) and re.match(PERCENT_PATTERN, candidate)
                and self.takes_percent(field)):
            branches = [self.resolve(b) for b in field.get("oneOf", [])]
            low = next((b.get("minimum", 0) for b in branches if b.get("type") == "integer"), 0)
            return bool(low <= digits_value(candidate[:-1]) <= 100)
        return True

    def takes_percent(self, field: Mapping[str, Any]) -> bool:
        """An int-or-percent field (docs/policy.md#how-the-numbers-resolve)."""
        return any(self.resolve(b).get("pattern") == PERCENT_PATTERN
                   for b in self.resolve(field).get("oneOf", []))

    def type_hint(self, field: Mapping[str, Any], value: Any, path: list[str | int]) -> str:
        """How to write ``value`` so that ``field`` takes it, if there is such a way."""
        name = path[-1] if path else ""
        if value is None:
            return ("; the value is empty: give one or remove the key (server-side apply, which "
                    "the reconciler applies with, refuses a null)")
        if isinstance(value, dict) and name == "pauseDuration":
            return "; the CRD takes an integer; leave pauseDuration out for a manual gate"
        if isinstance(value, str):
            return self.string_hint(field, value, str(name))
        if isinstance(value, bool):
            text = str(value).lower()
            return f"; quote it to make it a string: '{text}'" if self.accepts(field, text) else ""
        if isinstance(value, int | float):
            if self.accepts(field, str(value)):
                return f"; quote it to make it a string: '{value}'"
            if isinstance(value, float) and value.is_integer() and self.accepts(field, int(value)):
                return f"; write {int(value)} without a decimal point"
            if isinstance(value, int) and value > 0 and self.accepts(field, f"{value}s"):
                return f"; a duration has a unit: '{value}s' for {value} seconds"
            units = [(f"{value}{unit}", word) for unit, word in _LOG_UNITS]
            if isinstance(value, int) and all(self.accepts(field, u) for u, _ in units):
                shown = ", ".join(f"'{u}' ({w})" for u, w in units)
                return f"; a duration is a string with a unit: {shown}"
        return ""

    def string_hint(self, field: Mapping[str, Any], value: str, name: str) -> str:
        lowered, stripped = value.lower(), value.strip()
        if lowered in ("true", "false") and self.accepts(field, lowered == "true"):
            hint = (f"; remove the quotes: {_quote(value)} is a string, {lowered} is a "
                    "boolean (the vendor manual's patch commands quote it by mistake)")
            return hint + self.pause_note(field, name)
        if lowered in _YAML11_BOOLEANS and self.accepts(field, True):
            hint = (f"; policy files are YAML 1.2, where {value} is a string, not a boolean: "
                    "write true or false")
            return hint + self.pause_note(field, name)
        if self.accepts(field, True):
            return self.pause_note(field, name)
        duration = _DURATION.match(value)
        if duration and name == "pauseDuration":
            ms = digits_value(duration.group(1)) * _DURATION_MS[duration.group(2)]
            if self.accepts(field, ms):
                return f"; pauseDuration is in milliseconds: write {ms}"
        if re.fullmatch("[0-9]+", stripped):
            number = digits_value(stripped)
            count = self.accepts(field, number)
            percent = self.accepts(field, stripped + "%")
            if count and percent:
                return (f"; write {number} without quotes for a node count, or "
                        f"'{stripped}%' for a percentage")
            if count and self.takes_percent(field):
                return f"; write {number} without quotes for a node count"
            if count:
                return f"; write {number} without quotes: {name or 'it'} is an integer"
            if percent:
                return f"; write '{stripped}%' for a percentage"
            return ""
        squeezed = value.replace(" ", "")
        if (squeezed != value and re.match(PERCENT_PATTERN, squeezed)
                and self.accepts(field, squeezed)):
            return f"; remove the spaces: '{squeezed}'"
        if re.match(PERCENT_PATTERN, squeezed.lstrip("-+")):
            if self.accepts(field, squeezed.lstrip("-+")):
                return "; a percentage cannot be negative" if value.startswith("-") else ""
            if self.accepts(field, "1%"):
                return ""  # its pattern's phrase says the range
            if self.accepts(field, 1):
                return f"; {name or 'it'} takes an integer, not a percentage"
        return ""

    def pause_note(self, field: Mapping[str, Any], name: str) -> str:
        if name == "pause" and self.accepts(field, True):
            return ("; pause: true stops starting new nodes, pause: false lets the rollout "
                    "go on (the vendor manual's pause/resume commands have them swapped)")
        return ""

    def enum_hint(self, schema: Mapping[str, Any], value: Any) -> str:
        options = [str(v) for v in schema.get("enum", [])]
        if isinstance(value, str):
            for option in options:
                if option.lower() == value.lower():
                    return f"; values are case-sensitive: write {_quote(option)}"
            close = difflib.get_close_matches(value, options, n=1)
            if close:
                return f"; did you mean {_quote(close[0])}?"
        if isinstance(value, bool) and "true" in [o.lower() for o in options]:
            return "; quote it"
        return ""

    def unknown_field_message(self, name: str, path: list[str | int], allowed: list[str]) -> str:
        where = f"in {field_label(path)}" if path else "at the top level"
        message = f"unknown field '{name}' {where}"
        if not path and name in ("driver", "upgradePolicy", "devicePlugin", "maca", "runtime"):
            nested = "spec.driver.upgradePolicy" if name == "upgradePolicy" else f"spec.{name}"
            return (message + f"; it belongs under spec: write it as {nested} (the vendor "
                    "manual's examples and patch paths leave out /spec)")
        if not path and name == "webhook" and "forge" in allowed:  # reconciler.yaml
            return (message + "; nothing reads it: the push webhook is set on the daemon "
                    "(--webhook-listen, and its secret in --webhook-secret-file, never in Git: "
                    "docs/configuration.md)")
        close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
        if not close:
            close = [a for a in allowed if a.lower() == name.lower()]
        if close:
            return message + f"; did you mean '{close[0]}'?"
        if allowed:
            return message + "; known fields: " + ", ".join(allowed)
        return message

    def unknown_crd_fields(
        self, schema: Mapping[str, Any], value: Any, pointer: str, path: tuple[str | int, ...] = ()
    ) -> Iterator[Finding]:
        """Report each key the CRD does not have (:meth:`unknown_crd_field`; one under a mapping
        with ``additionalProperties: false`` is an error the schema reports; ``status`` is not
        looked at) and each repeated key of a keyed list."""
        schema = self.resolve(schema)
        if path[:1] == ("status",):
            return
        if isinstance(value, dict):
            properties: Mapping[str, Any] = schema.get("properties", {})
            extra = schema.get("additionalProperties")
            silent = (extra is False or schema.get("type") != "object"
                      or schema.get("x-kubernetes-preserve-unknown-fields") is True)
            for name, child in value.items():
                child_pointer = join_pointer(pointer, name)
                if name in properties:
                    yield from self.unknown_crd_fields(
                        properties[name], child, child_pointer, (*path, name))
                elif isinstance(extra, Mapping):
                    yield from self.unknown_crd_fields(extra, child, child_pointer,
                                                          (*path, name))
                elif not silent:
                    yield self.unknown_crd_field(name, child_pointer, path, properties)
        elif isinstance(value, list) and "items" in schema:
            yield from self.list_duplicates(schema, value, pointer, path)
            for index, item in enumerate(value):
                yield from self.unknown_crd_fields(
                    schema["items"], item, join_pointer(pointer, index), (*path, index))

    def unknown_crd_field(self, name: str, pointer: str, path: tuple[str | int, ...],
                          properties: Mapping[str, Any]) -> Finding:
        """A key the vendor's CRD does not have. Under ``spec``: an error, as server-side apply
        (the reconciler's) refuses the whole object ("field not declared in schema"; a create
        would drop the key). In ``metadata``: a warning, as the reconciler applies only its
        name, labels and annotations."""
        message = self.unknown_field_message(name, list(path), list(properties))
        if path[:1] == ("spec",):
            return self.doc.finding(
                pointer, "unknown-field",
                message + "; the vendor's CRD has no such field: server-side apply, which the "
                "reconciler applies with, refuses the object (\"field not declared in "
                "schema\"; a create would drop it): remove it", key=True)
        return self.doc.finding(
            pointer, "unknown-field-pruned",
            message + "; it is not applied (the reconciler applies only metadata.name, labels "
            "and annotations; the API server drops it)", key=True, warning=True)

    def list_duplicates(self, schema: Mapping[str, Any], value: list[Any], pointer: str,
                        path: tuple[str | int, ...]) -> Iterator[Finding]:
        """A list the CRD keys (``x-kubernetes-list-type: map``, by its list-map-keys) or makes
        a set repeats an item: the API server refuses it (``Duplicate value``)."""
        kind = schema.get("x-kubernetes-list-type")
        if kind not in ("map", "set"):
            return
        keys: list[str] = list(schema.get("x-kubernetes-list-map-keys") or ())
        seen: dict[str, int] = {}
        for index, item in enumerate(value):
            if kind == "map":
                if not isinstance(item, dict):
                    continue
                identity = json.dumps([item.get(k) for k in keys])
                shown = ", ".join(f"{k} {json.dumps(item.get(k))}" for k in keys)
            else:
                identity = shown = json.dumps(item, sort_keys=True)
            if identity in seen:
                label = field_label((*path, index))
                by = f"keyed by {', '.join(keys)}" if kind == "map" else "a set"
                yield self.doc.finding(
                    join_pointer(pointer, index), "list-duplicate",
                    f"{label}: repeats {shown} of item {seen[identity]}; the vendor's CRD makes "
                    f"this list {by}, so the API server refuses a repeat: merge the two items",
                )
            else:
                seen[identity] = index
