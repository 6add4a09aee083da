"""Invalid policy files: each reports the expected rule at the exact line (and column where the
layer knows it precisely). The seed's own mistakes are among them."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from reconciler.policy.validation import validate_document
from tests.policy.texts import SEED_10, insert_line, replace_line


@dataclass(frozen=True)
class Case:
    name: str
    text: str | bytes
    rule: str
    line: int
    column: int | None = None
    pointer: str | None = None
    message: str | None = None  # a fragment the message must contain


def edit(line: int, new: str | None) -> str:
    return replace_line(SEED_10, line, new)


def steps_as(line: str) -> str:
    """SEED_10 with its whole upgradeSteps block (lines 13-21) replaced by one line."""
    lines = SEED_10.splitlines(keepends=True)
    return "".join([*lines[:12], line + "\n", *lines[21:]])


P = "/spec/driver/upgradePolicy"

CASES = [
    # -- parse layer ----------------------------------------------------------------------------
    Case("duplicate-key-pause", insert_line(SEED_10, 23, "      pause: true"), "duplicate-key",
         23, 7, f"{P}/pause", "duplicate key 'pause' (first at line 22)"),
    Case("duplicate-key-in-step", edit(15, "          replicas: 3"), "duplicate-key", 15, 11,
         f"{P}/upgradeSteps/0/replicas"),
    Case("duplicate-top-level-key", SEED_10 + "kind: ClusterOperator\n", "duplicate-key", 27, 1,
         "/kind"),
    Case("custom-tag-scalar", edit(10, "      version: !semver 2.33.0.9"), "custom-tag", 10, 16,
         "/spec/driver/payload/version", "tag '!semver' is not allowed"),
    Case("binary-tag", edit(9, "      registry: !!binary cmVnaXN0cnk="), "custom-tag", 9, 17,
         message="'!!binary'"),
    Case("set-tag-on-mapping", edit(15, "          pauseDuration: !!set {}"), "custom-tag", 15, 26),
    Case("not-utf8-latin1", replace_line(SEED_10, 4, "  name: cluster-operator # caf\udce9")
         .encode("utf-8", "surrogateescape"), "not-utf8", 4, 31),
    Case("utf16-with-bom", SEED_10.encode("utf-16"), "not-utf8", 1, 1, message="UTF-16"),
    Case("empty-file", "", "empty-document", 1, 1),
    Case("only-comments", "# policy for lab-10\n# TODO\n", "empty-document", 1, 1),
    Case("explicit-null-document", "---\n~\n", "empty-document", 1, 1),
    Case("two-documents", SEED_10 + "---\n" + SEED_10, "multiple-documents", 28, 1),
    Case("yaml-1-1-directive", "%YAML 1.1\n---\n" + SEED_10, "yaml-version", 1, 1),
    Case("tab-indentation", edit(12, "\t  enableRollout: true"), "yaml-syntax", 12),
    Case("unclosed-flow-mapping", edit(15, "          pauseDuration: {"), "yaml-syntax", 16),
    Case("control-character", edit(9, "      registry: registry\x07example"), "yaml-syntax", 9, 25),
    Case("merge-key", insert_line(SEED_10, 23, "      <<: {maxParallel: 1}"), "merge-key", 23, 7),
    Case("integer-key", insert_line(SEED_10, 23, "      1: one"), "key-type", 23, 7),
    Case("boolean-key-yaml12-true", insert_line(SEED_10, 5, "  true: x"), "key-type", 5, 3),
    Case("recursive-alias", insert_line(SEED_10, 5, "  loop: &l [1, *l]"), "recursive-alias",
         5, 9, "/metadata/loop/1", "contains an alias to itself"),
    Case("non-finite-number", edit(25, "      maxFailureThreshold: .inf"), "non-finite-number",
         25, 28),
    # -- schema layer: the seed's mistakes --------------------------------------------------------
    Case("string-boolean-enable-rollout", edit(12, '      enableRollout: "false"'), "schema-type",
         12, 22, f"{P}/enableRollout", "expected boolean, got string 'false'; remove the quotes"),
    Case("string-boolean-pause", edit(22, '      pause: "true"'), "schema-type", 22, 14,
         f"{P}/pause", "pause: true stops starting new nodes"),
    Case("yaml11-boolean-yes", edit(12, "      enableRollout: yes"), "schema-type", 12, 22,
         message="YAML 1.2, where yes is a string"),
    Case("yaml11-boolean-on", edit(22, "      pause: on"), "schema-type", 22, 14,
         message="write true or false"),
    Case("integer-for-boolean", edit(22, "      pause: 1"), "schema-type", 22, 14,
         message="expected boolean, got integer 1"),
    Case("seed-fragment-without-spec",
         "driver:\n  upgradePolicy:\n    enableRollout: true\n", "unknown-field", 1, 1, "/driver",
         "it belongs under spec: write it as spec.driver"),
    Case("upgrade-policy-at-top-level", SEED_10 + "upgradePolicy: {}\n", "unknown-field", 27, 1,
         message="spec.driver.upgradePolicy"),
    # -- schema layer: upgradePolicy fields -------------------------------------------------------
    Case("max-parallel-zero", edit(23, "      maxParallel: 0"), "schema-minimum", 23, 20,
         f"{P}/maxParallel", "expected an integer >= 1 or a percentage like '50%'"),
    Case("max-parallel-space-percent", edit(23, '      maxParallel: "50 %"'), "percent-format",
         23, 20, message="remove the spaces: '50%'"),
    Case("max-parallel-quoted-number", edit(23, '      maxParallel: "100"'), "percent-format",
         23, 20, message="write 100 without quotes for a node count, or '100%'"),
    Case("max-parallel-negative-percent", edit(23, "      maxParallel: -10%"), "percent-format",
         23, 20, message="cannot be negative"),
    Case("max-parallel-float", edit(23, "      maxParallel: 1.5"), "schema-type", 23, 20),
    Case("max-parallel-zero-percent", edit(23, "      maxParallel: 0%"), "percent-range", 23, 20,
         message="from 1% to 100%"),
    Case("max-parallel-over-100", edit(23, "      maxParallel: 101%"), "percent-range", 23, 20),
    Case("max-parallel-null", edit(23, "      maxParallel:"), "schema-type", 23, 19,
         message="the value is empty"),
    Case("max-unavailable-negative", edit(24, "      maxUnavailable: -1"), "schema-minimum",
         24, 23, f"{P}/maxUnavailable", "an integer >= 0"),
    Case("max-unavailable-150-percent", edit(24, "      maxUnavailable: 150%"), "percent-range",
         24, 23, message="from 0% to 100%"),
    Case("max-unavailable-boolean", edit(24, "      maxUnavailable: false"), "schema-type", 24, 23),
    Case("threshold-zero", edit(25, "      maxFailureThreshold: 0"), "schema-minimum", 25, 28,
         f"{P}/maxFailureThreshold",
         "expected an integer from 1 to 2147483647 (int32), got integer 0"),
    Case("threshold-beyond-int32", edit(25, "      maxFailureThreshold: 2147483648"),
         "schema-maximum", 25, 28, f"{P}/maxFailureThreshold",
         "upgradePolicy.maxFailureThreshold: expected an integer from 1 to 2147483647 (int32)"),
    Case("threshold-string", edit(25, '      maxFailureThreshold: "3"'), "schema-type", 25, 28),
    Case("threshold-float-no-coercion", edit(25, "      maxFailureThreshold: 3.0"), "schema-type",
         25, 28, message="write 3 without a decimal point"),
    Case("threshold-percent", edit(25, "      maxFailureThreshold: 10%"), "schema-type", 25, 28),
    Case("fallback-capitalised", edit(26, "      fallback: Rollback"), "schema-enum", 26, 17,
         f"{P}/fallback", "values are case-sensitive: write 'rollback'"),
    Case("fallback-unknown", edit(26, "      fallback: abort"), "schema-enum", 26, 17,
         message="expected one of 'pause', 'rollback'"),
    Case("fallback-typo", edit(26, "      fallback: rolback"), "schema-enum", 26, 17,
         message="did you mean 'rollback'?"),
    Case("unknown-policy-key-typo", edit(23, "      maxParalel: 100%"), "unknown-field", 23, 7,
         f"{P}/maxParalel", "did you mean 'maxParallel'?"),
    Case("unknown-policy-key", insert_line(SEED_10, 26, "      strategy: canary"),
         "unknown-field", 26, 7, f"{P}/strategy"),
    Case("unknown-step-key", insert_line(SEED_10, 16, "          timeout: 10"), "unknown-field",
         16, 11, f"{P}/upgradeSteps/0/timeout"),
    Case("step-key-typo-replica", edit(14, "        - replica: 2"), "unknown-field", 14, 11,
         message="did you mean 'replicas'?"),
    Case("replicas-zero", edit(14, "        - replicas: 0"), "schema-minimum", 14, 21,
         f"{P}/upgradeSteps/0/replicas"),
    Case("replicas-quoted-number", edit(14, '        - replicas: "2"'), "percent-format", 14, 21),
    Case("replicas-zero-percent", edit(14, "        - replicas: 0%"), "percent-range", 14, 21),
    Case("replicas-float", edit(14, "        - replicas: 2.5"), "schema-type", 14, 21),
    Case("replicas-percent-with-decimals", edit(14, "        - replicas: 2.5%"), "percent-format",
         14, 21),
    Case("pause-duration-negative", edit(17, "          pauseDuration: -1"), "schema-minimum",
         17, 26, f"{P}/upgradeSteps/1/pauseDuration"),
    Case("pause-duration-seconds-string", edit(17, "          pauseDuration: 10s"), "schema-type",
         17, 26, message="pauseDuration is in milliseconds: write 10000"),
    Case("pause-duration-non-empty-mapping", edit(15, "          pauseDuration: {wait: true}"),
         "schema-type", 15, 26,
         message="the CRD takes an integer; leave pauseDuration out for a manual gate"),
    Case("pause-duration-empty-mapping", edit(15, "          pauseDuration: {}"),
         "schema-type", 15, 26, f"{P}/upgradeSteps/0/pauseDuration",
         "upgradeSteps[0].pauseDuration: expected an integer >= 0, got an empty mapping {}; "
         "the CRD takes an integer; leave pauseDuration out for a manual gate"),
    Case("pause-duration-null", edit(15, "          pauseDuration:"), "schema-type", 15, 25),
    Case("replicas-missing", edit(16, "        - pauseDuration: 10000") .replace(
        "          pauseDuration: 10000\n        - replicas: 8", "        - replicas: 8", 1),
         "required-field", 16, 11, f"{P}/upgradeSteps/1/replicas"),
    Case("steps-empty-list", steps_as("      upgradeSteps: []"), "schema-min-items", 13, 21),
    Case("steps-not-a-list", steps_as("      upgradeSteps: 100%"), "schema-type", 13, 21),
    # -- semantic rules ---------------------------------------------------------------------------
    Case("steps-equal-counts", edit(18, "        - replicas: 5"), "steps-increasing", 18, 21,
         f"{P}/upgradeSteps/2/replicas", "got 5 after 5 in step 2"),
    Case("steps-decreasing-counts", edit(16, "        - replicas: 1"), "steps-increasing", 16, 21),
    Case("steps-decreasing-percent",
         edit(14, "        - replicas: 50%").replace("replicas: 5\n", "replicas: 40%\n"),
         "steps-increasing", 16, 21, message="got 40% after 50%"),
    Case("step-after-100-percent", edit(18, "        - replicas: 100%"), "steps-increasing",
         20, 21, message="already covers 100%"),
    Case("last-step-count", edit(20, "        - replicas: 10"), "last-step-100", 20, 21,
         f"{P}/upgradeSteps/3/replicas", "the last step must be '100%'"),
    Case("last-step-90-percent", edit(20, "        - replicas: 90%"), "last-step-100", 20, 21),
    Case("enable-rollout-without-steps", steps_as("      pause: false").replace(
        "      pause: false\n      pause: false\n", "      pause: false\n"),
         "steps-required", 11, 5, f"{P}/upgradeSteps"),
    # -- the rest of the object -------------------------------------------------------------------
    Case("api-version-wrong", replace_line(SEED_10, 1, "apiVersion: gpu.metax-tech.com/v1"),
         "schema-enum", 1, 13, "/apiVersion"),
    Case("kind-wrong", replace_line(SEED_10, 2, "kind: ClusterOperators"), "schema-enum", 2, 7),
    Case("metadata-name-missing", replace_line(SEED_10, 4, "  labels: {team: gpu}"),
         "required-field", 3, 1, "/metadata/name"),
    Case("metadata-name-invalid", replace_line(SEED_10, 4, "  name: Cluster_Operator"),
         "schema-pattern", 4, 9, message="a lowercase DNS name"),
    Case("label-value-not-string", insert_line(SEED_10, 5, "  labels: {canary: true}"),
         "schema-type", 5, 20, "/metadata/labels/canary", "quote it to make it a string: 'true'"),
    Case("spec-missing", SEED_10.split("spec:")[0], "required-field", 1, 1, "/spec"),
    Case("driver-not-mapping", "".join(SEED_10.splitlines(keepends=True)[:5])
         + "  driver: latest\n", "schema-type", 6, 11),
    Case("root-is-a-list", "- " + SEED_10.replace("\n", "\n  ").rstrip() + "\n", "schema-type",
         1, 1, ""),
    Case("version-as-number", edit(10, "      version: 2.33"), "schema-type", 10, 16,
         message="quote it to make it a string: '2.33'"),
    Case("pull-policy-lowercase", insert_line(SEED_10, 11, "      pullPolicy: always"),
         "schema-enum", 11, 19),
    Case("fw-upgrade-policy-case", insert_line(SEED_10, 11, "    fwUpgradePolicy: preferCloud"),
         "schema-enum", 11, 22, "/spec/driver/fwUpgradePolicy"),
    Case("fw-enable-virt-string", insert_line(SEED_10, 11, '    fwEnableVirt: "true"'),
         "schema-type", 11, 19),
    Case("unknown-top-level-key", SEED_10 + "extra: 1\n", "unknown-field", 27, 1, "/extra"),
    # -- fields the vendor's CRD lacks: server-side apply refuses them ----------------------
    Case("unknown-driver-field", replace_line(SEED_10, 6, "  driver:\n    nodeSelector: {}"),
         "unknown-field", 7, 5, "/spec/driver/nodeSelector",
         "refuses the object (\"field not declared in schema\""),
    Case("unknown-spec-section", SEED_10 + "  topologyManager: {policy: none}\n",
         "unknown-field", 27, 3, "/spec/topologyManager"),
    Case("unknown-payload-field",
         replace_line(SEED_10, 8, "      name: driver-image\n      tag: x"),
         "unknown-field", 9, 7, "/spec/driver/payload/tag"),
    Case("vfio-manager-section", SEED_10 + "  vfioManager: {image: {name: vfio-manager}}\n",
         "unknown-field", 27, 3, "/spec/vfioManager",
         "unknown field 'vfioManager' in spec; known fields: cluster, dataExporter"),
]


def test_enough_cases() -> None:
    assert len(CASES) >= 60
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_invalid_file(case: Case) -> None:
    result = validate_document(case.text, "clusters/lab-10/cluster-operator.yaml")
    assert not result.ok
    matching = [f for f in result.errors if f.rule == case.rule and f.line == case.line]
    assert matching, (
        f"expected {case.rule} at line {case.line}, got "
        + "; ".join(f"{f.rule}@{f.line}:{f.column} {f.message}" for f in result.findings)
    )
    finding = matching[0]
    assert finding.file == "clusters/lab-10/cluster-operator.yaml"
    if case.column is not None:
        assert finding.column == case.column, finding
    if case.pointer is not None:
        assert finding.pointer == case.pointer, finding
    if case.message is not None:
        assert case.message in finding.message, finding.message
