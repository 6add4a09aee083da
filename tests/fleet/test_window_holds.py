"""What holds fresh node starts back is recorded as data, not as a sentence
(docs/configuration.md#maintenance-windows and docs/dashboard.md): builtin mode's planner writes
``upgradeStatus.holds`` (``{kind, until, detail}``), kept by a restart (it is read back from the
stored status) and left out once nothing holds; operator mode records them in the status snapshot
only. A window closing or opening is a new snapshot state."""

from __future__ import annotations

import json

from reconciler.fleet.window_pause import window_holds
from reconciler.gitops.status_policy import build_snapshot, snapshot_key
from reconciler.rollout.status import UpgradeStatus, empty_status
from reconciler.sync.status_view import report
from tests.fleet.test_planner_windows import EPOCH, HOUR, started_world
from tests.rollout.world import deletions

CLOSED = {"kind": "window", "detail": "outside the maintenance windows",
          "until": "2026-01-01T01:00:00Z"}


def test_the_planner_records_the_window_hold_and_a_restart_keeps_it() -> None:
    w = started_world(maxParallel=2)
    assert deletions(w.plan(10)) == []
    assert w.status["holds"] == [CLOSED]
    # a restart: the next pass reads the status as the API server stored it
    w.status = json.loads(json.dumps(w.status))
    again = w.plan(20)
    assert deletions(again) == [] and w.status["holds"] == [CLOSED]
    assert again.requeue_at == EPOCH + HOUR
    snap = {"cluster": "prod", "upgradeStatus": w.status,
            "spec": {"driver": {"upgradePolicy": {"upgradeSteps": [{"replicas": "100%"}]}}}}
    (wait,) = [x for x in report(snap, now=EPOCH + 20).waits if x.kind == "window"]
    assert wait.until == "2026-01-01T01:00:00Z"
    assert wait.detail == "fresh node starts wait until 2026-01-01T01:00:00Z (59m40s from now)"
    # the window opens: nothing holds, and the key is left out (not written empty)
    assert deletions(w.plan(HOUR)) == ["node-0001", "node-0002"]
    assert "holds" not in w.status


def test_an_unchanged_hold_writes_the_same_status() -> None:
    w = started_world()
    first = w.plan(10).status
    assert w.plan(30).status == first  # lastUpdateTime included: nothing new to write


def test_holds_round_trip_and_are_left_out_when_empty() -> None:
    assert "holds" not in UpgradeStatus.from_json(empty_status()).to_json()
    held = UpgradeStatus.from_json(empty_status()).evolve(holds=(CLOSED,)).to_json()
    assert held["holds"] == [CLOSED]
    read = UpgradeStatus.from_json(held)
    assert read.holds == (CLOSED,) and read.to_json() == held
    assert "holds" not in read.evolve(holds=()).to_json()


def test_operator_mode_records_holds_in_the_snapshot_and_a_closing_window_is_a_new_state() -> (
        None):
    calendar = started_world().windows
    assert window_holds(calendar, EPOCH + HOUR) == [] and window_holds(None, EPOCH) == []
    assert window_holds(calendar, EPOCH + 10) == [CLOSED]
    co = {"spec": {"driver": {}}, "status": {"upgradeStatus": {"phase": "Progressing"}}}
    open_ = build_snapshot(co, source_commit=None)
    closed = build_snapshot(co, source_commit=None, holds=window_holds(calendar, EPOCH + 10))
    assert "holds" not in open_ and closed["holds"] == [CLOSED]
    assert "holds" not in closed["upgradeStatus"]  # the vendor's status stays as it is
    assert snapshot_key(open_) != snapshot_key(closed)
    assert snapshot_key(closed).window_until == "2026-01-01T01:00:00Z"


def test_a_health_section_that_does_not_validate_is_recorded_as_a_health_hold() -> None:
    from tests.rollout.test_health_gates import HealthWorld, policy

    w = HealthWorld(3, policy(), error="reconciler.yaml:5:14: health.nodeChecks[0].expect: bad")
    w.plan(0)
    assert deletions(w.plan(0)) == []
    (hold,) = w.status["holds"]
    assert hold["kind"] == "health" and "reconciler.yaml:5:14" in hold["detail"]
    snap = {"cluster": "lab", "upgradeStatus": w.status}
    (wait,) = [x for x in report(snap, now=0.0).waits if x.kind == "health"]
    assert wait.title == "the health checks hold fresh node starts"
    assert "reconciler.yaml:5:14" in wait.detail
