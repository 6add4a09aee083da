"""wait_for: returns the first truthy value, and a timeout says what it waited for and saw."""

from __future__ import annotations

import itertools

import pytest

from reconciler.sim.waiting import WaitTimeout, wait_for


def test_returns_the_first_truthy_value() -> None:
    counter = itertools.count()
    assert wait_for(lambda: next(counter) >= 3 and "done", timeout=5, what="three polls",
                    interval=0) == "done"


def test_timeout_names_what_it_waited_for_and_what_it_saw() -> None:
    with pytest.raises(WaitTimeout) as timeout:
        wait_for(lambda: False, timeout=0.05, what="10 Ready driver pods",
                 observe=lambda: {"node-0003": "ImagePullBackOff"}, interval=0.01)
    message = str(timeout.value)
    assert "waiting for 10 Ready driver pods" in message
    assert "node-0003" in message and "ImagePullBackOff" in message


def test_without_observer_the_last_value_is_reported() -> None:
    with pytest.raises(WaitTimeout, match=r"last seen: \[\]"):
        wait_for(lambda: [], timeout=0.02, what="anything", interval=0.01)
