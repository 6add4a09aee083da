"""The drift repair and the write-back reasons take their time from the injected clock: the
exact intervals, on a virtual clock, in milliseconds of test time."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from reconciler.gitops.repository import PolicyRepository
from reconciler.kube.api import KubeApi
from reconciler.sync.drift import DriftRepair, WriteBacks
from reconciler.sync.fields import PAUSE
from reconciler.sync.record import SyncStats
from tests.clocks import VirtualClock


class RecordingApi:
    def __init__(self) -> None:
        self.applied: list[dict[str, Any]] = []

    def apply(self, path: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.applied.append(body)
        return body


def operator(version: str) -> dict[str, Any]:
    return {"metadata": {"name": "cluster-operator"},
            "spec": {"driver": {"payload": {"version": version}}}}


BODY, DRIFTED = operator("1"), operator("2")


def test_the_same_drift_is_repaired_at_most_once_a_minute_on_the_injected_clock() -> None:
    clock, api = VirtualClock(), RecordingApi()
    repair = DriftRepair(cast(KubeApi, api), "cluster-operator", cluster="prod-a",
                         monotonic=clock, stats=SyncStats())
    repair.body = BODY
    assert repair.repair(DRIFTED, set()) == BODY  # first repair: at once
    clock.now += 59.9
    assert repair.repair(DRIFTED, set()) is None  # the same drift again: not before 60 s
    clock.now += 0.1
    assert repair.repair(DRIFTED, set()) == BODY
    assert len(api.applied) == 2 and repair.stats.drift_repairs == 2
    assert repair.repair(BODY, set()) is None  # no drift: nothing applied


def test_an_unexplained_pause_waits_two_seconds_of_the_injected_clock_for_its_reason() -> None:
    clock = VirtualClock()
    # no commit is made while the reason is awaited: the repository is never written to
    repo = cast(PolicyRepository, SimpleNamespace(spec=None))
    write_backs = WriteBacks(repo, cluster="prod-a", monotonic=clock,
                             applied_commit=lambda: None, stats=SyncStats())
    live: dict[str, Any] = {"status": {"upgradeStatus": {"condition": []}}}
    write_backs.dispatch(PAUSE, True, False, live)  # no condition says why yet
    assert write_backs.take_recheck() == 1000.5
    clock.now += 1.9
    write_backs.dispatch(PAUSE, True, False, live)
    assert write_backs.take_recheck() == 1002.4
    assert write_backs.stats.write_backs == 0
