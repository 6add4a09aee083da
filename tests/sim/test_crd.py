"""The ClusterOperator CRD generated from schemas/clusteroperator.schema.json: the conversion
rules (pure) and what the real API server then accepts, rejects and preserves."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.kube.api import KubeApi, KubeError, resource_path
from reconciler.names import API_VERSION, PLURAL
from reconciler.sim.crd import (
    CEL_MINOR,
    SchemaConversionError,
    cluster_operator_crd,
    load_schema,
    structural_schema,
)
from reconciler.sim.operator_install import install_crd, release_minor, server_version

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
        forbidden = {"$ref", "oneOf", "anyOf", "allOf", "const", "$defs"}
        assert not forbidden & set(node), path
        assert ("type" in node or node.get("x-kubernetes-int-or-string")
                or node.get("x-kubernetes-preserve-unknown-fields")), path


# docs/policy.md#how-the-numbers-resolve's defaults, the values a real install carries
# (docs/policy.md#the-fields); upgradeSteps has none.
SPEC_DEFAULTS = {"enableRollout": False, "pause": False, "maxParallel": "100%",
                 "maxUnavailable": "0%", "maxFailureThreshold": 5, "fallback": "pause"}


def test_upgrade_policy_defaults_are_spec_3s_and_nothing_else_has_one() -> None:
    schema = structural_schema(load_schema())
    policy = schema["properties"]["spec"]["properties"]["driver"]["properties"]["upgradePolicy"]
    defaults = {k: v["default"] for k, v in policy["properties"].items() if "default" in v}
    assert defaults == SPEC_DEFAULTS
    others = [path for path, node in _schemas(schema) if "default" in node
              and not path.startswith("/spec/driver/upgradePolicy/")]
    assert others == []


def test_cel_rules_sit_where_spec_3_puts_them_and_can_be_left_out() -> None:
    def rules(schema: dict[str, Any]) -> dict[str, list[str]]:
        return {path: [r["rule"] for r in node["x-kubernetes-validations"]]
                for path, node in _schemas(schema) if "x-kubernetes-validations" in node}
    placed = rules(structural_schema(load_schema()))
    base = "/spec/driver/upgradePolicy"
    assert sorted(placed) == [base, f"{base}/maxParallel", f"{base}/maxUnavailable",
                              f"{base}/upgradeSteps"]
    assert "has(self.upgradeSteps)" in placed[base][0]
    assert rules(structural_schema(load_schema(), cel_rules=False)) == {}
    # A schema without those places (another JSON Schema) gets none.
    assert rules(structural_schema({"type": "object", "properties": {"spec": {
        "type": "object", "properties": {"driver": {"type": "object"}}}}})) == {}


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
@pytest.mark.compat
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


def _refused(kube: KubeApi, name: str, policy: dict[str, Any]) -> str | None:
    """The API server's message when it refuses the object, else None (the object is removed)."""
    try:
        kube.create(CO, _co(name, policy))
    except KubeError as exc:
        assert exc.status == 422, exc
        return str(exc)
    kube.delete(f"{CO}/{name}")
    return None


@pytest.mark.cluster
@pytest.mark.compat
def test_api_server_fills_in_spec_3s_defaults_and_keeps_what_is_written(kube: KubeApi) -> None:
    install_crd(kube)
    stored = kube.create(CO, _co("crd-defaults", {}))
    assert stored["spec"]["driver"]["upgradePolicy"] == SPEC_DEFAULTS
    written = {"enableRollout": True, "pause": True, "maxParallel": 3, "maxUnavailable": "10%",
               "maxFailureThreshold": 2, "fallback": "rollback",
               "upgradeSteps": [{"replicas": "100%", "pauseDuration": 0}]}
    kept = kube.create(CO, _co("crd-written", written))
    assert kept["spec"]["driver"]["upgradePolicy"] == written
    # A section the policy leaves out gets no defaults: there is no upgradePolicy to fill.
    bare = _co("crd-no-policy", {})
    del bare["spec"]["driver"]["upgradePolicy"]
    assert "upgradePolicy" not in kube.create(CO, bare)["spec"]["driver"]
    for name in ("crd-defaults", "crd-written", "crd-no-policy"):
        kube.delete(f"{CO}/{name}")


@pytest.mark.cluster
@pytest.mark.compat
def test_api_server_refuses_what_the_cel_rules_express_from_1_25_on(kube: KubeApi) -> None:
    install_crd(kube)
    enforced = release_minor(server_version(kube)) >= CEL_MINOR
    steps = [{"replicas": 1, "pauseDuration": 0}]
    refusals = {
        "crd-cel-no-steps": ({"enableRollout": True},
                             "spec.driver.upgradePolicy.upgradeSteps: Required value: "
                             "enableRollout is true but upgradeSteps is missing"),
        "crd-cel-last-count": ({"upgradeSteps": steps},
                               "the last step must be '100%'"),
        "crd-cel-last-half": ({"upgradeSteps": [{"replicas": "50%", "pauseDuration": 0}]},
                              "the last step must be '100%'"),
        "crd-cel-parallel-0": ({"maxParallel": "0%"},
                               "expected a percentage from 1% to 100%"),
        "crd-cel-parallel-101": ({"maxParallel": "101%"},
                                 "expected a percentage from 1% to 100%"),
        "crd-cel-unavailable-200": ({"maxUnavailable": "200%"},
                                    "expected a percentage from 0% to 100%"),
    }
    for name, (policy, message) in refusals.items():
        refused = _refused(kube, name, policy)
        if enforced:
            assert refused is not None and message in refused, (name, refused)
        else:  # 1.20: the rules are left out; the admission webhook answers them
            assert refused is None, (name, refused)
    # What the reconciler's validation accepts, the rules accept too (leading zeros included).
    for name, policy in (
        ("crd-cel-ok", {"enableRollout": True, "maxParallel": "0100%", "maxUnavailable": "000%",
                        "upgradeSteps": [*steps, {"replicas": "0100%", "pauseDuration": {}}]}),
        ("crd-cel-off", {"enableRollout": False, "maxParallel": 1, "maxUnavailable": "100%"}),
    ):
        assert _refused(kube, name, policy) is None, name
