"""Maintenance windows in the pure planner (docs/configuration.md#maintenance-windows), on a virtual
clock: fresh node starts only inside a window and never in a deny range; nodes in flight finish,
retries and rollback moves go on, gates and pauses run as usual; the step message says when the next
window opens.

The world's clock starts at 2026-01-01T00:00:00Z (``EPOCH``); the window opens daily at 01:00 UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as hs

from reconciler.fleet.windows import WindowCalendar
from reconciler.rollout.simulator import SimConfig, simulate
from tests.rollout.world import OLD_REV, World, deletions, policy, steps

HOUR = 3600.0


def at_utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()

EPOCH = 1767225600.0  # 2026-01-01T00:00:00Z


def nightly(duration: str = "1h", **extra: object) -> WindowCalendar:
    return WindowCalendar.from_config(
        {"timezone": "UTC", "allow": [{"schedule": "0 1 * * *", "duration": duration}], **extra})


def started_world(n: int = 4, **overrides: object) -> World:
    w = World(n, policy(**overrides))
    w.windows = nightly()
    w.settle(0)  # the template changes outside the window: no node moves by that
    return w


def test_no_fresh_start_outside_a_window_and_the_message_names_the_next_one() -> None:
    w = started_world(maxParallel=2)
    result = w.plan(10)
    assert deletions(result) == []
    assert w.inner["message"] == (
        "outside the maintenance windows: no new node starts; the next window opens at "
        "2026-01-01T01:00:00Z")
    assert result.requeue_at == EPOCH + HOUR  # the planner wakes when the window opens
    opened = w.plan(HOUR)
    assert deletions(opened) == ["node-0001", "node-0002"]


def test_nodes_in_flight_finish_after_the_window_closes_and_no_new_one_starts() -> None:
    w = started_world(maxParallel=2)
    assert deletions(w.plan(HOUR)) == ["node-0001", "node-0002"]
    w.ready("node-0001", "node-0002")
    after = w.plan(2 * HOUR + 60)  # the window closed at 02:00
    assert deletions(after) == []
    assert w.inner["totalUpgradeReadyReplicas"] == 2
    assert "next window opens at 2026-01-02T01:00:00Z" in w.inner["message"]
    assert deletions(w.plan(25 * HOUR)) == ["node-0003", "node-0004"]


def test_a_deny_range_beats_the_allow_window() -> None:
    w = World(2, policy())
    w.windows = nightly(deny=[{"from": "2026-01-01T00:30:00Z", "until": "2026-01-01T01:30:00Z",
                               "reason": "change freeze"}])
    w.settle(0)
    assert deletions(w.plan(HOUR)) == []
    assert w.inner["message"].startswith("deny window: change freeze: no new node starts; the "
                                         "next window opens at 2026-01-01T01:30:00Z")
    assert deletions(w.plan(1.5 * HOUR)) == ["node-0001"]


def test_a_retry_is_not_held_outside_the_window() -> None:
    w = World(4, policy(maxParallel=2, maxFailureThreshold=3))
    w.windows = nightly(duration="1m")
    w.settle(0)
    assert deletions(w.plan(HOUR)) == ["node-0001", "node-0002"]
    w.pod("node-0001", waiting_reason="ErrImagePull")
    assert deletions(w.plan(HOUR + 10)) == []  # failure counted, back-off runs
    retried = w.plan(HOUR + 120)  # outside the window, after the back-off
    assert deletions(retried) == ["node-0001"]  # the retry; node-0003 waits for the window


def test_rollback_moves_are_not_held_outside_the_window() -> None:
    w = World(4, policy())
    w.windows = nightly(duration="1m")
    w.settle(0)
    assert deletions(w.plan(HOUR)) == ["node-0001"]
    w.ready("node-0001")
    assert deletions(w.plan(HOUR + 120)) == []  # closed: node-0002 waits
    w.policy_raw["enableRollout"] = False
    moved: list[str] = []
    for second in range(5):  # the payload and template go back first, then the nodes
        moved += deletions(w.plan(3 * HOUR + second))
    assert moved == ["node-0001"]
    assert w.ready_on(OLD_REV) == ["node-0002", "node-0003", "node-0004"]
    w.ready("node-0001")
    w.plan(3 * HOUR + 10)
    assert w.status["phase"] == "Disabled" and sorted(w.on(OLD_REV)) == [
        "node-0001", "node-0002", "node-0003", "node-0004"]


def test_a_gate_released_outside_a_window_waits_for_the_window_for_fresh_starts() -> None:
    w = World(4, policy(upgradeSteps=steps((1, None), ("100%", 0)), maxParallel=4))
    w.windows = nightly()
    w.settle(0)
    assert deletions(w.plan(HOUR)) == ["node-0001"]
    w.ready("node-0001")
    w.plan(HOUR + 10)  # step 1 done: the gate opens (pause: true written back)
    assert w.policy_raw.get("pause") is True
    w.policy_raw["pause"] = False  # a person releases it after the window closed
    w.settle(3 * HOUR)
    assert w.inner["currentStepIndex"] == 2
    assert deletions(w.plan(3 * HOUR + 1)) == []
    assert "next window opens at 2026-01-02T01:00:00Z" in w.inner["message"]
    assert sorted(deletions(w.plan(25 * HOUR))) == ["node-0002", "node-0003", "node-0004"]


def test_a_timed_pause_runs_out_outside_the_window_and_the_next_step_waits() -> None:
    w = World(2, policy(upgradeSteps=steps((1, 60_000), ("100%", 0)), maxParallel=1))
    w.windows = nightly(duration="1m")
    w.settle(0)
    assert deletions(w.plan(HOUR)) == ["node-0001"]
    w.ready("node-0001")
    w.plan(HOUR + 10)  # step 1 done: the 60 s pause starts
    w.settle(HOUR + 200)  # the pause ended outside the window: step 2 begins
    assert w.inner["currentStepIndex"] == 2
    assert deletions(w.plan(HOUR + 201)) == []
    assert deletions(w.plan(25 * HOUR)) == ["node-0002"]


def test_a_calendar_that_failed_to_parse_starts_nothing() -> None:
    w = World(2, policy())
    w.windows = WindowCalendar.failed("windows.timezone: unknown time zone 'Mars/Olympus'")
    w.settle(0)
    assert deletions(w.plan(HOUR)) == []
    assert "Mars/Olympus" in w.inner["message"]


POLICY_DRIVER = {
    "payload": {"registry": "reg.local/metax", "name": "driver-image", "version": "2.33.0.9"},
    "upgradePolicy": {"enableRollout": True, "maxParallel": 2, "maxUnavailable": 1,
                      "maxFailureThreshold": 1, "fallback": "pause",
                      "upgradeSteps": [{"replicas": 3, "pauseDuration": 1000},
                                       {"replicas": "100%", "pauseDuration": 0}]},
}


@settings(max_examples=40, deadline=None)
@given(start=hs.integers(min_value=0, max_value=14 * 24 * 3600),
       hour=hs.integers(min_value=0, max_value=23),
       minutes=hs.sampled_from(["10m", "45m", "2h"]),
       zone=hs.sampled_from(["UTC", "Europe/Berlin", "Asia/Shanghai", "America/New_York"]))
def test_every_fresh_start_of_a_simulated_rollout_is_inside_a_window(
        start: int, hour: int, minutes: str, zone: str) -> None:
    calendar = WindowCalendar.from_config(
        {"timezone": zone, "allow": [{"schedule": f"0 {hour} * * *", "duration": minutes}],
         "deny": [{"from": "2026-03-29T00:00:00Z", "until": "2026-03-30T00:00:00Z"}]})
    origin = at_utc("2026-03-20T00:00:00") + start
    result = simulate(POLICY_DRIVER, SimConfig(
        nodes=7, from_version="2.32.0.6", install_seconds=300, until=30 * 24 * 3600,
        start=origin, windows=calendar))
    starts = [e.t for e in result.events if e.type == "NodeUpgradeStarted"]
    assert len(starts) == 7 and result.completed
    for t in starts:
        assert calendar.is_open(origin + t), (t, calendar)
