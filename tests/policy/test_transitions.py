"""Transition rules of docs/rollout.md#starting-a-rollout and docs/firmware.md: what may change
while a rollout or firmware upgrade runs."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from reconciler.names import ACTIVE_PHASES
from reconciler.policy.validation import validate_document
from tests.policy.texts import SEED_10, replace_line


def live(text: str = SEED_10) -> dict[str, Any]:
    obj = validate_document(text, "live.yaml").obj
    assert isinstance(obj, dict)
    return obj


def check(text: str, phase: str | None, *, previous: dict[str, Any] | None = None,
          firmware_phase: str | None = None) -> list[tuple[str, int, str]]:
    result = validate_document(text, "p.yaml", previous=previous or live(), phase=phase,
                               firmware_phase=firmware_phase)
    return [(f.rule, f.line, f.pointer) for f in result.errors]


@pytest.mark.parametrize("phase", sorted(ACTIVE_PHASES))
def test_max_parallel_change_is_rejected_during_a_rollout(phase: str) -> None:
    text = replace_line(SEED_10, 23, "      maxParallel: 50%")
    assert check(text, phase) == [
        ("transition-locked-field", 23, "/spec/driver/upgradePolicy/maxParallel")]
    message = validate_document(text, "p.yaml", previous=live(), phase=phase).errors[0].message
    assert f"while the rollout is {phase}" in message
    assert "was string '100%', now string '50%'" in message


@pytest.mark.parametrize("phase", ["Idling", "Disabled", "", None])
def test_anything_may_change_when_no_rollout_is_active(phase: str | None) -> None:
    text = replace_line(SEED_10, 23, "      maxParallel: 50%").replace("2.33.0.9", "2.34.0.1")
    assert check(text, phase) == []


@pytest.mark.parametrize(("line", "new"), [
    (22, "      pause: true"), (12, "      enableRollout: false")])
def test_pause_and_enable_rollout_may_change_during_a_rollout(line: int, new: str) -> None:
    assert check(replace_line(SEED_10, line, new), "Progressing") == []


def test_payload_version_change_is_rejected_during_a_rollout() -> None:
    text = SEED_10.replace("version: 2.33.0.9", "version: 2.34.0.1")
    assert check(text, "Terminating") == [
        ("transition-locked-field", 10, "/spec/driver/payload/version")]


def test_arch_suffix_alone_is_no_change() -> None:
    text = SEED_10.replace("version: 2.33.0.9", "version: 2.33.0.9-amd64")
    assert check(text, "Progressing") == []


def test_removed_step_is_reported_where_it_was() -> None:
    lines = SEED_10.splitlines(keepends=True)
    text = "".join(lines[:17] + lines[19:])  # drop the third step
    found = check(text, "Disabling")
    assert ("transition-locked-field", 13, "/spec/driver/upgradePolicy/upgradeSteps") in found


def test_removed_field_is_reported_at_its_parent() -> None:
    text = replace_line(SEED_10, 25, None)
    assert check(text, "Progressing") == [
        ("transition-locked-field", 11, "/spec/driver/upgradePolicy/maxFailureThreshold")]


def test_added_section_is_rejected_during_a_rollout() -> None:
    assert check(SEED_10 + "  maca: {payload: {images: ['maca-native:2.0']}}\n",
                 "Progressing") == [
        ("transition-locked-field", 27, "/spec/maca")]


def test_write_back_of_the_controller_trips_nothing() -> None:
    # The controller paused at a gate; the live object already has pause: true. Git catches up.
    running = live(replace_line(SEED_10, 22, "      pause: true"))
    assert check(replace_line(SEED_10, 22, "      pause: true"), "Progressing",
                 previous=running) == []


def test_bare_spec_is_accepted_as_previous() -> None:
    spec = copy.deepcopy(live()["spec"])
    text = replace_line(SEED_10, 24, "      maxUnavailable: 1")
    result = validate_document(text, "p.yaml", previous=spec, phase="Progressing")
    assert [f.rule for f in result.errors] == ["transition-locked-field"]


def test_starting_firmware_upgrade_during_a_rollout_is_rejected() -> None:
    text = replace_line(SEED_10, 10, "      version: 2.33.0.9\n    fwUpgradePolicy: PreferCloud")
    found = validate_document(text, "p.yaml", previous=live(), phase="Progressing").errors
    assert [(f.rule, f.line) for f in found] == [("transition-locked-field", 11)]
    assert "a firmware upgrade never runs during a driver rollout" in found[0].message


FIRMWARE_LIVE = replace_line(
    SEED_10, 10,
    "      version: 2.33.0.9\n    fwUpgradePolicy: PreferCloud\n    fwEnableVirt: false")


@pytest.mark.parametrize(("old", "new", "line"), [
    ("fwEnableVirt: false", "fwEnableVirt: true", 12),
    ("fwUpgradePolicy: PreferCloud", "fwUpgradePolicy: Never", 11),
])
def test_firmware_parameters_are_locked_while_an_upgrade_runs(old: str, new: str, line: int
                                                              ) -> None:
    text = FIRMWARE_LIVE.replace(old, new)
    assert check(text, "Disabled", previous=live(FIRMWARE_LIVE), firmware_phase="AwaitingReboot"
                 ) == [("firmware-locked-field", line, "/spec/driver/" + new.split(":")[0])]


def test_driver_payload_is_locked_while_firmware_upgrade_runs() -> None:
    text = FIRMWARE_LIVE.replace("version: 2.33.0.9", "version: 2.34.0.1")
    assert check(text, "Idling", previous=live(FIRMWARE_LIVE), firmware_phase="Upgrading") == [
        ("firmware-rollout-conflict", 10, "/spec/driver/payload/version")]


@pytest.mark.parametrize("firmware_phase", ["Idle", "Completed", "Failed", "Refused", None])
def test_firmware_parameters_may_change_when_no_upgrade_runs(firmware_phase: str | None) -> None:
    text = FIRMWARE_LIVE.replace("fwUpgradePolicy: PreferCloud", "fwUpgradePolicy: Never")
    assert check(text, "Idling", previous=live(FIRMWARE_LIVE), firmware_phase=firmware_phase
                 ) == []


def test_new_file_without_previous_has_no_transition_rules() -> None:
    result = validate_document(SEED_10, "p.yaml", previous=None, phase="Progressing")
    assert result.ok


def test_extra_rule_seam_adds_findings() -> None:
    from reconciler.policy.findings import Finding
    from reconciler.policy.rules import RuleContext

    def preflight(ctx: RuleContext) -> list[Finding]:
        return [ctx.doc.finding("/spec/driver/payload", "firmware-preflight", "node-1: vfio-pci")]

    result = validate_document(SEED_10, "p.yaml", extra_rules=[preflight])
    assert [(f.rule, f.line) for f in result.errors] == [("firmware-preflight", 8)]
