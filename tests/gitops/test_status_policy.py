"""When a status snapshot becomes a commit: pure decisions on a virtual clock."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from reconciler.gitops.status_policy import (
    SnapshotKey,
    WriterState,
    WriterTiming,
    committed,
    describe,
    due_at,
    observe,
    snapshot_key,
    trailers,
)

TIMING = WriterTiming(min_interval=5.0, max_delay=30.0)


def snap(phase: str = "Progressing", step: int = 1, state: str = "StepUpgrade",
         ready: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "cluster": "prod-a",
        "sourceCommit": "a" * 40,
        "upgradeStatus": {
            "phase": phase,
            "upgrading": phase in ("Progressing", "Terminating", "Disabling"),
            "status": {"currentStepIndex": step, "currentStepState": state,
                       "totalUpgradeReplicas": 10, "totalUpgradeReadyReplicas": ready},
        },
        "spec": {"upgradePolicy": {"upgradeSteps": [{}, {}, {}]}},
        **extra,
    }


def run(events: list[tuple[float, dict[str, Any]]], until: float,
        state: WriterState | None = None) -> list[tuple[float, dict[str, Any]]]:
    """Feed snapshots at their times and commit whenever due: the commits made, in order."""
    state = state or WriterState(committed_key=snapshot_key(snap("Idling", 0, "Completed")))
    commits = []
    timeline = sorted(events, key=lambda e: e[0])
    now = 0.0
    while now <= until:
        for at, snapshot in timeline:
            if at == now:
                state = observe(state, snapshot, now)
        due = due_at(state, TIMING)
        if due is not None and due <= now:
            assert state.pending is not None
            commits.append((now, state.pending))
            state = committed(state, now)
        now = round(now + 0.5, 3)
    return commits


def test_ready_counters_alone_never_commit() -> None:
    state = WriterState(committed_key=snapshot_key(snap(ready=0)), last_commit_at=0.0)
    state = observe(state, snap(ready=3), 100.0)
    assert state.pending is None
    assert due_at(state, TIMING) is None


def test_a_state_change_is_committed_once_stable_for_the_minimum_interval() -> None:
    commits = run([(0.0, snap(state="StepUpgrade"))], until=20)
    assert [at for at, _ in commits] == [5.0]


def test_short_lived_states_between_steps_coalesce_into_one_commit() -> None:
    events = [
        (0.0, snap(step=1, state="StepReady", ready=1)),
        (0.5, snap(step=2, state="StepUpgradeInit", ready=1)),
        (1.0, snap(step=2, state="StepUpgrade", ready=1)),
        (3.0, snap(step=2, state="StepUpgrade", ready=2)),  # counters ride along
    ]
    commits = run(events, until=30)
    assert len(commits) == 1
    at, snapshot = commits[0]
    assert at == 6.0
    assert snapshot_key(snapshot) == snapshot_key(snap(step=2, state="StepUpgrade"))
    assert snapshot["upgradeStatus"]["status"]["totalUpgradeReadyReplicas"] == 2


def test_terminal_states_are_committed_at_once() -> None:
    state = WriterState(committed_key=snapshot_key(snap()), last_commit_at=99.0)
    state = observe(state, snap("Idling", 3, "Completed", ready=10), 100.0)
    assert due_at(state, TIMING) == 100.0


def test_a_rejected_commit_is_committed_at_once() -> None:
    state = WriterState(committed_key=snapshot_key(snap("Idling", 0, "Completed")),
                        last_commit_at=99.5)
    rejected = snap("Idling", 0, "Completed", rejection={"commit": "b" * 40, "findings": []})
    state = observe(state, rejected, 100.0)
    assert due_at(state, TIMING) == 100.0


def test_commits_keep_the_minimum_interval_between_them() -> None:
    state = WriterState(committed_key=snapshot_key(snap(state="StepUpgrade")), last_commit_at=10.0)
    state = observe(state, snap(state="StepPaused"), 10.5)
    assert due_at(state, TIMING) == 15.5  # stable 5 s; the interval since 10.0 is also kept
    state = WriterState(committed_key=snapshot_key(snap(state="StepUpgrade")), last_commit_at=10.0)
    state = observe(state, snap(state="StepPaused"), 1.0)
    assert due_at(state, TIMING) == 15.0


def test_a_state_that_keeps_changing_is_still_committed_within_max_delay() -> None:
    states = ["StepUpgrade", "StepPaused"]
    events = [(float(t), snap(step=1 + t // 4, state=states[t % 2])) for t in range(0, 60, 2)]
    commits = run(events, until=60)
    assert commits, "never committed"
    assert commits[0][0] == 30.0
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(commits)]
    assert all(gap >= TIMING.min_interval for gap in gaps)


def test_going_back_to_the_committed_state_cancels_the_pending_commit() -> None:
    events = [(0.0, snap(state="StepPaused")), (2.0, snap(state="StepUpgrade"))]
    start = WriterState(committed_key=snapshot_key(snap(state="StepUpgrade")))
    assert run(events, until=20, state=start) == []


def test_step_count_bound_for_a_three_step_rollout() -> None:
    """Slow steps, each with a pause: at most 3 x steps + 3 commits (the issue's budget)."""
    events: list[tuple[float, dict[str, Any]]] = []
    t = 0.0
    for step in (1, 2, 3):
        for state, duration in (("StepUpgradeInit", 0.5), ("StepUpgrade", 60.0),
                                ("StepPaused", 60.0), ("StepReady", 0.5)):
            events.append((t, snap(step=step, state=state)))
            t += duration
    events.append((t, snap("Idling", 3, "Completed", ready=10)))
    commits = run(events, until=t + 10)
    assert len(commits) <= 3 * 3 + 3
    assert snapshot_key(commits[-1][1]).step_state == "Completed"
    assert [snapshot_key(c).step_state for _, c in commits].count("StepUpgradeInit") == 0


@pytest.mark.parametrize(
    ("snapshot", "subject"),
    [
        (snap(state="StepUpgrade", ready=3), "status(prod-a): step 1/3 upgrading (3/10 nodes"),
        (snap(state="StepPaused"),
         "status(prod-a): step 1/3 paused: waiting"),
        (snap("Idling", 3, "Completed", ready=10),
         "status(prod-a): rollout completed at step 3/3 (10/10 nodes"),
        (snap("Terminating", 2, "StepUpgrade"), "status(prod-a): rolling back at step 2/3"),
        (snap("Disabling", 2, "StepUpgrade"), "status(prod-a): rolling back at step 2/3: grey"),
        (snap("Idling", 0, "Completed", rejection={"commit": "c" * 40, "findings": [
            {"file": "clusters/prod-a/co.yaml", "line": 12, "message": "maxParallel is locked"}
        ]}), "status(prod-a): rejected cccccccccccc: clusters/prod-a/co.yaml:12 maxParallel"),
    ],
)
def test_commit_subjects_say_what_happened(snapshot: dict[str, Any], subject: str) -> None:
    assert describe(snapshot).startswith(subject)


def test_rollback_subject_names_the_rolled_back_version() -> None:
    snapshot = snap("Idling", 2, "Completed")
    snapshot["upgradeStatus"]["condition"] = [{
        "type": "RolledBack", "status": "True", "reason": "FailureThresholdReached",
        "message": "rolled back 2.33.0.9 to 2.32.0.6",
    }]
    assert describe(snapshot) == (
        "status(prod-a): rollback finished at step 2/3: rolled back 2.33.0.9 to 2.32.0.6"
    )


def test_trailers_name_source_commit_step_and_phase() -> None:
    assert trailers(snap(step=2, state="StepPaused")) == [
        ("Source-Commit", "a" * 40), ("Rollout-Step", "2/3"), ("Phase", "Progressing"),
    ]


def test_key_ignores_counters_and_tolerates_missing_fields() -> None:
    assert snapshot_key({}) == SnapshotKey(None, None, None)
    assert snapshot_key(snap(ready=1)) == snapshot_key(snap(ready=9))


def test_domains_counted_again_are_a_new_state_the_install_time_alone_is_not() -> None:
    """fleet.domains changes while the cluster is idle (a topology key added, nodes relabelled):
    plan needs them in Git before the next rollout, so they make a commit."""
    zones = {"key": "topology.kubernetes.io/zone", "nodes": {"zone-a": 2, "zone-b": 1}}
    idle = snap(state="Completed")
    counted = {**idle, "fleet": {"nodes": 3, "installSeconds": 9.0, "domains": zones}}
    assert snapshot_key(counted) != snapshot_key(idle)
    same = {**counted, "fleet": {"nodes": 3, "installSeconds": 12.0, "domains": {
        "key": zones["key"], "nodes": {"zone-b": 1, "zone-a": 2}}}}
    assert snapshot_key(same) == snapshot_key(counted)
    state = observe(WriterState(committed_key=snapshot_key(idle), last_commit_at=0.0),
                    counted, 100.0)
    assert state.pending is not None


def test_a_rejection_already_in_git_does_not_make_later_changes_urgent() -> None:
    rejection = {"commit": "b" * 40, "findings": []}
    state = WriterState(
        committed_key=snapshot_key(snap(state="StepUpgrade", rejection=rejection)),
        last_commit_at=0.0)
    state = observe(state, snap(state="StepPaused", rejection=rejection), 100.0)
    assert due_at(state, TIMING) == 105.0
    newer = {"commit": "c" * 40, "findings": []}
    state = observe(state, snap(state="StepPaused", rejection=newer), 101.0)
    assert due_at(state, TIMING) == 101.0


def test_firmware_phase_is_named_while_it_matters() -> None:
    idle = snap("Idling", 0, "Completed", firmware={"phase": "Idle"})
    running = snap("Idling", 0, "Completed", firmware={"phase": "AwaitingReboot"})
    assert describe(idle) == "status(prod-a): Idling"
    assert describe(running) == "status(prod-a): Idling; firmware AwaitingReboot"
    assert snapshot_key(idle) != snapshot_key(running)


def test_a_rollout_that_ends_where_the_last_one_ended_with_another_version_is_committed_at_once(
) -> None:
    def done(version: str) -> dict[str, Any]:
        finished = snap("Idling", 3, "Completed")
        finished["upgradeStatus"]["lastAppliedSpec"] = {"payload": {"version": version}}
        finished["spec"] = {"driver": {"payload": {"version": version}}}
        return finished

    state = committed(observe(WriterState(), done("2.33.0.9"), 0.0), 0.0)
    # a rollback to 2.32.0.6 that ran between two looks: same phase, step and state
    state = observe(state, done("2.32.0.6"), 1.0)
    assert state.pending is not None
    assert due_at(state, TIMING) == 1.0  # terminal: at once (a downstream's gate reads it)
    state = committed(state, 1.0)
    assert observe(state, done("2.32.0.6"), 2.0).pending is None  # same again: no commit
