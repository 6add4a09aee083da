"""Hostile values in the inputs of the rollout settings and their tools: ``rollout:`` of
reconciler.yaml, the ``--faults`` and ``--nodes-file`` files of ``simulate``, the forge's API
URL and the notification sinks. Each is refused with a message naming where, never a
traceback and never an unusable value taken as valid. Pure: no child process, no cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.cli.simulate import InputError, load_faults
from reconciler.cli.simulate_topology import load_nodes_file
from reconciler.policy.validation import validate_repo_config

HUGE = "9" * 400


def _errors(text: str) -> list[tuple[int, str]]:
    return [(f.line, f.message) for f in validate_repo_config(text, "reconciler.yaml").findings
            if f.is_error]


@pytest.mark.parametrize("fault", ["[crashloop]", "{crashloop: 1}"])
def test_a_fault_that_is_not_a_string_is_refused_where_written(tmp_path: Path,
                                                                fault: str) -> None:
    path = tmp_path / "faults.yaml"
    path.write_text(f"faults:\n  - {{node: node-0001, fault: {fault}}}\n")
    with pytest.raises(InputError, match=r"faults\.yaml:2:\d+: faults\[0\]\.fault: "):
        load_faults(path, 5)


def test_a_huge_fault_name_is_shown_shortened(tmp_path: Path) -> None:
    path = tmp_path / "faults.yaml"
    path.write_text(f"faults:\n  - {{node: node-0001, fault: {'x' * 100_000}}}\n")
    with pytest.raises(InputError) as refused:
        load_faults(path, 5)
    assert len(refused.value.message) < 1000
    assert "faults.yaml:2:" in refused.value.message


@pytest.mark.parametrize(("entry", "where"), [
    ("{name: a, labels: {zone: " + "z" * 64 + "}}", "labels/zone"),
    ("{name: a, labels: {'bad key!': x}}", "label key"),
    ("{name: 'a\\e[2J', labels: {}}", "node name"),
    ("{name: " + "n" * 254 + ", labels: {}}", "node name"),
])
def test_a_nodes_file_holds_only_what_the_api_server_would_store(
        tmp_path: Path, entry: str, where: str) -> None:
    path = tmp_path / "nodes.yaml"
    path.write_text(f"nodes:\n  - {{name: ok, labels: {{zone: a}}}}\n  - {entry}\n")

    def fail(message: str) -> None:
        raise InputError(message)

    with pytest.raises(InputError, match=r"nodes\.yaml:3:\d+: ") as refused:
        load_nodes_file(path, 100, fail)  # type: ignore[arg-type]
    assert len(refused.value.message) < 1000


@pytest.mark.parametrize("key", ["readyTimeout", "drain.timeout", "waitFor.timeout"])
def test_a_duration_too_large_to_count_is_an_error_where_written(key: str) -> None:
    section, _, name = key.rpartition(".")
    value = f"{HUGE}s"
    body = (f"  {section}: {{{name}: {value}}}\n" if section else f"  {name}: {value}\n")
    extra = "  drain: {}\n" if section == "waitFor" else ""
    errors = _errors(f"rollout:\n{body}{extra}")
    assert [line for line, _ in errors] == [2], errors
    assert "too large" in errors[0][1]


def test_a_cluster_duration_too_large_is_an_error_where_written() -> None:
    errors = _errors(f"clusters:\n  lab:\n    rollout:\n      readyTimeout: {HUGE}h\n")
    assert [line for line, _ in errors] == [4], errors
