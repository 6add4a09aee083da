"""``reconciler simulate --faults`` with the GPU fault kinds: accepted, and (with no health
checks to read GPU telemetry) the rollout is the same as without them."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from reconciler.cli.main import cli
from tests.rollout.test_simulate_cli import SEED_10, as_json, write_faults

ARGS = (SEED_10, "--nodes", "10", "--from-version", "2.32.0.6", "--auto-confirm", "30")


def test_gpu_faults_are_accepted_and_leave_a_rollout_without_health_checks_unchanged(
    tmp_path: Path,
) -> None:
    faults = write_faults(tmp_path, ("node-0001", "gpu-unavailable"),
                          ("node-0004", "gpu-throttling"))
    code, with_faults = as_json(*ARGS, "--faults", faults)
    assert code == 0 and with_faults["completed"] is True
    assert as_json(*ARGS) == (0, with_faults)
    result = CliRunner().invoke(cli, ["simulate", *map(str, ARGS), "--faults", str(faults)],
                                catch_exceptions=False)
    assert "2 GPU fault(s) (node-0001, node-0004) do not change this rollout" in result.stderr


def test_a_node_gets_one_fault_and_unknown_kinds_list_the_gpu_ones(tmp_path: Path) -> None:
    faults = write_faults(tmp_path, ("node-0001", "imagepull"), ("node-0001", "gpu-throttling"))
    result = CliRunner().invoke(cli, ["simulate", *map(str, ARGS), "--faults", str(faults)],
                                catch_exceptions=False)
    assert result.exit_code == 2 and "node-0001 already has a fault (imagepull)" in result.stderr
    faults = write_faults(tmp_path, ("node-0001", "gpu-melting"))
    result = CliRunner().invoke(cli, ["simulate", *map(str, ARGS), "--faults", str(faults)],
                                catch_exceptions=False)
    assert result.exit_code == 2
    assert "gpu-throttling, gpu-unavailable" in result.stderr
