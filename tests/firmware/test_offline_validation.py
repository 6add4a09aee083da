"""The firmware rules offline (docs/firmware.md and docs/gitops.md): a pull request is checked
against the cluster's last status snapshot, whose ``firmware`` section the orchestrator's status
gives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reconciler.firmware.controller import FirmwareController
from reconciler.firmware.model import FirmwareNode, FirmwareSettings, NodeLabelKeys
from reconciler.firmware.preflight import firmware_preflight_rule, published_facts
from reconciler.firmware.status_view import firmware_snapshot
from reconciler.gitops.status_policy import build_snapshot
from reconciler.kube.api import KubeApi
from reconciler.policy.validation import validate_document
from reconciler.sim.waiting import wait_for
from reconciler.stored_status import firmware_status_of
from tests.firmware.helpers import cluster_operator, firmware_status, request_firmware
from tests.policy.commands import git, validate
from tests.policy.texts import FIRMWARE_PAYLOAD, firmware_policy


def errors_and_warnings(stdout: str) -> list[dict[str, Any]]:
    """``validate --format json``'s findings but its infos."""
    return [f for f in json.loads(stdout) if f["severity"] != "info"]


def make_repo(root: Path, snapshot: dict[str, Any], *, policy: str, virt: str,
              payload: str) -> Path:
    (root / "clusters/lab").mkdir(parents=True)
    (root / "status").mkdir()
    (root / "reconciler.yaml").write_text("firmware:\n  reboot:\n    mode: manual\n")
    (root / "clusters/lab/cluster-operator.yaml").write_text(
        firmware_policy(policy, virt, payload=payload))
    (root / "status/lab.yaml").write_text(json.dumps(snapshot, indent=2))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "policy and status")
    return root


@pytest.mark.cluster
def test_pr_changing_firmware_parameters_mid_upgrade_is_rejected(
    kube: KubeApi, fleet_factory: Any, tmp_path: Path
) -> None:
    fleet = fleet_factory(nodes=4, firmware_seconds=0.3)
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 4, timeout=60, what="4 Ready pods")
    controller = FirmwareController(kube, settings=FirmwareSettings()).start()
    try:
        request_firmware(kube, source_commit="a" * 40)

        def awaiting_reboot() -> dict[str, Any] | None:
            """The object once its status says AwaitingReboot for every node (the phase may
            come before the last node's stage: one read of both, not two)."""
            co = cluster_operator(kube)
            status = firmware_status_of(co)
            stages = {name: entry.get("stage") for name, entry in
                      (status.get("nodes") or {}).items()}
            return co if (status.get("phase") == "AwaitingReboot" and stages
                          == dict.fromkeys(fleet.node_names, "awaiting-reboot")) else None

        co = wait_for(awaiting_reboot, timeout=120, what="AwaitingReboot on every node",
                      observe=lambda: firmware_status(kube))
    finally:
        controller.stop()
    # what the sync role commits: the snapshot with the orchestrator's firmware section
    status = firmware_status_of(co)
    snapshot = {"cluster": "lab", "observedAt": "2026-11-30T03:00:00Z",
                **build_snapshot(co, source_commit="a" * 40, firmware=firmware_snapshot(status))}
    assert snapshot["firmware"]["nodes"] == dict.fromkeys(
        ["node-0001", "node-0002", "node-0003", "node-0004"], "awaiting-reboot")
    # the policy file asks for what the cluster runs
    payload = json.dumps(co["spec"]["driver"]["payload"])
    repo = make_repo(tmp_path / "policy", snapshot, policy="PreferCloud", virt="false",
                     payload=payload)
    assert validate(repo, "--against", "main").returncode == 0, "the snapshot itself is valid"
    path = repo / "clusters/lab/cluster-operator.yaml"
    path.write_text(firmware_policy("PreferCloud", "true", payload=payload))
    result = validate(repo, "--against", "main", "--format", "json")
    assert result.returncode == 1, result.stdout + result.stderr
    # infos left out: they never fail (docs/validation.md#severities)
    (finding,) = errors_and_warnings(result.stdout)
    assert finding["rule"] == "firmware-locked-field"
    assert finding["pointer"] == "/spec/driver/fwEnableVirt"
    assert "phase AwaitingReboot" in finding["message"]
    # and turning it off by hand mid-upgrade is refused too
    path.write_text(firmware_policy("Never", "false", payload=payload))
    result = validate(repo, "--against", "main", "--format", "json")
    assert [f["rule"] for f in errors_and_warnings(result.stdout)] == ["firmware-locked-field"]


KEYS = NodeLabelKeys()


def snapshot_with(nodes: list[FirmwareNode], rollout_phase: str = "Idling") -> dict[str, Any]:
    facts = published_facts(nodes, KEYS)
    return {"upgradeStatus": {"phase": rollout_phase},
            "firmware": {"phase": "Idle", "nodes": {}, "preflight": facts}}


def node(name: str, **labels: str) -> FirmwareNode:
    return FirmwareNode(name, labels={KEYS.vbios_version: "1.12.0.0", **labels})


@pytest.mark.parametrize(("nodes", "rollout", "virt", "rules"), [
    ([node("n1", **{KEYS.vfio_pci: "true"})], "Idling", "false", ["firmware-preflight-vfio-pci"]),
    ([node("n1", **{KEYS.virtual_machine: "true"})], "Idling", "false",
     ["firmware-preflight-virtual-machine"]),
    ([node("n1", **{KEYS.vbios_version: "1.11.0.0_1.12.0.0"})], "Idling", "false",
     ["firmware-preflight-vbios-straddle"]),
    ([node("n1", **{KEYS.multi_host: "true"})], "Idling", "false",
     ["firmware-preflight-multi-host"]),
    ([node("n1")], "Idling", "true", ["firmware-preflight-sriov-unsupported"]),
    # reported once, by the transition rules
    ([node("n1")], "Progressing", "false", ["transition-locked-field"]),
    ([node("n1", **{KEYS.sriov: "Support"})], "Idling", "true", []),
    ([node("n1")], "Idling", "false", []),
])
def test_preflight_runs_offline_from_the_snapshot(
    nodes: list[FirmwareNode], rollout: str, virt: str, rules: list[str]
) -> None:
    rule = firmware_preflight_rule(snapshot_with(nodes, rollout))
    previous = {"spec": {"driver": {"payload": dict(FIRMWARE_PAYLOAD), "fwUpgradePolicy": "Never",
                                    "fwEnableVirt": False,
                                    "upgradePolicy": {"enableRollout": False}}}}
    text = firmware_policy("PreferCloud", virt)
    result = validate_document(text, "clusters/lab/cluster-operator.yaml", previous=previous,
                               phase=rollout, firmware_phase="Idle", extra_rules=[rule])
    assert [f.rule for f in result.errors] == rules
    firmware = [f for f in result.findings if f.rule.startswith("firmware-preflight-")]
    for finding in firmware:
        assert finding.pointer == "/spec/driver/fwUpgradePolicy"
        assert finding.line == 8  # the fwUpgradePolicy line, where the person looks
        assert finding.message.startswith("firmware upgrade refused: ")
        assert "node n1: " in finding.message
    # an unrelated edit of a file that already asks for PreferCloud is not a new request
    same = validate_document(text, "x.yaml", previous={"spec": {"driver": {
        "fwUpgradePolicy": "PreferCloud", "fwEnableVirt": virt == "true"}}},
        phase="Idling", firmware_phase="Completed", extra_rules=[rule])
    assert not [f for f in same.findings if f.rule.startswith("firmware-preflight-")]
