"""Integers are Kubernetes integers (docs/policy.md#the-fields): validation accepts exactly the
signed 64-bit range for every integer the schemas type, and rejects anything outside it at that
value, once."""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from ruamel.yaml import YAML

from reconciler.config.document import load
from reconciler.config.settings import SettingsRefused, resolve
from reconciler.config.sync import read_sync_settings
from reconciler.errors import RepoConfigError
from reconciler.policy.document import INT64_MAX, INT64_MIN, parse_document
from reconciler.policy.findings import Finding, join_pointer
from reconciler.policy.schema import inline_refs, load_schema
from reconciler.policy.validation import DocumentKind, validate_document
from tests.policy.texts import EXAMPLES, SEED_10, replace_line

Path_ = tuple[str | int, ...]


def integer_paths(schema: Any, path: Path_ = ()) -> Iterator[tuple[Path_, Mapping[str, Any]]]:
    """Every place a schema types as an integer (list items at index 0, open maps at key 'x')."""
    if not isinstance(schema, Mapping):
        return
    types = schema.get("type")
    if types == "integer" or (isinstance(types, list) and "integer" in types):
        yield path, schema
    for branch in schema.get("oneOf", []) + schema.get("anyOf", []):
        yield from integer_paths(branch, path)
    for name, child in schema.get("properties", {}).items():
        yield from integer_paths(child, (*path, name))
    if isinstance(schema.get("items"), Mapping):
        yield from integer_paths(schema["items"], (*path, 0))
    if isinstance(schema.get("additionalProperties"), Mapping):
        yield from integer_paths(schema["additionalProperties"], (*path, "x"))


def base_document(kind: DocumentKind) -> Any:
    if kind == "clusteroperator":
        return parse_document(SEED_10, "f.yaml").obj
    if kind == "status-snapshot":
        return parse_document((EXAMPLES / "status" / "lab-10.yaml").read_text(), "f.yaml").obj
    return {}


def with_value(obj: Any, path: Path_, value: int) -> Any:
    """``obj`` with ``value`` at ``path``, creating the containers on the way."""
    node = obj
    for index, token in enumerate(path):
        if index == len(path) - 1:
            node[token] = value
            break
        want: type = list if isinstance(path[index + 1], int) else dict
        if isinstance(node, list):
            assert isinstance(token, int)
            while len(node) <= token:
                node.append(want())
        elif not isinstance(node.get(token), want):
            node[token] = want()
        if not isinstance(node[token], want):
            node[token] = want()
        node = node[token]
    return obj


def dump(obj: Any) -> str:
    yaml = YAML(typ="safe")
    yaml.default_flow_style = False
    out = io.StringIO()
    yaml.dump(obj, out)
    return out.getvalue()


def where(text: str, written: str) -> tuple[int, int]:
    (index,) = [i for i in range(len(text)) if text.startswith(written, i)
                and not text[i + len(written): i + len(written) + 1].isdigit()]
    before = text[:index]
    return before.count("\n") + 1, index - (before.rfind("\n") + 1) + 1


def schema_integers() -> list[tuple[DocumentKind, Path_, Mapping[str, Any]]]:
    found: dict[tuple[DocumentKind, Path_], Mapping[str, Any]] = {}
    kinds: tuple[DocumentKind, ...] = ("clusteroperator", "repo-config", "status-snapshot")
    for kind in kinds:
        schema = load_schema(kind)
        for path, node in integer_paths(inline_refs(schema, schema.get("$defs", {}))):
            found.setdefault((kind, path), node)
    return [(kind, path, node) for (kind, path), node in found.items()]


FIELDS = schema_integers()


def pointer_of(path: Path_) -> str:
    pointer = ""
    for token in path:
        pointer = join_pointer(pointer, token)
    return pointer


def test_the_walk_finds_the_policy_integers() -> None:
    found = {pointer_of(p) for k, p, _ in FIELDS if k == "clusteroperator"}
    policy = "/spec/driver/upgradePolicy"
    assert {f"{policy}/maxParallel", f"{policy}/maxUnavailable", f"{policy}/maxFailureThreshold",
            f"{policy}/upgradeSteps/0/replicas", f"{policy}/upgradeSteps/0/pauseDuration",
            "/metadata/generation", "/spec/dataExporter/service/port",
            "/spec/topoDiscovery/dragonfly/nodeNumber"} <= found
    assert ("repo-config", ("firmware", "reboot", "maxConcurrent")) in {
        (k, p) for k, p, _ in FIELDS}
    assert len({k for k, _, _ in FIELDS}) == 3


def findings_at(kind: DocumentKind, path: Path_, value: int) -> tuple[str, list[Finding]]:
    text = dump(with_value(base_document(kind), path, value))
    result = validate_document(text, "f.yaml", kind=kind)
    # errors only: metadata.generation also gets its server-populated-field warning
    return text, [f for f in result.errors if f.pointer == pointer_of(path)]


@pytest.mark.parametrize("value", [INT64_MAX + 1, INT64_MIN - 1, 2**64, -(10**40)])
@pytest.mark.parametrize(("kind", "path", "schema"), FIELDS,
                         ids=[f"{k}:{pointer_of(p)}" for k, p, _ in FIELDS])
