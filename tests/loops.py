"""Control loops a test starts (the rollout controller, the sync role, ...): each waited for
until it has listed what it watches, all stopped when the test is over."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import ParamSpec, Protocol, TypeVar


class Loop(Protocol):
    def wait_synced(self, timeout: float = ...) -> bool: ...

    def stop(self) -> None: ...


Options = ParamSpec("Options")
L = TypeVar("L", bound=Loop)


@contextlib.contextmanager
def started_loops(start: Callable[Options, L]) -> Iterator[Callable[Options, L]]:
    """``start`` (which returns a started loop) for a fixture to hand out: each loop it returns
    is synced (30 s) before the test gets it, and stopped on leaving, in the order started."""
    started: list[L] = []

    def synced(*args: Options.args, **kwargs: Options.kwargs) -> L:
        loop = start(*args, **kwargs)
        started.append(loop)
        assert loop.wait_synced(30)
        return loop

    try:
        yield synced
    finally:
        for loop in started:
            loop.stop()
