"""``lastRollout`` in status snapshots (docs/configuration.md#the-completion-record): the last
rollout that ended on the cluster, ``Completed`` or ``RolledBack``, with the moment it ended; later
snapshots never move it."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from reconciler.gitops.status_policy import last_rollout
from reconciler.policy.validation import validate_status_snapshot
from tests.gitops.conftest import Remote
from tests.gitops.test_status_writer import Clock, writer_for

NEW, OLD = "2.33.0.9", "2.32.0.6"


def status(phase: str, state: str, version: str, *, conditions: list[dict[str, Any]] | None = None,
           updated: str = "2026-11-30T03:00:00Z") -> dict[str, Any]:
    return {
        "phase": phase, "upgrading": phase in ("Progressing", "Terminating"),
        "lastAppliedSpec": {"payload": {"version": version}},
        "condition": conditions or [],
        "status": {"currentStepIndex": 3, "currentStepState": state, "lastUpdateTime": updated},
    }


COMPLETED = status("Idling", "Completed", NEW, conditions=[
    {"type": "Progressing", "status": "False", "reason": "RolloutCompleted",
     "lastTransitionTime": "2026-11-30T02:00:00Z", "message": f"rollout of driver {NEW} done"}])
ROLLED_BACK = status("Idling", "Completed", OLD, conditions=[
    {"type": "RolledBack", "status": "True", "reason": "FailureThresholdReached",
     "lastTransitionTime": "2026-11-30T04:00:00Z",
     "message": f"driver {NEW} rolled back to {OLD} (FailureThresholdReached): 3 failures"}])


def test_a_completed_rollout_is_recorded_at_the_moment_it_ended() -> None:
    assert last_rollout(COMPLETED, None, active_version=NEW, now_text="2026-11-30T09:00:00Z") == {
        "version": NEW, "result": "Completed", "finishedAt": "2026-11-30T02:00:00Z"}


def test_a_rollback_names_the_version_it_rolled_back() -> None:
    expected = {"version": NEW, "result": "RolledBack", "finishedAt": "2026-11-30T04:00:00Z"}
    assert last_rollout(ROLLED_BACK, None, active_version=NEW, now_text="x") == expected
    # after a restart the writer may not have seen the rollback: the condition names it
    assert last_rollout(ROLLED_BACK, None, active_version=None, now_text="x") == expected


def test_a_rollback_takes_its_version_from_the_planners_record_not_the_message() -> None:
    recorded = {**ROLLED_BACK, "rolledBackSpec": {"payload": {"version": "2.34.0.1"}}}
    recorded["condition"] = [{**ROLLED_BACK["condition"][0],
                              "message": "rolled back: a message in other words"}]
    expected = {"version": "2.34.0.1", "result": "RolledBack",
                "finishedAt": "2026-11-30T04:00:00Z"}
    for active in (None, NEW):  # the record beats what the writer saw last
        assert last_rollout(recorded, None, active_version=active, now_text="x") == expected
    snapshot = {"cluster": "prod-a", "observedAt": "2026-11-30T04:00:01Z",
                "upgradeStatus": recorded, "lastRollout": expected}
    out = io.StringIO()
    YAML(typ="safe", pure=True).dump(snapshot, out)
    assert validate_status_snapshot(out.getvalue(), "status/prod-a.yaml").ok  # schema knows it


def test_later_snapshots_never_move_finished_at() -> None:
    previous = {"version": NEW, "result": "Completed", "finishedAt": "2026-11-30T01:59:00Z"}
    later = status("Idling", "Completed", NEW, conditions=COMPLETED["condition"],
                   updated="2026-11-30T08:00:00Z")
    assert last_rollout(later, previous, active_version=None, now_text="z") == previous


def test_an_active_rollout_keeps_the_previous_record() -> None:
    previous = {"version": OLD, "result": "Completed", "finishedAt": "2026-11-01T00:00:00Z"}
    active = status("Progressing", "StepUpgrade", NEW)
    assert last_rollout(active, previous, active_version=NEW, now_text="z") == previous
    assert last_rollout(active, None, active_version=NEW, now_text="z") is None


def test_writer_carries_the_record_into_git_and_keeps_it_across_a_restart(
        remote: Remote, tmp_path: Path) -> None:
    clock = Clock()
    writer = writer_for(remote.url, tmp_path / "state", clock)
    writer.offer({"upgradeStatus": status("Progressing", "StepUpgrade", NEW)})
    writer.poll(force=True)
    clock.now += 60
    writer.offer({"upgradeStatus": COMPLETED})
    writer.poll(force=True)
    assert writer.publisher.flush().ok
    data = YAML(typ="safe").load(remote.show("main:status/prod-a.yaml"))
    record = {"version": NEW, "result": "Completed", "finishedAt": "2026-11-30T02:00:00Z"}
    assert data["lastRollout"] == record
    text = remote.show("main:status/prod-a.yaml")
    assert validate_status_snapshot(text, "status/prod-a.yaml").ok
    # a restarted writer reads the record back; a later rollout of another version that rolls
    # back replaces it
    again = writer_for(remote.url, tmp_path / "state2", clock)
    clock.now += 3600
    later = status("Idling", "Completed", NEW, conditions=[
        {**COMPLETED["condition"][0], "lastTransitionTime": "2027-01-01T00:00:00Z"}])
    later["status"]["currentStepIndex"] = 4  # a new state: a new commit
    again.offer({"upgradeStatus": later})
    again.poll(force=True)
    assert again.publisher.flush().ok
    data = YAML(typ="safe").load(remote.show("main:status/prod-a.yaml"))
    assert data["upgradeStatus"]["status"]["currentStepIndex"] == 4
    assert data["lastRollout"] == record  # the same rollout: finishedAt not moved
    again.offer({"upgradeStatus": status("Terminating", "StepUpgrade", "2.34.0.1")})
    again.poll(force=True)
    rolled = status("Idling", "Completed", NEW, conditions=[
        {"type": "RolledBack", "status": "True", "reason": "FailureThresholdReached",
         "lastTransitionTime": "2027-01-02T00:00:00Z",
         "message": f"driver 2.34.0.1 rolled back to {NEW} (FailureThresholdReached): x"}])
    again.offer({"upgradeStatus": rolled})
    again.poll(force=True)
    assert again.publisher.flush().ok
    data = YAML(typ="safe").load(remote.show("main:status/prod-a.yaml"))
    assert data["lastRollout"] == {"version": "2.34.0.1", "result": "RolledBack",
                                   "finishedAt": "2027-01-02T00:00:00Z"}
