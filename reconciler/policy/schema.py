"""The schema layer: JSON Schema 2020-12 validation, each error mapped back to its line.

The schemas in ``schemas/`` are the single source: editors use them directly, the CRD's
structural schema is generated from ``clusteroperator.schema.json``, and this module turns each
jsonschema error into a finding that says what was expected and what was found, with a hint for
the known mistakes (quoted booleans, YAML 1.1 booleans, bare numbers where a percentage is meant).
"""

from __future__ import annotations

import difflib
import json
import re
import sysconfig
from collections.abc import Iterator, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, ValidationError
from jsonschema.validators import extend

from reconciler.policy.document import ParsedDocument
from reconciler.policy.findings import Finding, join_pointer

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
}
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


_StrictValidator = extend(
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine_many(
        {"integer": _is_integer, "number": _is_number}
    ),
)


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


def schema_findings(doc: ParsedDocument, kind: str) -> list[Finding]:
    """Every schema error of ``doc.obj`` against the schema ``kind``, located in the file."""
    mapper = _ErrorMapper(doc, load_schema(kind))
    findings: list[Finding] = []
    for error in validator(kind).iter_errors(doc.obj):
        findings.extend(mapper.map(error))
    findings.extend(mapper.preserved_unknown_fields(load_schema(kind), doc.obj, ""))
    return findings


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
        keys = ", ".join(_quote(k) for k in list(value)[:3])
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


