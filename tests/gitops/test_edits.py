"""Spec write-backs keep the policy file as a person wrote it; only the edited line changes."""

from __future__ import annotations

import difflib

import pytest
from ruamel.yaml import YAML

from reconciler.fieldpath import MISSING
from reconciler.gitops.edits import (
    ANY,
    FW_UPGRADE_POLICY_FIELD,
    PAUSE_FIELD,
    PAYLOAD_VERSION_FIELD,
    EditOutcome,
    FieldEdit,
    edit_policy_text,
    parse_status,
    render_status,
    scrub_secrets,
    status_change,
)
from tests.gitops.conftest import POLICY


def changed_lines(before: str, after: str) -> list[str]:
    return [
        line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="")
        if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))
    ]


def test_pause_is_added_and_nothing_else_moves() -> None:
    result = edit_policy_text(POLICY, [FieldEdit(PAUSE_FIELD, True)])
    assert result.outcome is EditOutcome.CHANGED and result.text is not None
    assert changed_lines(POLICY, result.text) == ["+      pause: true"]
    # the new key sits inside upgradePolicy, before the blank line that closes the section
    assert "      fallback: pause\n      pause: true\n\n  devicePlugin:" in result.text


def test_existing_pause_false_becomes_true_keeping_its_comment_in_its_column() -> None:
    text = POLICY.replace("      fallback: pause\n",
                          "      fallback: pause\n      pause: false   # released by bob\n")
    result = edit_policy_text(text, [FieldEdit(PAUSE_FIELD, True)])
    assert result.text is not None
    assert changed_lines(text, result.text) == [
        "-      pause: false   # released by bob", "+      pause: true    # released by bob",
    ]


def test_restoring_the_version_keeps_quotes_and_comments() -> None:
    text = POLICY.replace("version: 2.33.0.9", 'version: "2.33.0.9"  # bumped by alice')
    result = edit_policy_text(text, [FieldEdit(PAYLOAD_VERSION_FIELD, "2.32.0.6", "2.33.0.9")])
    assert result.text is not None
    assert changed_lines(text, result.text) == [
        '-      version: "2.33.0.9"  # bumped by alice',
        '+      version: "2.32.0.6"  # bumped by alice',
    ]


def test_expected_value_matches_across_the_arch_suffix() -> None:
    result = edit_policy_text(POLICY, [FieldEdit(PAYLOAD_VERSION_FIELD, "2.32.0.6",
                                                 "2.33.0.9-amd64")])
    assert result.outcome is EditOutcome.CHANGED


def test_a_person_who_changed_the_field_wins() -> None:
    text = POLICY.replace("version: 2.33.0.9", "version: 2.34.0.1")
    result = edit_policy_text(text, [FieldEdit(PAYLOAD_VERSION_FIELD, "2.32.0.6", "2.33.0.9")])
    assert result.outcome is EditOutcome.CONFLICT
    assert "2.34.0.1" in result.detail and "their value wins" in result.detail


def test_an_edit_git_already_has_is_no_change() -> None:
    result = edit_policy_text(POLICY, [FieldEdit(FW_UPGRADE_POLICY_FIELD, "PreferCloud")])
    assert result.outcome is EditOutcome.ALREADY


def test_firmware_policy_set_to_never() -> None:
    result = edit_policy_text(POLICY, [FieldEdit(FW_UPGRADE_POLICY_FIELD, "Never", "PreferCloud")])
    assert result.text is not None
    assert changed_lines(POLICY, result.text) == [
        "-    fwUpgradePolicy: PreferCloud", "+    fwUpgradePolicy: Never",
    ]


KUBECTL_STYLE = """\
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: unrelated
data:
  a: "1"
---
apiVersion: gpu.metax-tech.com/v1alpha1
kind: ClusterOperator
metadata:
  name: cluster-operator
spec:
  driver:
    payload:
      version: 2.33.0.9
    upgradePolicy:
      enableRollout: true
      upgradeSteps:
      - replicas: 1
      - replicas: 100%
        pauseDuration: 0
"""


def test_multi_document_file_with_unindented_sequences() -> None:
    result = edit_policy_text(KUBECTL_STYLE, [FieldEdit(PAUSE_FIELD, True)])
    assert result.text is not None
    assert changed_lines(KUBECTL_STYLE, result.text) == ["+      pause: true"]


