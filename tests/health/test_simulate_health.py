"""``reconciler simulate --repo-config F`` with a ``health`` section: the checks' delays and the
GPU faults change the predicted rollout, and the JSON gains the checks' outcomes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from click.testing import CliRunner

from reconciler.cli.main import cli
from tests.rollout.test_simulate_cli import SEED_10, as_json, write_faults

HEALTH = """\
health:
  prometheus: {url: http://prometheus.monitoring:9090}
  interval: 10s
  nodeChecks:
    - name: gpus-available
      query: 'min(mx_gpu_state{Hostname="{{node}}"})'
      expect: '== 1'
      within: 2m
  stepChecks:
    - name: no-throttling
      query: 'max(mx_clk_thr{Hostname=~"{{nodes}}"}) or vector(0)'
      expect: '== 0'
      for: 30s
"""

ARGS = (SEED_10, "--nodes", "10", "--from-version", "2.32.0.6", "--auto-confirm", "30")


def repo_config(tmp_path: Path, text: str = HEALTH) -> Path:
    path = tmp_path / "reconciler.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def strict_policy(tmp_path: Path) -> Path:
    """The seed's policy with maxFailureThreshold 1: one failed node pauses the batch."""
    text = SEED_10.read_text(encoding="utf-8").replace("maxFailureThreshold: 3",
                                                      "maxFailureThreshold: 1")
    path = tmp_path / "policy.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def outcomes(result: dict[str, Any], result_: str) -> set[tuple[str, str]]:
    return {(o["check"], o.get("node", "")) for o in result["health_checks"]
            if o["result"] == result_}


def test_a_clean_rollout_with_checks_completes_later_by_the_checks_delays(
    tmp_path: Path,
) -> None:
    code, plain = as_json(*ARGS)
    code_h, checked = as_json(*ARGS, "--repo-config", repo_config(tmp_path))
    assert code == code_h == 0 and checked["completed"] is True
    assert set(checked) - set(plain) == {"health_checks"}  # only a new key
    passed = outcomes(checked, "Passed")
    assert {node for check, node in passed if check == "gpus-available"} == {
        f"node-{i:04d}" for i in range(1, 11)}
    assert ("no-throttling", "") in passed
    # every batch waits at least the scrape delay (15 s) and the step check's 30 s hold
    assert checked["duration_seconds"] >= plain["duration_seconds"] + 4 * (15 + 30)


def test_gpu_unavailable_on_a_canary_fails_its_node_check_and_pauses_batch_one(
    tmp_path: Path,
) -> None:
    faults = write_faults(tmp_path, ("node-0001", "gpu-unavailable"))
    code, result = as_json(strict_policy(tmp_path), *ARGS[1:], "--faults", faults,
                           "--repo-config", repo_config(tmp_path))
    assert code == 1 and result["stop_reason"] == "fallback-pause"
    assert outcomes(result, "Failed") == {("gpus-available", "node-0001")}
    conditions = {c["type"]: c for c in result["final"]["conditions"]}
    assert "node-0001" in conditions["HealthCheckFailed"]["message"]
    assert result["final"]["status"]["currentStepIndex"] == 1
    on_new = [n["name"] for n in result["nodes"] if n["version"] == "2.33.0.9"]
    assert set(on_new) <= {"node-0001", "node-0002"}  # nothing outside batch 1


def test_gpu_throttling_fails_the_step_check_at_once(tmp_path: Path) -> None:
    faults = write_faults(tmp_path, ("node-0002", "gpu-throttling"))
    code, result = as_json(*ARGS, "--faults", faults, "--repo-config", repo_config(tmp_path))
    assert code == 1 and result["stop_reason"] == "fallback-pause"
    assert outcomes(result, "Failed") == {("no-throttling", "")}
    conditions = {c["type"]: c for c in result["final"]["conditions"]}
    assert "mx_clk_thr" in conditions["HealthCheckFailed"]["message"]
    assert result["final"]["status"]["currentFailureRetry"] == 0  # not a node failure


def test_an_invalid_health_section_is_refused_with_its_location(tmp_path: Path) -> None:
    bad = repo_config(tmp_path, HEALTH.replace("expect: '== 1'", "expect: '= 1'"))
    result = CliRunner().invoke(cli, ["simulate", *map(str, ARGS), "--repo-config", str(bad)])
    assert result.exit_code == 2
    assert "reconciler.yaml:7:15:" in result.stderr
    assert "health-expect" in result.stderr
