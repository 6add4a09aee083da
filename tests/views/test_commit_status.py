"""Forge commit statuses decided purely (docs/forges.md): the state and description per phase and
kind, the forges' words, the 140-character cut, deduplication and the rate limit on a
virtual clock."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.views.commit_status import (
    MAX_DESCRIPTION,
    CommitStatus,
    PostGate,
    commit_status,
    cut,
    forge_state,
)

NOW = 1_790_000_000.0
SHA = "a" * 40


def snap(phase: str = "Progressing", index: int = 1, state: str = "StepUpgrade", *,
         ready: int = 2, total: int = 10, conditions: tuple[dict[str, Any], ...] = (),
         version: str = "2.0.0", pause: bool = False, **extra: Any) -> dict[str, Any]:
    policy: dict[str, Any] = {"upgradeSteps": [{"step": 1}, {"step": 5}, {"step": 100}]}
    if pause:
        policy["pause"] = True
    return {
        "upgradeStatus": {
            "phase": phase,
            "lastAppliedSpec": {"payload": {"version": version}},
            "status": {"currentStepIndex": index, "currentStepState": state,
                       "totalUpgradeReadyReplicas": ready, "totalUpgradeReplicas": total},
            "condition": list(conditions),
        },
        "spec": {"driver": {"upgradePolicy": policy, "payload": {"version": version}}},
        **extra,
    }


def status(snapshot: dict[str, Any], commit: str | None = SHA) -> CommitStatus | None:
    return commit_status(snapshot, cluster="prod-a", commit=commit, now=NOW,
                         target_url="https://dash.example.com/")


@pytest.mark.parametrize(("snapshot", "state", "description"), [
    (snap(), "running", "step 1/3 to 2.0.0, 2/10 nodes on the new driver"),
    (snap(index=2, state="StepPaused",
          conditions=({"type": "ManualGate", "status": "True"},)),
     "running", "step 2/3 to 2.0.0, 2/10 nodes on the new driver, waits for a person: step 2/3 "
                "is done (manual gate)"),
    (snap(state="StepPaused", conditions=({"type": "BatchFailed", "status": "True",
                                          "message": "2 of 2 nodes failed"},)),
     "failure", "failure fallback at step 1/3: 2 of 2 nodes failed"),
    (snap(phase="Terminating"), "failure", "rolling back at step 1/3 (after failures)"),
    (snap(phase="Disabling"), "failure", "rolling back at step 1/3 (grey release turned off)"),
    (snap(phase="Idling", index=1, state="Completed",
          conditions=({"type": "RolledBack", "status": "True",
                       "message": "driver 2.0.0 rolled back to 1.0.0"},)),
     "failure", "rolled back: driver 2.0.0 rolled back to 1.0.0"),
    (snap(phase="Idling", index=3, state="Completed", ready=10),
     "success", "completed 2.0.0; 10/10 nodes on the new driver"),
])
def test_state_and_description_per_phase(snapshot: dict[str, Any], state: str,
                                         description: str) -> None:
    got = status(snapshot)
    assert got == CommitStatus(SHA, "gpu-reconciler/prod-a", state, description,
                               "https://dash.example.com/")


def test_pause_timer_is_named_by_its_end_so_the_description_stays_the_same() -> None:
    timed = snap(index=1, state="StepPaused")
    timed["upgradeStatus"]["status"]["recheckTime"] = "2026-09-21T12:00:00Z"
    early = commit_status(timed, cluster="c", commit=SHA, now=NOW)
    later = commit_status(timed, cluster="c", commit=SHA, now=NOW + 30)
    assert early is not None and later is not None
    assert early.description == later.description
    assert "waits for the pause after step 1/3 (until 2026-09-21T12:00:00Z)" in early.description


def test_rejected_commit_fails_on_itself_with_the_located_reason() -> None:
    snapshot = snap(rejection={"commit": "b" * 40, "findings": [
        {"file": "clusters/prod-a/policy.yaml", "line": 7, "rule": "schema",
         "message": "maxUnavailable must be at least 1"}]})
    assert status(snapshot, commit=SHA) == CommitStatus(
        "b" * 40, "gpu-reconciler/prod-a", "failure",
        "rejected, nothing applied: clusters/prod-a/policy.yaml:7: maxUnavailable must be at "
        "least 1", "https://dash.example.com/")


def test_nothing_to_report_without_a_rollout_or_a_commit() -> None:
    assert status(snap(phase="Idling", index=0, state="")) is None
    assert status(snap(), commit=None) is None


@pytest.mark.parametrize(("forge", "words"), [
    ("github", ["pending", "pending", "success", "failure"]),
    ("gitea", ["pending", "pending", "success", "failure"]),
    ("gitlab", ["pending", "running", "success", "failed"]),
])
def test_each_forge_gets_its_own_words(forge: str, words: list[str]) -> None:
    assert [forge_state(forge, s) for s in ("pending", "running", "success", "failure")] == words


def test_descriptions_are_cut_to_140_characters() -> None:
    long = snap(state="StepPaused", conditions=({"type": "BatchFailed", "status": "True",
                                                "message": "x" * 400},))
    got = status(long)
    assert got is not None and len(got.description) == MAX_DESCRIPTION
    assert got.description.endswith("…")
    assert cut("a\nb  c") == "a b c"
    assert cut("y" * 140) == "y" * 140


def _status(state: str = "running", description: str = "step 1/3",
            commit: str = SHA) -> CommitStatus:
    return CommitStatus(commit, "gpu-reconciler/prod-a", state, description)


def test_identical_states_are_not_posted_again() -> None:
    gate = PostGate()
    first = _status()
    assert gate.due(first, 0.0) == 0.0
    gate.attempted(first, 0.0)
    gate.done(first)
    assert gate.due(first, 100.0) is None
    for other in (_status(description="step 2/3"), _status(state="success"),
                  _status(commit="c" * 40)):
        assert gate.due(other, 100.0) == 100.0


def test_one_post_per_cluster_per_10_seconds_on_a_virtual_clock() -> None:
    gate = PostGate()
    gate.attempted(_status(), 50.0)
    gate.done(_status())
    assert gate.due(_status(description="step 2/3"), 52.5) == 60.0
    assert gate.due(_status(description="step 2/3"), 60.0) == 60.0
    # another cluster is not held by this one
    other = CommitStatus(SHA, "gpu-reconciler/prod-b", "running", "step 1/3")
    assert gate.due(other, 52.5) == 52.5


def test_a_failed_post_counts_for_the_rate_but_is_not_remembered_as_posted() -> None:
    gate = PostGate()
    gate.attempted(_status(), 0.0)
    assert gate.due(_status(), 1.0) == 10.0
