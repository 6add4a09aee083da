"""The worker core every control loop runs on (``reconciler.runtime.worker.Worker``):
when a turn is due (kicks, the time a pass returned, a failure's back-off), leader gating, and the
acting barrier. Turns are taken by hand on a virtual clock; only the barrier test runs the thread.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable

import pytest

from reconciler.gitops.errors import RemoteUnavailable
from reconciler.kube.api import KubeError
from reconciler.ops.metrics import Metrics
from reconciler.runtime.failures import PassFailures, RetryLater
from reconciler.runtime.worker import MAX_PASS_SPACING, Worker
from reconciler.sync.loop import FIRST_BACKOFF, MAX_BACKOFF, NOT_LEADER_RECHECK, SyncFailures
from reconciler.sync.record import SyncStats
from tests.clocks import VirtualClock


class NoFailures:
    """A failure policy for passes that never raise."""

    def failed(self, exc: Exception) -> float | None:
        raise AssertionError(f"the pass raised {exc!r}")

    def succeeded(self) -> None:
        pass

    def held_until(self) -> float | None:
        return None


def worker(clock: VirtualClock, run: Callable[[], float | None], *,
           is_leader: Callable[[], bool] = lambda: True, ready: Callable[[], bool] = lambda: True,
           failures: object = None, not_leader_requeue: float = 0.5) -> Worker:
    return Worker(run, name="test-worker", clock=clock, is_leader=is_leader, ready=ready,
                  failures=failures or NoFailures(),  # type: ignore[arg-type]
                  not_leader_requeue=not_leader_requeue)


def test_a_turn_is_due_when_kicked_or_when_the_time_its_pass_returned_comes() -> None:
    clock = VirtualClock()
    passes: list[float] = []

    def run() -> float | None:
        passes.append(clock.now)
        return clock.now + 5.0

    w = worker(clock, run)
    assert w.next_wait() is None, "a new worker passes at once"
    assert w.turn() and passes == [1000.0]
    assert w.next_wait() == 5.0
    clock.now += 4.0
    assert w.next_wait() == 1.0
    w.kick()
    assert w.next_wait() is None, "a kick does not wait for the requeue time"
    assert w.turn() and passes == [1000.0, 1004.0]
    assert w.next_wait() == 5.0, "the requeue time is the new pass's"
    clock.now += 5.0
    assert w.next_wait() is None


def test_a_pass_that_returns_no_time_waits_for_a_kick() -> None:
    clock = VirtualClock()
    w = worker(clock, lambda: None)
    w.turn()
    clock.now += 3600.0
    assert w.next_wait() == math.inf
    w.kick()
    assert w.next_wait() is None


@pytest.mark.parametrize("requeue", [NOT_LEADER_RECHECK, 0.5])  # the sync's, the controllers'
@pytest.mark.parametrize("closed", ["is_leader", "ready"])
def test_a_worker_that_is_not_the_leader_or_not_synced_does_not_pass_and_looks_again_later(
    requeue: float, closed: str,
) -> None:
    clock = VirtualClock()
    passes: list[float] = []
    gates = {"is_leader": True, "ready": True}
    gates[closed] = False

    def run() -> float | None:
        passes.append(clock.now)
        return None

    w = worker(clock, run, is_leader=lambda: gates["is_leader"], ready=lambda: gates["ready"],
               not_leader_requeue=requeue)
    assert not w.turn() and passes == []
    assert w.next_wait() == pytest.approx(requeue)
    clock.now += requeue
    assert w.next_wait() is None
    assert not w.turn() and w.next_wait() == pytest.approx(requeue), "it keeps looking while shut"
    gates[closed] = True
    clock.now += requeue
    assert w.turn() and passes == [clock.now]


def test_sync_failures_back_off_doubling_to_the_cap_whatever_kicks_the_worker() -> None:
    clock = VirtualClock()
    failing = [True]

    def run() -> float | None:
        if failing[0]:
            raise KubeError(503, "ServiceUnavailable", "etcd leader changed", method="GET",
                            path="/apis")
        return None

    stats = SyncStats()
    w = worker(clock, run, failures=SyncFailures(cluster="prod-a", monotonic=clock, stats=stats,
                                                 metrics=None))
    waits = []
    for _ in range(9):
        assert w.turn()
        waits.append(w.next_wait())
        w.kick()
        assert w.next_wait() == waits[-1], "a kick does not cut the back-off short"
        clock.now += waits[-1] or 0.0
        assert w.next_wait() is None
    assert waits == pytest.approx([0.2, 0.4, 0.8, 1.6, 3.2, 6.4, MAX_BACKOFF, MAX_BACKOFF,
                                   MAX_BACKOFF])
    assert waits[0] == pytest.approx(FIRST_BACKOFF)
    assert stats.errors == 9
    failing[0] = False
    assert w.turn() and w.next_wait() == math.inf, "a pass that returns ends the back-off"
    failing[0] = True
    w.turn()
    assert w.next_wait() == pytest.approx(FIRST_BACKOFF), "the next failure starts again"


def test_sync_failures_count_git_errors_and_log_other_errors_with_their_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = VirtualClock()
    metrics = Metrics()
    stats = SyncStats()
    policy = SyncFailures(cluster="prod-a", monotonic=clock, stats=stats, metrics=metrics)
    with caplog.at_level(logging.WARNING, logger="reconciler.sync.loop"):
        assert policy.failed(RemoteUnavailable("origin: connection refused")) == 1000.2
        assert policy.failed(ValueError("bad data")) == pytest.approx(1000.4)
    assert metrics.registry.get_sample_value("gpu_reconciler_git_errors_total",
                                             {"operation": "read"}) == 1.0
    assert stats.errors == 2
    git, other = caplog.records
    assert git.levelno == logging.WARNING and git.exc_info is None
    assert git.getMessage() == ("sync of prod-a failed: origin: connection refused; "
                                "retrying in 0.2 s")
    assert other.levelno == logging.ERROR and other.exc_info is not None
    assert other.getMessage() == "sync of prod-a failed; retrying in 0.4 s"


def test_pass_failures_back_off_within_the_range_they_are_given() -> None:
    clock = VirtualClock()
    failures = PassFailures(clock, first_retry=1.0, max_retry=60.0)
    waits = []
    for _ in range(8):
        failures.failed(RuntimeError("planner bug"))
        assert failures.retry_at is not None
        waits.append(failures.retry_at - clock.now)
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]


def test_stop_acting_returns_only_once_the_acting_pass_ended_and_no_pass_acts_after() -> None:
    clock = VirtualClock()
    order: list[str] = []
    entered, release, refused = threading.Event(), threading.Event(), threading.Event()
    leader = [True]

    def run() -> float | None:
        order.append("pass began")
        entered.set()
        assert release.wait(30)
        order.append("pass ended")
        return None

    def is_leader() -> bool:
        if not leader[0]:
            refused.set()
        return leader[0]

    w = worker(clock, run, is_leader=is_leader)
    w.start_thread()
    try:
        assert entered.wait(30), "the first pass began"

        def lose_leadership() -> None:
            leader[0] = False
            order.append("stop_acting called")
            w.stop_acting()
            order.append("stop_acting returned")

        stopper = threading.Thread(target=lose_leadership)
        stopper.start()
        stopper.join(0.3)
        assert stopper.is_alive(), "stop_acting waits for the acting pass"
        release.set()
        stopper.join(30)
        assert order == ["pass began", "stop_acting called", "pass ended",
                         "stop_acting returned"]
        w.kick()
        assert refused.wait(30), "the next turn asked for the leadership"
        assert order.count("pass began") == 1, "and did not pass"
    finally:
        release.set()
        w.stop_thread(10)
    assert not w.thread_alive


def test_a_periodic_look_that_raises_is_logged_and_looked_at_again_after_its_retry(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = VirtualClock()
    errors: list[Exception] = [RemoteUnavailable("remote down"), ValueError("bad data")]

    def run() -> float | None:
        if errors:
            raise errors.pop(0)
        return clock.now + 30.0

    w = worker(clock, run, failures=RetryLater(clock, what="windows", retry=lambda: 7.0,
                                               logger=logging.getLogger("test.retry"),
                                               expected=(RemoteUnavailable,)))
    with caplog.at_level(logging.WARNING, logger="test.retry"):
        assert w.turn()
        assert w.next_wait() == 7.0, "no hot loop, no back-off held beyond the retry"
        clock.now += 7.0
        assert w.turn()
    expected, other = caplog.records
    assert expected.levelno == logging.WARNING and "remote down" in expected.getMessage()
    assert expected.exc_info is None  # an expected error is one line
    assert other.levelno == logging.ERROR and other.exc_info is not None  # others: traceback
    w.kick()
    assert w.next_wait() is None, "a kick is not held by a failure"
    clock.now += 7.0
    assert w.turn() and w.next_wait() == 30.0, "the next look that works is the pass's time"


def test_after_a_long_pass_the_next_waits_so_passes_keep_to_their_share() -> None:
    clock, timer = VirtualClock(), VirtualClock()

    def run() -> float | None:
        timer.now += 0.1  # a pass of 100 ms (an O(N) pass over 10,000 nodes)
        return None

    w = Worker(run, name="test-worker", clock=clock, is_leader=lambda: True,
               ready=lambda: True, failures=NoFailures(), not_leader_requeue=0.5,
               settle_seconds=0.02, pass_share=1 / 3, timer=timer)
    assert w.wait_before_pass() == 0.02, "the first pass waits the settle time only"
    w.turn()
    assert w.last_pass_seconds == pytest.approx(0.1)
    assert w.wait_before_pass() == pytest.approx(0.2), "twice the last pass: a third of the time"
    timer.now += 0.15
    assert w.wait_before_pass() == pytest.approx(0.05), "the time since the pass counts"
    timer.now += 10.0
    assert w.wait_before_pass() == 0.02, "after a quiet spell: the settle time"

    def slow() -> float | None:
        timer.now += 5.0  # a pass held up (a full collection, thousands of actions)
        return None

    w._run_pass = slow
    w.turn()
    assert w.wait_before_pass() == MAX_PASS_SPACING, "never held back longer than that"


def test_passes_back_to_back_by_default_and_a_share_outside_0_to_1_is_refused() -> None:
    clock, timer = VirtualClock(), VirtualClock()

    def run() -> float | None:
        timer.now += 0.1
        return None

    w = Worker(run, name="test-worker", clock=clock, is_leader=lambda: True,
               ready=lambda: True, failures=NoFailures(), not_leader_requeue=0.5, timer=timer)
    w.turn()
    assert w.wait_before_pass() == 0.0
    for share in (0.0, -1.0, 1.5):
        with pytest.raises(ValueError, match="pass_share"):
            Worker(run, name="test-worker", clock=clock, is_leader=lambda: True,
                   ready=lambda: True, failures=NoFailures(), not_leader_requeue=0.5,
                   pass_share=share)


def test_wait_passes_returns_once_passes_begun_after_it_returned_and_kicks_for_them() -> None:
    clock = VirtualClock()
    seen: list[int] = []
    value = [0]

    def run() -> float | None:
        seen.append(value[0])
        return None  # only when kicked: wait_passes kicks for each pass it waits for

    w = worker(clock, run)
    w.start_thread()
    try:
        assert w.wait_passes(1, timeout=30)
        value[0] = 1
        before = w.passes
        assert w.wait_passes(2, timeout=30)
        assert w.passes >= before + 2
        assert seen[-2:] == [1, 1], "both passes began after the change"
    finally:
        w.stop_thread(10)
    assert not w.wait_passes(1, timeout=0.05), "no thread: no pass"
