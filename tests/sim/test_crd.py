"""The ClusterOperator CRD: the vendor's, with our additions
(docs/dev-cluster.md#the-clusteroperator-crd), and what a real API server then accepts, refuses,
prunes and defaults: the same values validation accepts and refuses
(tests/policy/vendor_cases.py)."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from reconciler.data import (
    rendered_cluster_operator,
    stored_cluster_operator,
    vendor_openapi_schema,
)
from reconciler.fieldpath import MISSING, resolve
from reconciler.kube.api import KubeApi, KubeError, resource_path
from reconciler.names import API_VERSION, PLURAL
from reconciler.policy.validation import validate_document
from reconciler.sim.crd import CEL_MINOR, CEL_RULES, PRINTER_COLUMNS, cluster_operator_crd
from reconciler.sim.operator_install import install_crd, release_minor, server_version
from reconciler.sync.desired import apply_body
from tests.policy.test_vendor_crd import SSA_REFUSED_NULLS
from tests.policy.vendor_cases import CASES, Refused, as_stored, as_yaml, set_at

CO = resource_path(API_VERSION, PLURAL)
P = "/spec/driver/upgradePolicy"


def test_crd_shape() -> None:
    crd = cluster_operator_crd()
    assert crd["metadata"]["name"] == "clusteroperators.gpu.metax-tech.com"
    assert crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["names"]["shortNames"] == ["co"]
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    assert version["additionalPrinterColumns"] == PRINTER_COLUMNS
    schema = version["schema"]["openAPIV3Schema"]
    # the vendor's status, exactly: conditions, CurrentUpgradeReadyReplicas, strings
    assert schema["properties"]["status"] == vendor_openapi_schema()["properties"]["status"]
    upgrade = schema["properties"]["status"]["properties"]["upgradeStatus"]["properties"]
    assert "conditions" in upgrade and upgrade["lastCoDriverSpec"]["type"] == "string"
    assert "CurrentUpgradeReadyReplicas" in upgrade["status"]["required"]


def _rules(crd: dict[str, Any]) -> dict[str, list[dict[str, str]]]:
    found: dict[str, list[dict[str, str]]] = {}

    def walk(node: dict[str, Any], path: str) -> None:
        if "x-kubernetes-validations" in node:
            found[path] = node["x-kubernetes-validations"]
        for name, child in (node.get("properties") or {}).items():
            walk(child, f"{path}/{name}")
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]")

    walk(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"], "")
    return found


def test_cel_rules_sit_where_they_say_and_only_when_asked() -> None:
    placed = _rules(cluster_operator_crd())
    assert set(placed) == {"/spec/" + "/".join(place) for place in CEL_RULES}
    assert _rules(cluster_operator_crd(cel_rules=False)) == {}
    # none on each step: the vendor's list has no maxItems, the server refuses their cost
    assert not any("[]" in path for path in placed)


def _create(kube: KubeApi, name: str, obj: dict[str, Any]) -> str | None:
    """The API server's message when it refuses to create ``obj``, else None (removed again)."""
    obj = copy.deepcopy(obj)
    obj["metadata"] = {"name": name}  # no finalizer: no operator here takes it off
    try:
        kube.create(CO, obj)
    except KubeError as exc:
        assert exc.status == 422, exc
        return str(exc)
    kube.delete(f"{CO}/{name}")
    return None


def _name(case: Refused) -> str:
    return "crd-" + re.sub("[^a-z0-9-]", "-", case.name.lower())[:50]


@pytest.mark.cluster
def test_the_api_server_refuses_what_validation_refuses_and_takes_the_vendor_object(
        kube: KubeApi) -> None:
    """Each value validation refuses as the API server would is refused by a real one, with the
    words of docs/dev-cluster.md#the-clusteroperator-crd; our stricter rules (server None) are
    the admission webhook's; the vendor's object itself is taken."""
    install_crd(kube)
    assert _create(kube, "crd-vendor-object", as_stored()) is None
    current = release_minor(server_version(kube)) >= CEL_MINOR
    for case in CASES:
        refused = _create(kube, _name(case), set_at(as_stored(), case.pointer, case.value))
        if case.server is None:
            assert refused is None, (case.name, refused)
        else:
            assert refused is not None, case.name
            if current:
                assert case.server in refused, (case.name, refused)


