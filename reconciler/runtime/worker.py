"""The worker core every control loop runs on (the rollout controller, the firmware orchestrator,
the sync role, and operator mode's health and window watches): one thread that runs passes one
at a time, so actions never race each other.

A pass runs when something kicked the worker (a watch event, a new Git head, a resync) or when
the time the previous pass returned has come. Only the leader passes: each turn holds the acting
barrier while it checks ``is_leader`` and runs, and ``stop_acting()`` takes the same barrier, so
once it has returned (and ``is_leader`` says no) no pass acts. What a failed pass means (how
long to back off, whether it becomes a condition) is the loop's ``FailurePolicy`` over the one
taxonomy of ``failures.py``. Every time is read from the injected clock; the thread's waits are
capped (``idle_wait``) so a clock that is not the machine's is looked at again.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

from reconciler import clock as clocks
from reconciler.clock import Clock
from reconciler.runtime.failures import FailurePolicy

#: the longest wait ``pass_share`` adds before a pass (a pass slowed by a collection or a
#: thousand actions must not hold the next one back for long)
MAX_PASS_SPACING = 0.5


class Worker:
    """One thread of passes. ``run`` is the pass: it returns when to look again (on ``clock``;
    None: only when kicked) and may raise (``failures`` decides what then). A turn passes only
    when ``ready`` (the caches are synced) and ``is_leader``; otherwise it looks again
    ``not_leader_requeue`` seconds later. ``settle_seconds``: a wait before each pass that
    gathers a burst of events into one. ``pass_share``: the largest share of the time passes
    may take while events keep coming (1: back to back): the wait before a pass is then at least
    ``1 / pass_share - 1`` times the last pass (at most ``MAX_PASS_SPACING``), timed on
    ``timer``. An O(N) pass over 10,000 nodes takes 40-130 ms; back to back through a wave's
    burst of events it took most of a core from the API server the wave waits on."""

    def __init__(
        self,
        run: Callable[[], float | None],
        *,
        name: str,
        clock: Clock,
        is_leader: Callable[[], bool],
        ready: Callable[[], bool],
        failures: FailurePolicy,
        not_leader_requeue: float,
        settle_seconds: float = 0.0,
        idle_wait: float = 5.0,
        pass_share: float = 1.0,
        timer: Clock = clocks.monotonic,
    ) -> None:
        if not 0.0 < pass_share <= 1.0:
            raise ValueError(f"pass_share must be in (0, 1], not {pass_share}")
        self._run_pass = run
        self.name = name
        self.clock = clock
        self.is_leader = is_leader
        self.ready = ready
        self.failure_policy = failures
        self.not_leader_requeue = not_leader_requeue
        self.settle_seconds = settle_seconds
        self.idle_wait = idle_wait
        self.pass_share = pass_share
        self.timer = timer
        #: how long the last pass took on ``timer`` (seconds)
        self.last_pass_seconds = 0.0
        self._last_pass_end = 0.0
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        #: kicked since the last turn began (guarded by ``_wake``)
        self._dirty = True
        #: when the last turn asked to look again (None: only when kicked)
        self._requeue_at: float | None = None
        self._stop = threading.Event()
        #: held by a turn while it checks the leadership and passes
        self._acting = threading.Lock()
        self._thread: threading.Thread | None = None
        #: passes begun and passes returned so far (guarded by ``_wake``; ``wait_passes``)
        self._passes_begun = 0
        self._passes_done = 0
        self._passed = threading.Condition(self._lock)

    # -- lifecycle --------------------------------------------------------------------------

    def start_thread(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def request_stop(self) -> None:
        """The thread ends after the turn it is in (waits end at once)."""
        self._stop.set()
        with self._wake:
            self._wake.notify_all()

    def join_thread(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def stop_thread(self, timeout: float) -> None:
        self.request_stop()
        self.join_thread(timeout)

    @property
    def thread_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop_acting(self) -> None:
        """Returns once no pass is acting; later turns see ``is_leader`` false and do not
        pass (the leader election's ``on_stopped_leading``)."""
        with self._acting:
            pass

    # -- wake-ups ---------------------------------------------------------------------------

    def kick(self) -> None:
        with self._wake:
            self._touch()

    def _touch(self) -> None:
        """Marks the world changed; the caller holds ``_wake``."""
        self._dirty = True
        self._wake.notify()

    def next_wait(self) -> float | None:
        """Seconds until the next turn is due (None: now; ``math.inf``: when kicked). The
        worker thread holds ``_wake`` while it asks."""
        now = self.clock()
        held = self.failure_policy.held_until()
        if held is not None and now < held:
            return held - now  # a failing pass waits out its back-off, whatever happens meanwhile
        if self._dirty or (self._requeue_at is not None and self._requeue_at <= now):
            return None
        return math.inf if self._requeue_at is None else self._requeue_at - now

    @property
    def passes(self) -> int:
        """Passes returned so far (raised or not)."""
        with self._wake:
            return self._passes_done

    def wait_passes(self, count: int = 1, *, timeout: float) -> bool:
        """Kicks the worker until ``count`` passes that began after this call have returned
        (True), or ``timeout`` seconds of machine time went by (False). A pass that began after
        the call saw every change made before it (as far as the caches had it): tests wait on
        it to see the passes go on without doing something, instead of sleeping."""
        deadline = clocks.monotonic() + timeout
        with self._wake:
            target = self._passes_begun + count
            while self._passes_done < target:
                if not self._dirty:
                    self._touch()
                left = deadline - clocks.monotonic()
                if left <= 0:
                    return False
                self._passed.wait(left)
            return True

    # -- the thread -------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self._wake:
                while not self._stop.is_set() and (wait := self.next_wait()) is not None:
                    self._wake.wait(min(wait, self.idle_wait))
            if self._stop.is_set():
                break
            self.turn()

    def turn(self) -> bool:
        """One due turn: passes if ready and the leader (True), else looks again
        ``not_leader_requeue`` seconds later. Kicks from here on ask for another turn."""
        with self._wake:
            self._dirty = False
        with self._acting:
            if not self.ready() or not self.is_leader():
                self._requeue_at = self.clock() + self.not_leader_requeue
                return False
            if (wait := self.wait_before_pass()) > 0:
                self._stop.wait(wait)  # gather a burst of events into one pass
            with self._wake:
                self._passes_begun += 1
            started = self.timer()
            self._requeue_at = self.run_pass()
            self._last_pass_end = self.timer()
            self.last_pass_seconds = max(0.0, self._last_pass_end - started)
            with self._wake:
                self._passes_done += 1
                self._passed.notify_all()
            return True

    def wait_before_pass(self) -> float:
        """The settle time, or longer right after a long pass (``pass_share``); a pass after a
        quiet spell waits the settle time only."""
        spacing = min(self.last_pass_seconds * (1.0 / self.pass_share - 1.0), MAX_PASS_SPACING)
        since = max(0.0, self.timer() - self._last_pass_end)
        return max(self.settle_seconds, spacing - since)

    def run_pass(self) -> float | None:
        """One guarded pass; returns when to look again."""
        try:
            requeue_at = self._run_pass()
        except Exception as exc:
            return self.failure_policy.failed(exc)
        self.failure_policy.succeeded()
        return requeue_at
