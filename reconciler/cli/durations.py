"""Durations on the command line and in the repository config: ``500ms``, ``30s``, ``10m``, ``1h``
or a bare number of seconds."""

from __future__ import annotations

import re

_DURATION = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)?$")
_SCALE = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration_seconds(text: str) -> float:
    match = _DURATION.match(text.strip())
    if not match:
        raise ValueError(f"expected a duration like 30s, 10m or 1h, got {text!r}")
    return float(match.group(1)) * _SCALE[match.group(2)]
