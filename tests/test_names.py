"""reconciler.names, reconciler.timefmt and reconciler.planning: the bottom layer."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import reconciler
from reconciler.names import (
    ACTIVE_PHASES,
    FIRMWARE_DONE_PHASES,
    FIRMWARE_IDLE_PHASES,
    ConditionType,
    FirmwarePhase,
    Phase,
    StepState,
)
from reconciler.policy.transitions import firmware_upgrade_running

PACKAGE = Path(reconciler.__file__).parent
#: what the bottom layer may import: the standard library's pure parts
ALLOWED = {"__future__", "dataclasses", "datetime", "enum", "math", "typing", "collections"}


@pytest.mark.parametrize("module", ["names.py", "timefmt.py", "planning.py"])
def test_the_bottom_layer_imports_nothing_of_the_project_and_no_clock_or_client(
    module: str,
) -> None:
    tree = ast.parse((PACKAGE / module).read_text(encoding="utf-8"))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0 and node.module is not None
            imported.add(node.module.split(".")[0])
    assert imported <= ALLOWED, imported - ALLOWED


def test_phases_and_step_states_are_the_spec_strings() -> None:
    assert [str(p) for p in Phase] == [
        "Idling", "Progressing", "Terminating", "Disabling", "Disabled"]
    assert [str(s) for s in StepState] == [
        "StepUpgradeInit", "StepUpgrade", "StepPaused", "StepReady", "Completed"]
    # HealthCheckFailed: docs/health.md's condition of a fallback a health check caused;
    # GateConfirmed and RollingBack: what a False condition said before the CRD's conditions
    # (which have no status) made a listed condition one in force
    assert [str(c) for c in ConditionType] == [
        "Progressing", "ManualGate", "GateConfirmed", "BatchFailed", "RollingBack",
        "RolledBack", "HealthCheckFailed"]
    assert {"Progressing", "Terminating", "Disabling"} == ACTIVE_PHASES
    assert [str(p) for p in FirmwarePhase] == [
        "Idle", "Preflight", "Refused", "Cordoning", "Upgrading", "AwaitingReboot",
        "Verifying", "Finishing", "Completed", "Failed"]


@pytest.mark.parametrize("phase", [*FirmwarePhase, "", None])
def test_a_firmware_upgrade_runs_in_every_phase_but_the_done_ones(phase: str | None) -> None:
    running = phase is not None and phase not in FIRMWARE_DONE_PHASES and phase != ""
    assert firmware_upgrade_running(phase) is running
    assert (phase in FIRMWARE_IDLE_PHASES) is (phase is not None and not running)
