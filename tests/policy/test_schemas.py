"""The JSON Schemas: valid 2020-12, usable by editors from the examples, convertible to a CRD."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from reconciler.config.document import load
from reconciler.config.settings import ClusterSettings, resolve
from reconciler.config.sync import SyncSettings
from reconciler.config.validation import validate_repo_config
from reconciler.durations import parse_duration
from reconciler.policy.schema import SCHEMA_FILES, ecma_pattern, load_schema
from reconciler.policy.validation import validate_document, validate_status_snapshot
from tests.policy.texts import EXAMPLES, REPO

# The keywords of the vendor's CRD as JSON Schema (reconciler/policy/crd_schema.py: anyOf as
# oneOf, int32/int64 as minimum/maximum) and of our stricter rules (allOf: a second pattern).
CRD_KEYWORDS = {
    "$schema", "$id", "$ref", "$defs", "title", "description", "type", "properties",
    "additionalProperties", "required", "items", "enum", "minimum", "maximum", "minLength",
    "maxLength", "pattern", "minItems", "oneOf", "allOf", "default", "format",
    "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string",
    "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type",
}


@pytest.mark.parametrize("kind", sorted(SCHEMA_FILES))
def test_schema_is_valid_2020_12(kind: str) -> None:
    schema = load_schema(kind)
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert (REPO / "schemas" / SCHEMA_FILES[kind]).is_file()


def keywords(node: Any, under_properties: bool = False) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if not under_properties:
                found.add(key)
            found |= keywords(value, under_properties=key in ("properties", "$defs")
                              and not under_properties)
    elif isinstance(node, list):
        for item in node:
            found |= keywords(item)
    return found


def test_cluster_operator_schema_uses_the_crds_keywords_and_ours() -> None:
    assert keywords(load_schema("clusteroperator")) <= CRD_KEYWORDS


def test_upgrade_policy_is_strict_and_other_sections_follow_the_vendors_crd() -> None:
    spec = load_schema("clusteroperator")["properties"]["spec"]
    policy = spec["properties"]["driver"]["properties"]["upgradePolicy"]
    assert policy["additionalProperties"] is False
    assert policy["properties"]["upgradeSteps"]["items"]["additionalProperties"] is False
    # as the CRD says: no section keeps unknown fields (the API server drops them)
    for name, section in spec["properties"].items():
        assert "x-kubernetes-preserve-unknown-fields" not in section, name
        assert "additionalProperties" not in section, name


def test_examples_point_editors_at_the_schemas() -> None:
    files = sorted(EXAMPLES.rglob("*.yaml"))
    assert len(files) >= 7
    for file in files:
        first = file.read_text().splitlines()[0]
        match = re.fullmatch(r"# yaml-language-server: \$schema=(\S+)", first)
        assert match, file
        assert (file.parent / match.group(1)).resolve().is_file(), file


def test_example_config_and_snapshots_are_valid() -> None:
    config = validate_repo_config((EXAMPLES / "reconciler.yaml").read_bytes(), "reconciler.yaml")
    assert config.ok, config.findings
    parsed = SyncSettings.from_obj(config.obj)
    assert (parsed.clusters_dir, parsed.status_path, parsed.status_branch) == (
        "clusters", "status", None)
    assert parsed.status_file("lab-10") == "status/lab-10.yaml"
    for snapshot in sorted((EXAMPLES / "status").glob("*.yaml")):
        result = validate_status_snapshot(snapshot.read_bytes(), snapshot.name)
        assert result.ok, result.findings


def test_empty_config_means_defaults() -> None:
    result = validate_repo_config(b"# nothing configured\n", "reconciler.yaml")
    assert result.ok and SyncSettings.from_obj(result.obj) == SyncSettings()
    assert resolve(load(b"# nothing configured\n"), "lab-10", source="c") == ClusterSettings()


@pytest.mark.parametrize(("text", "rule", "line"), [
    ("clustersDir: ''\n", "schema-min-length", 1),
    ("status: {path: status, brnch: x}\n", "unknown-field", 1),
    ("rollout:\n  readyTimeout: 10 minutes\n", "schema-pattern", 2),
    ("firmware:\n  reboot: {mode: auto}\n", "schema-enum", 2),
    ("firmware:\n  reboot: {mode: hook, maxConcurrent: 0}\n", "schema-minimum", 2),
    ("signatures: {mode: pgp}\n", "schema-enum", 1),
    ("signatures: {mod: gpg}\n", "unknown-field", 1),  # a typo would leave verification off
    ("webhook: {secret: x}\n", "unknown-field", 1),  # nothing reads it; no secret in Git
])
def test_invalid_repo_config(text: str, rule: str, line: int) -> None:
    result = validate_repo_config(text, "reconciler.yaml")
    assert [(f.rule, f.line) for f in result.errors] == [(rule, line)]


def test_durations() -> None:
    assert parse_duration("1h30m") == 5400 and parse_duration("250ms") == 0.25
    with pytest.raises(ValueError, match="expected a duration"):
        parse_duration("5 min")


def test_snapshot_rejection_findings_use_the_json_keys() -> None:
    finding = {"file": "clusters/a/x.yaml", "line": 3, "column": 5, "pointer": "/spec",
               "rule": "schema-type", "severity": "error", "message": "m"}
    text = json.dumps({"cluster": "a", "observedAt": "2026-11-30T02:00:00Z",
                       "upgradeStatus": {"phase": "Idling"},
                       "rejection": {"commit": "abc", "findings": [finding]}})
    assert validate_status_snapshot(text, "s.yaml").ok
    finding["severity"] = "fatal"
    bad = validate_status_snapshot(json.dumps(json.loads(text) | {"rejection": {
        "commit": "abc", "findings": [finding]}}), "s.yaml")
    assert [f.rule for f in bad.errors] == ["schema-enum"]


def test_schema_files_are_formatted_json() -> None:
    for name in SCHEMA_FILES.values():
        text = (REPO / "schemas" / name).read_text()
        assert text.endswith("\n") and json.loads(text)


def test_schemas_dir_is_found() -> None:
    from reconciler.policy.schema import schemas_dir

    assert Path(schemas_dir(), SCHEMA_FILES["clusteroperator"]).is_file()


@pytest.mark.parametrize("version", ["2.33.0.9\n", "2.33.0.9\r", "2.33.0.9 "])
def test_a_pattern_ends_at_the_end_of_the_text_as_the_api_server_reads_it(version: str) -> None:
    """Python's ``$`` matches before a final newline; ECMA-262's and RE2's (the API server's)
    do not: an image tag with a newline is refused here as the cluster would refuse it."""
    text = ("apiVersion: gpu.metax-tech.com/v1alpha1\nkind: ClusterOperator\n"
            "metadata: {name: cluster-operator}\nspec:\n  driver:\n    payload: "
            f"{{registry: reg.local/metax, name: driver-image, version: {json.dumps(version)}}}\n")
    result = validate_document(text.encode(), "policy.yaml")
    assert [(f.rule, f.line) for f in result.errors] == [("schema-pattern", 6)]
    assert ecma_pattern("^a$").search("a") and not ecma_pattern("^a$").search("a\n")
    assert ecma_pattern("^[$]$").search("$")  # a '$' in a class stays a character
    assert ecma_pattern(r"^\$$").search("$") and not ecma_pattern(r"^\$$").search("$\n")
