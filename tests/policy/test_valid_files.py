"""Valid policy files pass with no error; what the daemon applies is plain data."""

from __future__ import annotations

import json

import pytest

from reconciler.policy.upgrade_policy import UpgradePolicy
from reconciler.policy.validation import validate_document
from tests.policy.texts import EXAMPLES, SEED_10, SEED_100, VENDOR_DEFAULT, replace_line

MINIMAL = """\
apiVersion: gpu.metax-tech.com/v1alpha1
kind: ClusterOperator
metadata:
  name: cluster-operator
spec: {}
"""

VALID = {
    "seed-10-nodes": SEED_10,
    "seed-100-nodes": SEED_100,
    "vendor-install-default": VENDOR_DEFAULT,
    "example-lab-10": (EXAMPLES / "clusters/lab-10/cluster-operator.yaml").read_text(),
    "example-prod-100": (EXAMPLES / "clusters/prod-100/cluster-operator.yaml").read_text(),
    "example-firmware": (EXAMPLES / "clusters/fw-lab-4/cluster-operator.yaml").read_text(),
    "minimal-object": MINIMAL,
    "rollout-off-without-steps": MINIMAL.replace(
        "spec: {}", "spec:\n  driver:\n    upgradePolicy:\n      enableRollout: false"),
    "single-step-continue-at-once": MINIMAL.replace("spec: {}", """spec:
  driver:
    upgradePolicy:
      enableRollout: true
      upgradeSteps:
        - replicas: 100%
          pauseDuration: 0"""),
    "mixed-count-and-percent-steps": MINIMAL.replace("spec: {}", """spec:
  driver:
    upgradePolicy:
      enableRollout: true
      upgradeSteps: [{replicas: 1}, {replicas: 50%, pauseDuration: 60000},
                     {replicas: 10, pauseDuration: 0}, {replicas: '100%'}]
      maxParallel: 1
      maxUnavailable: 0%
      fallback: rollback"""),
    "document-markers-and-comments": "%YAML 1.2\n---\n# lab\n" + SEED_10 + "...\n",
    "json-syntax": json.dumps({
        "apiVersion": "gpu.metax-tech.com/v1alpha1", "kind": "ClusterOperator",
        "metadata": {"name": "cluster-operator"},
        "spec": {"driver": {"upgradePolicy": {"enableRollout": True, "upgradeSteps": [
            {"replicas": "100%"}], "maxUnavailable": "100%"}}},
    }),
    "crlf-line-endings": SEED_10.replace("\n", "\r\n"),
    "utf8-bom": "\ufeff" + SEED_100,
    "anchors-and-aliases": replace_line(
        replace_line(SEED_10, 17, "          pauseDuration: &wait 10000"),
        19, "          pauseDuration: *wait"),
    "same-version-with-arch-suffix": SEED_10.replace("2.33.0.9", "2.33.0.9-arm64"),
    "trailing-document-separator": SEED_10 + "---\n",
    "quoted-keys-and-flow-style": MINIMAL.replace(
        "spec: {}", 'spec: {"driver": {"payload": {"version": "2.32.0.6"}}}'),
}


def test_enough_cases() -> None:
    assert len(VALID) >= 15


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_file(name: str) -> None:
    result = validate_document(VALID[name], f"{name}.yaml")
    assert result.errors == [], [f"{f.line}:{f.column} {f.message}" for f in result.errors]
    assert result.ok
    assert isinstance(result.obj, dict)
    json.dumps(result.obj)  # plain data, ready to apply
    UpgradePolicy.from_spec(result.obj["spec"].get("driver", {}).get("upgradePolicy"))


def test_seed_scenarios_resolve_as_the_manual_says() -> None:
    ten = UpgradePolicy.from_spec(validate_document(SEED_10, "a").obj["spec"]["driver"][
        "upgradePolicy"])
    assert ten.step_targets(10) == [2, 5, 8, 10]
    assert [ten.batch_max_parallel(b) for b in (2, 3, 3, 2)] == [2, 3, 3, 2]
    hundred = UpgradePolicy.from_spec(validate_document(SEED_100, "b").obj["spec"]["driver"][
        "upgradePolicy"])
    assert hundred.step_targets(100) == [5, 30, 60, 100]
    assert hundred.batch_max_parallel(25) == 13
    assert hundred.resolved_max_unavailable(100) == 10
    assert [s.is_gate for s in hundred.steps] == [True, False, False, True]


def test_yaml12_scalars_are_not_coerced() -> None:
    result = validate_document(SEED_10.replace("version: 2.33.0.9", "version: '012'"), "a")
    assert result.obj["spec"]["driver"]["payload"]["version"] == "012"
    labels = validate_document(MINIMAL.replace(
        "  name: cluster-operator", "  name: cluster-operator\n  labels: {a: 'yes', b: 'on'}"), "b")
    assert labels.ok and labels.obj["metadata"]["labels"] == {"a": "yes", "b": "on"}


def test_alias_yields_same_value_in_each_place() -> None:
    result = validate_document(VALID["anchors-and-aliases"], "a")
    steps = result.obj["spec"]["driver"]["upgradePolicy"]["upgradeSteps"]
    assert steps[1]["pauseDuration"] == steps[2]["pauseDuration"] == 10000


