"""The operator-mode health watch's look interval without a valid section: 10 s, or the seconds
``RECONCILER_HEALTH_IDLE_INTERVAL`` gives (tests of the daemon process watch its looks go by)."""

from __future__ import annotations

import pytest

from reconciler.sync.health_watch import (
    IDLE_INTERVAL,
    IDLE_INTERVAL_ENV,
    configured_idle_interval,
)


def test_ten_seconds_unless_the_environment_says_otherwise() -> None:
    assert IDLE_INTERVAL == 10.0
    assert configured_idle_interval({}) == 10.0
    assert configured_idle_interval({IDLE_INTERVAL_ENV: "0.5"}) == 0.5


@pytest.mark.parametrize("given", ["", "soon", "0", "-1", "nan", "inf"])
def test_a_value_that_is_no_positive_finite_number_keeps_ten_seconds(given: str) -> None:
    assert configured_idle_interval({IDLE_INTERVAL_ENV: given}) == IDLE_INTERVAL
