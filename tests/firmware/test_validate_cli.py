"""``reconciler validate`` runs the firmware preflight offline from the status snapshot, and
checks the repository config's ``firmware`` section (docs/firmware.md and docs/gitops.md)."""

from __future__ import annotations

import json
from pathlib import Path

from reconciler.firmware.model import FirmwareNode, NodeLabelKeys
from reconciler.firmware.preflight import published_facts
from tests.policy.commands import git, validate
from tests.policy.texts import FIRMWARE_PAYLOAD as PAYLOAD
from tests.policy.texts import firmware_policy as policy

KEYS = NodeLabelKeys()


def repo_with(root: Path, nodes: list[FirmwareNode], config: str = "") -> Path:
    snapshot = {
        "cluster": "lab", "observedAt": "2026-11-30T03:00:00Z", "upgradeStatus": {},
        "spec": {"driver": {"payload": PAYLOAD, "upgradePolicy": {"enableRollout": False}}},
        "firmware": {"phase": "Idle", "nodes": {}, "preflight": published_facts(nodes, KEYS)},
    }
    (root / "clusters/lab").mkdir(parents=True)
    (root / "status").mkdir()
    (root / "reconciler.yaml").write_text(config or "clustersDir: clusters\n")
    (root / "clusters/lab/cluster-operator.yaml").write_text(policy("Never"))
    (root / "status/lab.yaml").write_text(json.dumps(snapshot, indent=2))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "policy and status")
    return root


def test_pr_requesting_firmware_on_refused_nodes_fails_naming_them(tmp_path: Path) -> None:
    nodes = [FirmwareNode("gpu-01", labels={KEYS.vbios_version: "1.12.0.0"}),
             FirmwareNode("gpu-02", labels={KEYS.vbios_version: "1.12.0.0",
                                            KEYS.vfio_pci: "true"}),
             FirmwareNode("gpu-03", labels={KEYS.vbios_version: "1.11.0.0_1.12.0.0"})]
    repo = repo_with(tmp_path / "policy", nodes)
    path = repo / "clusters/lab/cluster-operator.yaml"
    path.write_text(policy("PreferCloud"))
    result = validate(repo, "--against", "main", "--format", "json")
    assert result.returncode == 1, result.stdout + result.stderr
    # the infos left out (the file's spec has only driver: crd-required-field, never fails)
    findings = [f for f in json.loads(result.stdout) if f["severity"] != "info"]
    by_rule = {f["rule"]: f for f in findings}
    assert len(findings) == 2 and {f["line"] for f in findings} == {8}
    assert "node gpu-02: GPUs are bound to vfio-pci" in by_rule[
        "firmware-preflight-vfio-pci"]["message"]
    assert "node gpu-03: VBIOS versions straddle 1.12.0.0" in by_rule[
        "firmware-preflight-vbios-straddle"]["message"]
    # virtualised firmware asked for on non-virtualised nodes: each one named
    path.write_text(policy("PreferCloud", virt="true"))
    rules = [f["rule"] for f in json.loads(
        validate(repo, "--against", "main", "--format", "json").stdout)]
    assert rules.count("firmware-preflight-sriov-unsupported") == 3
    # without --against there are no live facts: only the file's own checks
    assert validate(repo).returncode == 0


def test_pr_requesting_firmware_on_a_clean_fleet_passes(tmp_path: Path) -> None:
    nodes = [FirmwareNode(f"gpu-0{i}", labels={KEYS.vbios_version: "1.12.0.0"})
             for i in range(1, 4)]
    repo = repo_with(tmp_path / "policy", nodes)
    (repo / "clusters/lab/cluster-operator.yaml").write_text(policy("PreferCloud"))
    result = validate(repo, "--against", "main")
    assert result.returncode == 0, result.stdout + result.stderr


def test_repo_config_firmware_section_is_checked(tmp_path: Path) -> None:
    config = ("firmware:\n  nodeLabels: {vfio: x}\n  timeouts: {upgrde: 1m, reboot: soon}\n"
              "  reboot: {mode: hook, maxConcurent: 2}\n")
    repo = repo_with(tmp_path / "policy", [], config=config)
    result = validate(repo, "reconciler.yaml", "--format", "json")
    assert result.returncode == 1
    found = {(f["pointer"], f["rule"]) for f in json.loads(result.stdout)}
    assert {p for p, _ in found} >= {
        "/firmware/nodeLabels/vfio", "/firmware/timeouts/upgrde", "/firmware/timeouts/reboot",
        "/firmware/reboot/maxConcurent"}, found
    good = ("firmware:\n  expectedVersion: \"1.13.0.0\"\n"
            "  timeouts: {upgrade: 30m, manualReboot: 0, verify: 2m}\n"
            "  reboot: {mode: hook, command: [reboot-node], maxConcurrent: 2}\n")
    (repo / "reconciler.yaml").write_text(good)
    assert validate(repo, "reconciler.yaml").returncode == 0
