"""Validation against the vendor's real CRD (docs/validation.md): the object the vendor's chart
renders is valid and warns about no field; every value the API server refuses is one located
error naming the field; what the CRD requires, drops or has without the reconciler acting on it
is said the way docs/validation.md says."""

from __future__ import annotations

import json

import pytest

from reconciler.data import RENDERED_OBJECT_FILE
from reconciler.policy.upgrade_policy import UpgradePolicy
from reconciler.policy.validation import parse_only, validate_document
from tests.policy.texts import SEED_10
from tests.policy.vendor_cases import CASES, Refused, as_stored, as_yaml, set_at

NOT_ACTED_ON = [
    "spec.labelgen", "spec.driver.deploy", "spec.driver.deployPolicy", "spec.driver.image",
    "spec.driver.log", "spec.driver.cmInit", "spec.driver.deviceAsRootGroup", "spec.maca",
    "spec.runtime", "spec.devicePlugin", "spec.dataExporter", "spec.topoDiscovery",
    "spec.gpuScheduler", "spec.openshift", "spec.vendor", "spec.cluster",
]


#: the nulls of the chart's rendering that server-side apply refuses (SOURCE.md: the errors of
#: Helm 4.3.2's own install, and of a real API server, tests/sim/test_crd.py)
SSA_REFUSED_NULLS = ["/spec/openshift", *(f"/spec/vendor/{key}" for key in (
    "vendorID", "domain", "charDev", "driver", "virtDriver"))]


def test_the_rendered_vendor_object_has_no_error_and_no_warning() -> None:
    """What `helm template` renders with the chart's default values: its nulls are left out
    when applied (server-side apply would refuse them, a create prunes them), its namespace and
    Helm's label are never applied: infos, all of them."""
    result = validate_document(RENDERED_OBJECT_FILE.read_bytes(), "cluster-operator.yaml")
    assert result.errors == [] and result.warnings == []
    assert [(f.rule, f.pointer) for f in result.infos] == [
        ("cluster-scoped-namespace", "/metadata/namespace"),
        ("helm-ownership-metadata", "/metadata/labels/app.kubernetes.io~1managed-by"),
        ("not-acted-on", "/spec/labelgen"),
        ("null-left-out", "/spec/openshift")]
    acted = next(f for f in result.infos if f.rule == "not-acted-on")
    assert (acted.line, acted.column) == (18, 3)
    assert acted.message == (
        ", ".join(NOT_ACTED_ON) + ": applied, not acted on by the reconciler (the vendor's "
        "operator reads them; validation checks them against the vendor's CRD)")
    nulls = next(f for f in result.infos if f.rule == "null-left-out")
    # the switchbox strings are null too, but have defaults: the server puts them in
    assert all(p.removeprefix("/").replace("/", ".") in nulls.message for p in SSA_REFUSED_NULLS)
    assert "left out when applied" in nulls.message


def test_the_vendor_object_as_stored_has_no_error_and_no_warning() -> None:
    result = validate_document(as_yaml(as_stored()), "cluster-operator.yaml")
    assert result.errors == [] and result.warnings == []
    assert [f.rule for f in result.infos] == ["helm-ownership-metadata", "not-acted-on"]


def test_the_vendor_spec_as_a_policy_file_is_clean() -> None:
    obj = as_stored()
    obj["metadata"] = {"name": "cluster-operator"}
    result = validate_document(as_yaml(obj), "clusters/lab/cluster-operator.yaml")
    assert [(f.severity, f.rule) for f in result.findings] == [("info", "not-acted-on")]
    assert result.ok and result.warnings == []


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_refused_value_alone_is_one_located_error(case: Refused) -> None:
    text = as_yaml(set_at(as_stored(), case.pointer, case.value))
    result = validate_document(text, "co.yaml")
    at = case.at or case.pointer
    assert [(f.rule, f.pointer) for f in result.errors] == [(case.rule, at)], [
        f.message for f in result.errors]
    (error,) = result.errors
    where = parse_only(text, "co.yaml").locate(at)
    assert (error.line, error.column) == (where.line, where.column)
    assert case.label in error.message and case.message in error.message, error.message
    # nothing else changes: no new warning, the same info
    assert {f.rule for f in result.findings if not f.is_error} == {
        "helm-ownership-metadata", "not-acted-on"}


def test_a_policy_with_only_spec_driver_gets_one_info_for_what_the_crd_requires() -> None:
    result = validate_document(SEED_10, "clusters/lab-10/cluster-operator.yaml")
    assert result.ok and result.warnings == []
    (info,) = result.infos
    assert (info.rule, info.pointer, info.line, info.column) == (
        "crd-required-field", "/spec", 5, 1)
    assert ("(dataExporter, devicePlugin, gpuScheduler, labelgen, maca, openshift, runtime, "
            "topoDiscovery, driver.deviceAsRootGroup, driver.fwEnableVirt)") in info.message
    assert "applied over the installed object (server-side apply)" in info.message
    assert "the API server refuses to create a new ClusterOperator without them" in (
        info.message)


