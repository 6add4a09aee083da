"""Sends events to the sinks (docs/notifications.md) without ever holding up the rollout.

``observe(snapshot, rollout=...)`` is called by the sync role's pass (so only the leader offers),
with the commit that started the rollout (the events' keys carry it, not the head): it derives
the events (``events.py``, pure) against the snapshot it saw last and puts each (sink, event)
into a bounded queue, returning at once (a full queue drops the offer with a warning; the next
snapshot offers it again). One background thread sends: the sink's URL and secret read from
their files at each send, the request built and signed (``sinks.py``), POSTed with a timeout; a
2xx answer is recorded in the ledger (at least once: a crash between the answer and the record
sends it again, with the same ``webhook-id``); any other answer or error is retried after
``first_backoff`` doubling to ``max_backoff`` seconds, at most ``attempts`` times, other sends
going on meanwhile. Times come from the clock seam: wall time signs, monotonic time paces.

Neither a URL nor a secret is ever logged (they are read, used and dropped; the log names the
sink)."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler import clock as clocks
from reconciler.clock import Clock
from reconciler.files import FileRefused, read_bounded
from reconciler.notify.events import Event, derive_events
from reconciler.notify.ledger import SentLedger, remember
from reconciler.notify.sinks import SecretRefused, build_request
from reconciler.policy.notify_config import NotifySink
from reconciler.views.waits import GitContext

log = logging.getLogger(__name__)

QUEUE_SIZE = 64
ATTEMPTS = 6
FIRST_BACKOFF = 1.0
MAX_BACKOFF = 60.0
TIMEOUT = 5.0
#: the largest URL or secret file read
_SECRET_BYTES = 8192


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, not a delivery: a signed body is not sent on elsewhere."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


@dataclass(order=True)
class _Send:
    due: float
    order: int
    sink: NotifySink = field(compare=False)
    event: Event = field(compare=False)
    attempt: int = field(default=1, compare=False)


class Notifier:
    def __init__(self, cluster: str, *, sinks: Callable[[], tuple[NotifySink, ...]],
                 ledger: SentLedger, is_leader: Callable[[], bool] = lambda: True,
                 git: Callable[[], GitContext | None] = lambda: None,
                 object_name: str = "cluster-operator", wall: Clock = clocks.wall,
                 monotonic: Clock = clocks.monotonic, queue_size: int = QUEUE_SIZE,
                 attempts: int = ATTEMPTS, first_backoff: float = FIRST_BACKOFF,
                 max_backoff: float = MAX_BACKOFF, timeout: float = TIMEOUT) -> None:
        self.cluster = cluster
        self.sinks = sinks
        self.ledger = ledger
        self.is_leader = is_leader
        self.git = git
        self.object_name = object_name
        self.wall = wall
        self.monotonic = monotonic
        self.queue_size = queue_size
        self.attempts = attempts
        self.first_backoff = first_backoff
        self.max_backoff = max_backoff
        self.timeout = timeout
        self._previous: Mapping[str, Any] | None = None
        self._cond = threading.Condition()
        self._heap: list[_Send] = []
        self._order = itertools.count()
        #: (sink, key) queued, in flight or sent by this process (guarded by _cond)
        self._offered: set[tuple[str, str]] = set()
        #: what the ledger holds (None: not read yet, or read again after a leader change)
        self._sent: dict[str, list[str]] | None = None
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._busy = False
        #: for tests and metrics: deliveries that got a 2xx, and those given up
        self.delivered = 0
        self.given_up = 0

    # -- the sync pass's side: never blocks on the network --------------------------------
    def observe(self, snapshot: Mapping[str, Any], *, rollout: str = "") -> list[Event]:
        """Offer the events ``snapshot`` shows; returns them (for tests). ``rollout``: the
        commit that started the rollout (``reconciler.sync.rollout_start``), the rollout part
        of the events' keys."""
        sinks = self.sinks()
        events = derive_events(self.cluster, self._previous, snapshot, now=self.wall(),
                               rollout=rollout, git=self.git(),
                               object_name=self.object_name) if sinks else []
        for event in events:
            for sink in sinks:
                if sink.wants(event.kind):
                    self._offer(sink, event)
        self._previous = snapshot
        return events

    @property
    def last_snapshot(self) -> Mapping[str, Any] | None:
        """The snapshot ``observe`` saw last (its events are offered)."""
        return self._previous

    def _offer(self, sink: NotifySink, event: Event) -> None:
        with self._cond:
            if (sink.name, event.key) in self._offered or self._stopping:
                return
            if len(self._heap) >= self.queue_size:
                log.warning("notify %s: the queue is full; %s is offered again later",
                            sink.name, event.key)
                return
            self._offered.add((sink.name, event.key))
            heapq.heappush(self._heap, _Send(self.monotonic(), next(self._order), sink, event))
            if self._thread is None:  # started by the first offer: no sinks, no thread
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name=f"notify-{self.cluster}")
                self._thread.start()
            self._cond.notify()

    def leadership_changed(self) -> None:
        """Read the ledger again before the next send (another leader may have sent more)."""
        with self._cond:
            self._sent = None

    # -- lifecycle ---------------------------------------------------------------------------
    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def wait_idle(self, timeout: float) -> bool:
        """True once nothing waits to be sent (tests)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._heap and not self._busy, timeout)

    # -- the sending thread ----------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                item = self._next_locked()
                if item is None:
                    return
                self._busy = True
            try:
                self._deliver(item)
            except Exception:  # never let the thread die: the event is given up, logged
                log.exception("notify %s: sending %s failed", item.sink.name, item.event.key)
                self._give_up(item)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _next_locked(self) -> _Send | None:
        while not self._stopping:
            if self._heap:
                wait = self._heap[0].due - self.monotonic()
                if wait <= 0:
                    return heapq.heappop(self._heap)
            else:
                wait = None
            self._cond.wait(wait)
        return None

    def _deliver(self, item: _Send) -> None:
        sink, event = item.sink, item.event
        if not self.is_leader():
            self._forget(item)  # the new leader sends it
            return
        sent = self._ledger()
        if sent is None:
            self._retry(item, "the ledger cannot be read")
            return
        if event.key in sent.get(sink.name, ()):
            return
        try:
            url = sink.url or _read(sink.url_file)
            secret = _read(sink.secret_file) if sink.secret_file else None
            request = build_request(sink, event, url=url, secret=secret, now=self.wall())
        except (OSError, UnicodeDecodeError, SecretRefused) as exc:
            self._retry(item, _safe(exc, sink))
            return
        status = self._post(request.url, request.body, request.headers)
        if status is not None and 200 <= status < 300:
            self.delivered += 1
            log.info("notify %s: sent %s", sink.name, event.key)
            with self._cond:
                remember(sent, sink.name, event.key)
                snapshot = {name: list(keys) for name, keys in sent.items()}
            try:
                self.ledger.record(snapshot)
            except Exception as exc:  # sent; a restart may send it again (at least once)
                log.warning("notify %s: recording %s failed: %s", sink.name, event.key,
                            type(exc).__name__)
            return
        self._retry(item, f"answered {status}" if status is not None else "no answer")

    def _post(self, url: str, body: bytes, headers: Mapping[str, str]) -> int | None:
        request = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
        try:
            with _OPENER.open(request, timeout=self.timeout) as response:
                response.read(65536)
                return int(response.status)
        except urllib.error.HTTPError as exc:
            exc.close()
            return int(exc.code)
        except (OSError, ValueError):  # refused, timed out, a bad URL: the text may hold it
            return None

    def _ledger(self) -> dict[str, list[str]] | None:
        with self._cond:
            if self._sent is not None:
                return self._sent
        try:
            loaded = self.ledger.load()
        except Exception as exc:
            log.warning("notify %s: reading the events sent failed: %s", self.cluster,
                        type(exc).__name__)
            return None
        with self._cond:
            self._sent = loaded
            return loaded

    def _retry(self, item: _Send, why: str) -> None:
        if item.attempt >= self.attempts:
            log.warning("notify %s: %s: %s; given up after %d attempts", item.sink.name,
                        item.event.key, why, item.attempt)
            self._give_up(item)
            return
        delay = min(self.max_backoff, self.first_backoff * 2 ** (item.attempt - 1))
        log.info("notify %s: %s: %s; again in %.1f s", item.sink.name, item.event.key, why,
                 delay)
        with self._cond:
            heapq.heappush(self._heap, _Send(self.monotonic() + delay, next(self._order),
                                             item.sink, item.event, item.attempt + 1))

    def _give_up(self, item: _Send) -> None:
        self.given_up += 1
        self._forget(item)

    def _forget(self, item: _Send) -> None:
        """A later snapshot offers it again."""
        with self._cond:
            self._offered.discard((item.sink.name, item.event.key))


def _read(path: str | None) -> str:
    """A URL or secret file (a Secret's volume links its files: links are followed)."""
    if path is None:
        raise SecretRefused("no file named")
    try:
        data = read_bounded(path, limit=_SECRET_BYTES, follow_links=True)
    except FileRefused as exc:
        raise SecretRefused(f"a URL or secret file refused: {exc.reason}") from None
    return data.decode("utf-8").strip()


def _safe(exc: Exception, sink: NotifySink) -> str:
    """Why a sink's files are unusable, without their content."""
    if isinstance(exc, SecretRefused):
        return str(exc)
    return f"its URL or secret file cannot be read ({type(exc).__name__})"