WARNINGS = [
    ("server-populated-resource-version",
     replace_line(SEED_10, 4, "  name: cluster-operator\n  resourceVersion: '81234'"),
     "server-populated-field", 5, "/metadata/resourceVersion"),
    ("server-populated-managed-fields",
     replace_line(SEED_10, 4, "  name: cluster-operator\n  managedFields:\n  - manager: kubectl"),
     "server-populated-field", 5, "/metadata/managedFields"),
    ("server-populated-uid-and-generation",
     replace_line(SEED_10, 4, "  name: cluster-operator\n  uid: 7c1e\n  generation: 3"),
     "server-populated-field", 6, "/metadata/generation"),
    ("server-populated-creation-timestamp",
     replace_line(SEED_10, 4, "  name: cluster-operator\n  creationTimestamp: 2026-11-30T01:00Z"),
     "server-populated-field", 5, "/metadata/creationTimestamp"),
    ("status-in-policy-file", SEED_10 + "status:\n  upgradeStatus: {phase: Idling}\n",
     "server-populated-field", 27, "/status"),
    ("reconciler-rollout-state-annotation",
     replace_line(SEED_10, 4, "  name: cluster-operator\n  annotations:\n"
                  "    gpu.metax-tech.com/rollout-state: '{}'"),
     "reconciler-annotation", 6, "/metadata/annotations/gpu.metax-tech.com~1rollout-state"),
    ("reconciler-firmware-request-annotation",
     replace_line(SEED_10, 4, "  name: cluster-operator\n  annotations:\n"
                  "    gpu.metax-tech.com/owner: gpu-team\n"
                  "    gpu.metax-tech.com/firmware-request: "
                  "'{\"fwUpgradePolicy\": \"PreferCloud\"}'"),
     "reconciler-annotation", 7, "/metadata/annotations/gpu.metax-tech.com~1firmware-request"),
    ("unknown-metadata-field-not-applied",
     replace_line(SEED_10, 4, "  name: cluster-operator\n  team: gpu"),
     "unknown-field-pruned", 5, "/metadata/team"),
]


@pytest.mark.parametrize(("name", "text", "rule", "line", "pointer"), WARNINGS,
                         ids=[w[0] for w in WARNINGS])
def test_warning_only(name: str, text: str, rule: str, line: int, pointer: str) -> None:
    result = validate_document(text, "w.yaml")
    assert result.ok, result.errors
    seen = [(f.rule, f.line, f.pointer, f.severity) for f in result.findings]
    assert (rule, line, pointer, "warning") in seen
    assert {f.rule for f in result.findings if not f.is_info} == {rule}


#: metadata the chart's rendering carries, never applied: an info each (the rendered object
#: validates with no warning)
INFOS = [
    ("namespace-on-cluster-scoped",
     replace_line(SEED_10, 4, "  name: cluster-operator\n  namespace: metax-operator"),
     "cluster-scoped-namespace", 5, "/metadata/namespace"),
    ("helm-managed-by-label",
     replace_line(SEED_10, 4, "  name: cluster-operator\n  labels:\n"
                  "    app.kubernetes.io/managed-by: Helm"),
     "helm-ownership-metadata", 6, "/metadata/labels/app.kubernetes.io~1managed-by"),
    ("helm-release-annotation",
     replace_line(SEED_10, 4, "  name: cluster-operator\n  annotations:\n"
                  "    meta.helm.sh/release-name: metax-operator"),
     "helm-ownership-metadata", 6, "/metadata/annotations/meta.helm.sh~1release-name"),
]


@pytest.mark.parametrize(("name", "text", "rule", "line", "pointer"), INFOS,
                         ids=[w[0] for w in INFOS])
def test_info_only(name: str, text: str, rule: str, line: int, pointer: str) -> None:
    result = validate_document(text, "w.yaml")
    assert result.ok, result.errors
    assert result.warnings == []
    seen = [(f.rule, f.line, f.pointer, f.severity) for f in result.findings]
    assert (rule, line, pointer, "info") in seen


def test_an_unknown_section_is_one_error_server_side_apply_refuses_it() -> None:
    """The CRD keeps no unknown field, and server-side apply (the reconciler's) refuses one
    ("field not declared in schema"): one error at its key, nothing about what is inside."""
    result = validate_document(VENDOR_DEFAULT + "  extraSection:\n    nested: [1, {a: b}]\n", "x")
    assert [(f.rule, f.pointer) for f in result.errors] == [("unknown-field", "/spec/extraSection")]
    assert "server-side apply, which the reconciler applies with, refuses the object" in (
        result.errors[0].message)


def test_helm_ownership_metadata_is_said_at_each_key_and_other_metadata_is_ours() -> None:
    text = replace_line(SEED_10, 4, """  name: cluster-operator
  labels:
    app.kubernetes.io/managed-by: gpu-gitops-reconciler
    app.kubernetes.io/part-of: metax-operator
    helm.sh/chart: metax-operator-0.9.2
  annotations:
    app.kubernetes.io/managed-by: Helm
    meta.helm.sh/release-name: metax-operator
    meta.helm.sh/release-namespace: metax-operator
    gpu.metax-tech.com/owner: gpu-platform-team""")
    result = validate_document(text, "w.yaml")
    assert result.ok, result.errors
    helm = [f for f in result.findings if f.rule == "helm-ownership-metadata"]
    assert [(f.severity, f.line, f.column) for f in helm] == [
        ("info", line, 5) for line in (6, 11, 12)]
    assert result.warnings == []
    assert "'app.kubernetes.io/managed-by' is Helm's ownership metadata" in helm[0].message
