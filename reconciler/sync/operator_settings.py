"""Operator mode and the ``rollout`` keys of our own rollout (docs/live-clusters.md#the-drain and
docs/rollout.md#topology-aware-waves): the vendor runs the rollout there, so ``drain``, ``waitFor``,
``unavailableNodes`` and ``topology`` do nothing. They are not refused (the same reconciler.yaml
serves clusters in both modes); each commit whose settings set any of them says so once: a warning
in the log and a Warning Event ``RolloutSettingsIgnored`` naming them."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from reconciler.policy.rollout_settings import RolloutSettings

log = logging.getLogger(__name__)

REASON = "RolloutSettingsIgnored"


def ignored_in_operator_mode(rollout: RolloutSettings) -> tuple[str, ...]:
    """The keys of ``rollout`` (as reconciler.yaml spells them) that are set and that operator
    mode ignores; ``readyTimeout`` is not one of them (it is always set)."""
    keys = []
    if rollout.drain is not None:
        keys.append("drain")
    if rollout.wait_for is not None:
        keys.append("waitFor")
    if rollout.unavailable_nodes != "count":
        keys.append("unavailableNodes")
    if rollout.topology is not None:
        keys.append("topology")
    return tuple(keys)


def ignored_message(keys: tuple[str, ...], source: str) -> str:
    names = ", ".join(f"rollout.{key}" for key in keys)
    return (f"{names} in reconciler.yaml ({source}) ignored: operator mode, the vendor's "
            "operator runs the rollout (they apply in builtin mode only)")


class IgnoredSettingsWarning:
    """Subscribed to the live settings: warns when the keys ignored change to a non-empty set,
    once per set (not at every commit): the log line at once, the Event as soon as ``record``
    could record it (only the leader records; a replica that is not yet one tries again at the
    next change of the settings)."""

    def __init__(self, settings: Callable[[], tuple[RolloutSettings, str]],
                 record: Callable[[str], bool]) -> None:
        """``settings``: the rollout settings in force and where they come from; ``record``:
        records the Event, False when it did not (not the leader)."""
        self.settings = settings
        self.record = record
        self.logged: tuple[str, ...] = ()
        self.recorded: tuple[str, ...] = ()
        self._lock = threading.Lock()

    def __call__(self) -> None:
        rollout, source = self.settings()
        keys = ignored_in_operator_mode(rollout)
        message = ignored_message(keys, source)
        with self._lock:
            log_it, self.logged = keys != self.logged, keys
            record_it = bool(keys) and keys != self.recorded
        if keys and log_it:
            log.warning("%s", message)
        if not keys:
            with self._lock:
                self.recorded = ()
        elif record_it and self.record(message):
            with self._lock:
                self.recorded = keys
