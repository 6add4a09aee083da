"""Durations as ``reconciler.yaml`` writes them (``500ms``, ``30s``, ``10m``, ``1h30m``) and their
errors (bottom layer: every layer that reads a setting parses them here)."""

from __future__ import annotations

import math
import re

from reconciler.errors import RepoConfigError

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds in a duration like ``500ms``, ``30s``, ``10m`` or ``1h30m``. Raises ValueError."""
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"expected a duration like '30s', '10m' or '1h30m', got {text!r}")
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def parse_duration_setting(raw: object, *, key: str) -> float:
    """Seconds from an unchecked setting: ``"30s"``, ``"500ms"``, ``"10m"``, ``"1h30m"`` (the
    schema's format) or a plain number of seconds. Raises RepoConfigError naming ``key``."""
    if isinstance(raw, bool):
        raise RepoConfigError(f"{key}: expected a duration like '30s', got boolean {raw!r}")
    if isinstance(raw, int | float):
        seconds = float(raw)
    elif isinstance(raw, str):
        try:
            seconds = parse_duration(raw.strip())
        except ValueError:
            raise RepoConfigError(
                f"{key}: expected a duration like '30s', '500ms' or '1h30m', got {raw!r}"
            ) from None
    else:
        raise RepoConfigError(f"{key}: expected a duration like '30s', got {raw!r}")
    if seconds < 0:
        raise RepoConfigError(f"{key}: a duration cannot be negative, got {raw!r}")
    if not math.isfinite(seconds):
        raise RepoConfigError(f"{key}: expected a finite duration, got {raw!r}")
    return seconds
