"""List+watch of one kind of object, kept as a local cache (an informer, in client-go's words).

Lists once, then watches from the list's resourceVersion; on 410 Gone or a broken stream it
lists again and reports the differences as events, so a consumer never misses a change and
never polls.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import urllib3

from reconciler.kube.api import JSON, Gone, KubeApi, KubeError, NotFound

log = logging.getLogger(__name__)

EventHandler = Callable[[str, JSON], None]


def without_managed_fields(obj: JSON) -> JSON:
    """A ``transform`` for caches that never read ``metadata.managedFields``: usually the
    largest part of an object, and the bulk of what a full garbage collection would otherwise
    scan again and again in a cache of thousands of nodes and pods (client-go's informers strip
    it for the same reason)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def object_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


class ListWatch:
    """Keeps ``cache`` equal to the server's objects under ``path`` (with optional label or field
    selectors in ``query``) and calls ``on_event(type, obj)`` for ADDED, MODIFIED and DELETED, from
    its own thread, in order. Handlers must be quick (hand work to a queue). ``transform``, if
    given, is applied to every object before it is cached or handed out."""

    def __init__(
        self,
        api: KubeApi,
        path: str,
        *,
        on_event: EventHandler | None = None,
        query: Mapping[str, str | int | bool] | None = None,
        name: str | None = None,
        timeout_seconds: int = 60,
        max_retry_delay: float = 5.0,
        transform: Callable[[JSON], JSON] | None = None,
    ) -> None:
        self.api = api
        self.transform = transform
        self.path = path
        self.query = dict(query or {})
        self.name = name or path
        self.on_event = on_event
        self.timeout_seconds = timeout_seconds
        self.max_retry_delay = max_retry_delay
        self.cache: dict[str, JSON] = {}
        self.lists = 0
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._response: urllib3.BaseHTTPResponse | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> ListWatch:
        self._thread = threading.Thread(target=self._run, name=f"watch {self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            with contextlib.suppress(Exception):  # a response already closed is fine
                response.shutdown()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait_synced(self, timeout: float | None = None) -> bool:
        """True once the first list has been loaded into the cache."""
        return self._synced.wait(timeout)

    def items(self) -> list[JSON]:
        with self._lock:
            return list(self.cache.values())

    def get(self, key: str) -> JSON | None:
        with self._lock:
            return self.cache.get(key)

    # -- loop -------------------------------------------------------------------------------

    def _run(self) -> None:
        resource_version: str | None = None
        delay = 0.1
        while not self._stop.is_set():
            try:
                if resource_version is None:
                    resource_version = self._relist()
                    self._synced.set()
                resource_version = self._watch(resource_version)
                delay = 0.1
            except Gone:
                resource_version = None
            except (KubeError, ValueError) as exc:
                if self._stop.is_set():
                    break
                self.last_error = str(exc)
                if isinstance(exc, NotFound):  # e.g. the CRD is not installed yet
                    resource_version = None
                log.debug("%s: %s; retrying in %.1f s", self.name, exc, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, self.max_retry_delay)

    def _relist(self) -> str:
        listing = self.api.list(self.path, query=self.query)
        self.lists += 1
        items = listing.get("items") or []
        if self.transform is not None:
            items = [self.transform(item) for item in items]
        fresh = {object_key(item): item for item in items}
        events: list[tuple[str, JSON]] = []
        with self._lock:
            for key, obj in fresh.items():
                old = self.cache.get(key)
                if old is None:
                    events.append(("ADDED", obj))
                elif _rv(old) != _rv(obj):
                    events.append(("MODIFIED", obj))
            events.extend(("DELETED", old) for key, old in self.cache.items() if key not in fresh)
            self.cache = fresh
        for event_type, obj in events:
            self._emit(event_type, obj)
        return str((listing.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, resource_version: str) -> str:
        stream = self.api.watch(
            self.path,
            resource_version=resource_version,
            query=self.query,
            timeout_seconds=self.timeout_seconds,
            on_open=self._opened,
        )
        try:
            for event in stream:
                if self._stop.is_set():
                    break
                event_type = str(event.get("type"))
                obj = event.get("object") or {}
                if event_type == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone(410, "Expired", str(obj.get("message")), method="WATCH",
                                   path=self.path)
                    raise KubeError(int(obj.get("code") or 0), str(obj.get("reason")),
                                    str(obj.get("message")), method="WATCH", path=self.path)
                resource_version = _rv(obj) or resource_version
                if event_type == "BOOKMARK":
                    continue
                if self.transform is not None:
                    obj = self.transform(obj)
                key = object_key(obj)
                with self._lock:
                    if event_type == "DELETED":
                        self.cache.pop(key, None)
                    else:
                        self.cache[key] = obj
                self._emit(event_type, obj)
        finally:
            self._response = None
        return resource_version

    def _opened(self, response: urllib3.BaseHTTPResponse) -> None:
        self._response = response
        if self._stop.is_set():
            response.shutdown()

    def _emit(self, event_type: str, obj: JSON) -> None:
        if self.on_event is None:
            return
        try:
            self.on_event(event_type, obj)
        except Exception:
            log.exception("%s: handler failed on %s %s", self.name, event_type, object_key(obj))


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")
