"""The maintenance-window calendar (docs/configuration.md#maintenance-windows) on a virtual clock:
epoch seconds in, verdicts out."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from reconciler.fleet.windows import WindowCalendar, WindowsConfigError

BERLIN = ZoneInfo("Europe/Berlin")
SHANGHAI = ZoneInfo("Asia/Shanghai")


def at(text: str, zone: ZoneInfo = BERLIN) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=zone).timestamp()


NIGHTS = WindowCalendar.from_config({
    "timezone": "Europe/Berlin",
    "allow": [{"schedule": "0 22 * * *", "duration": "8h"}],
})


@pytest.mark.parametrize(("moment", "is_open"), [
    ("2026-06-10T21:59:59", False),
    ("2026-06-10T22:00:00", True),
    ("2026-06-10T23:59:00", True),
    ("2026-06-11T00:00:00", True),   # across midnight
    ("2026-06-11T05:59:59", True),
    ("2026-06-11T06:00:00", False),  # until is exclusive
    ("2026-06-11T12:00:00", False),
])
def test_a_nightly_window_is_open_from_its_start_across_midnight_for_its_duration(
        moment: str, is_open: bool) -> None:
    assert NIGHTS.is_open(at(moment)) is is_open


def test_next_open_and_closes_at_name_the_window_edges() -> None:
    noon = at("2026-06-11T12:00:00")
    assert NIGHTS.next_open(noon) == at("2026-06-11T22:00:00")
    verdict = NIGHTS.verdict(noon)
    assert not verdict.open and verdict.until == at("2026-06-11T22:00:00")
    assert "2026-06-11T20:00:00Z" in verdict.describe()  # 22:00 CEST is 20:00 UTC
    inside = at("2026-06-11T23:00:00")
    assert NIGHTS.next_open(inside) == inside
    assert NIGHTS.closes_at(inside) == at("2026-06-12T06:00:00")
    assert NIGHTS.verdict(inside) == NIGHTS.verdict(inside).__class__(
        True, at("2026-06-12T06:00:00"))


def test_a_window_across_the_spring_dst_switch_lasts_its_elapsed_duration() -> None:
    # 2026-03-29 02:00 CET -> 03:00 CEST: 8 elapsed hours from 22:00 end at 07:00 local time
    opened = at("2026-03-28T22:00:00")
    assert NIGHTS.closes_at(opened) == opened + 8 * 3600
    assert datetime.fromtimestamp(opened + 8 * 3600, BERLIN).hour == 7
    assert NIGHTS.is_open(at("2026-03-29T06:59:00"))
    assert not NIGHTS.is_open(at("2026-03-29T07:00:00"))


def test_a_start_in_the_hour_skipped_by_dst_runs_right_after_the_switch() -> None:
    calendar = WindowCalendar.from_config({
        "timezone": "Europe/Berlin",
        "allow": [{"schedule": "30 2 * * *", "duration": "1h"}],
    })
    # 02:30 does not exist on 2026-03-29: Debian cron (and cronsim) run it at 03:00 CEST
    assert calendar.next_open(at("2026-03-29T00:00:00")) == at("2026-03-29T03:00:00")
    assert calendar.is_open(at("2026-03-29T03:30:00"))
    assert not calendar.is_open(at("2026-03-29T04:00:00"))


def test_a_window_across_the_autumn_dst_switch_lasts_its_elapsed_duration() -> None:
    # 2026-10-25 03:00 CEST -> 02:00 CET: 8 elapsed hours from 22:00 end at 05:00 local time
    opened = at("2026-10-24T22:00:00")
    closes = NIGHTS.closes_at(opened)
    assert closes == opened + 8 * 3600
    assert datetime.fromtimestamp(closes, BERLIN).hour == 5


def test_deny_beats_allow_and_the_next_window_after_a_deny_range_is_named() -> None:
    calendar = WindowCalendar.from_config({
        "timezone": "Asia/Shanghai",
        "allow": [{"schedule": "0 22 * * 1-5", "duration": "8h"}],
        "deny": [{"from": "2026-12-24T00:00:00+08:00", "until": "2026-12-27T00:00:00+08:00",
                  "reason": "holiday freeze"}],
    })
    # Wednesday 2026-12-23 22:00: open, but the freeze starts at midnight and closes it
    wednesday = at("2026-12-23T22:00:00", SHANGHAI)
    assert calendar.is_open(wednesday)
    assert calendar.closes_at(wednesday) == at("2026-12-24T00:00:00", SHANGHAI)
    thursday_night = at("2026-12-24T23:00:00", SHANGHAI)
    verdict = calendar.verdict(thursday_night)
    assert not verdict.open and verdict.reason == "deny window: holiday freeze"
    # Sat 26 and Sun 27 have no window; Monday 28 22:00 is the next one
    assert verdict.until == at("2026-12-28T22:00:00", SHANGHAI)


def test_a_deny_range_ending_inside_a_window_opens_it_at_its_end() -> None:
    calendar = WindowCalendar.from_config({
        "timezone": "UTC",
        "allow": [{"schedule": "0 0 * * *", "duration": "10h"}],
        "deny": [{"from": "2026-05-01T00:00:00Z", "until": "2026-05-01T04:00:00Z"}],
    })
    assert calendar.next_open(at("2026-04-30T23:00:00", ZoneInfo("UTC"))) == at(
        "2026-05-01T04:00:00", ZoneInfo("UTC"))


def test_without_allow_entries_only_deny_ranges_close() -> None:
    calendar = WindowCalendar.from_config({
        "deny": [{"from": "2026-05-01T00:00:00", "until": "2026-05-02T00:00:00"}]})
    utc = ZoneInfo("UTC")
    assert calendar.is_open(at("2026-04-30T23:59:59", utc))
    assert not calendar.is_open(at("2026-05-01T12:00:00", utc))  # no offset: in timezone (UTC)
    assert calendar.next_open(at("2026-05-01T12:00:00", utc)) == at("2026-05-02T00:00:00", utc)
    assert calendar.closes_at(at("2026-04-30T00:00:00", utc)) == at("2026-05-01T00:00:00", utc)


def test_overlapping_windows_chain_into_one_open_period() -> None:
    calendar = WindowCalendar.from_config({
        "allow": [{"schedule": "0 * * * *", "duration": "90m"}]})  # every hour, 90 minutes
    now = at("2026-01-01T10:30:00", ZoneInfo("UTC"))
    assert calendar.is_open(now)
    assert calendar.closes_at(now) is None  # never closes within the horizon


def test_a_failed_calendar_is_never_open_and_says_why() -> None:
    calendar = WindowCalendar.failed("windows.timezone: unknown time zone 'Mars/Olympus'")
    verdict = calendar.verdict(0.0)
    assert not verdict.open and verdict.until is None
    assert "Mars/Olympus" in verdict.describe()


@pytest.mark.parametrize(("section", "message"), [
    ({"timezone": "Mars/Olympus"}, "windows.timezone: unknown time zone 'Mars/Olympus'"),
    ({"timezone": "../../etc/passwd"}, "windows.timezone: unknown time zone"),
    ({"allow": [{"schedule": "61 * * * *", "duration": "1h"}]}, "windows.allow[0].schedule"),
    ({"allow": [{"schedule": "0 22 * *", "duration": "1h"}]}, "expected five cron fields"),
    ({"allow": [{"schedule": "0 0 30 2 *", "duration": "1h"}]}, "windows.allow[0].schedule"),
    ({"allow": [{"schedule": "0 22 * * *", "duration": "0s"}]}, "windows.allow[0].duration"),
    ({"allow": [{"schedule": "0 22 * * *", "duration": "200h"}]}, "at most 168h"),
    ({"deny": [{"from": "2026-12-27T00:00:00Z", "until": "2026-12-24T00:00:00Z"}]},
     "windows.deny[0]: until must be after from"),
    ({"deny": [{"from": "yesterday", "until": "2026-12-24T00:00:00Z"}]}, "windows.deny[0].from"),
])
def test_an_unusable_section_is_refused_naming_the_key(section: dict[str, object],
                                                       message: str) -> None:
    with pytest.raises(WindowsConfigError, match=None) as refused:
        WindowCalendar.from_config(section)
    assert message in str(refused.value)


DENY_FROM = at("2026-07-01T00:00:00", ZoneInfo("UTC"))
DENY_UNTIL = at("2026-07-03T12:00:00", ZoneInfo("UTC"))
PROPERTY_CALENDAR = WindowCalendar.from_config({
    "timezone": "Europe/Berlin",
    "allow": [{"schedule": "0 22 * * 1-5", "duration": "8h"},
              {"schedule": "30 2 * * 0", "duration": "3h"}],
    "deny": [{"from": "2026-07-01T00:00:00Z", "until": "2026-07-03T12:00:00Z", "reason": "x"}],
})


@settings(max_examples=200, deadline=None)
@given(hs.floats(min_value=at("2026-06-01T00:00:00"), max_value=at("2026-08-01T00:00:00")))
def test_the_calendar_is_never_open_inside_a_deny_range(now: float) -> None:
    if DENY_FROM <= now < DENY_UNTIL:
        assert not PROPERTY_CALENDAR.is_open(now)
    opens = PROPERTY_CALENDAR.next_open(now)
    assert opens is not None and opens >= now
    assert not DENY_FROM <= opens < DENY_UNTIL
    assert PROPERTY_CALENDAR.is_open(opens)
    closes = PROPERTY_CALENDAR.closes_at(opens)
    assert closes is not None and closes > opens
    # the open period contains no deny instant
    assert not (opens < DENY_FROM < closes)
