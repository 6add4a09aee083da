"""What the simulator installs as ``cluster-operator``, pure: the object the vendor's chart 0.15.2
renders (the project's data copy), whole as the vendor's CRD requires, with the simulator's
payload; ``spec=`` is a merge patch onto it (docs/dev-cluster.md)."""

from __future__ import annotations

from typing import Any

from ruamel.yaml import YAML

from reconciler.policy.payload import Payload
from reconciler.sim.operator_install import (
    DEFAULT_PAYLOAD,
    FINALIZER,
    HELM_ANNOTATIONS,
    HELM_LABELS,
    INSTALL_VALUES,
    INSTALLED_UPGRADE_POLICY,
    RENDERED_OBJECT,
    VENDOR_DATA,
    cluster_operator,
    merge_patch,
    rendered_object,
)


def _vendor_crd_schema() -> dict[str, Any]:
    crd = YAML(typ="safe", pure=True).load(
        (VENDOR_DATA / "gpu.metax-tech.com_clusteroperators.yaml").read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _missing_required(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """Fields the vendor's schema requires that ``value`` lacks, and fields it does not know
    (the API server would refuse the first and prune the second)."""
    problems: list[str] = []
    if not isinstance(value, dict) or schema.get("type") != "object":
        return problems
    properties = schema.get("properties") or {}
    problems += [f"{path}.{name}: required" for name in schema.get("required") or []
                 if name not in value]
    for key, child in value.items():
        if key not in properties:
            if not (schema.get("additionalProperties")
                    or schema.get("x-kubernetes-preserve-unknown-fields")):
                problems.append(f"{path}.{key}: unknown (pruned)")
            continue
        problems += _missing_required(properties[key], child, f"{path}.{key}")
    return problems


def test_the_installed_object_is_the_chart_rendering_with_the_simulators_payload() -> None:
    co = cluster_operator(DEFAULT_PAYLOAD)
    rendered = rendered_object()
    assert co["spec"]["driver"]["payload"] == {
        "name": "driver-image", "registry": "cr.metax-tech.com/public-library",
        "version": "2.31.0.6", "pullPolicy": "IfNotPresent"}
    rendered["spec"]["driver"]["payload"] = co["spec"]["driver"]["payload"]
    assert co["spec"]["openshift"] == {"deploy": False}, "what the chart's defaults leave null"
    rendered["spec"]["openshift"] = co["spec"]["openshift"]
    assert co["spec"] == rendered["spec"], "everything else as the chart renders it"
    assert co["metadata"] == {
        "name": "cluster-operator", "finalizers": ["gpu.metax-tech.com/finalizers"],
        "labels": HELM_LABELS, "annotations": HELM_ANNOTATIONS}
    assert FINALIZER == "gpu.metax-tech.com/finalizers"
    assert HELM_LABELS["helm.sh/chart"] == "metax-operator-0.15.2"
    assert HELM_LABELS["app.kubernetes.io/managed-by"] == "Helm"
    assert HELM_LABELS["app.kubernetes.io/instance"] == \
        HELM_ANNOTATIONS["meta.helm.sh/release-name"] == "metax-operator"


def test_it_is_whole_by_the_vendors_crd_and_carries_nothing_the_crd_prunes() -> None:
    schema = _vendor_crd_schema()
    co = cluster_operator(DEFAULT_PAYLOAD)
    assert _missing_required(schema["properties"]["spec"], co["spec"], "spec") == []
    assert "vfioManager" not in co["spec"]
    # no nulls: the API server drops them (none of these fields is nullable; a server-side
    # apply refuses them), and openshift, which the chart's defaults leave null, is set
    raw = YAML(typ="safe", pure=True).load(RENDERED_OBJECT.read_text())
    assert raw["spec"]["vendor"]["domain"] is None
    assert raw["spec"]["topoDiscovery"]["switchbox"]["clusterManagerAddress"] is None
    assert (raw["spec"].get("openshift") or {}).get("deploy") is None
    assert co["spec"]["openshift"] == INSTALL_VALUES["openshift"] == {"deploy": False}
    assert "domain" not in co["spec"]["vendor"]
    assert "clusterManagerAddress" not in co["spec"]["topoDiscovery"]["switchbox"]
    # a spec of the driver alone is what the API server refuses
    assert _missing_required(schema["properties"]["spec"], {"driver": {}}, "spec") == [
        "spec.dataExporter: required", "spec.devicePlugin: required",
        "spec.gpuScheduler: required", "spec.labelgen: required", "spec.maca: required",
        "spec.openshift: required", "spec.runtime: required", "spec.topoDiscovery: required",
        "spec.driver.deviceAsRootGroup: required", "spec.driver.fwEnableVirt: required"]


def test_the_installed_upgrade_policy_is_the_documented_defaults() -> None:
    """What a real install carries (docs/policy.md, the defaults; chart 0.15.2 renders the same)."""
    assert INSTALLED_UPGRADE_POLICY == {
        "enableRollout": False, "pause": False, "maxParallel": "100%", "maxUnavailable": "0%",
        "maxFailureThreshold": 5, "fallback": "pause",
        "upgradeSteps": [{"replicas": 1, "pauseDuration": 30000},
                         {"replicas": "100%", "pauseDuration": 0}]}


def test_spec_is_a_merge_patch_onto_the_installed_spec() -> None:
    steps = [{"replicas": 2, "pauseDuration": 0}, {"replicas": "100%", "pauseDuration": 0}]
    co = cluster_operator(DEFAULT_PAYLOAD, spec={
        "driver": {"upgradePolicy": {"enableRollout": True, "upgradeSteps": steps,
                                     "maxUnavailable": None},
                   "fwUpgradePolicy": "PreferCloud"},
        "dataExporter": {"deploy": True}})
    policy = co["spec"]["driver"]["upgradePolicy"]
    assert policy["enableRollout"] is True
    assert policy["upgradeSteps"] == steps, "a list replaces"
    assert "maxUnavailable" not in policy, "a null removes"
    assert policy["maxParallel"] == "100%", "the rest stays as installed"
    assert co["spec"]["driver"]["fwUpgradePolicy"] == "PreferCloud"
    assert co["spec"]["driver"]["payload"]["version"] == DEFAULT_PAYLOAD.version
    assert co["spec"]["dataExporter"]["deploy"] is True
    assert co["spec"]["dataExporter"]["image"] == rendered_object()["spec"]["dataExporter"]["image"]
    assert set(co["spec"]) == set(rendered_object()["spec"]) | {"openshift"}
    # neither side changed
    assert merge_patch({"a": {"b": 1}}, {"a": {"c": 2}}) == {"a": {"b": 1, "c": 2}}
    base = {"a": {"b": [1]}}
    merge_patch(base, {"a": {"b": [2]}})
    assert base == {"a": {"b": [1]}}


def test_an_object_of_no_release_has_no_finalizer_and_no_chart_labels() -> None:
    co = cluster_operator(DEFAULT_PAYLOAD, name="probe", release=False)
    assert co["metadata"] == {"name": "probe"}
    assert co["spec"] == cluster_operator(DEFAULT_PAYLOAD)["spec"]


def test_the_vendors_payload_form_names_its_image() -> None:
    """values.yaml of the chart: ``payload.name: metax/driver-image``,
    ``version: "3.2.1.12-amd64"``; the image is ``<registry>/<payload.name>:<version>``, a version
    without an arch suffix gets ``-amd64``."""
    vendor = rendered_object()["spec"]["driver"]["payload"]
    assert vendor == {"name": "metax/driver-image", "version": "3.2.1.12-amd64",
                      "pullPolicy": "IfNotPresent", "registry": "release.daocloud.io"}
    payload = Payload.from_spec(vendor)
    assert payload.image == "release.daocloud.io/metax/driver-image:3.2.1.12-amd64"
    assert payload.same_image(Payload("release.daocloud.io", "metax/driver-image", "3.2.1.12"))
    assert not payload.same_image(Payload("release.daocloud.io", "metax/driver-image",
                                          "3.2.1.12-arm64"))
    # the registry may carry the vendor's folder instead of the name: the same image
    assert payload.same_image(Payload("release.daocloud.io/metax", "driver-image", "3.2.1.12"))
    co = cluster_operator(payload)
    assert co["spec"]["driver"]["payload"] == vendor
