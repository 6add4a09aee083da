"""The one live view of the repository config for this cluster: every section of
``reconciler.yaml`` resolved for it (``reconciler.config``), published whole.

Published by the sync role at each commit it applies (``reconciler.sync``), or, for a role that
runs without Git (``--role controller --repo-config F``), by ``RepoConfigWatch`` whenever F
changes; read by each control loop at each pass (rollout controller, firmware, health and window
watches, the notifier) and by the forge's commit-status poster before each post, so every setting
of ``reconciler.yaml`` follows commits the same way. A file that is
refused keeps the settings in force (the last good ones) and is reported: a located error in the
log here; the sync role reports a refused commit as any rejected commit (status snapshot, Event).
Subscribers (the controllers' kick) run after each change, so a change takes effect at once, not
at a loop's next pass for other reasons.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

from reconciler.config.document import ConfigDocument, load
from reconciler.config.settings import ClusterSettings, SettingsRefused, resolve
from reconciler.files import FileRefused, printable, read_bounded
from reconciler.timefmt import format_duration

log = logging.getLogger(__name__)


class LiveSettings:
    """The settings in force for ``cluster``; ``current()`` is safe from any thread (one
    reference to a frozen value, replaced whole)."""

    def __init__(self, cluster: str | None, initial: ClusterSettings | None = None, *,
                 pin: Callable[[ClusterSettings], ClusterSettings] | None = None) -> None:
        """``pin``: applied to every published value (a command-line flag that overrides a
        setting of the file)."""
        self.cluster = cluster
        self._pin = pin or (lambda settings: settings)
        self._current = self._pin(initial or ClusterSettings())
        self._lock = threading.Lock()
        self._subscribers: list[Callable[[], None]] = []
        #: why the newest file offered was refused (None: it is in force)
        self.refused: str | None = None
        self._health_error_logged: str | None = None

    def current(self) -> ClusterSettings:
        return self._current

    def subscribe(self, callback: Callable[[], None]) -> None:
        """``callback()`` after each change of the settings in force."""
        with self._lock:
            self._subscribers.append(callback)

    def offer(self, doc: ConfigDocument, *, source: str) -> SettingsRefused | None:
        """Resolve ``doc`` and publish it; a refused one keeps the settings in force, is
        logged (once per refusal) and returned."""
        try:
            settings = resolve(doc, self.cluster, source=source)
        except SettingsRefused as exc:
            if self.refused != str(exc):
                log.error("%s refused, the settings of %s stay in force: %s", source,
                          self._current.source, exc)
            self.refused = str(exc)
            return exc
        self.publish(settings)
        return None

    def publish(self, settings: ClusterSettings) -> None:
        settings = self._pin(settings)
        with self._lock:
            before, self._current = self._current, settings
            self.refused = None
            subscribers = list(self._subscribers) if settings != before else []
        if settings.rollout != before.rollout:
            log.info("rollout settings from %s: readyTimeout %s", settings.source,
                     format_duration(settings.rollout.ready_timeout))
        error = settings.health.error
        if error is not None and error != self._health_error_logged:
            log.error("health section invalid, no node starts: %s", error)
        self._health_error_logged = error
        for callback in subscribers:
            callback()


class RepoConfigWatch:
    """``--repo-config F`` read again whenever it changes: its folder is watched (an editor
    may replace F rather than write it), and F's bytes compared with the ones last read."""

    def __init__(self, path: Path | str, live: LiveSettings) -> None:
        self.path = Path(path)
        self.live = live
        self._last: bytes | None = None
        self._lock = threading.Lock()
        self._observer: BaseObserver | None = None

    def check(self) -> None:
        """Read F; offer it to the live view when its bytes changed."""
        with self._lock:
            try:
                text = read_bounded(self.path)
            except FileRefused as exc:
                message = printable(str(exc))
                if self.live.refused != message:
                    log.error("--repo-config %s refused, the settings of %s stay in force: %s",
                              self.path, self.live.current().source, message)
                self.live.refused = message
                self._last = None
                return
            if text == self._last:
                return
            self._last = text
            self.live.offer(load(text, str(self.path)), source=str(self.path))

    def start(self) -> RepoConfigWatch:
        self.check()
        observer = Observer()
        observer.schedule(_FolderChanged(self.check), str(self.path.parent), recursive=False)
        observer.daemon = True
        observer.start()
        self._observer = observer
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout)
            self._observer = None


class _FolderChanged(FileSystemEventHandler):
    def __init__(self, on_change: Callable[[], None]) -> None:
        self.on_change = on_change

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):  # our own read
            return
        try:
            self.on_change()
        except Exception:  # a watch thread must not die on one bad read
            log.exception("reading %s again failed", os.fsdecode(event.src_path))
