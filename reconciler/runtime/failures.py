"""What a failed pass means: one taxonomy for every control loop (Flux's error kinds).

- ``RETRY``: the world failed us (the API server, a Git remote, the network): the same input
  may pass later, so the pass is retried after a delay (logged as one warning line).
- ``STALLED``: the pass fails on its input (a planner that raises, a garbled object): retrying
  at once would fail the same way, so it is reported (with its traceback, and as a condition
  where the loop has one) and retried on a slow back-off that kicks do not cut short, until the
  input changed and a pass goes through. Flux stops retrying a stalled object until its
  generation moves; our passes read many objects with no one generation, so they look again on
  the back-off instead.
- ``CONFLICT``: someone wrote the object since we read it: re-read it and pass again at once.

Each loop says only its delays, whether kicks wait them out, what it re-reads and where it
shows a stalled pass (``LoopFailures``).
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from reconciler.clock import Clock
from reconciler.errors import GitOpsError
from reconciler.kube.api import Conflict, KubeError

#: the longest condition message / error text carried into the status and Events
_MESSAGE_LIMIT = 1000


class FailureKind(enum.Enum):
    RETRY = "retry"
    STALLED = "stalled"
    CONFLICT = "conflict"


def failure_kind(exc: BaseException,
                 transient: tuple[type[BaseException], ...] = ()) -> FailureKind:
    """The kind of a pass's exception; ``transient``: a loop's own errors to retry."""
    if isinstance(exc, Conflict):
        return FailureKind.CONFLICT
    if isinstance(exc, (KubeError, GitOpsError, *transient)):
        return FailureKind.RETRY
    return FailureKind.STALLED


@dataclass(frozen=True, slots=True)
class PassFailure:
    """What a pass that raised reports: the exception's class and its text."""

    reason: str
    message: str

    @classmethod
    def of(cls, exc: BaseException) -> PassFailure:
        text = str(exc) or repr(exc)
        if len(text) > _MESSAGE_LIMIT:
            text = text[: _MESSAGE_LIMIT - 3] + "..."
        return cls(type(exc).__name__, text)


class PassFailures:
    """Failed passes in a row: retried after a back-off that doubles (``first_retry`` to
    ``max_retry``; or ``delay(failures in a row)``), not in a hot loop, and reported when the
    error is new and then at most once per ``report_every`` while it lasts. The next pass that
    does not raise clears it. ``kicks_wait``: kicks do not cut the back-off short. Times come
    from ``clock``."""

    def __init__(self, clock: Clock, *, report_every: float = 600.0,
                 first_retry: float = 1.0, max_retry: float = 60.0,
                 delay: Callable[[int], float] | None = None, kicks_wait: bool = True) -> None:
        self.clock = clock
        self.report_every = report_every
        self.first_retry = first_retry
        self.max_retry = max_retry
        self.delay = delay
        self.kicks_wait = kicks_wait
        #: the current failure (None: the last pass did not raise)
        self.current: PassFailure | None = None
        #: failed passes in a row
        self.count = 0
        #: no pass before this (while failing)
        self.retry_at: float | None = None
        self._reported: PassFailure | None = None
        self._reported_at = -math.inf

    def backoff(self) -> float:
        """The wait after the current run of failures (seconds)."""
        if self.delay is not None:
            return self.delay(self.count)
        return min(self.first_retry * 2.0 ** min(max(self.count - 1, 0), 32), self.max_retry)

    def failed(self, exc: BaseException) -> bool:
        """Records a failed pass; True when it is to be reported now."""
        now = self.clock()
        failure = PassFailure.of(exc)
        self.count += 1
        self.current = failure
        self.retry_at = now + self.backoff()
        if failure != self._reported or now - self._reported_at >= self.report_every:
            self._reported, self._reported_at = failure, now
            return True
        return False

    def succeeded(self) -> PassFailure | None:
        """Records a pass that did not raise; returns the failure it clears, if any."""
        cleared = self.current
        self.current = None
        self.count = 0
        self.retry_at = None
        self._reported, self._reported_at = None, -math.inf
        return cleared

    def held(self) -> bool:
        """Whether the next pass must wait for the back-off (events do not cut it short)."""
        return self.kicks_wait and self.retry_at is not None and self.clock() < self.retry_at


