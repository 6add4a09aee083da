"""A finished node's bookkeeping yields to pod deletions in flight, but never for long. Unit
tests at our own seam: the controller is not started and its executor records calls."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from kubernetes import client as k8s_client

from reconciler.controller import dispatch
from reconciler.controller.act import Target
from reconciler.controller.index import NodeIntent
from reconciler.controller.loop import RolloutController
from reconciler.kube.api import KubeApi, KubeError
from reconciler.names import ANN_STATE
from reconciler.rollout.actions import (
    Action,
    AnnotateNode,
    Cordon,
    DeleteDriverPod,
    Uncordon,
)
from reconciler.sim.waiting import wait_for


class RecordingExecutor:
    def __init__(self) -> None:
        self.calls: list[tuple[float, list[Action]]] = []
        self.failing: set[str] = set()  # nodes whose requests fail

    def execute_node_actions(self, actions: list[Action], cluster_operator: Any) -> None:
        node = getattr(actions[0], "node", "")
        if node in self.failing:
            raise KubeError(422, "Invalid", f"{node}: refused", method="PATCH", path=node)
        self.calls.append((time.monotonic(), actions))


@pytest.fixture
def controller() -> Iterator[RolloutController]:
    # never started: no watch runs and no request is sent; its pools stop after the test
    api = KubeApi(k8s_client.ApiClient(k8s_client.Configuration()))
    made = RolloutController(api, Target(cluster_operator="unused"))
    made.dispatcher.executor = RecordingExecutor()  # type: ignore[assignment]
    yield made
    made._stop.set()
    made.stop()


def _failing(controller: RolloutController, node: str) -> RecordingExecutor:
    """The executor, refusing ``node``'s requests; a failed request's intent is kept 10 s
    after it failed (the longest back-off), so the test sees it."""
    executor: RecordingExecutor = controller.executor  # type: ignore[assignment]
    executor.failing.add(node)
    controller.dispatcher.failure_backoff[node] = 30.0
    return executor


def _start_in_flight(controller: RolloutController, node: str) -> tuple[NodeIntent, Future[None]]:
    """A pod deletion handed out and not answered yet, as ``_dispatch`` leaves it."""
    intent = NodeIntent.of([DeleteDriverPod(node, f"driver-{node}")])
    pending: Future[None] = Future()
    with controller._wake:
        controller.index.intents.setdefault(node, []).append(intent)
        controller.dispatcher.in_flight.add(pending)
        controller.dispatcher.starts_in_flight.add(pending)
    return intent, pending


def test_bookkeeping_waits_until_the_deletions_in_flight_landed(
    controller: RolloutController,
) -> None:
    intent, pending = _start_in_flight(controller, "node-0002")
    worker = threading.Thread(target=controller.dispatcher.bookkeep,
                              args=("node-0001", [Uncordon("node-0001")], {}))
    worker.start()
    # the bookkeeping is waiting (CPython's Condition keeps its waiters in ``_waiters``)
    wait_for(lambda: controller.dispatcher.starts_idle._waiters,  # type: ignore[attr-defined]
             timeout=10, what="the bookkeeping waiting for the deletion")
    executor: RecordingExecutor = controller.executor  # type: ignore[assignment]
    assert executor.calls == [], "the uncordon went out while a deletion was in flight"

    landed = time.monotonic()
    pending.set_result(None)
    controller.dispatcher.forget("node-0002", intent, pending, replan=False)
    worker.join(2)
    assert not worker.is_alive()
    assert [actions for _, actions in executor.calls] == [[Uncordon("node-0001")]]
    assert executor.calls[0][0] >= landed
    assert not controller.dispatcher.starts_in_flight


def test_bookkeeping_waits_at_most_the_bound(controller: RolloutController,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dispatch, "BOOKKEEPING_WAIT", 0.2)
    _start_in_flight(controller, "node-0002")  # never answered
    started = time.monotonic()
    controller.dispatcher.bookkeep("node-0001", [Uncordon("node-0001")], {})
    executor: RecordingExecutor = controller.executor  # type: ignore[assignment]
    assert [actions for _, actions in executor.calls] == [[Uncordon("node-0001")]]
    assert executor.calls[0][0] - started >= 0.2


def test_bookkeeping_goes_at_once_when_no_deletion_is_in_flight(
    controller: RolloutController,
) -> None:
    controller.dispatcher.bookkeep("node-0001", [Uncordon("node-0001")], {})
    executor: RecordingExecutor = controller.executor  # type: ignore[assignment]
    assert [actions for _, actions in executor.calls] == [[Uncordon("node-0001")]]


CORDON_AHEAD: list[Action] = [AnnotateNode("node-0003", {ANN_STATE: "cordoned"}),
                              Cordon("node-0003")]
#: a node cordoned ahead starts by its pod deletion alone
START: list[Action] = [DeleteDriverPod("node-0003", "driver-node-0003")]


def test_a_start_runs_after_the_nodes_cordon_ahead_which_then_stops_yielding(
    controller: RolloutController, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the cordon ahead would yield for 60 s to another node's deletion that is never answered;
    # the start that needs it ends that wait, and goes after it
    monkeypatch.setattr(dispatch, "BOOKKEEPING_WAIT", 60.0)
    _start_in_flight(controller, "node-0002")
    controller.dispatcher.dispatch("node-0003", CORDON_AHEAD, {}, starts=False)
    start = controller.dispatcher.dispatch("node-0003", START, {}, starts=True)
    start.result(timeout=10)
    executor: RecordingExecutor = controller.executor  # type: ignore[assignment]
    assert [actions for _, actions in executor.calls] == [CORDON_AHEAD, START]


def test_a_start_does_not_run_when_the_nodes_cordon_ahead_failed(
    controller: RolloutController,
) -> None:
    executor = _failing(controller, "node-0003")
    cordon = controller.dispatcher.dispatch("node-0003", CORDON_AHEAD, {}, starts=False)
    with pytest.raises(KubeError):
        cordon.result(timeout=10)
    executor.failing.clear()  # only the cordon ahead failed; the start alone would succeed
    start = controller.dispatcher.dispatch("node-0003", START, {}, starts=True)
    with pytest.raises(KubeError):
        start.result(timeout=10)
    assert executor.calls == []  # no pod deleted on a node whose cordon did not land


def test_a_failed_start_is_one_request_planned_again_after_its_back_off(
    controller: RolloutController,
) -> None:
    # the deletion fails: its intent stays (the node counts as started) until the back-off
    # ends, and the node is then planned from the server's objects
    executor = _failing(controller, "node-0003")
    assert controller.dispatcher.execute(START, {})
    whole = controller.dispatcher.node_requests["node-0003"]
    with pytest.raises(KubeError):
        whole.result(timeout=10)
    assert executor.calls == []
    assert controller.dispatcher.in_flight == {whole}
    assert controller.index.intents["node-0003"] == [NodeIntent.of(START)]
    assert controller.dispatcher.stats.errors == 1
