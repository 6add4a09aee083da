"""Maintenance windows (docs/configuration.md#maintenance-windows) as a pure calendar: when fresh
node starts may happen.

``windows:`` of ``reconciler.yaml`` (or ``clusters.<name>.windows``)::

    timezone: Europe/Berlin                            # IANA name; default UTC
    allow: [{schedule: '0 22 * * 1-5', duration: 8h}]  # a window opens at each cron match
    deny:  [{from: '2026-12-24T00:00:00+01:00', until: '2026-12-27T00:00:00+01:00',
             reason: holiday freeze}]

- Cron matches are taken in ``timezone`` (``cronsim`` follows Debian cron across DST changes: a
  start in the skipped hour runs right after the change, one in the repeated hour runs once).
  ``duration`` is elapsed time: an 8h window that opens at 22:00 on the night the clocks go
  forward closes at 07:00 local time.
- Without ``allow`` entries every moment is allowed; a ``deny`` range always wins (``from``
  inclusive, ``until`` exclusive). A ``from``/``until`` without a UTC offset is read in
  ``timezone``.

Pure: instants are epoch seconds passed in; nothing reads a clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from reconciler.durations import parse_duration_setting
from reconciler.errors import RepoConfigError
from reconciler.timefmt import format_time

#: a window longer than this is a mistake (and a week covers every weekly schedule)
MAX_WINDOW = 7 * 24 * 3600.0
MAX_SCHEDULE = 128
#: open periods chained into one (windows that touch or overlap) before giving up
_CHAIN_LIMIT = 200
#: how far ahead ``next_open`` looks (cronsim itself looks 50 years ahead for one match)
HORIZON = 5 * 366 * 24 * 3600.0
_MINUTE = timedelta(minutes=1)


class WindowsConfigError(RepoConfigError):
    """A ``windows`` section that cannot be used; the message names the key."""


def zone_problem(name: object) -> str | None:
    """Why ``name`` is no IANA time zone, or None."""
    if not isinstance(name, str) or not name or len(name) > 64:
        return "expected an IANA time zone name like 'Europe/Berlin' or 'UTC'"
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return f"unknown time zone '{name}' (expected an IANA name like 'Asia/Shanghai')"
    return None


def schedule_problem(expression: object) -> str | None:
    """Why ``expression`` is no five-field cron expression, or None."""
    if not isinstance(expression, str) or not expression.strip():
        return "expected a cron expression like '0 22 * * 1-5'"
    if len(expression) > MAX_SCHEDULE:
        return f"a cron expression has at most {MAX_SCHEDULE} characters"
    fields = expression.split()
    if len(fields) != 5:
        return (f"expected five cron fields (minute hour day-of-month month day-of-week), got "
                f"{len(fields)}")
    try:
        CronSim(expression, datetime(2026, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        return f"not a valid cron expression: {exc}"
    except (ValueError, IndexError, KeyError) as exc:  # a parser corner cronsim does not wrap
        return f"not a valid cron expression: {exc}"
    return None


def parse_instant(text: object, zone: tzinfo) -> float:
    """An RFC 3339 / ISO 8601 instant; without an offset it is read in ``zone``. Raises
    ValueError."""
    if isinstance(text, datetime):  # YAML 1.1 loaders turn timestamps into datetimes
        moment = text
    elif isinstance(text, str) and 0 < len(text) <= 64:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    else:
        raise ValueError("expected a time like '2026-12-24T00:00:00+08:00'")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone)
    return moment.timestamp()


@dataclass(frozen=True, slots=True)
class Allow:
    schedule: str
    duration: float  # seconds


@dataclass(frozen=True, slots=True)
class Deny:
    start: float
    end: float
    reason: str


@dataclass(frozen=True, slots=True)
class Verdict:
    """The calendar at one instant."""

    open: bool
    #: open: when the open period ends (None: not before the horizon); closed: when the next
    #: one begins (None: none within the horizon)
    until: float | None
    #: closed: why ("outside the maintenance windows", "deny window: holiday freeze", ...)
    reason: str = ""

    def describe(self) -> str:
        """For a status message: why nothing starts now and when it may."""
        if self.open:
            return "inside a maintenance window"
        when = (f"the next window opens at {format_time(self.until)}" if self.until is not None
                else "no window opens within 5 years")
        return f"{self.reason}: no new node starts; {when}"

    def hold(self) -> dict[str, str]:
        """A closed calendar as a recorded hold (``upgradeStatus.holds``, the status snapshot's
        ``holds``): why, and when the next window opens (absent: none within the horizon)."""
        held = {"kind": "window", "detail": self.reason}
        if self.until is not None:
            held["until"] = format_time(self.until)
        return held


@dataclass(frozen=True, slots=True)
class WindowCalendar:
    timezone: str = "UTC"
    allow: tuple[Allow, ...] = ()
    deny: tuple[Deny, ...] = ()
    #: a section that does not validate fails closed (docs/health.md): nothing starts, this says why
    error: str | None = None

    @classmethod
    def from_config(cls, section: object, *, label: str = "windows") -> WindowCalendar:
        """From an unchecked ``windows`` mapping; raises WindowsConfigError naming the key."""
        if not isinstance(section, Mapping):
            raise WindowsConfigError(f"{label}: expected a mapping")
        zone_name = section.get("timezone", "UTC")
        problem = zone_problem(zone_name)
        if problem:
            raise WindowsConfigError(f"{label}.timezone: {problem}")
        zone = ZoneInfo(str(zone_name))
        allow: list[Allow] = []
        for index, entry in enumerate(_list(section.get("allow"), f"{label}.allow")):
            where = f"{label}.allow[{index}]"
            if not isinstance(entry, Mapping):
                raise WindowsConfigError(f"{where}: expected {{schedule, duration}}")
            problem = schedule_problem(entry.get("schedule"))
            if problem:
                raise WindowsConfigError(f"{where}.schedule: {problem}")
            duration = parse_duration_setting(entry.get("duration"), key=f"{where}.duration")
            if not 0 < duration <= MAX_WINDOW:
                raise WindowsConfigError(f"{where}.duration: must be longer than 0 and at "
                                         "most 168h")
            allow.append(Allow(str(entry["schedule"]), duration))
        deny: list[Deny] = []
        for index, entry in enumerate(_list(section.get("deny"), f"{label}.deny")):
            where = f"{label}.deny[{index}]"
            if not isinstance(entry, Mapping):
                raise WindowsConfigError(f"{where}: expected {{from, until, reason}}")
            bounds = []
            for key in ("from", "until"):
                try:
                    bounds.append(parse_instant(entry.get(key), zone))
                except (ValueError, OverflowError) as exc:
                    raise WindowsConfigError(f"{where}.{key}: {exc}") from None
            if bounds[1] <= bounds[0]:
                raise WindowsConfigError(f"{where}: until must be after from")
            deny.append(Deny(bounds[0], bounds[1], str(entry.get("reason") or "deny window")))
        return cls(str(zone_name), tuple(allow), tuple(deny))

    @classmethod
    def failed(cls, error: str) -> WindowCalendar:
        return cls(error=error)

    # -- questions -----------------------------------------------------------------------

    def is_open(self, now: float) -> bool:
        if self.error is not None:
            return False
        return self._denied(now) is None and self._allowed(now) is not None

    def verdict(self, now: float) -> Verdict:
        if self.error is not None:
            return Verdict(False, None, f"windows unusable ({self.error})")
        denied = self._denied(now)
        if denied is None and self._allowed(now) is not None:
            return Verdict(True, self.closes_at(now))
        reason = (f"deny window: {denied.reason}" if denied is not None
                  else "outside the maintenance windows")
        return Verdict(False, self.next_open(now), reason)

    def next_open(self, now: float) -> float | None:
        """The first instant at or after ``now`` that is open; None within the horizon."""
        if self.error is not None:
            return None
        t = now
        for _ in range(_CHAIN_LIMIT):
            if t > now + HORIZON:
                return None
            denied = self._denied(t)
            if denied is not None:
                t = max(t, denied.end)
                continue
            if self._allowed(t) is not None:
                return t
            start = self._next_start(t)
            if start is None:
                return None
            t = start
        return None

    def closes_at(self, now: float) -> float | None:
        """When the open period around ``now`` ends (``now`` when closed); None: not within
        the horizon."""
        if not self.is_open(now):
            return now
        end = now
        for _ in range(_CHAIN_LIMIT):
            window_end = self._allowed(end) if end <= now + HORIZON else None
            if window_end is None:
                break
            end = window_end
        else:
            return None  # windows chained past the limit: open for the foreseeable future
        closes = min([end, *(d.start for d in self.deny if now < d.start < end)])
        return closes if closes <= now + HORIZON else None

    # -- the parts -----------------------------------------------------------------------

    def _denied(self, t: float) -> Deny | None:
        for deny in self.deny:
            if deny.start <= t < deny.end:
                return deny
        return None

    def _allowed(self, t: float) -> float | None:
        """When no allow entries: +inf (always allowed). Else the latest end among the
        windows that contain ``t`` (None: none does)."""
        if not self.allow:
            return math.inf
        zone = ZoneInfo(self.timezone)
        # the latest start at or before t decides for each entry: an earlier one with the
        # same duration ends earlier
        local = datetime.fromtimestamp(t, zone)
        ends = []
        for entry in self.allow:
            start = _previous_match(entry.schedule, local)
            if start is not None and start <= t < start + entry.duration:
                ends.append(start + entry.duration)
        return max(ends) if ends else None

    def _next_start(self, t: float) -> float | None:
        zone = ZoneInfo(self.timezone)
        local = datetime.fromtimestamp(t, zone)
        starts = [s for s in (_next_match(e.schedule, local) for e in self.allow)
                  if s is not None]
        return min(starts) if starts else None


def _previous_match(schedule: str, local: datetime) -> float | None:
    # cronsim's reverse iteration yields matches strictly before its start: start a minute on
    # so a match at ``local`` itself counts (cron has whole minutes)
    it = CronSim(schedule, local.replace(second=0, microsecond=0) + _MINUTE, reverse=True)
    for match in it:
        if match.timestamp() <= local.timestamp():
            return match.timestamp()
    return None


def _next_match(schedule: str, local: datetime) -> float | None:
    try:
        return next(CronSim(schedule, local)).timestamp()
    except StopIteration:
        return None


def _list(value: object, label: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise WindowsConfigError(f"{label}: expected a list")
    return value

