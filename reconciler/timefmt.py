"""RFC 3339 text for the instants the program writes and reads back (status fields, node
annotations, Events, leases), and durations for messages.

One module so every status field is written the same way and the year-9999 clamp lives in one
place. It only converts: it never reads a clock (``reconciler.clock`` is the one seam) and
imports nothing else from ``reconciler``.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Final

#: the instants RFC 3339 (four-digit years) can write: a deadline past the last one (a pause of
#: up to 2^63-1 ms is valid policy) is written as the last one, i.e. never reached in practice
LATEST_TIME: Final = datetime.max.replace(microsecond=999000, tzinfo=UTC).timestamp()
LATEST_TIME_TEXT: Final = "9999-12-31T23:59:59.999Z"
EARLIEST_TIME: Final = datetime.min.replace(tzinfo=UTC).timestamp()
EARLIEST_TIME_TEXT: Final = "0001-01-01T00:00:00Z"
#: the last whole second that can be written
LATEST_SECOND: Final = float(math.floor(LATEST_TIME))
LATEST_SECOND_TEXT: Final = "9999-12-31T23:59:59Z"


def format_time(t: float) -> str:
    """RFC 3339 in UTC; milliseconds only when the instant has a fraction of a second. Instants
    outside years 1..9999 are clamped to the nearest one that can be written."""
    if not t < LATEST_TIME:  # NaN too: no deadline can be computed, so none is ever reached
        return LATEST_TIME_TEXT
    if t <= EARLIEST_TIME:
        return EARLIEST_TIME_TEXT
    moment = datetime.fromtimestamp(t, UTC)
    if moment.microsecond:
        return _seconds_text(moment) + f".{moment.microsecond // 1000:03d}Z"
    return _seconds_text(moment) + "Z"


def format_seconds(t: float) -> str:
    """RFC 3339 in UTC to the whole second (fraction dropped), clamped like ``format_time``."""
    if not t < LATEST_SECOND:  # NaN included
        return LATEST_SECOND_TEXT
    if t <= EARLIEST_TIME:
        return EARLIEST_TIME_TEXT
    return _seconds_text(datetime.fromtimestamp(math.floor(t), UTC)) + "Z"


def _seconds_text(moment: datetime) -> str:
    # four-digit years before 1000 too (strftime's %Y does not pad them on every platform)
    return f"{moment.year:04d}" + moment.strftime("-%m-%dT%H:%M:%S")


def format_clock(t: float) -> str:
    """The time of day in UTC (``HH:MM:SSZ``), for messages about a near instant."""
    return datetime.fromtimestamp(t, UTC).strftime("%H:%M:%SZ")


def format_micro_time(value: datetime) -> str:
    """Kubernetes MicroTime: RFC 3339 with exactly six fractional digits (``isoformat()`` drops
    them when they are zero, which the API server rejects)."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def after_ms(t: float, ms: int) -> float:
    """``ms`` milliseconds after ``t``, clamped to the instants ``format_time`` can write (no
    integer of any size overflows: the comparison is exact)."""
    if ms >= (LATEST_TIME - t) * 1000:
        return LATEST_TIME
    if ms <= (EARLIEST_TIME - t) * 1000:
        return EARLIEST_TIME
    return t + ms / 1000


def parse_time(text: str) -> float:
    """RFC 3339 to epoch seconds; ValueError when it is not."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def parse_time_or(text: object, default: float) -> float:
    """``parse_time`` for values anyone can edit (annotations): garbage reads as ``default``."""
    if not isinstance(text, str) or not text:
        return default
    try:
        return parse_time(text)
    except ValueError:
        return default


def parse_time_or_none(text: object) -> float | None:
    """``parse_time`` of a value read from a status: None when absent or not a time."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return parse_time(text)
    except ValueError:
        return None


def parse_seconds(text: object) -> float | None:
    """The whole seconds of an RFC 3339 UTC time (as ``format_seconds`` or the API server
    writes it; any fraction and zone suffix ignored); None when it is not one."""
    if not isinstance(text, str) or len(text) < 19:
        return None
    try:
        moment = datetime.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None
    return moment.replace(tzinfo=UTC).timestamp()


def format_duration(seconds: float) -> str:
    """``1h30m``, ``2m5s``, ``45s``; ``forever`` for an infinite wait."""
    if not math.isfinite(seconds):
        return "forever" if seconds > 0 else "?"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m{secs}s" if secs else f"{minutes}m"
    return f"{secs}s"


def format_wait(seconds: float) -> str:
    """A wait as people read it in a status line: ``45s``, ``2m05s``, ``3h07m`` (never
    negative)."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
