"""Waiting on a condition with a timeout that says what it saw (for tests, bench and the CLI)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(TimeoutError):
    pass


def wait_for(
    condition: Callable[[], T],
    *,
    timeout: float,
    what: str,
    observe: Callable[[], object] | None = None,
    interval: float = 0.05,
) -> T:
    """Returns the first truthy value of ``condition()``; on timeout raises ``WaitTimeout``
    naming ``what`` and the last thing ``observe()`` (or the condition) returned."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            seen = observe() if observe is not None else value
            raise WaitTimeout(
                f"timed out after {timeout:g} s waiting for {what}; last seen: {seen}"
            )
        time.sleep(interval)