class FailurePolicy(Protocol):
    """What a pass that raised means to one control loop."""

    def failed(self, exc: Exception) -> float | None:
        """The pass raised ``exc``: count and report it; returns when to look again."""

    def succeeded(self) -> None:
        """The pass returned."""

    def held_until(self) -> float | None:
        """No pass before this, whatever kicks the worker meanwhile (None: not held)."""


class StalledDisplay(Protocol):
    """Where a loop shows a stalled pass besides its log (a condition, an Event)."""

    def show(self, failure: PassFailure, *, event: bool) -> None:
        """The pass is stalled on ``failure``; ``event``: it is to be announced now."""

    def shown(self) -> PassFailure | None:
        """The failure shown now, if any (also one a previous leader left)."""

    def clear(self, failure: PassFailure) -> None:
        """A pass went through after ``failure``."""


class LoopFailures:
    """A control loop's failure policy over the one taxonomy. ``what`` names the loop in the
    log; ``retry`` and ``stalled`` are the back-offs of the two kinds (the same object: one run
    of failures whatever the kind); ``reread``: what a conflict reads again (None: a conflict
    is retried like any API error); ``counted(kind, exc)``: the loop's own counters."""

    def __init__(self, clock: Clock, *, what: str, logger: logging.Logger,
                 retry: PassFailures, stalled: PassFailures,
                 reread: Callable[[], object] | None = None,
                 display: StalledDisplay | None = None,
                 counted: Callable[[FailureKind, Exception], None] | None = None,
                 transient: tuple[type[Exception], ...] = ()) -> None:
        self.clock = clock
        self.what = what
        self.log = logger
        self.retry = retry
        self.stalled = stalled
        self.reread = reread
        self.display = display
        self.counted = counted
        self.transient = transient

    def failed(self, exc: Exception) -> float | None:
        kind = failure_kind(exc, self.transient)
        if kind is FailureKind.CONFLICT and self.reread is None:
            kind = FailureKind.RETRY
        if self.counted is not None:
            self.counted(kind, exc)
        if kind is FailureKind.CONFLICT:
            assert self.reread is not None
            self.reread()
            return self.clock()
        backoff = self.retry if kind is FailureKind.RETRY else self.stalled
        report = backoff.failed(exc)
        wait = backoff.backoff()
        if kind is FailureKind.RETRY:
            self.log.warning("%s failed: %s; retrying in %.1f s", self.what, exc, wait)
        else:
            self._stalled(exc, report, wait)
        return backoff.retry_at

    def _stalled(self, exc: Exception, report: bool, wait: float) -> None:
        failure = self.stalled.current
        assert failure is not None
        if report:
            self.log.error("%s failed; retrying in %.1f s", self.what, wait, exc_info=exc)
        else:
            self.log.debug("%s failed again: %s", self.what, failure.message)
        if self.display is not None:
            try:
                self.display.show(failure, event=report)
            except Exception:  # e.g. a status section too garbled to carry a condition
                self.log.exception("%s: could not show the failed pass", self.what)

    def succeeded(self) -> None:
        self.retry.succeeded()
        cleared = self.stalled.succeeded()
        if cleared is not None:
            self.log.info("%s goes through again after %s", self.what, cleared.reason)
        if self.display is None:
            return
        # also a failure whose clearing was lost (a failed or overtaken status write), or one a
        # previous leader left
        try:
            shown = self.display.shown() or cleared
            if shown is not None:
                self.display.clear(shown)
        except Exception:
            self.log.exception("%s: could not clear the shown failure", self.what)

    def held_until(self) -> float | None:
        held = [b.retry_at for b in (self.retry, self.stalled) if b.held()]
        return max((at for at in held if at is not None), default=None)


class RetryLater(LoopFailures):
    """The failure policy of a periodic look (operator mode's health checks and windows): a look
    that raised is looked at again ``retry()`` seconds later, whatever its kind (``expected``:
    more errors of the kind retried); kicks are not held and nothing shows in a status."""

    def __init__(self, clock: Clock, *, what: str, retry: Callable[[], float],
                 logger: logging.Logger,
                 expected: tuple[type[Exception], ...] = ()) -> None:
        later = PassFailures(clock, delay=lambda _count: retry(), kicks_wait=False)
        super().__init__(clock, what=what, logger=logger, retry=later, stalled=later,
                         transient=expected)