def test_every_schema_integer_outside_int64_is_an_error_at_the_value_once(
    kind: DocumentKind, path: Path_, schema: Mapping[str, Any], value: int
) -> None:
    text, found = findings_at(kind, path, value)
    line, column = where(text, str(value))
    assert [(f.rule, f.severity, f.line, f.column) for f in found] == [
        ("integer-range", "error", line, column)], found
    assert str(value) in found[0].message and "signed 64-bit" in found[0].message


@pytest.mark.parametrize(("kind", "path", "schema"), FIELDS,
                         ids=[f"{k}:{pointer_of(p)}" for k, p, _ in FIELDS])
def test_every_schema_integer_accepts_the_int64_bounds_its_field_allows(
    kind: DocumentKind, path: Path_, schema: Mapping[str, Any]
) -> None:
    for value in (INT64_MAX, INT64_MIN):
        _, found = findings_at(kind, path, value)
        assert all(f.rule != "integer-range" for f in found), found
        # a field's own range (the CRD's int32, our minimums) decides inside int64; status is
        # never applied, so not checked (docs/validation.md#the-layers)
        if kind == "clusteroperator" and path[0] == "status":
            assert found == [], found
        elif value < schema.get("minimum", INT64_MIN):
            assert [f.rule for f in found] == ["schema-minimum"], found
        elif value > schema.get("maximum", INT64_MAX):
            assert [f.rule for f in found] == ["schema-maximum"], found
        else:
            assert found == [], found


def test_pause_duration_of_two_to_the_62_ms_is_valid() -> None:
    text = replace_line(SEED_10, 17, "          pauseDuration: 4611686018427387904")
    assert validate_document(text, "f.yaml").errors == []


@pytest.mark.parametrize(("written", "column"), [
    ("0x8000000000000000", 28), ("-0x8000000000000001", 28), ("0o1000000000000000000000", 28),
    ("+9223372036854775808", 28), ("00000000000000000000009223372036854775808", 28),
])
def test_integers_outside_int64_in_any_notation_are_errors(written: str, column: int) -> None:
    text = replace_line(SEED_10, 25, f"      maxFailureThreshold: {written}")
    result = validate_document(text, "f.yaml")
    assert [(f.rule, f.line, f.column) for f in result.errors + result.warnings] == [
        ("integer-range", 25, column)]


def test_leading_zeros_do_not_push_an_int64_out_of_range() -> None:
    text = replace_line(SEED_10, 17, "          pauseDuration: 0009223372036854775807")
    assert validate_document(text, "f.yaml").errors == []


def test_a_float_beyond_double_range_is_one_non_finite_error() -> None:
    text = replace_line(SEED_10, 25, "      maxFailureThreshold: 1e400")
    result = validate_document(text, "f.yaml")
    assert [(f.rule, f.line, f.column) for f in result.errors + result.warnings] == [
        ("non-finite-number", 25, 28)]


def test_an_out_of_range_replicas_starts_no_step_order_errors() -> None:
    text = replace_line(SEED_10, 14, "        - replicas: 99999999999999999999")
    result = validate_document(text, "f.yaml")
    assert [(f.rule, f.line) for f in result.errors + result.warnings] == [("integer-range", 14)]


def test_repo_config_for_the_git_side_refuses_a_huge_integer_at_its_place_not_traceback() -> None:
    # the Git side parses with the policy files' parser, so the refusal is located
    with pytest.raises(RepoConfigError, match=r"reconciler\.yaml:2:18: integer .*signed 64-bit"):
        read_sync_settings("sync:\n  fetchInterval: " + "9" * 5000 + "\n")
    with pytest.raises(RepoConfigError, match=r"reconciler\.yaml:2:18: 1e400 is not a finite"):
        read_sync_settings("sync:\n  fetchInterval: 1e400\n")
    # and so does the whole file, resolved for a cluster
    with pytest.raises(SettingsRefused, match=r"reconciler\.yaml:2:18: 1e400 is not a finite"):
        resolve(load("sync:\n  fetchInterval: 1e400\n"), "prod", source="test")


@pytest.mark.parametrize(("written", "needs"), [
    ("!!int abc", "an integer"), ('!!int ""', "an integer"), ("!!int 0x", "an integer"),
    ("!!int 0b2", "an integer"), ('!!int "0x -5"', "an integer"), ("!!int 3.5", "an integer"),
    ("!!float abc", "a number"), ("!!bool maybe", "a boolean"), ("!!null x", "null"),
])
def test_an_explicit_core_tag_on_text_it_does_not_fit_is_an_error_not_a_traceback(
    written: str, needs: str
) -> None:
    text = replace_line(SEED_10, 25, f"      maxFailureThreshold: {written}")
    result = validate_document(text, "f.yaml")
    (mismatch,) = [f for f in result.errors if f.rule == "tag-value"]
    assert (mismatch.line, mismatch.column) == (25, 28)
    assert f"needs {needs}" in mismatch.message


def test_an_explicit_core_tag_on_fitting_text_is_the_value() -> None:
    for written, value in (('!!int "3"', 3), ("!!int 0x10", 16), ("!!float 3", 3.0)):
        text = replace_line(SEED_10, 25, f"      maxFailureThreshold: {written}")
        result = validate_document(text, "f.yaml")
        assert result.obj["spec"]["driver"]["upgradePolicy"]["maxFailureThreshold"] == value
        assert all(f.rule != "tag-value" for f in result.findings)