def test_the_whole_object_must_carry_what_the_crd_requires() -> None:
    """The admission webhook sees the merged object: a missing field is refused there."""
    obj = as_stored()
    del obj["spec"]["maca"]
    del obj["spec"]["driver"]["deviceAsRootGroup"]
    del obj["spec"]["cluster"]["type"]
    result = validate_document(json.dumps(obj), "clusteroperator/x", whole_object=True)
    assert sorted((f.rule, f.pointer) for f in result.errors) == [
        ("required-field", "/spec/cluster/type"),
        ("required-field", "/spec/driver/deviceAsRootGroup"),
        ("required-field", "/spec/maca")]
    assert all("the vendor's CRD requires it" in f.message for f in result.errors)
    offline = validate_document(json.dumps(obj), "x.yaml")
    assert offline.ok and offline.warnings == []
    assert {"crd-required-field", "not-acted-on"} <= {f.rule for f in offline.infos}


def test_a_required_field_with_a_default_is_filled_in_by_the_server() -> None:
    obj = as_stored()
    del obj["spec"]["topoDiscovery"]["mode"]  # required, default config
    del obj["spec"]["topoDiscovery"]["dragonfly"]["nodeNumber"]  # required, default 2
    result = validate_document(json.dumps(obj), "x", whole_object=True)
    assert result.errors == []


def test_a_null_is_left_out_where_we_do_not_act_and_an_error_where_we_do() -> None:
    """The sync leaves a null out of what it applies (server-side apply would refuse it, a
    create prunes it); in a field the reconciler acts on, an empty value is a mistake."""
    for pointer in ("/spec/driver/payload/version", "/spec/driver/upgradePolicy/maxParallel",
                    "/spec/driver/fwUpgradePolicy"):
        bad = validate_document(json.dumps(set_at(as_stored(), pointer, None)), "x")
        assert [(f.rule, f.pointer) for f in bad.errors] == [("schema-type", pointer)]
        assert "the value is empty: give one or remove the key" in bad.errors[0].message
    left = validate_document(json.dumps(set_at(as_stored(), "/spec/maca/log/level", None)), "x")
    assert left.errors == [] and left.warnings == []
    (null,) = [f for f in left.infos if f.rule == "null-left-out"]
    assert null.pointer == "/spec/maca/log/level" and "spec.maca.log.level" in null.message
    # the whole object (the webhook's) never holds a null: the server pruned it
    whole = validate_document(json.dumps(set_at(as_stored(), "/spec/maca/log/level", None)),
                              "x", whole_object=True)
    assert [f.pointer for f in whole.errors] == ["/spec/maca/log/level"]
    defaulted = set_at(as_stored(), "/spec/topoDiscovery/switchbox/clusterManagerUser", None)
    assert validate_document(json.dumps(defaulted), "x").errors == []


@pytest.mark.parametrize(("section", "pointer"), [
    ("  vfioManager: {image: {name: vfio-manager}}\n", "/spec/vfioManager"),
    ("  devicePlugin: {config: {mode: native}}\n", "/spec/devicePlugin/config"),
])
def test_a_field_the_crd_lacks_is_one_error_server_side_apply_refuses_it(
        section: str, pointer: str) -> None:
    result = validate_document(SEED_10 + section, "x.yaml")
    assert [(f.rule, f.pointer) for f in result.errors] == [("unknown-field", pointer)]
    assert result.warnings == []
    assert ("the vendor's CRD has no such field: server-side apply, which the reconciler "
            "applies with, refuses the object") in result.errors[0].message


def test_unknown_keys_under_upgrade_policy_stay_errors() -> None:
    text = SEED_10.replace("      pause: false\n", "      pause: false\n      surge: 1\n")
    result = validate_document(text, "x.yaml")
    assert [(f.rule, f.pointer) for f in result.errors] == [
        ("unknown-field", "/spec/driver/upgradePolicy/surge")]


@pytest.mark.parametrize("toleration", [0, 3, "0%", "100%", "050%"])
def test_toleration_takes_a_count_or_a_percentage_like_replicas_but_0_too(
        toleration: object) -> None:
    policy = {"enableRollout": True, "upgradeSteps": [
        {"replicas": 2, "toleration": toleration}, {"replicas": "100%", "pauseDuration": 0}]}
    obj = set_at(as_stored(), "/spec/driver/upgradePolicy", policy)
    result = validate_document(json.dumps(obj), "x")
    assert result.errors == []


@pytest.mark.parametrize(("toleration", "rule"), [
    ("10", "percent-format"), ("5 %", "percent-format"), (1.5, "schema-type"),
    (True, "schema-type"), ("101%", "percent-range"), (-2, "schema-minimum")])
def test_toleration_refusals(toleration: object, rule: str) -> None:
    obj = set_at(as_stored(), "/spec/driver/upgradePolicy/upgradeSteps/0/toleration",
                 toleration)
    result = validate_document(json.dumps(obj), "x")
    assert [(f.rule, f.pointer) for f in result.errors] == [
        (rule, "/spec/driver/upgradePolicy/upgradeSteps/0/toleration")]


def test_pause_duration_left_out_is_a_manual_gate_and_no_longer_required() -> None:
    result = validate_document(SEED_10, "x.yaml")
    steps = result.obj["spec"]["driver"]["upgradePolicy"]["upgradeSteps"]
    assert "pauseDuration" not in steps[0]
    assert [s.is_gate for s in UpgradePolicy.from_spec(
        result.obj["spec"]["driver"]["upgradePolicy"]).steps] == [True, False, False, False]


def test_status_is_not_checked_in_a_policy_file() -> None:
    """Never applied (the server-populated-field warning says so), so not judged."""
    result = validate_document(SEED_10 + "status: {state: broken, upgradeStatus: {upgrading: 3}}\n",
                               "x.yaml")
    assert result.ok and [f.rule for f in result.warnings] == ["server-populated-field"]
