"""The rollout controller against the real control plane and the simulated fleet."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from reconciler.controller.loop import RolloutController
from reconciler.kube.api import KubeApi
from reconciler.names import ANN_STATE, CLUSTER_OPERATOR_NAME
from reconciler.rollout.model import PlannerSettings
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from reconciler.stored_status import FIRMWARE_STATUS_ANNOTATION
from tests.controller.helpers import (
    SEED_10,
    InvariantObserver,
    StatusRecorder,
    cluster_operator,
    event_reasons,
    passes_after_it_saw,
    person_patch,
    running_controller,
    spec_41_problems,
    start_rollout,
    upgrade_status,
)

pytestmark = pytest.mark.cluster

NEW = "2.33.0.9"


@pytest.fixture
def controller(kube: KubeApi) -> Iterator[RolloutController]:
    yield from running_controller(
        kube, PlannerSettings(ready_timeout=20, retry_backoff=0.5, retry_backoff_max=2))


def _state(kube: KubeApi) -> dict[str, Any]:
    status = upgrade_status(kube)
    return {"phase": status.get("phase"), **{k: v for k, v in (status.get("status") or {}).items()
                                             if k != "message"}}


def _wait_state(kube: KubeApi, timeout: float = 60, **expected: Any) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        state = _state(kube)
        return state if all(state.get(k) == v for k, v in expected.items()) else None

    result: dict[str, Any] = wait_for(check, timeout=timeout, what=f"status {expected}",
                                      observe=lambda: _state(kube))
    return result


def _release_gate(kube: KubeApi) -> None:
    wait_for(lambda: cluster_operator(kube)["spec"]["driver"]["upgradePolicy"].get("pause") is True,
             timeout=30, what="the controller to set pause: true at the gate")
    person_patch(kube, {"upgradePolicy": {"pause": False}})


@pytest.mark.compat
def test_seed_10_node_scenario_runs_to_completion(
    kube: KubeApi, fleet: Fleet, controller: RolloutController
) -> None:
    observer = InvariantObserver(kube, max_parallel=3).start()
    recorder = StatusRecorder(kube).__enter__()
    try:
        start_rollout(kube, NEW, SEED_10)
        # batch 1: 2 nodes, then a manual gate the controller marks with pause: true
        state = _wait_state(kube, currentStepIndex=1, currentStepState="StepPaused")
        assert state["phase"] == "Progressing"
        assert state["totalUpgradeReplicas"] == 10
        assert state["currentUpgradeReplicas"] == 2
        assert state["CurrentUpgradeReadyReplicas"] == 2
        assert len(fleet.ready_driver_nodes(NEW)) == 2
        status = upgrade_status(kube)
        assert status["upgrading"] is True
        _release_gate(kube)
        _wait_state(kube, timeout=90, phase="Idling", currentStepState="Completed",
                    currentStepIndex=4)
        final = upgrade_status(kube)
        assert final["upgrading"] is False
        assert final["status"]["totalUpgradeReadyReplicas"] == 10
        assert final["status"]["lastPodSpecRevision"] == final["status"][
            "upgradingPodSpecRevision"]
        assert sorted(fleet.ready_driver_nodes(NEW)) == fleet.node_names
    finally:
        observer.stop()
        recorder.__exit__()
    assert observer.violations == []
    assert all(len(revs) == 1 for revs in observer.deletions.values()), observer.deletions
    assert len(observer.deletions) == 10
    # every status the object showed on the way has exactly docs/rollout.md#status-fields's fields
    # and values, and the steps went 1..4 in order through their states
    for status in recorder.stored:
        assert spec_41_problems(status) == [], status
    progress = [(s["status"]["currentStepIndex"], s["status"]["currentStepState"])
                for s in recorder.seen if s["phase"] == "Progressing"]
    indices = [i for i, _ in progress]
    assert indices == sorted(indices) and set(indices) == {1, 2, 3, 4}, progress
    for index in (1, 2, 3, 4):
        states = [state for i, state in progress if i == index]
        assert "StepPaused" in states, (index, states)
    reasons = wait_for(lambda: (r := event_reasons(kube)) and "RolloutCompleted" in r and r,
                       timeout=10, what="the completion event")
    for expected in ("RolloutStarted", "GateOpened", "GateConfirmed", "StepStarted",
                     "StepCompleted", "RolloutCompleted"):
        assert expected in reasons, reasons


def _conditions(kube: KubeApi) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in upgrade_status(kube).get("conditions") or []}


def _policy(**changes: Any) -> dict[str, Any]:
    policy = {
        "enableRollout": True,
        "upgradeSteps": [{"replicas": 3, "pauseDuration": 0},
                         {"replicas": "100%", "pauseDuration": 0}],
        "pause": False,
        "maxParallel": 1,
        "maxUnavailable": 0,
        "maxFailureThreshold": 1,
        "fallback": "pause",
    }
    policy.update(changes)
    return policy


def test_failure_pauses_then_a_fix_and_resume_completes(
    kube: KubeApi, fleet_factory: Any, controller: RolloutController
) -> None:
    fleet = fleet_factory(nodes=6)
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 6, timeout=60, what="6 Ready pods")
    fleet.set_fault("node-0002", "imagepull", version=NEW)
    observer = InvariantObserver(kube, max_parallel=1).start()
    try:
        start_rollout(kube, NEW, _policy())
        state = _wait_state(kube, currentStepState="StepPaused", currentFailureRetry=1)
        assert state["phase"] == "Progressing"
        wait_for(lambda: cluster_operator(kube)["spec"]["driver"]["upgradePolicy"]["pause"],
                 timeout=30, what="pause: true set by the fallback")
        assert "node-0002" in str(upgrade_status(kube))
        reasons = wait_for(lambda: (r := event_reasons(kube)) and "FallbackPaused" in r and r,
                           timeout=10, what="the fallback event")
        assert "NodeFailed" in reasons
        # the failed node stays cordoned; nothing else starts while paused
        node = kube.get("/api/v1/nodes/node-0002")
        assert node["spec"].get("unschedulable") is True
        upgraded = set(fleet.ready_driver_nodes(NEW))
        assert upgraded == {"node-0001"}
        # a person fixes the registry and resumes
        fleet.clear_faults("node-0002")
        person_patch(kube, {"upgradePolicy": {"pause": False}})
        _wait_state(kube, timeout=90, phase="Idling", currentStepState="Completed")
    finally:
        observer.stop()
    assert sorted(fleet.ready_driver_nodes(NEW)) == fleet.node_names
    for name in fleet.node_names:
        assert not kube.get(f"/api/v1/nodes/{name}")["spec"].get("unschedulable")
    assert observer.violations == []


@pytest.mark.compat
def test_failure_with_rollback_fallback_restores_the_old_version(
    kube: KubeApi, fleet_factory: Any, controller: RolloutController
) -> None:
    fleet = fleet_factory(nodes=6)
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 6, timeout=60, what="6 Ready pods")
    old = fleet.payload.version
    fleet.set_fault("node-0003", "crashloop", version=NEW)
    start_rollout(kube, NEW, _policy(fallback="rollback", maxParallel=2,
                                     upgradeSteps=[{"replicas": 4, "pauseDuration": 0},
                                                   {"replicas": "100%", "pauseDuration": 0}]))
    _wait_state(kube, phase="Terminating", timeout=60)
    final = _wait_state(kube, timeout=90, phase="Idling", currentStepState="Completed")
    assert final["currentStepIndex"] == 1
    rolled_back = _conditions(kube)["RolledBack"]
    assert rolled_back["reason"] == "FailureThresholdReached"
    assert NEW in rolled_back["message"]
    assert cluster_operator(kube)["spec"]["driver"]["payload"]["version"] == old
    wait_for(lambda: sorted(fleet.ready_driver_nodes(old)) == fleet.node_names, timeout=60,
             what="every node Ready on the old version", observe=fleet.driver_pods)


def test_enable_rollout_false_mid_rollout_rolls_back_to_disabled(
    kube: KubeApi, fleet: Fleet, controller: RolloutController
) -> None:
    old = fleet.payload.version
    start_rollout(kube, NEW, SEED_10)
    _wait_state(kube, currentStepIndex=1, currentStepState="StepPaused")
    assert len(fleet.ready_driver_nodes(NEW)) == 2
    person_patch(kube, {"upgradePolicy": {"enableRollout": False}})
    _wait_state(kube, timeout=90, phase="Disabled", currentStepState="Completed")
    assert _conditions(kube)["RolledBack"]["reason"] == "RolloutDisabled"
    assert cluster_operator(kube)["spec"]["driver"]["payload"]["version"] == old
    wait_for(lambda: sorted(fleet.ready_driver_nodes(old)) == fleet.node_names, timeout=60,
             what="every node back on the old version", observe=fleet.driver_pods)


def test_a_busy_node_waits_for_its_gpu_job_and_status_names_it(
    kube: KubeApi, fleet_factory: Any, controller: RolloutController
) -> None:
    fleet = fleet_factory(nodes=4)
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 4, timeout=60, what="4 Ready pods")
    job = fleet.add_workload("node-0001")
    start_rollout(kube, NEW, _policy(upgradeSteps=[{"replicas": 1, "pauseDuration": 0},
                                                   {"replicas": "100%", "pauseDuration": 0}]))
    # busy nodes are skipped (docs/rollout.md): the others go ahead, node-0001 waits, named
    wait_for(lambda: sorted(fleet.ready_driver_nodes(NEW)) == ["node-0002", "node-0003",
                                                               "node-0004"],
             timeout=60, what="the three free nodes upgraded", observe=fleet.driver_pods)
    wait_for(lambda: job in str(upgrade_status(kube)), timeout=30,
             what="the status to name the blocking pod", observe=lambda: upgrade_status(kube))
    state = _state(kube)
    assert state["phase"] == "Progressing"
    assert state["currentFailureRetry"] == 0  # busy is not failed
    assert not kube.get("/api/v1/nodes/node-0001")["spec"].get("unschedulable")
    assert "node-0001" not in fleet.ready_driver_nodes(NEW)
    fleet.remove_workload(job)
    _wait_state(kube, timeout=60, phase="Idling", currentStepState="Completed")
    assert sorted(fleet.ready_driver_nodes(NEW)) == fleet.node_names


def test_a_node_joining_mid_rollout_is_counted_and_upgraded(
    kube: KubeApi, fleet: Fleet, controller: RolloutController
) -> None:
    start_rollout(kube, NEW, SEED_10)
    _wait_state(kube, currentStepIndex=1, currentStepState="StepPaused")
    joined = fleet.add_node()
    # the DaemonSet template already names the new version, so the joiner starts on it
    wait_for(lambda: joined in fleet.ready_driver_nodes(NEW), timeout=60,
             what=f"{joined} Ready on {NEW}", observe=fleet.driver_pods)
    wait_for(lambda: _state(kube)["totalUpgradeReplicas"] == 11, timeout=30,
             what="N to count the joiner", observe=lambda: _state(kube))
    _release_gate(kube)
    final = _wait_state(kube, timeout=90, phase="Idling", currentStepState="Completed")
    assert final["totalUpgradeReadyReplicas"] == 11
    assert sorted(fleet.ready_driver_nodes(NEW)) == fleet.node_names


@pytest.mark.slow
def test_seed_100_node_scenario_runs_to_completion(
    kube: KubeApi, fleet_factory: Any, controller: RolloutController
) -> None:
    from tests.controller.helpers import SEED_100

    fleet = fleet_factory(nodes=100)
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 100, timeout=120, what="100 Ready pods")
    observer = InvariantObserver(kube, max_parallel=20).start()  # 50% of the largest batch (40)
    try:
        start_rollout(kube, NEW, SEED_100)
        state = _wait_state(kube, timeout=60, currentStepIndex=1, currentStepState="StepPaused")
        assert state["currentUpgradeReplicas"] == 5
        assert len(fleet.ready_driver_nodes(NEW)) == 5
        _release_gate(kube)
        state = _wait_state(kube, timeout=180, currentStepIndex=4, currentStepState="StepPaused")
        assert state["totalUpgradeReadyReplicas"] == 100
        assert state["phase"] == "Progressing"  # the last gate: a person confirms the end
        _release_gate(kube)
        _wait_state(kube, timeout=60, phase="Idling", currentStepState="Completed")
    finally:
        observer.stop()
    assert observer.violations == []
    assert observer.max_in_flight <= 20
    assert all(len(revs) == 1 for revs in observer.deletions.values())


def test_no_rollout_starts_while_a_firmware_upgrade_runs(
    kube: KubeApi, fleet_factory: Any, controller: RolloutController
) -> None:
    """docs/firmware.md: the rollout and a firmware upgrade never run at the same time."""
    from reconciler.kube.objects import cluster_operator_path

    fleet = fleet_factory(nodes=3)
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 3, timeout=60, what="3 Ready pods")
    wait_for(lambda: upgrade_status(kube).get("phase"), timeout=30, what="a first status")
    path = cluster_operator_path(CLUSTER_OPERATOR_NAME)

    def firmware(phase: str) -> dict[str, Any]:
        # where the orchestrator keeps its record (the CRD has no status field for it)
        return {"metadata": {"annotations": {FIRMWARE_STATUS_ANNOTATION: json.dumps(
            {"phase": phase})}}}

    kube.patch(path, firmware("AwaitingReboot"))
    start_rollout(kube, NEW, _policy())
    passes_after_it_saw(controller, NEW)
    assert fleet.ready_driver_nodes(NEW) == []
    assert upgrade_status(kube)["phase"] != "Progressing"
    kube.patch(path, firmware("Completed"))
    _wait_state(kube, timeout=60, phase="Idling", currentStepState="Completed")
    assert sorted(fleet.ready_driver_nodes(NEW)) == fleet.node_names


def _node_states(kube: KubeApi, names: list[str]) -> dict[str, tuple[str | None, bool]]:
    """node -> (our upgrade-state annotation, unschedulable)."""
    states = {}
    for name in names:
        node = kube.get(f"/api/v1/nodes/{name}")
        annotations = node["metadata"].get("annotations") or {}
        states[name] = (annotations.get(ANN_STATE), bool(node["spec"].get("unschedulable")))
    return states


def test_nodes_next_in_line_are_cordoned_ahead_and_released_while_paused(
    kube: KubeApi, fleet_factory: Any, controller: RolloutController
) -> None:
    fleet = fleet_factory(nodes=6, install_seconds=6)
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 6, timeout=60, what="6 Ready pods")
    names = fleet.node_names
    observer = InvariantObserver(kube, max_parallel=2, max_unavailable=0).start()
    try:
        start_rollout(kube, NEW, _policy(maxParallel=2,
                                         upgradeSteps=[{"replicas": "100%", "pauseDuration": 0}]))
        # two upgrading, the next two cordoned ahead (their old pods untouched), two untouched
        ahead = {
            "node-0001": ("upgrading", True), "node-0002": ("upgrading", True),
            "node-0003": ("cordoned", True), "node-0004": ("cordoned", True),
            "node-0005": (None, False), "node-0006": (None, False),
        }
        wait_for(lambda: _node_states(kube, names) == ahead, timeout=30,
                 what="two nodes upgrading and two cordoned ahead",
                 observe=lambda: _node_states(kube, names))
        assert set(observer.deletions) == {"node-0001", "node-0002"}
        # paused: nothing will start, so the nodes cordoned ahead are given back at once
        person_patch(kube, {"upgradePolicy": {"pause": True}})
        wait_for(lambda: all(_node_states(kube, names)[n] == (None, False)
                             for n in ("node-0003", "node-0004")),
                 timeout=30, what="the nodes cordoned ahead released",
                 observe=lambda: _node_states(kube, names))
        assert set(observer.deletions) <= {"node-0001", "node-0002"}
        person_patch(kube, {"upgradePolicy": {"pause": False}})
        _wait_state(kube, timeout=90, phase="Idling", currentStepState="Completed")
    finally:
        observer.stop()
    assert observer.violations == []
    assert sorted(observer.deletions) == names
    assert all(len(revs) == 1 for revs in observer.deletions.values()), observer.deletions
    assert _node_states(kube, names) == {name: ("done", False) for name in names}


def test_a_planning_pass_that_raises_shows_on_the_cluster_operator_until_it_plans_again(
    kube: KubeApi, fleet_factory: Any, controller: RolloutController,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The condition goes through the status subresource and the Event to the API server;
    passes are retried with a back-off, reported once; the pass that plans again clears it.
    Then the 2^62 ms pause that used to raise in every pass: a pause until year 9999."""
    from reconciler.controller import loop

    fleet = fleet_factory(nodes=3)
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 3, timeout=60, what="3 Ready pods")
    wait_for(lambda: upgrade_status(kube).get("phase"), timeout=30, what="a first status")
    real_plan = loop.plan
    broken = True

    def planner(*args: Any) -> Any:
        if broken:
            raise RuntimeError("planner bug")
        return real_plan(*args)

    monkeypatch.setattr(loop, "plan", planner)
    person_patch(kube, {"payload": {"version": NEW}, "upgradePolicy": _policy(
        upgradeSteps=[{"replicas": 1, "pauseDuration": 2**62},
                      {"replicas": "100%", "pauseDuration": 0}])})
    failed = wait_for(lambda: _conditions(kube).get("PlanningFailed"), timeout=30,
                      what="the PlanningFailed condition", observe=lambda: _conditions(kube))
    assert failed["reason"] == "RuntimeError"
    assert "planner bug" in failed["message"]
    # passes at +1, +3 s fail again
    wait_for(lambda: controller.failures.count >= 3, timeout=30, what="two more failed passes",
             observe=lambda: controller.failures.count)
    assert controller.failures.count >= 3
    assert event_reasons(kube).count("PlanningFailed") == 1
    assert fleet.ready_driver_nodes(NEW) == []
    broken = False
    _wait_state(kube, timeout=60, phase="Progressing", currentStepIndex=1,
                currentStepState="StepPaused")
    status = upgrade_status(kube)
    assert status["status"]["recheckTime"] == "9999-12-31T23:59:59.999Z"
    assert "PlanningFailed" not in _conditions(kube), "recovered: off the conditions in force"
    reasons = wait_for(lambda: (r := event_reasons(kube)) and "PlanningRecovered" in r and r,
                       timeout=10, what="the recovery event")
    assert reasons.count("PlanningFailed") == 1
    assert fleet.ready_driver_nodes(NEW) == ["node-0001"]
