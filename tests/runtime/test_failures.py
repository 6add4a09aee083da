"""The one failure taxonomy every control loop shares (``reconciler.runtime.failures``): what a
pass's exception is (retry after a delay, stalled, conflict) and what a loop's policy does with
each, on a virtual clock."""

from __future__ import annotations

import logging

import pytest

from reconciler.errors import RepoConfigError
from reconciler.gitops.errors import RemoteUnavailable
from reconciler.kube.api import Conflict, KubeError
from reconciler.runtime.failures import (
    FailureKind,
    LoopFailures,
    PassFailure,
    PassFailures,
    failure_kind,
)
from tests.clocks import VirtualClock


class Shown:
    """A loop's display of a stalled pass (a condition in a real controller)."""

    def __init__(self) -> None:
        self.shown_now: PassFailure | None = None
        self.events: list[tuple[str, str]] = []

    def show(self, failure: PassFailure, *, event: bool) -> None:
        self.shown_now = failure
        if event:
            self.events.append(("Warning", failure.reason))

    def shown(self) -> PassFailure | None:
        return self.shown_now

    def clear(self, failure: PassFailure) -> None:
        self.shown_now = None
        self.events.append(("Normal", failure.reason))


def test_each_exception_has_one_kind() -> None:
    assert failure_kind(Conflict(409, "Conflict", "changed", method="PATCH", path="/x")) is (
        FailureKind.CONFLICT)
    assert failure_kind(KubeError(503, "ServiceUnavailable", "down", method="GET",
                                  path="/x")) is FailureKind.RETRY
    assert failure_kind(RemoteUnavailable("origin: refused")) is FailureKind.RETRY
    assert failure_kind(RepoConfigError("sync.fetchInterval: bad")) is FailureKind.RETRY
    assert failure_kind(ValueError("planner bug")) is FailureKind.STALLED
    assert failure_kind(TimeoutError("slow"), (TimeoutError,)) is FailureKind.RETRY


def test_a_controller_policy_rereads_on_conflict_retries_api_errors_and_shows_a_stall(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = VirtualClock()
    rereads: list[str] = []
    kinds: list[FailureKind] = []
    shown = Shown()
    stalled = PassFailures(clock)
    policy = LoopFailures(
        clock, what="test-controller pass", logger=logging.getLogger("test.failures"),
        retry=PassFailures(clock, first_retry=0.2, max_retry=10.0, kicks_wait=False),
        stalled=stalled, reread=lambda: rereads.append("clusteroperator"), display=shown,
        counted=lambda kind, exc: kinds.append(kind))
    conflict = Conflict(409, "Conflict", "changed", method="PATCH", path="/x")
    assert policy.failed(conflict) == 1000.0 and rereads == ["clusteroperator"]
    api = KubeError(503, "ServiceUnavailable", "down", method="GET", path="/x")
    assert policy.failed(api) == pytest.approx(1000.2)
    assert policy.failed(api) == pytest.approx(1000.4)
    assert policy.held_until() is None, "a kick cuts an API error's wait short"
    with caplog.at_level(logging.DEBUG, logger="test.failures"):
        assert policy.failed(ValueError("planner bug")) == 1001.0
        assert policy.held_until() == 1001.0, "a stalled pass is not retried on every kick"
        clock.now = 1001.0
        assert policy.failed(ValueError("planner bug")) == 1003.0
    retries = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in retries] == [
        "test-controller pass failed: GET /x: 503 ServiceUnavailable: down; retrying in 0.2 s",
        "test-controller pass failed: GET /x: 503 ServiceUnavailable: down; retrying in 0.4 s"]
    first, again = [r for r in caplog.records if r.levelno != logging.WARNING]
    assert first.levelno == logging.ERROR and first.exc_info is not None
    assert again.levelno == logging.DEBUG, "the same stall is reported once"
    assert shown.events == [("Warning", "ValueError")]
    assert kinds == [FailureKind.CONFLICT, FailureKind.RETRY, FailureKind.RETRY,
                     FailureKind.STALLED, FailureKind.STALLED]
    policy.succeeded()
    assert shown.shown_now is None and shown.events[-1] == ("Normal", "ValueError")
    assert policy.held_until() is None and stalled.current is None


def test_without_a_reread_a_conflict_is_retried_like_an_api_error() -> None:
    clock = VirtualClock()
    back_off = PassFailures(clock, first_retry=0.2, max_retry=10.0)
    policy = LoopFailures(clock, what="sync of a", logger=logging.getLogger("test.failures"),
                          retry=back_off, stalled=back_off)
    assert policy.failed(Conflict(409, "Conflict", "x", method="PATCH", path="/x")) == (
        pytest.approx(1000.2))
    assert policy.held_until() == pytest.approx(1000.2)
