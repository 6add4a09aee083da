"""A planning pass that raises is a visible, rate-limited ``PlanningFailed`` condition and Warning
Event, retried after a back-off, and cleared by the next pass that plans. Unit tests at our own
seam: the controllers are never started; the cache is fed by their handlers, a pass is
``run_pass()``, the clock is injected, and Events and status writes are captured."""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes import client as k8s_client

from reconciler.controller.act import Target
from reconciler.controller.loop import RolloutController
from reconciler.firmware import controller as firmware_controller
from reconciler.firmware.controller import FirmwareController
from reconciler.firmware.planner import plan as real_plan
from reconciler.kube.api import KubeApi
from reconciler.names import DRIVER_DAEMONSET, OPERATOR_NAMESPACE
from reconciler.rollout.actions import RecordEvent
from reconciler.runtime.watched import PLANNING_FAILED, PLANNING_RECOVERED
from tests.clocks import VirtualClock

IMAGE = "reg.local/metax/driver-image:2.32.0.6-amd64"
GOOD_POLICY = {"enableRollout": True,
               "upgradeSteps": [{"replicas": "100%", "pauseDuration": 0}]}


class InlineEvents(ThreadPoolExecutor):
    """The controller's Event thread, run inline so the test sees each Event at once."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        fn(*args, **kwargs)


def api() -> KubeApi:
    return KubeApi(k8s_client.ApiClient(k8s_client.Configuration()))


def cluster_operator(policy: dict[str, Any], version: int) -> dict[str, Any]:
    return {
        "metadata": {"name": "cluster-operator", "resourceVersion": str(version)},
        "spec": {"driver": {
            "payload": {"registry": "reg.local/metax", "name": "driver-image",
                        "version": "2.32.0.6"},
            "upgradePolicy": policy,
        }},
        "status": {"upgradeStatus": {"phase": "Idling", "condition": []}},
    }


@pytest.fixture
def rollout() -> tuple[RolloutController, VirtualClock, list[RecordEvent]]:
    clock = VirtualClock(1_767_225_600.0)
    controller = RolloutController(api(), Target(cluster_operator="cluster-operator"),
                                   clock=clock)
    events: list[RecordEvent] = []
    controller.dispatcher.events = InlineEvents()
    controller.executor.execute = lambda action, co: events.append(action)  # type: ignore
    controller._on_daemonset("ADDED", {
        "metadata": {"name": DRIVER_DAEMONSET, "namespace": OPERATOR_NAMESPACE,
                     "generation": 1, "resourceVersion": "1"},
        "spec": {"template": {"spec": {"containers": [{"name": "driver", "image": IMAGE}]}}},
    })
    controller._on_revision("ADDED", {
        "metadata": {"name": "metax-driver-rev1", "namespace": OPERATOR_NAMESPACE,
                     "labels": {"controller-revision-hash": "rev1"},
                     "ownerReferences": [{"kind": "DaemonSet", "name": DRIVER_DAEMONSET}]},
        "revision": 1,
        "data": {"spec": {"template": {"spec": {"containers": [
            {"name": "driver", "image": IMAGE}]}}}},
    })
    return controller, clock, events


def planning_condition(status: dict[str, Any] | None) -> dict[str, Any] | None:
    """The PlanningFailed condition in force (the CRD's conditions have no status: listed
    means in force; None once cleared)."""
    conditions = [c for c in (status or {}).get("conditions") or ()
                  if c["type"] == PLANNING_FAILED]
    assert len(conditions) <= 1, conditions
    return conditions[0] if conditions else None


def in_force(status: dict[str, Any] | None) -> dict[str, Any]:
    condition = planning_condition(status)
    assert condition is not None, status
    return condition


def test_a_rollout_planning_pass_that_raises_is_a_condition_and_a_rate_limited_event(
    rollout: tuple[RolloutController, VirtualClock, list[RecordEvent]],
) -> None:
    controller, clock, events = rollout
    # int-or-string lets any string through the CRD schema; only validation rejects it
    bad = {**GOOD_POLICY, "upgradeSteps": [{"replicas": "ten", "pauseDuration": 0}]}
    controller._on_cluster_operator("ADDED", cluster_operator(bad, 10))

    retry_at = controller.run_pass()
    assert retry_at == clock.now + 1.0, "retried after a back-off, not at once"
    condition = in_force(controller.status_writer.planned)
    assert condition["reason"] == "ValueError"
    assert "'ten'" in condition["message"]
    assert [(e.type, e.reason) for e in events] == [("Warning", PLANNING_FAILED)]
    assert "'ten'" in events[0].message
    assert controller.failures.held()

    # the same error again: no new Event, no new status, a longer back-off
    written = controller.status_writer.planned
    clock.now = retry_at
    assert not controller.failures.held()
    retry_at = controller.run_pass()
    assert retry_at == clock.now + 2.0
    clock.now = retry_at
    retry_at = controller.run_pass()
    assert retry_at == clock.now + 4.0
    assert len(events) == 1
    assert controller.status_writer.planned is written

    # the back-off stops doubling at a minute; a lasting error is reported again after 10
    # minutes (passes at +7, +15, +31, +63, then every 60 s: the one at +603)
    first_report = clock.now - 3.0
    delays = []
    while len(events) == 1:
        clock.now = retry_at
        retry_at = controller.run_pass()
        assert retry_at is not None
        delays.append(retry_at - clock.now)
    assert delays == [8.0, 16.0, 32.0] + [60.0] * 10
    assert clock.now - first_report == 603.0
    assert events[1].reason == PLANNING_FAILED

    # another error: reported at once, the condition says which
    worse = {**GOOD_POLICY, "maxParallel": "half"}
    controller._on_cluster_operator("MODIFIED", cluster_operator(worse, 11))
    controller.run_pass()
    assert len(events) == 3 and "'half'" in events[2].message
    assert "'half'" in in_force(controller.status_writer.planned)["message"]

    # fixed: the pass plans, the condition goes to False, a Normal Event says so
    controller._on_cluster_operator("MODIFIED", cluster_operator(GOOD_POLICY, 12))
    clock.now += 600
    assert controller.run_pass() is None
    assert not controller.failures.held() and controller.failures.current is None
    assert planning_condition(controller.status_writer.planned) is None
    assert controller.status_writer.planned is not None
    assert controller.status_writer.planned["phase"] == "Idling", "the planned status is kept"
    assert [(e.type, e.reason) for e in events[3:]] == [("Normal", PLANNING_RECOVERED)]
    # nothing more to clear on the next pass
    controller.run_pass()
    assert len(events) == 4


def test_a_cleared_condition_whose_write_was_lost_is_cleared_again(
    rollout: tuple[RolloutController, VirtualClock, list[RecordEvent]],
) -> None:
    """The status writer drops a planned status another writer overtook; the next pass that
    plans still finds the True condition in the stored status and clears it."""
    controller, _clock, events = rollout
    stale = cluster_operator(GOOD_POLICY, 20)
    stale["status"]["upgradeStatus"]["conditions"] = [{
        "type": PLANNING_FAILED, "status": "True", "reason": "ValueError",
        "message": "planning pass failed: boom", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    controller._on_cluster_operator("ADDED", stale)
    controller.run_pass()
    assert planning_condition(controller.status_writer.planned) is None
    assert [e.reason for e in events] == [PLANNING_RECOVERED]


def test_a_firmware_planning_pass_that_raises_is_a_condition_and_a_rate_limited_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = VirtualClock(1_767_225_600.0)
    controller = FirmwareController(api(), clock=clock)
    statuses: list[dict[str, Any]] = []
    events: list[Any] = []

    def write(status: dict[str, Any]) -> None:
        statuses.append(copy.deepcopy(status))
        co = copy.deepcopy(controller._co) or {}
        co.setdefault("status", {})["firmwareUpgrade"] = status
        co["metadata"]["resourceVersion"] = str(int(co["metadata"]["resourceVersion"]) + 1)
        controller._on_cluster_operator("MODIFIED", co)

    monkeypatch.setattr(controller, "_write_status", write)
    monkeypatch.setattr(controller, "_record_event", lambda action, co: events.append(action))
    controller._on_cluster_operator("ADDED", {
        "metadata": {"name": "cluster-operator", "resourceVersion": "5"},
        "spec": {"driver": {"fwUpgradePolicy": "Never"}},
        "status": {"firmwareUpgrade": {"phase": "Idle"}},
    })

    def broken(*args: Any) -> Any:
        raise KeyError("nodes")

    monkeypatch.setattr(firmware_controller, "plan", broken)
    assert controller.run_pass() == clock.now + 1.0
    assert controller.run_pass() == clock.now + 2.0
    assert len(statuses) == 1, "a lasting failure writes its condition once"
    condition = in_force(statuses[0])
    assert condition["reason"] == "KeyError"
    assert statuses[0]["phase"] == "Idle", "the rest of the status is kept"
    assert [(e.type, e.reason) for e in events] == [("Warning", PLANNING_FAILED)]

    monkeypatch.setattr(firmware_controller, "plan", real_plan)
    controller.run_pass()
    assert not controller.failures.held()
    assert planning_condition(statuses[-1]) is None
    assert [e.reason for e in events] == [PLANNING_FAILED, PLANNING_RECOVERED]


def test_a_status_too_garbled_to_carry_the_condition_still_gets_the_event_and_back_off(
    rollout: tuple[RolloutController, VirtualClock, list[RecordEvent]],
) -> None:
    controller, clock, events = rollout
    garbled = cluster_operator(GOOD_POLICY, 30)
    garbled["status"]["upgradeStatus"] = {"phase": "Progressing", "status": "not a mapping"}
    controller._on_cluster_operator("ADDED", garbled)
    assert controller.run_pass() == clock.now + 1.0, "the worker thread lives on"
    assert [(e.type, e.reason) for e in events] == [("Warning", PLANNING_FAILED)]
    assert "AttributeError" in events[0].message
