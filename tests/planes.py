"""The control planes the fixtures start: one way to start, stop and keep the logs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

import pytest

from reconciler.sim.control_plane import ControlPlane

Plane = TypeVar("Plane", bound=ControlPlane)


def serve_plane(request: pytest.FixtureRequest, plane: Plane,
                what: str = "control plane") -> Iterator[Plane]:
    """``plane`` started for a fixture (``yield from``) and stopped after it; its logs are kept
    (the path printed, as ``what``) when any test of the session failed."""
    plane.start()
    try:
        yield plane
    finally:
        if request.session.testsfailed:
            plane.mark_failed()
            print(f"\n{what} logs kept in {plane.logs}")
        plane.stop()
