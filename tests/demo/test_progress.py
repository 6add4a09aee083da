"""The demo's progress view: snapshots from a ClusterOperator, the live screen, change lines."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from reconciler.demo.progress import NodeView, changes, render, snapshot_from

POLICY = {
    "enableRollout": True,
    "upgradeSteps": [{"replicas": 2}, {"replicas": 5, "pauseDuration": 10000},
                     {"replicas": 8, "pauseDuration": 10000},
                     {"replicas": "100%", "pauseDuration": 10000}],
    "pause": True,
    "maxParallel": "100%",
}


def _co(phase: str, step: int, state: str, *, gate: bool = False,
        recheck: str | None = None) -> dict[str, Any]:
    conditions = [{"type": "ManualGate", "status": "True" if gate else "False"}]
    return {
        "spec": {"driver": {"payload": {"version": "2.33.0.9"}, "upgradePolicy": POLICY}},
        "status": {"upgradeStatus": {
            "phase": phase, "message": "step 1 of 4 done", "condition": conditions,
            "status": {"currentStepIndex": step, "currentStepState": state,
                       "recheckTime": recheck},
        }},
    }


def _nodes(new: int, *, upgrading: str | None = None) -> list[NodeView]:
    nodes = []
    for i in range(1, 11):
        name = f"node-{i:04d}"
        version = "2.33.0.9-amd64" if i <= new else "2.32.0.6-amd64"
        nodes.append(NodeView(name, version, name != upgrading, name == upgrading,
                              name == upgrading))
    return nodes


def test_a_gate_is_shown_as_waiting_for_a_person() -> None:
    snap = snapshot_from(_co("Progressing", 1, "StepPaused", gate=True), _nodes(2), [])
    assert snap.gate and snap.steps == 4 and snap.spec_pause is True
    assert snap.on("2.33.0.9") == 2 and snap.on("2.32.0.6") == 8
    assert snap.headline() == ("Progressing, step 1/4 StepPaused "
                               "(manual gate: a person merges pause: false)")


def test_a_timed_pause_shows_the_time_left() -> None:
    snap = snapshot_from(_co("Progressing", 2, "StepPaused", recheck="2026-11-30T02:00:10Z"),
                         _nodes(5), [], now=1796004000.0)  # 2026-11-30T02:00:00Z
    assert snap.seconds_left() == 10.0
    assert "(10 s of pause left)" in snap.headline()


def test_the_screen_shows_batches_nodes_and_the_git_log() -> None:
    snap = snapshot_from(_co("Progressing", 2, "StepUpgrade"), _nodes(2, upgrading="node-0003"),
                         ["abc1234 Bob: release", "def5678 Alice: merge"])
    console = Console(record=True, width=120)
    console.print(render(snap, new="2.33.0.9", old="2.32.0.6", narration=["Bob released"],
                         note="simulated install: 3 s"))
    text = console.export_text()
    assert "Progressing, step 2/4 StepUpgrade" in text
    assert "a person (gate)" in text and "10 s pause" in text
    assert "~ node-0003" in text and "(cordoned)" in text
    assert "+ node-0001 2.33.0.9-amd64" in text
    assert "abc1234 Bob: release" in text and "Bob released" in text
    assert "simulated install: 3 s" in text


def test_changes_are_one_line_each() -> None:
    before = snapshot_from(_co("Progressing", 1, "StepUpgrade"), _nodes(0), ["a Alice: merge"])
    after = snapshot_from(_co("Progressing", 1, "StepPaused", gate=True), _nodes(2),
                          ["b reconciler: pause", "a Alice: merge"])
    lines = changes(before, after, new="2.33.0.9")
    assert lines[0].startswith("status: Progressing, step 1/4 StepPaused (manual gate")
    assert "node node-0001: driver 2.33.0.9-amd64 Ready" in lines
    assert "git: b reconciler: pause" in lines
    assert changes(after, after, new="2.33.0.9") == []


def test_a_small_terminal_gets_a_shorter_git_log_not_a_shorter_story() -> None:
    log = [f"c{i:06d} Alice: commit {i}" for i in range(12)]
    snap = snapshot_from(_co("Progressing", 1, "StepUpgrade"), _nodes(0), log)
    console = Console(record=True, width=120)
    console.print(render(snap, new="2.33.0.9", old="2.32.0.6", narration=["one", "two"],
                         note="n", height=24))
    small = console.export_text()
    assert "c000000" in small and "c000001" in small and "c000002" not in small
    assert "one" in small and "two" in small
    console.print(render(snap, new="2.33.0.9", old="2.32.0.6", narration=["one"], note="n"))
    tall = console.export_text()
    assert "c000007" in tall and "c000008" not in tall