@pytest.mark.cluster
def test_server_side_apply_refuses_the_charts_nulls_where_validation_does(kube: KubeApi) -> None:
    """Server-side apply refuses a null that a create would prune
    (reconciler/data/metax-operator-0.15.2/SOURCE.md): exactly the fields validation names in
    its ``null-left-out`` info (docs/validation.md#severities), and the sync's apply body leaves
    them out, so the server takes it; the switchbox nulls, which have defaults, are filled in."""
    install_crd(kube)
    rendered = rendered_cluster_operator()
    rendered["metadata"] = {"name": "crd-rendered-ssa"}
    with pytest.raises(KubeError) as refused:
        kube.apply(f"{CO}/crd-rendered-ssa", rendered, field_manager="crd-test")
    fields = set(re.findall(r"(spec\.[A-Za-z.]+): Invalid value: \"null\"", str(refused.value)))
    refused_fields = {p.removeprefix("/").replace("/", ".") for p in SSA_REFUSED_NULLS}
    assert fields == refused_fields
    ours = validate_document(as_yaml(rendered), "x.yaml")
    assert ours.errors == [] and ours.warnings == []
    (nulls,) = [f for f in ours.infos if f.rule == "null-left-out"]
    assert all(field in nulls.message for field in refused_fields), nulls.message
    # what the sync applies has none of them, and the server takes it over the installed
    # object (which keeps its own values for them)
    kube.create(CO, set_at(as_stored(), "/metadata", {"name": "crd-installed-ssa"}))
    body = apply_body(rendered, name="crd-installed-ssa", source_commit="a" * 40)
    assert all(resolve(body, p.split("/")[1:]) is MISSING for p in SSA_REFUSED_NULLS)
    applied = kube.apply(f"{CO}/crd-installed-ssa", body, field_manager="crd-test")
    assert applied["spec"]["openshift"] == {}
    assert applied["spec"]["topoDiscovery"]["switchbox"]["clusterManagerUser"] == ""
    kube.delete(f"{CO}/crd-installed-ssa")
    stored = kube.create(CO, set_at(as_stored(), "/metadata", {"name": "crd-stored"}))
    assert stored["spec"]["vendor"] == {} and stored["spec"]["openshift"] == {}
    assert stored["spec"]["topoDiscovery"]["switchbox"]["clusterManagerUser"] == ""
    kube.delete(f"{CO}/crd-stored")


@pytest.mark.cluster
def test_a_policy_with_only_spec_driver_applied_over_the_installed_object_keeps_the_rest(
        kube: KubeApi) -> None:
    """Why a policy file that leaves out the required sections is only an info
    (docs/validation.md#severities): server-side apply over the installed object keeps them.
    Why a field the CRD lacks is an error: server-side apply refuses the object (a create or a
    PUT would drop the field)."""
    install_crd(kube)
    kube.create(CO, set_at(as_stored(), "/metadata", {"name": "crd-installed"}))
    policy = {"apiVersion": API_VERSION, "kind": "ClusterOperator",
              "metadata": {"name": "crd-installed"},
              "spec": {"driver": {"payload": {"version": "3.2.1.13"},
                                  "upgradePolicy": {"pause": True}}}}
    applied = kube.apply(f"{CO}/crd-installed", policy, field_manager="crd-policy", force=True)
    assert applied["spec"]["driver"]["payload"]["version"] == "3.2.1.13"
    assert applied["spec"]["driver"]["upgradePolicy"]["pause"] is True
    assert applied["spec"]["maca"] == as_stored()["spec"]["maca"]
    info = [f.rule for f in validate_document(as_yaml(policy), "p.yaml").findings]
    assert info == ["crd-required-field"]
    unknown = set_at(policy, "/spec/vfioManager", {"image": {"name": "vfio-manager"}})
    with pytest.raises(KubeError, match="field not declared in schema"):
        kube.apply(f"{CO}/crd-installed", unknown, field_manager="crd-policy", force=True)
    assert [(f.rule, f.pointer) for f in validate_document(as_yaml(unknown), "p.yaml").errors
            ] == [("unknown-field", "/spec/vfioManager")]
    kube.delete(f"{CO}/crd-installed")


