"""``reconciler status``'s report, pure: phase, step i/n, batches, failures, and what the
rollout waits for (gate, pause timer with time left, pause: true, busy and unavailable nodes)."""

from __future__ import annotations

from typing import Any

from click.testing import CliRunner

from reconciler.cli.main import cli
from reconciler.sync.status_view import parse_time, report

NOW = parse_time("2026-11-30T10:00:00Z") or 0.0


def snapshot(state: str = "StepPaused", *, index: int = 1, phase: str = "Progressing",
             conditions: list[dict[str, Any]] | None = None, recheck: str = "",
             pause: bool = False) -> dict[str, Any]:
    return {
        "cluster": "prod-a",
        "sourceCommit": "a" * 40,
        "observedAt": "2026-11-30T09:59:00Z",
        "upgradeStatus": {
            "phase": phase, "upgrading": phase == "Progressing",
            "condition": conditions or [],
            "status": {"currentStepIndex": index, "currentStepState": state,
                       "totalUpgradeReplicas": 10, "totalUpgradeReadyReplicas": 3,
                       "currentFailureRetry": 1, "recheckTime": recheck, "message": ""},
        },
        "spec": {"driver": {
            "payload": {"version": "2.33.0.9"},
            "upgradePolicy": {"enableRollout": True, "pause": pause, "maxFailureThreshold": 2,
                              "upgradeSteps": [
                                  {"replicas": 1},
                                  {"replicas": "50%", "pauseDuration": 600000},
                                  {"replicas": "100%", "pauseDuration": 0}]}}},
    }


def test_a_manual_gate_names_the_person_and_the_merge() -> None:
    gate = [{"type": "ManualGate", "status": "True", "reason": "WaitingForConfirmation"}]
    result = report(snapshot(conditions=gate), now=NOW)
    assert (result.phase, result.step, result.step_state) == ("Progressing", "1/3", "StepPaused")
    assert [(r.step, r.target, r.nodes, r.pause, r.state) for r in result.steps] == [
        (1, 1, 1, "gate (a person)", "StepPaused"), (2, 5, 4, "10m00s", "pending"),
        (3, 10, 5, "none", "pending")]
    assert result.waiting_for == [
        "a person: step 1/3 is done; merge `pause: false` to release the next batch "
        "(manual gate)"]
    assert (result.failures, result.max_failures) == (1, 2)


def test_a_pause_timer_shows_the_time_left() -> None:
    result = report(snapshot(index=2, recheck="2026-11-30T10:04:30Z"), now=NOW)
    assert result.steps[0].state == "done"
    assert result.waiting_for == ["the pause timer: 4m30s left (until 10:04:30Z)"]


def test_failures_pause_true_rejection_busy_and_unavailable_nodes() -> None:
    failed = [{"type": "BatchFailed", "status": "True", "reason": "FailureThresholdReached",
               "message": "step 2: 2 failures (failed: node-0004, node-0005)"}]
    snap = snapshot(index=2, conditions=failed)
    snap["rejection"] = {"commit": "b" * 40, "findings": [
        {"file": "clusters/prod-a/co.yaml", "line": 12, "message": "maxParallel cannot change"}]}
    result = report(snap, now=NOW, nodes={"busy": {"node-0007": ["ml/train-1"]},
                                          "unavailable": {"node-0004": "NotReady"}})
    assert result.waiting_for[0] == ("a fixed commit: bbbbbbbbbbbb was rejected "
                                     "(clusters/prod-a/co.yaml:12: maxParallel cannot change)")
    assert "node-0004, node-0005" in result.waiting_for[1]
    assert "busy nodes (GPU pods must finish first): node-0007 (ml/train-1)" in result.waiting_for
    assert "unavailable nodes: node-0004 (NotReady)" in result.waiting_for
    paused = report(snapshot(pause=True), now=NOW)
    assert paused.waiting_for == [
        "a person: the policy says `pause: true`; merge `pause: false` to go on"]


def test_a_completed_rollout_waits_for_nothing() -> None:
    done = report(snapshot("Completed", index=3, phase="Idling"), now=NOW)
    assert done.waiting_for == []
    assert [r.state for r in done.steps] == ["done", "done", "done"]


def test_the_command_reads_a_snapshot_in_a_local_repository(tmp_path: Any) -> None:
    import subprocess

    from reconciler.gitops.edits import render_status

    repo = tmp_path / "policy"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "status").mkdir()
    gate = [{"type": "ManualGate", "status": "True", "reason": "WaitingForConfirmation"}]
    (repo / "status" / "prod-a.yaml").write_text(render_status(snapshot(conditions=gate)))
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@x",
                    "commit", "-q", "-m", "status"], check=True)
    runner = CliRunner()
    text = runner.invoke(cli, ["status", "--repo", str(repo), "--cluster", "prod-a"])
    assert text.exit_code == 0, text.output
    assert "Progressing" in text.output and "merge `pause: false`" in text.output
    data = runner.invoke(cli, ["status", "--repo", str(repo), "--cluster", "prod-a",
                               "--format", "json"])
    assert data.exit_code == 0
    import json

    parsed = json.loads(data.output)
    assert parsed["step"] == "1/3" and parsed["waitingFor"][0].startswith("a person")
    missing = runner.invoke(cli, ["status", "--repo", str(repo), "--cluster", "prod-b"])
    assert missing.exit_code == 1
    assert "no status snapshot for cluster 'prod-b'" in missing.output
