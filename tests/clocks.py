"""The tests' virtual clock: a clock seam (``reconciler.clock.Clock``) a test moves by hand, so
a delay is asserted exactly and takes no time."""

from __future__ import annotations


class VirtualClock:
    """Seconds that move only when the test says: ``clock.now += 30``."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
