"""Durations on the command line: what ``reconciler.yaml`` accepts (``500ms``, ``30s``, ``10m``,
``1h30m``) plus a bare number of seconds."""

from __future__ import annotations

from reconciler.policy.repo_config import parse_duration


def parse_duration_seconds(text: str) -> float:
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return parse_duration(text)
    except ValueError:
        raise ValueError(
            f"expected a duration like 30s, 10m or 1h, or a number of seconds, got {text!r}"
        ) from None
