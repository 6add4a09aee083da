"""The fleet simulator's keyed workers: one node's work in order and never at once, stop after
what was submitted, a failing task recorded."""

from __future__ import annotations

import threading

from reconciler.sim.dispatch import KeyedWorkers


def test_one_keys_tasks_run_in_order_and_never_at_once() -> None:
    workers = KeyedWorkers(4)
    seen: list[int] = []
    running = threading.Semaphore(1)
    overlaps: list[int] = []

    def task(i: int) -> None:
        if not running.acquire(blocking=False):
            overlaps.append(i)
            return
        try:
            seen.append(i)
        finally:
            running.release()

    try:
        for i in range(500):
            workers.submit("node-0001", lambda i=i: task(i))
        assert workers.wait_idle(10)
    finally:
        workers.stop()
    assert seen == list(range(500))
    assert overlaps == []


def test_stop_finishes_what_was_submitted_and_refuses_more() -> None:
    workers = KeyedWorkers(2)
    gate = threading.Event()
    ran: list[int] = []
    workers.submit("a", gate.wait)
    for i in range(10):
        workers.submit("b", lambda i=i: ran.append(i))
    gate.set()
    workers.stop()
    workers.submit("b", lambda: ran.append(99))
    assert ran == list(range(10))
    assert all(not t.is_alive() for t in workers.threads)


def test_a_failing_task_is_recorded_and_the_key_goes_on() -> None:
    workers = KeyedWorkers(1)
    after: list[str] = []

    def fail() -> None:
        raise RuntimeError("boom")

    try:
        workers.submit("a", fail)
        workers.submit("a", lambda: after.append("a"))
        assert workers.wait_idle(10)
    finally:
        workers.stop()
    assert workers.errors == ["RuntimeError: boom"]
    assert after == ["a"]
