"""The rollout controller's dispatcher: hands a plan's actions out without waiting for them.

Runs of per-node actions go to a pool, in order within each node and in parallel across nodes
(a wave of 400 nodes is 400 x 3 requests); their intents are in the node index before they are
sent. Nodes that get a pod deleted go first. A finished node's bookkeeping (uncordon,
annotations) runs on a few threads of its own and yields, briefly, to pod deletions in flight.
Cluster-wide actions (the DaemonSet template, the policy's pause, the payload) wait for every
request in flight first, as they did in a plan's order. Events go to a thread of their own:
they are information and must not delay the rollout.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

from reconciler.controller.act import ActionExecutor
from reconciler.controller.hooks import RolloutObserver
from reconciler.controller.index import NodeIndex, NodeIntent
from reconciler.kube.api import JSON, KubeError
from reconciler.rollout.actions import (
    NODE_ACTIONS,
    Action,
    DeleteDriverPod,
    DeletePod,
    EvictPod,
    NodeAction,
    RecordEvent,
)

log = logging.getLogger(__name__)

#: the longest a finished node's bookkeeping waits for pod deletions in flight
BOOKKEEPING_WAIT = 1.0
_EVICTIONS = (EvictPod, DeletePod)


class DispatchStats(Protocol):
    actions: int
    errors: int


class Dispatcher:
    """Sends one controller's actions. ``wake`` is the controller's condition (over ``lock``,
    which also guards ``index``); ``touch`` asks for a pass (called with ``lock`` held)."""

    def __init__(
        self,
        executor: ActionExecutor,
        index: NodeIndex,
        *,
        lock: threading.Lock,
        wake: threading.Condition,
        touch: Callable[[], None],
        stop: threading.Event,
        is_leader: Callable[[], bool],
        stats: DispatchStats,
        observer: RolloutObserver,
        role: str,
        workers: int = 32,
    ) -> None:
        self.executor = executor
        self.index = index
        self._wake = wake
        self._touch = touch
        self._stop = stop
        self.is_leader = is_leader
        self.stats = stats
        self.observer = observer
        self.role = role
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rollout-act")
        # the bookkeeping of finished nodes (uncordon, annotations) on a few threads of its own:
        # a freed slot's refill never queues behind it, and it does not crowd the API server
        # while slots are being refilled
        self.bookkeeping = ThreadPoolExecutor(max_workers=8,
                                              thread_name_prefix="rollout-bookkeeping")
        self.events = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollout-events")
        self.in_flight: set[Future[None]] = set()
        self.starts_in_flight: set[Future[None]] = set()  # those that delete a pod
        self.starts_idle = threading.Condition(lock)
        self.failure_backoff: dict[str, float] = {}
        # node -> its newest requests handed out: a node's later requests run after them
        self.node_requests: dict[str, Future[None]] = {}
        # nodes whose bookkeeping a start waits for: it goes without yielding
        self.awaited: set[str] = set()

    def shutdown_requests(self) -> None:
        self.pool.shutdown(wait=True)
        self.bookkeeping.shutdown(wait=True)

    def shutdown_events(self) -> None:
        self.events.shutdown(wait=True)

    def record_event(self, event: RecordEvent, co: Mapping[str, Any]) -> None:
        self.events.submit(self.executor.execute, event, co)

    def execute(self, actions: Sequence[Action], co: JSON) -> bool:
        """Hands out a plan's actions in order (see the module's docstring). False when
        leadership was lost."""
        batch: dict[str, list[NodeAction]] = {}

        def flush() -> None:
            # nodes that get a pod deleted go first: a freed slot is refilled before the
            # bookkeeping of nodes that just finished (their uncordon can wait a moment)
            groups = [(node, group, any(isinstance(a, DeleteDriverPod) for a in group))
                      for node, group in batch.items()]
            batch.clear()
            for node, group, starts in sorted(groups, key=lambda g: not g[2]):
                # a draining node's evictions are its way to a start: they never yield
                evicts = not starts and any(isinstance(a, _EVICTIONS) for a in group)
                self.dispatch(node, group, co, starts=starts, urgent=evicts)

        for action in actions:
            if not self.is_leader():
                return False
            self.stats.actions += 1
            if isinstance(action, RecordEvent):
                self.events.submit(self.executor.execute, action, co)
            elif isinstance(action, NODE_ACTIONS):
                batch.setdefault(action.node, []).append(action)
            else:
                flush()
                self.drain()
                self.executor.execute(action, co)
        flush()
        return True

    def dispatch(self, node: str, group: list[NodeAction], co: JSON, *,
                 starts: bool, urgent: bool = False) -> Future[None]:
        """Hands one node's actions to the pool; its intent is in the index before this
        returns. They run after the node's earlier requests (a start right after the node's
        cordon ahead waits for the cordon), and not at all if those failed. ``urgent``: not
        a start, yet on the pool of starts (a draining node's evictions), never yielding."""
        intent = NodeIntent.of(group)
        with self._wake:
            self.index.add_intent(node, intent)
            earlier = self.node_requests.get(node)
            if earlier is not None and earlier.done() and earlier.exception() is None:
                earlier = None  # landed; a failed one counts until it is forgotten
            if earlier is not None and starts:
                self.awaited.add(node)
                self.starts_idle.notify_all()
        handed_out = self.observer.requests_handed_out(node, starts=starts)
        if starts or urgent:
            future = self.pool.submit(self._after, earlier, self.executor.execute_node_actions,
                                      group, co)
        else:
            future = self.bookkeeping.submit(self._after, earlier, self.bookkeep, node, group,
                                             co)
        with self._wake:
            self.in_flight.add(future)
            self.node_requests[node] = future
            if starts:
                self.starts_in_flight.add(future)
        future.add_done_callback(
            lambda done: self.landed(node, intent, done, handed_out, starts=starts))
        return future

    def _start_landed(self, future: Future[None]) -> None:
        """A start's pod deletion is done (the caller holds the lock): bookkeeping waiting for
        the deletions in flight may go."""
        if future in self.starts_in_flight:
            self.starts_in_flight.discard(future)
            if not self.starts_in_flight:
                self.starts_idle.notify_all()

    @staticmethod
    def _after(earlier: Future[None] | None, run: Callable[..., None], *args: object) -> None:
        if earlier is not None:
            earlier.result()  # raises what it raised: this node is planned again instead
        run(*args)

    def bookkeep(self, node: str, group: list[NodeAction], co: JSON) -> None:
        """A finished node's bookkeeping (uncordon, annotations) and a cordon ahead wait, up to
        a second, while pod deletions are on their way: in a burst of freed slots the API server
        answers the refills first. The planner already counts what they write (their intent).
        A start waiting for this node's request ends the wait."""
        with self.starts_idle:
            self.starts_idle.wait_for(
                lambda: not self.starts_in_flight or node in self.awaited
                or self._stop.is_set(), BOOKKEEPING_WAIT)
            self.awaited.discard(node)
        self.executor.execute_node_actions(group, co)

    def landed(self, node: str, intent: NodeIntent, done: Future[None], handed_out: object,
               *, starts: bool = False) -> None:
        """A node's requests finished: the server's objects are in the index (the executor's
        ``on_object``), so the intent goes. After a failure it stays a little longer, so the
        next pass does not retry that node in a tight loop; then the node is planned from what
        the server has."""
        error = done.exception()
        self.observer.requests_landed(node, handed_out, starts=starts)
        if error is None:
            with self._wake:
                self.failure_backoff.pop(node, None)
            self.forget(node, intent, done, replan=False)
            return
        self.stats.errors += 1
        with self._wake:
            backoff = min(self.failure_backoff.get(node, 0.1) * 2, 10.0)
            self.failure_backoff[node] = backoff
        if isinstance(error, KubeError):
            log.warning("%s: node %s: %s; planned again in %.1f s", self.role, node, error,
                        backoff)
        else:
            log.error("%s: node %s: %r; planned again in %.1f s", self.role, node, error, backoff)
        timer = threading.Timer(backoff, self.forget, (node, intent, done))
        timer.daemon = True
        timer.start()

    def forget(self, node: str, intent: NodeIntent, done: Future[None], *,
               replan: bool = True) -> None:
        """Drops a landed intent. After success the index already holds what it said, so
        nothing needs planning again; after a failure the node is planned from the server's
        objects."""
        with self._wake:
            self.in_flight.discard(done)
            self._start_landed(done)
            if self.node_requests.get(node) is done:
                del self.node_requests[node]
            self.index.drop_intent(node, intent)
            if replan:
                self._touch()
            self._wake.notify_all()  # drain waits on the same condition

    def drain(self) -> None:
        """Waits until no per-node request is in flight (before a cluster-wide action)."""
        with self._wake:
            while self.in_flight and not self._stop.is_set():
                self._wake.wait(0.5)
