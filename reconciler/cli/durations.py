"""Durations on the command line: what ``reconciler.yaml`` accepts (``500ms``, ``30s``, ``10m``,
``1h30m``) plus a bare number of seconds; finite, from 0 to a year (``nan``, ``inf``, ``-5`` and
``1e309`` are refused: they would spin a loop or overflow a timer)."""

from __future__ import annotations

import math

from reconciler.cli.numbers import MAX_SECONDS
from reconciler.durations import parse_duration
from reconciler.files import printable


def parse_duration_seconds(text: str) -> float:
    text = text.strip()
    shown = printable(text[:40]) + ("..." if len(text) > 40 else "")
    try:
        seconds = float(text) if len(text) <= 40 else math.nan
    except ValueError:
        try:
            seconds = parse_duration(text)
        except ValueError:
            raise ValueError(
                f"expected a duration like 30s, 10m or 1h, or a number of seconds, got {shown!r}"
            ) from None
    if not (math.isfinite(seconds) and 0 <= seconds <= MAX_SECONDS):
        raise ValueError(f"expected a duration from 0 to {int(MAX_SECONDS)} seconds (a year), "
                         f"got {shown!r}")
    return seconds
