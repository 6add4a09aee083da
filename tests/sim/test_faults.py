"""The fault file shared by `dev-cluster up --faults` and the fleet."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.sim.faults import Fault, FaultFileError, FaultKind, load_faults, parse_faults


def test_fault_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "faults.yaml"
    path.write_text(
        "faults:\n"
        "  - {node: node-0003, fault: imagepull}\n"
        "  - {node: node-0004, fault: crashloop, version: '2.33.0.9'}\n"
        "  - {node: node-0005, fault: node-notready}\n"
        "  - {node: node-0006, fault: never-ready}\n"
        "  - {node: node-0007, fault: firmware-no-report}\n"
        "  - {node: node-0008, fault: firmware-wrong-version}\n"
    )
    faults = load_faults(path)
    assert faults[1] == Fault("node-0004", FaultKind.CRASH_LOOP, "2.33.0.9")
    assert [f.kind.value for f in faults] == [
        "imagepull", "crashloop", "node-notready", "never-ready", "firmware-no-report",
        "firmware-wrong-version"]


def test_version_matching_ignores_the_default_arch_suffix() -> None:
    fault = Fault("node-0001", FaultKind.IMAGE_PULL, "2.33.0.9")
    assert fault.applies_to("2.33.0.9-amd64")
    assert not fault.applies_to("2.31.0.6")
    assert not fault.applies_to(None)
    assert Fault("node-0001", FaultKind.IMAGE_PULL).applies_to("anything")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- node-0001\n", "expected a mapping with one key 'faults'"),
        ("faults: {node: node-0001}\n", "'faults' must be a list"),
        ("faults: [{node: node-0001, fault: melt}]\n", "'fault' must be one of imagepull"),
        ("faults: [{fault: imagepull}]\n", "'node' must be a node name"),
        ("faults: [{node: node-0001, fault: imagepull, version: 2.5}]\n", "quote it"),
        ("faults: [{node: node-0001, fault: imagepull, when: now}]\n", "unknown key(s) when"),
        ("faults: [\n", "not valid YAML"),
    ],
)
def test_bad_fault_files_are_explained(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "faults.yaml"
    path.write_text(text)
    with pytest.raises(FaultFileError) as error:
        load_faults(path)
    assert message in str(error.value)
    assert str(path) in str(error.value)


def test_missing_file_and_empty_document(tmp_path: Path) -> None:
    with pytest.raises(FaultFileError, match="cannot read"):
        load_faults(tmp_path / "absent.yaml")
    assert parse_faults(None) == []
    assert parse_faults({"faults": []}) == []