def _whole(kube: KubeApi, name: str) -> dict[str, Any]:
    """The vendor's object as stored, named ``name``; without its empty strings before 1.25
    (1.20.2 reads ``""`` as null, docs/dev-cluster.md)."""
    current = release_minor(server_version(kube)) >= CEL_MINOR
    return set_at(stored_cluster_operator(empty_strings=current), "/metadata", {"name": name})


@pytest.mark.cluster
@pytest.mark.compat
def test_api_server_fills_in_the_vendors_defaults_and_keeps_what_is_written(
        kube: KubeApi) -> None:
    install_crd(kube)
    defaults = {"enableRollout": False, "pause": False, "maxParallel": "100%",
                "maxUnavailable": "0%", "maxFailureThreshold": 5, "fallback": "pause"}
    stored = kube.create(CO, set_at(_whole(kube, "crd-defaults"), P, {}))
    assert stored["spec"]["driver"]["upgradePolicy"] == defaults
    written = {"enableRollout": True, "pause": True, "maxParallel": 3, "maxUnavailable": "10%",
               "maxFailureThreshold": 2, "fallback": "rollback",
               "upgradeSteps": [{"replicas": 2, "toleration": "50%"}, {"replicas": "100%"}]}
    kept = kube.create(CO, set_at(_whole(kube, "crd-written"), P, written))
    assert kept["spec"]["driver"]["upgradePolicy"] == written  # pauseDuration stays left out
    for name in ("crd-defaults", "crd-written"):
        kube.delete(f"{CO}/{name}")


@pytest.mark.cluster
@pytest.mark.compat
def test_api_server_refuses_what_the_cel_rules_express_from_1_25_on(kube: KubeApi) -> None:
    install_crd(kube)
    enforced = release_minor(server_version(kube)) >= CEL_MINOR
    refusals = {
        "crd-cel-no-steps": ({"enableRollout": True},
                             "spec.driver.upgradePolicy.upgradeSteps: Required value: "
                             "enableRollout is true but upgradeSteps is missing"),
        "crd-cel-no-step": ({"upgradeSteps": []}, "expected at least 1 step"),
        "crd-cel-last-count": ({"upgradeSteps": [{"replicas": 1}]},
                               "the last step must be '100%'"),
        "crd-cel-last-half": ({"upgradeSteps": [{"replicas": "50%"}]},
                              "the last step must be '100%'"),
        "crd-cel-parallel-zero": ({"maxParallel": 0}, "expected an integer >= 1"),
        "crd-cel-parallel-0": ({"maxParallel": "0%"}, "expected a percentage from 1% to 100%"),
        "crd-cel-parallel-101": ({"maxParallel": "101%"},
                                 "expected a percentage from 1% to 100%"),
        "crd-cel-unavailable-200": ({"maxUnavailable": "200%"},
                                    "expected a percentage from 0% to 100%"),
        "crd-cel-unavailable-neg": ({"maxUnavailable": -1}, "expected an integer >= 0"),
        "crd-cel-threshold-0": ({"maxFailureThreshold": 0}, "expected an integer >= 1"),
    }
    for name, (policy, message) in refusals.items():
        refused = _create(kube, name, set_at(_whole(kube, name), P, policy))
        if enforced:
            assert refused is not None and message in refused, (name, refused)
        else:  # 1.20: the rules are left out; the admission webhook answers them
            assert refused is None, (name, refused)
    # What the reconciler's validation accepts, the rules accept too (leading zeros included).
    for name, policy in (
        ("crd-cel-ok", {"enableRollout": True, "maxParallel": "0100%", "maxUnavailable": "000%",
                        "upgradeSteps": [{"replicas": 1, "pauseDuration": 0},
                                         {"replicas": "0100%"}]}),
        ("crd-cel-off", {"enableRollout": False, "maxParallel": 1, "maxUnavailable": "100%"}),
    ):
        assert _create(kube, name, set_at(_whole(kube, name), P, policy)) is None, name
