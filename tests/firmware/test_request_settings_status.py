"""The request annotation, the settings from the repository config, and the status views."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.config.validation import validate_repo_config
from reconciler.firmware.model import (
    FirmwareRequest,
    FirmwareSettings,
    NodeLabelKeys,
    SettingsError,
    StageTimeouts,
)
from reconciler.firmware.request import RequestError, firmware_request_annotation, parse_request
from reconciler.firmware.status_view import (
    FirmwareRow,
    firmware_rows,
    firmware_snapshot,
    firmware_summary,
)
from reconciler.names import FIRMWARE_DONE_PHASES, FIRMWARE_IDLE_PHASES, REQUEST_ANNOTATION
from reconciler.policy.validation import validate_document


def test_annotation_round_trip() -> None:
    key, value = firmware_request_annotation(enable_virt=True, source_commit="abc")
    assert key == REQUEST_ANNOTATION == "gpu.metax-tech.com/firmware-request"
    assert json.loads(value) == {"fwUpgradePolicy": "PreferCloud", "fwEnableVirt": True,
                                 "sourceCommit": "abc"}
    assert parse_request(value) == FirmwareRequest("PreferCloud", True, "abc")
    _, value = firmware_request_annotation(enable_virt=False, source_commit=None,
                                           expected_version="1.13.0.0")
    assert parse_request(value).expected_version == "1.13.0.0"


@pytest.mark.parametrize(("value", "message"), [
    ("{", "is not JSON"),
    ("[]", "expected a JSON object"),
    ('{"fwUpgradePolicy": "Never"}', "fwUpgradePolicy must be PreferCloud, got 'Never'"),
    ('{"fwUpgradePolicy": "PreferCloud", "fwEnableVirt": "false"}',
     "fwEnableVirt: expected boolean, got str 'false'"),
    ('{"fwUpgradePolicy": "PreferCloud", "sourceCommit": 5}', "sourceCommit: expected a string"),
    ('{"fwUpgradePolicy": "PreferCloud", "expectedVersion": 1.13}',
     "expectedVersion: expected a string"),
    ('{"fwUpgradePolicy": "PreferCloud", "fwEnableVrit": true}', "unknown key(s) fwEnableVrit"),
])
def test_bad_requests_say_what_is_wrong(value: str, message: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_request(value)
    assert message in str(info.value)


def test_settings_defaults_and_config() -> None:
    assert FirmwareSettings.from_config(None) == FirmwareSettings()
    settings = FirmwareSettings.from_config({
        "nodeLabels": {"vfioPci": "example.com/vfio", "sriov": "example.com/sriov"},
        "expectedVersion": "1.13.0.0",
        "reboot": {"mode": "hook", "command": ["reboot-node", "--now"], "maxConcurrent": 3},
        "timeouts": {"upgrade": "10m", "manualReboot": "2h", "reboot": "90s", "verify": 0,
                     "hook": "30s"},
    })
    assert settings.labels == NodeLabelKeys(vfio_pci="example.com/vfio",
                                            sriov="example.com/sriov")
    assert settings.reboot_command == ("reboot-node", "--now")
    assert settings.max_concurrent_reboots == 3 and settings.reboot_mode == "hook"
    assert settings.timeouts == StageTimeouts(upgrade=600, manual_reboot=7200, reboot=90,
                                              verify=0, hook=30)
    assert settings.expected_version == "1.13.0.0"


@pytest.mark.parametrize(("config", "message"), [
    ({"nodeLabels": {"vfio": "x"}}, "firmware.nodeLabels: unknown key(s) vfio"),
    ({"timeouts": {"upgrade": "ten minutes"}}, "firmware.timeouts.upgrade: expected a duration"),
    ({"timeouts": {"boot": "1m"}}, "firmware.timeouts: unknown key(s) boot"),
    ({"reboot": {"mode": "hook"}}, "firmware.reboot.command: required when mode is hook"),
    ({"reboot": {"maxConcurrent": 0}}, "maxConcurrent: expected an integer >= 1"),
])
def test_bad_settings_say_where(config: dict[str, object], message: str) -> None:
    with pytest.raises(SettingsError) as info:
        FirmwareSettings.from_config(config)
    assert message in str(info.value)


def test_example_config_section_in_the_docs_is_valid() -> None:
    docs = (Path(__file__).parents[2] / "docs/firmware.md").read_text()
    section = docs.split("## Configuration")[1].split("```yaml\n")[1].split("```")[0]
    result = validate_repo_config(section, "reconciler.yaml")
    assert result.ok, result.findings
    settings = FirmwareSettings.from_config(result.obj["firmware"])
    assert settings.timeouts == StageTimeouts()  # the documented defaults are the real ones
    assert settings.max_concurrent_reboots == 2


def test_standalone_entry_rejects_a_bad_config(tmp_path: Path) -> None:
    config = tmp_path / "reconciler.yaml"
    config.write_text("firmware:\n  reboot:\n    mode: hook\n")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    done = subprocess.run([sys.executable, "-m", "reconciler.cli.main", "firmware", "--kubeconfig",
                           str(kubeconfig), "--config", str(config)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "firmware.reboot.command: required when mode is hook" in done.stderr
    assert "Traceback" not in done.stderr


def test_done_phases_agree_with_the_validation_seam() -> None:
    # one definition: the validation seam's set is the planner's plus a status naming no phase
    assert FIRMWARE_IDLE_PHASES - {""} == FIRMWARE_DONE_PHASES
    assert {"Idle", "Completed", "Failed", "Refused"} == FIRMWARE_DONE_PHASES


STATUS = {
    "phase": "AwaitingReboot",
    "message": "1 awaiting-reboot, 1 verified, 1 failed",
    "sourceCommit": "0123456789abcdef0123",
    "startedAt": "2026-11-30T02:00:00Z",
    "request": {"fwUpgradePolicy": "PreferCloud", "fwEnableVirt": False},
    "nodes": {
        "node-0002": {"stage": "verified", "since": "t2", "message": "VBIOS 1.13.0.0"},
        "node-0001": {"stage": "awaiting-reboot", "since": "t1",
                      "message": "NodeNeedReboot reported: reboot this node"},
        "node-0003": {"stage": "failed", "since": "t3", "message": "no NodeNeedReboot"},
    },
    "refusals": [{"node": "*", "rule": "firmware-locked", "reason": "restored"}],
    "preflight": {"nodes": 3, "refusals": []},
}


def test_rows_for_reconciler_status() -> None:
    assert firmware_rows(STATUS) == [
        FirmwareRow("node-0003", "failed", "no NodeNeedReboot", "t3"),
        FirmwareRow("node-0001", "awaiting-reboot", "NodeNeedReboot reported: reboot this node",
                    "t1"),
        FirmwareRow("node-0002", "verified", "VBIOS 1.13.0.0", "t2"),
        FirmwareRow("*", "refused", "restored", ""),
    ]
    assert firmware_summary(STATUS) == (
        "AwaitingReboot (source commit 0123456789ab): 1 awaiting-reboot, 1 verified, 1 failed")
    assert firmware_summary({}) == "Idle"
    # rows also come from a Git snapshot's section
    assert [r.stage for r in firmware_rows(firmware_snapshot(STATUS))] == [
        "failed", "awaiting-reboot", "verified", "refused"]


def test_snapshot_section_fits_the_status_snapshot_schema() -> None:
    section = firmware_snapshot(STATUS)
    assert section["nodes"] == {"node-0001": "awaiting-reboot", "node-0002": "verified",
                                "node-0003": "failed"}
    assert section["failures"] == {"node-0003": "no NodeNeedReboot"}
    snapshot = {"cluster": "lab", "observedAt": "2026-11-30T02:10:00Z", "upgradeStatus": {},
                "firmware": section}
    result = validate_document(json.dumps(snapshot), "status/lab.yaml", kind="status-snapshot")
    assert result.ok, result.findings


def test_simulator_reboot_hook_usage_errors() -> None:
    hook = [sys.executable, "-m", "reconciler.firmware.annotate_reboot"]
    no_args = subprocess.run(hook, capture_output=True, text=True, timeout=60, check=False)
    assert no_args.returncode == 2 and "usage:" in no_args.stderr
    env = {"PATH": "/usr/bin:/bin"}
    no_token = subprocess.run([*hook, "node-0001"], capture_output=True, text=True, timeout=60,
                              check=False, env=env)
    assert no_token.returncode == 2
    assert "FIRMWARE_REBOOT_TOKEN and KUBECONFIG must be set" in no_token.stderr