FOUR_SPACES = """\
apiVersion: gpu.metax-tech.com/v1alpha1
kind: ClusterOperator
metadata:
    name: cluster-operator
spec:
    driver:
        payload:
            version: 2.33.0.9   # pinned
        upgradePolicy:
            enableRollout: true
            upgradeSteps:
                -   replicas: 100%
                    pauseDuration: 0
"""


def test_four_space_indentation_is_kept() -> None:
    result = edit_policy_text(FOUR_SPACES, [FieldEdit(PAYLOAD_VERSION_FIELD, "2.32.0.6", ANY)])
    assert result.text is not None
    assert changed_lines(FOUR_SPACES, result.text) == [
        "-            version: 2.33.0.9   # pinned", "+            version: 2.32.0.6   # pinned",
    ]


def test_missing_sections_are_created() -> None:
    text = "apiVersion: gpu.metax-tech.com/v1alpha1\nkind: ClusterOperator\nspec: {}\n"
    result = edit_policy_text(text, [FieldEdit(PAUSE_FIELD, True, MISSING)])
    assert result.text is not None
    assert YAML(typ="safe").load(result.text)["spec"] == {
        "driver": {"upgradePolicy": {"pause": True}}
    }


@pytest.mark.parametrize("text", ["kind: ConfigMap\n", "a: [unclosed\n", ""])
def test_files_without_a_cluster_operator_are_not_edited(text: str) -> None:
    assert edit_policy_text(text, [FieldEdit(PAUSE_FIELD, True)]).outcome is (
        EditOutcome.NOT_FOUND
    )


def test_status_file_never_carries_secrets() -> None:
    snapshot = {
        "cluster": "prod-a",
        "upgradeStatus": {"phase": "Idling", "lastAppliedSpec": {
            "payload": {"registry": "r", "imagePullSecret": "s3cr3t"}}},
        "token": "abc", "extra": [{"password": "x", "ok": 1}],
    }
    text = render_status(snapshot)
    assert "s3cr3t" not in text and "abc" not in text and "password" not in text
    assert text.startswith("# Status snapshot written by gpu-gitops-reconciler")
    assert parse_status(text) == scrub_secrets(snapshot)


def test_status_change_skips_a_state_git_already_has() -> None:
    first = {"cluster": "c", "upgradeStatus": {"phase": "Progressing", "status": {
        "currentStepIndex": 1, "currentStepState": "StepUpgrade", "totalUpgradeReadyReplicas": 0}}}
    counters = {**first, "upgradeStatus": {**first["upgradeStatus"], "status": {
        "currentStepIndex": 1, "currentStepState": "StepUpgrade", "totalUpgradeReadyReplicas": 4}}}
    paused = {**first, "upgradeStatus": {"phase": "Progressing", "status": {
        "currentStepIndex": 1, "currentStepState": "StepPaused"}}}
    text = render_status(first)
    assert status_change(text, counters) is None
    assert status_change(text, paused) == render_status(paused)
    assert status_change(None, first) == text
    assert status_change("not: [yaml", first) == text


def test_windows_line_endings_and_a_missing_final_newline_are_kept() -> None:
    text = POLICY.replace("\n", "\r\n").rstrip("\r\n")
    result = edit_policy_text(text, [FieldEdit(PAUSE_FIELD, True)])
    assert result.text is not None
    assert result.text.count("\r\n") == text.count("\r\n") + 1
    assert "\n" not in result.text.replace("\r\n", "")
    assert not result.text.endswith("\n")
    assert changed_lines(text, result.text) == ["+      pause: true"]


def test_quoted_values_compare_by_value() -> None:
    text = POLICY.replace("fwUpgradePolicy: PreferCloud", 'fwUpgradePolicy: "PreferCloud"')
    result = edit_policy_text(text, [FieldEdit(FW_UPGRADE_POLICY_FIELD, "Never", "PreferCloud")])
    assert result.outcome is EditOutcome.CHANGED and result.text is not None
    assert changed_lines(text, result.text) == [
        '-    fwUpgradePolicy: "PreferCloud"', '+    fwUpgradePolicy: "Never"',
    ]
    again = edit_policy_text(result.text, [FieldEdit(FW_UPGRADE_POLICY_FIELD, "Never")])
    assert again.outcome is EditOutcome.ALREADY


def test_a_boolean_is_not_a_number() -> None:
    text = POLICY.replace("      fallback: pause\n", "      fallback: pause\n      pause: 1\n")
    result = edit_policy_text(text, [FieldEdit(PAUSE_FIELD, True, False)])
    assert result.outcome is EditOutcome.CONFLICT
