"""The reason a ``fwUpgradePolicy: Never`` write-back gives in its commit subject comes from the
firmware status phase: a refused or failed upgrade is never called finished."""

from __future__ import annotations

from reconciler.sync.drift import firmware_never_reason as _firmware_never_reason


def test_completed_is_finished() -> None:
    assert _firmware_never_reason({"phase": "Completed"}) == "firmware upgrade finished"


def test_a_refusal_names_the_node_and_the_reason() -> None:
    status = {"phase": "Refused", "refusals": [
        {"node": "node-0003", "rule": "driver-version", "reason": "driver 2.31 is too old"},
        {"node": "node-0004", "rule": "driver-version", "reason": "driver 2.31 is too old"}]}
    assert _firmware_never_reason(status) == (
        "firmware upgrade refused (node-0003): driver 2.31 is too old")


def test_a_cluster_wide_refusal_names_no_node() -> None:
    status = {"phase": "Refused", "refusals": [
        {"node": "*", "rule": "no-gpu-nodes", "reason": "there are no GPU nodes"}]}
    assert _firmware_never_reason(status) == (
        "firmware upgrade refused: there are no GPU nodes")


def test_a_failure_carries_the_status_message() -> None:
    status = {"phase": "Failed", "message": "node-0002 reported 1.11.0.0 after its reboot"}
    assert _firmware_never_reason(status) == (
        "firmware upgrade failed: node-0002 reported 1.11.0.0 after its reboot")


def test_a_phase_that_does_not_explain_never_yet_gives_no_reason() -> None:
    # the orchestrator's status write that says why is still on its way: the sync waits
    for status in ({}, {"phase": "AwaitingReboot"}, {"phase": "Verifying"}):
        assert _firmware_never_reason(status) is None
