"""Clean shutdown on SIGTERM (Kubernetes stopping the pod) and SIGINT (Ctrl-C).

The signal handler only notes the signal: it runs between two bytecodes of the main thread,
which may hold a lock the handler would need (an Event's, a log stream's), so it takes none and
writes nothing. ``wait`` looks for a noted signal a few times a second, logs it and sets the
event; the main thread then runs the registered steps in reverse order of registration (last
started, first stopped): stop acting, release the Lease, flush the status queue, close servers.
A second signal while shutting down exits at once.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType

from reconciler.clock import Clock, monotonic

log = logging.getLogger(__name__)

#: how often ``wait`` looks for a signal the handler noted
SIGNAL_POLL = 0.2


class Shutdown:
    def __init__(self, *, clock: Clock = monotonic) -> None:
        self._clock = clock
        self._event = threading.Event()
        self._steps: list[tuple[str, Callable[[], None]]] = []
        self._lock = threading.Lock()
        self._signal: int | None = None

    @property
    def requested(self) -> bool:
        return self._event.is_set() or self._signal is not None

    @property
    def event(self) -> threading.Event:
        """Loops pass this to ``wait(timeout)`` instead of ``time.sleep`` so they stop promptly."""
        return self._event

    def on_shutdown(self, name: str, step: Callable[[], None]) -> None:
        with self._lock:
            self._steps.append((name, step))

    def request(self, reason: str = "requested") -> None:
        if not self._event.is_set():
            log.info("shutdown %s", reason)
        self._event.set()

    def install(self, signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> None:
        """Install the handlers; call from the main thread."""
        for sig in signals:
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._signal is not None or self._event.is_set():
            # a person pressing Ctrl-C twice, or the kubelet's patience running out
            os._exit(128 + signum)
        self._signal = signum  # one store: no lock, no I/O (see the module's docstring)

    def _take_signal(self) -> None:
        signum = self._signal
        if signum is not None and not self._event.is_set():
            self.request(f"on {signal.Signals(signum).name}")

    def wait(self, timeout: float | None = None) -> bool:
        """True once shutdown was requested (by a signal or ``request``); False after
        ``timeout`` seconds without."""
        deadline = None if timeout is None else self._clock() + timeout
        while True:
            self._take_signal()
            remaining = SIGNAL_POLL if deadline is None else deadline - self._clock()
            if self._event.wait(max(0.0, min(remaining, SIGNAL_POLL))):
                return True
            if deadline is not None and self._clock() >= deadline:
                self._take_signal()
                return self._event.is_set()

    def run_steps(self) -> list[str]:
        """Run the shutdown steps, newest first; a failing step is logged and the rest still run.

        Returns the names of the steps that failed.
        """
        with self._lock:
            steps = list(reversed(self._steps))
            self._steps.clear()
        failed: list[str] = []
        for name, step in steps:
            try:
                step()
            except Exception:
                log.exception("shutdown step %s failed", name)
                failed.append(name)
            else:
                log.debug("shutdown step %s done", name)
        return failed
