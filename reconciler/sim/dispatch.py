"""Work dispatch for the fleet simulator: keyed worker threads (work for one node runs in order,
nodes run in parallel) and a timer thread that hands due work to them."""

from __future__ import annotations

import collections
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

Task = Callable[[], None]


class KeyedWorkers:
    """``submit(key, task)`` runs tasks with the same key one after another, in submission
    order, on one of ``count`` threads; different keys run concurrently. Any idle thread takes
    the next key with work (keys take turns, one task each), so one node's work never waits
    behind another node's as real kubelets, one per node, do not: with a queue per thread, a
    wave of 2,000 pods at 10,000 nodes left some threads idle while others still had dozens of
    nodes' tasks queued, each waiting on the API server."""

    def __init__(self, count: int, *, name: str = "worker") -> None:
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._idle = threading.Condition(self._lock)
        #: key -> its tasks not started yet
        self._tasks: dict[str, collections.deque[Task]] = {}
        #: keys with tasks waiting and none running, in the order they became ready
        self._ready: collections.deque[str] = collections.deque()
        self._pending = 0
        self._stopped = False
        self.errors: list[str] = []
        self._threads = [
            threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True)
            for i in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, key: str, task: Task) -> None:
        with self._lock:
            if self._stopped:
                return
            self._pending += 1
            tasks = self._tasks.get(key)
            if tasks is None:  # neither waiting nor running: ready now
                self._tasks[key] = collections.deque((task,))
                self._ready.append(key)
                self._work.notify()
            else:
                tasks.append(task)

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._ready and not self._stopped:
                    self._work.wait()
                if not self._ready:
                    return  # stopped, and what was submitted before has run
                key = self._ready.popleft()
                task = self._tasks[key].popleft()
            try:
                task()
            except Exception as exc:
                log.exception("simulated fleet task failed")
                self.errors.append(f"{type(exc).__name__}: {exc}")
            finally:
                with self._lock:
                    self._pending -= 1
                    if self._tasks[key]:
                        self._ready.append(key)  # its next task, after the others' turn
                        self._work.notify()
                    else:
                        del self._tasks[key]
                    if self._pending == 0:
                        self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Refuses new tasks; the threads end once what was submitted before has run."""
        with self._lock:
            self._stopped = True
            self._work.notify_all()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    @property
    def threads(self) -> list[threading.Thread]:
        return list(self._threads)


class Timers:
    """``call_later(delay, key, task)``: at the due time the task goes to the keyed workers."""

    def __init__(self, workers: KeyedWorkers) -> None:
        self._workers = workers
        self._heap: list[tuple[float, int, str, Task]] = []
        self._counter = itertools.count()
        self._wakeup = threading.Condition()
        self._stopped = False
        self.thread = threading.Thread(target=self._run, name="fleet-timers", daemon=True)
        self.thread.start()

    def call_later(self, delay: float, key: str, task: Task) -> None:
        if delay <= 0:
            self._workers.submit(key, task)
            return
        with self._wakeup:
            heapq.heappush(self._heap, (time.monotonic() + delay, next(self._counter), key, task))
            self._wakeup.notify()

    def _run(self) -> None:
        with self._wakeup:
            while not self._stopped:
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    _, _, key, task = heapq.heappop(self._heap)
                    self._workers.submit(key, task)
                timeout = self._heap[0][0] - now if self._heap else None
                self._wakeup.wait(timeout)

    def pending(self) -> int:
        with self._wakeup:
            return len(self._heap)

    def stop(self, timeout: float = 5.0) -> None:
        with self._wakeup:
            self._stopped = True
            self._heap.clear()
            self._wakeup.notify()
        self.thread.join(timeout)
