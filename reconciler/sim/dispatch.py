"""Work dispatch for the fleet simulator: keyed worker threads (work for one node runs in order,
nodes run in parallel) and a timer thread that hands due work to them."""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
import time
import zlib
from collections.abc import Callable

log = logging.getLogger(__name__)

Task = Callable[[], None]
_STOP = object()


class KeyedWorkers:
    """``submit(key, task)`` runs tasks with the same key one after another, in submission
    order, on one of ``count`` threads; different keys run concurrently."""

    def __init__(self, count: int, *, name: str = "worker") -> None:
        self._queues: list[queue.SimpleQueue[object]] = [queue.SimpleQueue() for _ in range(count)]
        self._threads = [
            threading.Thread(target=self._run, args=(q,), name=f"{name}-{i}", daemon=True)
            for i, q in enumerate(self._queues)
        ]
        self._pending = 0
        self._idle = threading.Condition()
        self.errors: list[str] = []
        self._stopped = False
        for thread in self._threads:
            thread.start()

    def submit(self, key: str, task: Task) -> None:
        if self._stopped:
            return
        with self._idle:
            self._pending += 1
        self._queues[zlib.crc32(key.encode()) % len(self._queues)].put(task)

    def _run(self, tasks: queue.SimpleQueue[object]) -> None:
        while True:
            task = tasks.get()
            if task is _STOP:
                return
            try:
                assert callable(task)
                task()
            except Exception as exc:
                log.exception("simulated fleet task failed")
                self.errors.append(f"{type(exc).__name__}: {exc}")
            finally:
                with self._idle:
                    self._pending -= 1
                    if self._pending == 0:
                        self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def stop(self, timeout: float = 10.0) -> None:
        self._stopped = True
        for q in self._queues:
            q.put(_STOP)
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