class _ErrorMapper:
    def __init__(self, doc: ParsedDocument, root_schema: Mapping[str, Any]) -> None:
        self.doc = doc
        self.defs: Mapping[str, Any] = root_schema.get("$defs", {})

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
        kind = schema.get("type")
        if isinstance(kind, list):
            return " or ".join(_TYPE_NAMES.get(str(k), str(k)) for k in kind)
        if kind == "integer" and "minimum" in schema:
            return f"an integer >= {schema['minimum']}"
        if kind == "string" and schema.get("pattern") in _PATTERN_PHRASES:
            return _PATTERN_PHRASES[schema["pattern"]]
        if kind == "object" and schema.get("maxProperties") == 0:
            return "{} (an empty mapping)"
        if isinstance(kind, str):
            return _TYPE_NAMES.get(kind, kind)
        return "a valid value"

    # -- mapping ----------------------------------------------------------------------------
    def map(self, error: ValidationError) -> Iterator[Finding]:
        path = list(error.absolute_path)
        pointer = "".join(join_pointer("", token) for token in path)
        label = field_label(path)
        value = error.instance
        schema: Mapping[str, Any] = error.schema if isinstance(error.schema, Mapping) else {}
        kind = error.validator

        if kind == "additionalProperties":
            allowed = list(schema.get("properties", {}))
            for name in value if isinstance(value, dict) else ():
                if name in allowed:
                    continue
                yield self.doc.finding(
                    join_pointer(pointer, name), "unknown-field",
                    self.unknown_field_message(name, path, allowed), key=True,
                )
            return
        if kind == "required":
            for name in error.validator_value:
                if isinstance(value, dict) and name not in value:
                    where = f"in {label}" if path else "at the top level"
                    yield self.doc.finding(
                        join_pointer(pointer, name), "required-field",
                        f"missing required field '{name}' {where}", key=True,
                    )
            return
        if kind == "oneOf":
            yield from self.map_one_of(error, path, pointer, label)
            return
        yield self.simple(kind, schema, value, path, pointer, label, self.expected(schema))

    def simple(
        self, kind: str, schema: Mapping[str, Any], value: Any, path: list[str | int],
        pointer: str, label: str, expected: str,
    ) -> Finding:
        got = describe_value(value)
        rule = "schema-" + re.sub(r"(?<!^)(?=[A-Z])", "-", kind).lower()
        message = f"{label}: expected {expected}, got {got}"
        if kind == "type":
            message += self.type_hint(schema, value, path)
        elif kind == "enum":
            rule = "schema-enum"
            message += self.enum_hint(schema, value)
        elif kind == "pattern":
            if schema.get("pattern") == PERCENT_PATTERN:
                rule = "percent-format"
                message += self.percent_hint(value)
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

    def map_one_of(
        self, error: ValidationError, path: list[str | int], pointer: str, label: str
    ) -> Iterator[Finding]:
        schema = self.resolve(error.schema)
        expected = self.expected(schema)
        value = error.instance
        # The branch whose type matches says what is wrong (e.g. below its minimum).
        for index, branch in enumerate(schema.get("oneOf", [])):
            branch = self.resolve(branch)
            if not _StrictValidator(branch).is_type(value, branch.get("type", "")):
                continue
            sub = [e for e in error.context or () if e.relative_schema_path
                   and e.relative_schema_path[0] == index]
            for sub_error in sub:
                if sub_error.absolute_path != error.absolute_path:
                    yield from self.map(sub_error)
                    continue
                sub_schema = sub_error.schema if isinstance(sub_error.schema, Mapping) else {}
                yield self.simple(str(sub_error.validator), sub_schema, value, path, pointer,
                                  label, expected)
            return
        message = f"{label}: expected {expected}, got {describe_value(value)}"
        message += self.type_hint(schema, value, path)
        yield self.doc.finding(pointer, "schema-type", message)

    # -- hints -----------------------------------------------------------------------------
    def type_hint(self, schema: Mapping[str, Any], value: Any, path: list[str | int]) -> str:
        types = {self.resolve(b).get("type") for b in schema.get("oneOf", [])}
        types.add(schema.get("type"))
        name = path[-1] if path else ""
        hint = ""
        if "boolean" in types and isinstance(value, str):
            if value.lower() in ("true", "false"):
                hint = (f"; remove the quotes: {_quote(value)} is a string, {value.lower()} is a "
                        "boolean (the vendor manual's patch commands quote it by mistake)")
            elif value.lower() in _YAML11_BOOLEANS:
                hint = (f"; policy files are YAML 1.2, where {value} is a string, not a boolean: "
                        "write true or false")
            if name == "pause":
                hint += ("; pause: true stops starting new nodes, pause: false lets the rollout "
                         "go on (the vendor manual's pause/resume commands have them swapped)")
        elif value is None:
            hint = "; the value is empty: give one or remove the key"
        elif "string" in types and isinstance(value, bool):
            hint = f"; quote it to make it a string: '{str(value).lower()}'"
        elif "string" in types and isinstance(value, int | float):
            hint = f"; quote it to make it a string: '{value}'"
        elif "integer" in types and isinstance(value, str):
            match = _DURATION.match(value)
            if name == "pauseDuration" and match:
                ms = int(match.group(1)) * _DURATION_MS[match.group(2)]
                hint = f"; pauseDuration is in milliseconds: write {ms}"
            elif value.strip().isdigit():
                hint = (f"; write {value.strip()} without quotes for a node count, or "
                        f"'{value.strip()}%' for a percentage")
        elif "integer" in types and isinstance(value, float) and value.is_integer():
            hint = f"; write {int(value)} without a decimal point"
        return hint

    def percent_hint(self, value: Any) -> str:
        if not isinstance(value, str):
            return ""
        stripped = value.replace(" ", "")
        if stripped != value and re.match(PERCENT_PATTERN, stripped):
            return f"; remove the spaces: '{stripped}'"
        if value.strip().isdigit():
            return (f"; write {value.strip()} without quotes for a node count, or "
                    f"'{value.strip()}%' for a percentage")
        if value.startswith("-"):
            return "; a percentage cannot be negative"
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
        close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
        if not close:
            close = [a for a in allowed if a.lower() == name.lower()]
        if close:
            return message + f"; did you mean '{close[0]}'?"
        if allowed:
            return message + "; known fields: " + ", ".join(allowed)
        return message

    def preserved_unknown_fields(
        self, schema: Mapping[str, Any], value: Any, pointer: str, path: tuple[str | int, ...] = ()
    ) -> Iterator[Finding]:
        """Warn about keys a section keeps without knowing them: kept and applied, but probably
        a typo (sections with x-kubernetes-preserve-unknown-fields and listed properties)."""
        schema = self.resolve(schema)
        if isinstance(value, dict):
            properties: Mapping[str, Any] = schema.get("properties", {})
            preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
            for name, child in value.items():
                child_pointer = join_pointer(pointer, name)
                if name in properties:
                    yield from self.preserved_unknown_fields(
                        properties[name], child, child_pointer, (*path, name))
                elif preserve and properties:
                    message = self.unknown_field_message(name, list(path), list(properties))
                    yield self.doc.finding(
                        child_pointer, "unknown-field-preserved",
                        message + "; it is kept and applied as written", key=True, warning=True,
                    )
        elif isinstance(value, list) and "items" in schema:
            for index, item in enumerate(value):
                yield from self.preserved_unknown_fields(
                    schema["items"], item, join_pointer(pointer, index), (*path, index))
