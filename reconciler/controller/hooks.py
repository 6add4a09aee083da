"""Hooks a benchmark (or a profiler) times the rollout controller by.

The controller reads no clock for its own figures: it says what just happened, and an observer
that cares takes the time (``bench/controller_rollout.py`` passes one). The default does
nothing, so a production controller pays one method call per hook.
"""

from __future__ import annotations

from typing import Protocol


class RolloutObserver(Protocol):
    """What the controller reports while it works; every method returns at once."""

    def pass_started(self) -> None:
        """A planning pass is about to plan (on the worker thread)."""

    def pass_planned(self) -> None:
        """The planner returned."""

    def pass_acted(self) -> None:
        """The plan's actions are handed out."""

    def pass_ended(self) -> None:
        """The planned status is handed to the status writer."""

    def requests_handed_out(self, node: str, *, starts: bool) -> object:
        """One node's requests went to a pool (``starts``: they delete its driver pod); the
        value comes back to ``requests_landed``."""

    def requests_landed(self, node: str, handed_out: object, *, starts: bool) -> None:
        """Those requests finished (landed or failed; on a pool thread)."""

    def node_written(self, node: str) -> None:
        """The server answered a write of the node (on a pool thread)."""

    def pod_deleted(self, node: str) -> None:
        """The server answered the deletion of the node's driver pod (on a pool thread)."""

    def driver_ready_seen(self, node: str) -> None:
        """The index saw the node's driver pod turn Ready (the controller's lock is held)."""


class NoObserver:
    """The default observer: does nothing."""

    def pass_started(self) -> None:
        pass

    def pass_planned(self) -> None:
        pass

    def pass_acted(self) -> None:
        pass

    def pass_ended(self) -> None:
        pass

    def requests_handed_out(self, node: str, *, starts: bool) -> object:
        return None

    def requests_landed(self, node: str, handed_out: object, *, starts: bool) -> None:
        pass

    def node_written(self, node: str) -> None:
        pass

    def pod_deleted(self, node: str) -> None:
        pass

    def driver_ready_seen(self, node: str) -> None:
        pass
