"""The one clock seam: the only module that reads the machine's clocks.

Everything that needs the time takes one of these callables as a parameter (default: the
machine's), so tests run on a virtual clock and assert exact delays. ``wall`` is seconds since
the epoch, for what is written down (status timestamps, Events, Git); ``monotonic`` never jumps,
for deadlines, intervals and timeouts. The simulator and the demo keep virtual or display time of
their own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

#: a clock: a callable returning seconds
Clock = Callable[[], float]


def wall() -> float:
    """Seconds since the epoch (UTC): for timestamps that are stored or shown."""
    return time.time()


def monotonic() -> float:
    """Seconds on a clock that never goes back: for deadlines and intervals."""
    return time.monotonic()


def utc_now() -> datetime:
    """``wall()`` as an aware UTC datetime."""
    return datetime.now(UTC)
