"""``reconciler status`` says when the next maintenance window opens
(docs/configuration.md#maintenance-windows), from the hold the planner records in the snapshot
(``upgradeStatus.holds``), never from its step message."""

from __future__ import annotations

from reconciler.fleet.windows import Verdict, WindowCalendar
from reconciler.sync.status_view import parse_time, report
from tests.sync.test_status_view import snapshot

NOW = parse_time("2026-11-30T10:00:00Z") or 0.0


def with_hold(verdict: Verdict) -> dict[str, object]:
    """A snapshot as the planner leaves it while the calendar holds fresh starts."""
    snap = snapshot("StepUpgrade", index=2)
    snap["upgradeStatus"]["status"]["message"] = verdict.describe()  # type: ignore[index]
    snap["upgradeStatus"]["holds"] = [verdict.hold()]  # type: ignore[index]
    return snap


def test_status_names_the_next_window_and_the_time_left() -> None:
    calendar = WindowCalendar.from_config(
        {"allow": [{"schedule": "30 13 * * *", "duration": "1h"}]})
    result = report(with_hold(calendar.verdict(NOW)), now=NOW)
    assert ("a maintenance window (outside the maintenance windows): fresh node starts wait "
            "until 2026-11-30T13:30:00Z (3h30m from now)") in result.waiting_for


def test_status_names_a_deny_window_by_its_reason() -> None:
    calendar = WindowCalendar.from_config({"deny": [
        {"from": "2026-11-30T00:00:00Z", "until": "2026-12-01T00:00:00Z",
         "reason": "holiday freeze"}]})
    result = report(with_hold(calendar.verdict(NOW)), now=NOW)
    assert ("a maintenance window (deny window: holiday freeze): fresh node starts wait "
            "until 2026-12-01T00:00:00Z (14h00m from now)") in result.waiting_for


def test_status_says_when_no_window_can_open() -> None:
    calendar = WindowCalendar.failed("windows.timezone: unknown time zone 'Mars/Olympus'")
    result = report(with_hold(calendar.verdict(NOW)), now=NOW)
    assert any("Mars/Olympus" in line and "no window opens" in line
               for line in result.waiting_for), result.waiting_for
