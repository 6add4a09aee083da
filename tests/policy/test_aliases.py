"""Alias locations: a finding about a value an alias put in place is reported at the alias, and
names the anchor and where the value is written; the parse layer's own findings stay where the
value is written, once."""

from __future__ import annotations

from reconciler.policy.validation import validate_document

P = "/spec/driver/upgradePolicy"

ALIASED = """\
apiVersion: gpu.metax-tech.com/v1alpha1
kind: ClusterOperator
metadata:
  name: cluster-operator
  annotations:
    threshold: &limit "3"
spec:
  templates:
    steps: &steps
      - replicas: 0
        pauseDuration: 10000
      - replicas: 100%
        pauseDuration: 0
    policy: &policy {enableRollout: false, strategy: canary}
  driver:
    payload:
      name: driver-image
      registry: registry.example.com/metax
      version: 2.33.0.9
    upgradePolicy:
      enableRollout: true
      upgradeSteps: *steps
      maxFailureThreshold: *limit
"""


#: where the anchors live: a section the vendor's CRD does not have, one error at its key
TEMPLATES = "/spec/templates"


def errors(text: str) -> list[tuple[str, int, int, str, str]]:
    """The errors, but the one about the anchors' own section."""
    return [(f.rule, f.line, f.column, f.pointer, f.message)
            for f in validate_document(text, "f.yaml").errors if f.pointer != TEMPLATES]


def test_an_error_inside_an_aliased_collection_is_reported_at_the_alias() -> None:
    (minimum,) = [e for e in errors(ALIASED) if e[0] == "schema-minimum"]
    assert minimum[1:4] == (22, 21, f"{P}/upgradeSteps/0/replicas")
    assert minimum[4].endswith(
        "(put here by alias *steps: written at line 10, column 19, inside &steps at line 9)")


def test_an_aliased_scalar_of_the_wrong_type_is_reported_at_the_alias_naming_the_anchor() -> None:
    (wrong,) = [e for e in errors(ALIASED) if e[3] == f"{P}/maxFailureThreshold"]
    assert wrong[:3] == ("schema-type", 23, 28)
    assert "write 3 without quotes" in wrong[4]
    assert wrong[4].endswith("(the value of alias *limit, anchored as &limit at line 6)")


def test_the_anchor_itself_is_judged_where_it_is_written() -> None:
    # the same values are fine where the anchors are (an annotation string); their section is
    # one the CRD lacks: one error at its key, nothing about what is inside
    found = validate_document(ALIASED, "f.yaml").errors
    assert [(f.rule, f.line, f.pointer) for f in found if f.line < 15] == [
        ("unknown-field", 8, TEMPLATES)]


def test_an_unknown_key_brought_in_by_an_alias_is_reported_at_the_alias() -> None:
    text = ALIASED.replace("    upgradePolicy:\n      enableRollout: true\n"
                           "      upgradeSteps: *steps\n      maxFailureThreshold: *limit\n",
                           "    upgradePolicy: *policy\n")
    assert errors(text) == [(
        "unknown-field", 20, 20, f"{P}/strategy",
        "unknown field 'strategy' in driver.upgradePolicy; known fields: enableRollout, "
        "fallback, maxFailureThreshold, maxParallel, maxUnavailable, pause, upgradeSteps "
        "(put here by alias *policy: written at line 14, column 44, inside &policy at line 14)",
    )]


def test_a_value_the_parse_layer_rejects_is_reported_once_where_it_is_written() -> None:
    text = ALIASED.replace('&limit "3"', "&limit 99999999999999999999")
    found = [(e[0], e[1], e[2]) for e in errors(text)]
    assert ("integer-range", 6, 16) in found
    assert [f for f in found if f[0] == "integer-range" or f[1] == 23] == [("integer-range", 6, 16)]


def test_without_aliases_locations_are_unchanged() -> None:
    flow = "upgradeSteps: [{replicas: 0, pauseDuration: 1}, {replicas: 100%, pauseDuration: 0}]"
    text = ALIASED.replace("upgradeSteps: *steps", flow)
    (minimum,) = [e for e in errors(text) if e[0] == "schema-minimum"]
    assert minimum[1:3] == (22, 33) and "alias" not in minimum[4]


def test_an_unknown_key_written_as_an_alias_is_reported_at_the_alias() -> None:
    text = ALIASED.replace('    threshold: &limit "3"\n',
                           '    threshold: &limit "3"\n    field: &field strategy\n').replace(
        "      maxFailureThreshold: *limit\n", "      *field : canary\n")
    (unknown,) = [e for e in errors(text) if e[0] == "unknown-field"]
    assert unknown[1:4] == (24, 7, f"{P}/strategy")
    assert unknown[4].endswith("(the value of alias *field, anchored as &field at line 7)")
