"""The ClusterOperator CRD generated from schemas/clusteroperator.schema.json: the conversion
rules (pure) and what the real API server then accepts, rejects and preserves."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.kube.api import KubeApi, KubeError, resource_path
from reconciler.names import API_VERSION, PLURAL
from reconciler.sim.crd import (
    SchemaConversionError,
    cluster_operator_crd,
    load_schema,
    structural_schema,
)
from reconciler.sim.operator_install import install_crd

CO = resource_path(API_VERSION, PLURAL)


def _schemas(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every schema node: the root, property values, items, additionalProperties."""
    found = [(path, node)]
    for key, child in (node.get("properties") or {}).items():
        found.extend(_schemas(child, f"{path}/{key}"))
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            found.extend(_schemas(node[key], f"{path}/{key}"))
    return found


def test_generated_schema_is_structural() -> None:
    schema = structural_schema(load_schema())
    nodes = _schemas(schema)
    assert len(nodes) > 30
    for path, node in nodes:
        forbidden = {"$ref", "oneOf", "anyOf", "allOf", "const", "default", "$defs"}
        assert not forbidden & set(node), path
        assert ("type" in node or node.get("x-kubernetes-int-or-string")
                or node.get("x-kubernetes-preserve-unknown-fields")), path


def test_int_or_percent_and_pause_duration_conversions() -> None:
    spec = structural_schema(load_schema())["properties"]["spec"]
    policy = spec["properties"]["driver"]["properties"]["upgradePolicy"]["properties"]
    assert policy["maxParallel"]["x-kubernetes-int-or-string"] is True
    assert policy["maxParallel"]["minimum"] == 1
    assert policy["maxParallel"]["pattern"] == "^[0-9]+%$"
    assert policy["maxUnavailable"]["minimum"] == 0
    step = policy["upgradeSteps"]["items"]["properties"]
    assert step["pauseDuration"]["x-kubernetes-preserve-unknown-fields"] is True
    assert "type" not in step["pauseDuration"]
    assert spec["x-kubernetes-preserve-unknown-fields"] is True  # other sections are kept


def test_ref_siblings_nullable_const_and_exclusive_minimum() -> None:
    schema = {
        "$defs": {"Count": {"type": "integer", "minimum": 0}},
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {
            "count": {"$ref": "#/$defs/Count", "description": "how many"},
            "name": {"type": ["string", "null"]},
            "mode": {"const": "fixed", "type": "string"},
            "ratio": {"type": "number", "exclusiveMinimum": 0},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        }, "additionalProperties": False}},
    }
    spec = structural_schema(schema)["properties"]["spec"]
    props = spec["properties"]
    assert props["count"] == {"type": "integer", "minimum": 0, "description": "how many"}
    assert props["name"] == {"type": "string", "nullable": True}
    assert props["mode"] == {"type": "string", "enum": ["fixed"]}
    assert props["ratio"] == {"type": "number", "minimum": 0, "exclusiveMinimum": True}
    assert props["labels"] == {"type": "object", "additionalProperties": {"type": "string"}}
    assert "additionalProperties" not in spec


def test_bad_references_are_reported() -> None:
    with pytest.raises(SchemaConversionError, match="names no definition"):
        structural_schema({"type": "object", "properties": {"spec": {"$ref": "#/$defs/Nope"}}})
    recursive = {"$defs": {"A": {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}}},
                 "properties": {"spec": {"$ref": "#/$defs/A"}}}
    with pytest.raises(SchemaConversionError, match="recursive"):
        structural_schema(recursive)


def test_crd_shape() -> None:
    crd = cluster_operator_crd()
    assert crd["metadata"]["name"] == "clusteroperators.gpu.metax-tech.com"
    assert crd["spec"]["scope"] == "Cluster"
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert status == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def _co(name: str, policy: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "ClusterOperator", "metadata": {"name": name},
            "spec": {"driver": {"payload": {"name": "driver-image", "version": "2.31.0.6"},
                                "upgradePolicy": policy}, **spec}}


@pytest.mark.cluster
def test_api_server_enforces_and_preserves(kube: KubeApi) -> None:
    install_crd(kube)
    good = _co("crd-good", {"enableRollout": True, "maxParallel": "25%", "maxUnavailable": 0,
                            "upgradeSteps": [{"replicas": 1, "pauseDuration": {}},
                                             {"replicas": "100%", "pauseDuration": 60000}],
                            "surprise": 1},
               devicePlugin={"image": {"name": "device-plugin"}, "anything": [1, 2]})
    stored = kube.create(CO, good)
    policy = stored["spec"]["driver"]["upgradePolicy"]
    assert policy["upgradeSteps"][0]["pauseDuration"] == {}
    assert policy["upgradeSteps"][1]["pauseDuration"] == 60000
    assert "surprise" not in policy  # pruned; `reconciler validate` reports it as an error
    assert stored["spec"]["devicePlugin"] == {"image": {"name": "device-plugin"},
                                              "anything": [1, 2]}
    kube.delete(f"{CO}/crd-good")

    for name, policy in (
        ("crd-zero-parallel", {"maxParallel": 0}),
        ("crd-spaced-percent", {"maxParallel": "50 %"}),
        ("crd-string-bool", {"enableRollout": "false"}),
        ("crd-bad-fallback", {"fallback": "retry"}),
    ):
        with pytest.raises(KubeError) as refused:
            kube.create(CO, _co(name, policy))
        assert refused.value.status == 422, name
