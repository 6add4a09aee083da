"""reconciler.timefmt: the one place RFC 3339 text is written and read, year-9999 clamp included."""

from __future__ import annotations

import calendar
import math
import time
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.timefmt import (
    EARLIEST_TIME,
    LATEST_TIME,
    LATEST_TIME_TEXT,
    after_ms,
    format_clock,
    format_duration,
    format_micro_time,
    format_seconds,
    format_time,
    parse_seconds,
    parse_time,
    parse_time_or,
    parse_time_or_none,
)

INSTANTS = st.floats(min_value=EARLIEST_TIME + 1, max_value=LATEST_TIME - 1, allow_nan=False)


def test_format_time_writes_milliseconds_only_for_a_fraction() -> None:
    assert format_time(1_764_496_800.0) == "2025-11-30T10:00:00Z"
    assert format_time(1_764_496_800.25) == "2025-11-30T10:00:00.250Z"


@pytest.mark.parametrize("t", [LATEST_TIME, LATEST_TIME + 1, math.inf, math.nan])
def test_instants_past_year_9999_and_nan_are_written_as_the_last_one(t: float) -> None:
    assert format_time(t) == LATEST_TIME_TEXT
    assert format_seconds(t) == "9999-12-31T23:59:59Z"


@pytest.mark.parametrize("t", [EARLIEST_TIME, EARLIEST_TIME - 1, -math.inf])
def test_instants_before_year_1_are_written_as_the_first_one(t: float) -> None:
    assert format_time(t) == "0001-01-01T00:00:00Z"
    assert format_seconds(t) == "0001-01-01T00:00:00Z"


@given(INSTANTS)
def test_format_seconds_writes_what_time_strftime_of_gmtime_wrote(t: float) -> None:
    # the firmware planner's and the Event writer's format before they shared this module,
    # except that years before 1000 now have their four digits (RFC 3339)
    expected = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
    assert format_seconds(t) == expected.rjust(20, "0")


def test_years_before_1000_are_written_with_four_digits() -> None:
    t = datetime(999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()
    assert format_time(t) == "0999-12-31T23:59:59Z"
    assert format_time(t + 0.5) == "0999-12-31T23:59:59.500Z"
    assert parse_time(format_time(t)) == t


@given(INSTANTS)
def test_parse_seconds_reads_back_the_whole_second(t: float) -> None:
    assert parse_seconds(format_seconds(t)) == math.floor(t)
    assert parse_seconds(format_time(t)) == float(
        calendar.timegm(time.strptime(format_time(t)[:19], "%Y-%m-%dT%H:%M:%S")))


@given(INSTANTS)
def test_parse_time_reads_back_format_time_to_the_millisecond(t: float) -> None:
    # the fraction is cut to milliseconds; far from 1970 a float carries ~1e-4 s of error
    assert abs(parse_time(format_time(t)) - t) < 0.001 + 1e-4


@pytest.mark.parametrize("text", ["", "yesterday", "2026-13-01T00:00:00Z", None, 5])
def test_garbage_reads_as_the_default(text: object) -> None:
    assert parse_time_or(text, 42.0) == 42.0
    assert parse_time_or_none(text) is None
    assert parse_seconds(text) is None


def test_after_ms_clamps_any_integer_to_the_writable_instants() -> None:
    assert after_ms(100.0, 1500) == 101.5
    assert after_ms(100.0, 2**63 - 1) == LATEST_TIME
    assert after_ms(100.0, 10**400) == LATEST_TIME
    assert after_ms(100.0, -(10**400)) == EARLIEST_TIME


def test_micro_time_has_exactly_six_fractional_digits() -> None:
    assert format_micro_time(datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)) == (
        "2026-11-30T10:00:00.000000Z")


def test_clock_and_durations_for_messages() -> None:
    assert format_clock(1_764_496_805.0) == "10:00:05Z"
    assert [format_duration(s) for s in (5, 65, 120, 3600, 5400, math.inf)] == [
        "5s", "1m5s", "2m", "1h", "1h30m", "forever"]
