"""Each preflight refusal, as table tests on the pure rules (docs/firmware.md)."""

from __future__ import annotations

import pytest

from reconciler.firmware.model import FirmwareNode, NodeLabelKeys
from reconciler.firmware.preflight import (
    offline_preflight,
    preflight,
    published_facts,
)

KEYS = NodeLabelKeys()
CLEAN = {"metax-tech.com/gpu.vbios.version": "1.12.0.0", "metax-tech.com/gpu.sriov": "forbidden"}


def node(name: str = "node-0001", vfio_gpus: int = 0, **labels: str) -> FirmwareNode:
    merged = dict(CLEAN)
    for key, value in labels.items():
        label = {"vbios": KEYS.vbios_version, "vfio": KEYS.vfio_pci, "vm": KEYS.virtual_machine,
                 "multihost": KEYS.multi_host, "sriov": KEYS.sriov}[key]
        if value == "<absent>":
            merged.pop(label, None)
        else:
            merged[label] = value
    return FirmwareNode(name, labels=merged, vfio_gpus=vfio_gpus)


@pytest.mark.parametrize(("nodes", "virt", "rollout", "expected"), [
    pytest.param([node(vfio="true")], False, None, [("node-0001", "vfio-pci")], id="vfio-label"),
    pytest.param([node(vfio_gpus=8)], False, None, [("node-0001", "vfio-pci")],
                 id="vfio-allocatable"),
    pytest.param([node(vm="true")], False, None, [("node-0001", "virtual-machine")], id="vm"),
    pytest.param([node(vbios="1.11.0.0_1.12.0.0")], False, None,
                 [("node-0001", "vbios-straddle")], id="straddle"),
    pytest.param([node(vbios="1.11.9.9_1.13.0.0_1.12.0.0")], False, None,
                 [("node-0001", "vbios-straddle")], id="straddle-three"),
    pytest.param([node(vbios="<absent>")], False, None, [("node-0001", "vbios-unknown")],
                 id="vbios-missing"),
    pytest.param([node(vbios="1.12.x")], False, None, [("node-0001", "vbios-unknown")],
                 id="vbios-garbage"),
    pytest.param([node(multihost="true")], False, None, [("node-0001", "multi-host")],
                 id="multi-host"),
    pytest.param([node(sriov="forbidden")], True, None, [("node-0001", "sriov-unsupported")],
                 id="non-virtualised-to-virtualised"),
    pytest.param([node(sriov="<absent>")], True, None, [("node-0001", "sriov-unsupported")],
                 id="sriov-label-missing"),
    pytest.param([node()], False, "Progressing", [("*", "rollout-active")], id="rollout"),
    pytest.param([node()], False, "Terminating", [("*", "rollout-active")], id="rollback"),
    pytest.param([node()], False, "Disabling", [("*", "rollout-active")], id="disabling"),
    # accepted
    pytest.param([node()], False, None, [], id="clean"),
    pytest.param([node()], False, "Idling", [], id="rollout-idle"),
    pytest.param([node(vbios="1.10.0.0_1.11.2.0")], False, None, [], id="all-below"),
    pytest.param([node(vbios="1.12.0.0_1.13.1.0")], False, None, [], id="all-at-or-above"),
    pytest.param([node(sriov="Support")], True, None, [], id="virtualised-stays-virtualised"),
    pytest.param([node(vfio="false", vm="false", multihost="false")], False, None, [],
                 id="explicit-false"),
])
def test_refusals(nodes: list[FirmwareNode], virt: bool, rollout: str | None,
                  expected: list[tuple[str, str]]) -> None:
    refusals = preflight(nodes, enable_virt=virt, keys=KEYS, rollout_phase=rollout)
    assert [(r.node, r.rule) for r in refusals] == expected
    for refusal in refusals:
        assert refusal.reason  # a person reads why


def test_each_node_and_reason_named() -> None:
    nodes = [node("node-0002", vm="true", multihost="true"), node("node-0001", vfio="true"),
             node("node-0003")]
    refusals = preflight(nodes, enable_virt=True, keys=KEYS, rollout_phase=None)
    assert [(r.node, r.rule) for r in refusals] == [
        ("node-0001", "sriov-unsupported"), ("node-0001", "vfio-pci"),
        ("node-0002", "multi-host"), ("node-0002", "sriov-unsupported"),
        ("node-0002", "virtual-machine"), ("node-0003", "sriov-unsupported")]
    straddle = preflight([node(vbios="1.11.0.0_1.12.0.0")], enable_virt=False, keys=KEYS,
                         rollout_phase=None)[0]
    assert "1.11.0.0 below" in straddle.reason and "1.12.0.0 at or above" in straddle.reason


def test_label_keys_are_configurable() -> None:
    keys = NodeLabelKeys(vfio_pci="example.com/vfio", vbios_version="example.com/vbios")
    n = FirmwareNode("node-0001", labels={"example.com/vfio": "true",
                                          "example.com/vbios": "1.12.0.0"})
    assert [r.rule for r in preflight([n], enable_virt=False, keys=keys,
                                      rollout_phase=None)] == ["vfio-pci"]


def test_offline_preflight_gives_the_same_refusals_as_the_live_one() -> None:
    nodes = [node("node-0001", vfio="true"), node("node-0002"), node("node-0003", vm="true"),
             node("node-0004", sriov="supported")]
    facts = published_facts(nodes, KEYS)
    for virt in (False, True):
        for rollout in (None, "Progressing"):
            live = preflight(nodes, enable_virt=virt, keys=KEYS, rollout_phase=rollout)
            offline = offline_preflight(facts, enable_virt=virt, rollout_phase=rollout)
            assert [(r.node, r.rule) for r in offline] == [(r.node, r.rule) for r in live]


def test_published_facts_are_bounded() -> None:
    nodes = [node(f"node-{i:05d}", vm="true") for i in range(250)]
    facts = published_facts(nodes, KEYS)
    assert facts["nodes"] == 250 and facts["refusalCount"] == 250
    assert len(facts["refusals"]) == 100 and len(facts["nonVirtualised"]) == 100
    offline = offline_preflight(facts, enable_virt=True, rollout_phase=None)
    assert ("*", "more-refusals") in [(r.node, r.rule) for r in offline]
    assert any("150 more" in r.reason for r in offline if r.rule == "sriov-unsupported")
