"""``upgradeSteps[].toleration`` (docs/rollout.md#failures-tolerated-in-a-step) and a
``pauseDuration`` left out (a gate), against the pure planner."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.names import (
    ANN_FAILURE_TOLERATED,
    ANN_FAILURES,
    ANN_STATE,
    ANN_TARGET,
    ANN_WAS_UNSCHEDULABLE,
    CANARY_LABEL,
)
from reconciler.policy.quantity import Quantity
from reconciler.policy.upgrade_policy import UpgradePolicy
from reconciler.rollout.actions import (
    AnnotateNode,
    Cordon,
    RecordEvent,
    RestorePayload,
    SetDaemonSetImage,
    SetPolicyPause,
    Uncordon,
)
from reconciler.rollout.model import PlannerSettings

from .world import (
    NEW_PAYLOAD,
    NEW_REV,
    OLD_PAYLOAD,
    OLD_REV,
    World,
    deletions,
    of_type,
    policy,
)


def tolerating(*steps: tuple[int | str, int, int | str | None]) -> list[dict[str, Any]]:
    """Steps of (replicas, pauseDuration, toleration); toleration None: left out."""
    return [{"replicas": r, "pauseDuration": p, **({} if t is None else {"toleration": t})}
            for r, p, t in steps]


def events(w: World, reason: str) -> list[RecordEvent]:
    assert w.last is not None
    return [e for e in of_type(w.last, RecordEvent) if e.reason == reason]


# --------------------------------------------------------------------------- resolution


@pytest.mark.parametrize(("steps", "nodes", "expected"), [
    # batches 2, 3, 5: 50% of 2 = 1; 1; 10% of 5 = 0.5 -> 1 (rounded up)
    ([(2, "50%"), (5, 1), ("100%", "10%")], 10, [1, 1, 1]),
    # left out = 0; 0% = 0; more than the batch is the batch
    ([(2, None), (4, "0%"), ("100%", 99)], 10, [0, 0, 6]),
    ([(3, "150%"), ("100%", "100%")], 10, [3, 7]),
    # a step that adds no nodes tolerates none (10% of 10 and 1 are both 1)
    ([("10%", 1), (1, 1), ("100%", 0)], 10, [1, 0, 0]),
    # garbage (a CR patched around validation) tolerates nothing; a negative count neither
    ([(2, "x%"), ("100%", -3)], 10, [0, 0]),
])
def test_toleration_resolves_against_the_steps_batch(
    steps: list[tuple[int | str, int | str | None]], nodes: int, expected: list[int],
) -> None:
    raw = [{"replicas": r, "pauseDuration": 0, **({} if t is None else {"toleration": t})}
           for r, t in steps]
    policy = UpgradePolicy.from_spec({"enableRollout": True, "upgradeSteps": raw})
    assert policy.step_tolerations(nodes) == expected


def test_pause_duration_left_out_is_a_gate_and_an_empty_mapping_still_is() -> None:
    policy = UpgradePolicy.from_spec({"upgradeSteps": [
        {"replicas": 1}, {"replicas": 2, "pauseDuration": {}},
        {"replicas": 3, "pauseDuration": 0, "toleration": "50%"},
        {"replicas": "100%", "pauseDuration": 60_000}]})
    assert [s.is_gate for s in policy.steps] == [True, True, False, False]
    assert [s.pause_ms for s in policy.steps] == [None, None, 0, 60_000]
    assert [s.toleration for s in policy.steps] == [None, None, Quantity(50, True), None]


@pytest.mark.parametrize("gate", [{}, {"pauseDuration": {}}], ids=["left-out", "empty-mapping"])
def test_a_step_without_a_pause_duration_waits_for_a_person(gate: dict[str, Any]) -> None:
    w = World(3, policy(upgradeSteps=[{"replicas": 1, **gate},
                                      {"replicas": "100%", "pauseDuration": 0}]))
    w.settle(0)
    w.ready("node-0001")
    result = w.plan(60)
    assert of_type(result, SetPolicyPause) == [SetPolicyPause(True)]
    assert w.inner["currentStepState"] == "StepPaused"
    assert "ManualGate" in w.conditions()
    assert deletions(w.plan(7200)) == []
    w.policy_raw["pause"] = False
    assert deletions(w.settle(7300)) == ["node-0002"]


# --------------------------------------------------------------------------- the rule


def test_a_failure_within_the_toleration_is_left_behind_and_the_rollout_completes() -> None:
    """The acceptance of issue 41: toleration 1 on the first step, one faulty node: the rollout
    completes, the fault tolerated, no fallback (maxFailureThreshold 1 would fall back at the
    first counted failure)."""
    w = World(4, policy(upgradeSteps=tolerating((2, 0, 1), ("100%", 0, None)), maxParallel=2,
                        maxFailureThreshold=1, maxUnavailable=0))
    assert deletions(w.settle(0)) == ["node-0001", "node-0002"]
    w.pod("node-0001", waiting_reason="ErrImagePull")
    w.ready("node-0002")
    result = w.settle(30)
    assert w.annotation("node-0001", ANN_STATE) == "failed"
    assert w.annotation("node-0001", ANN_FAILURE_TOLERATED) == f"1@{NEW_REV}"
    assert w.annotation("node-0001", ANN_FAILURES) is None  # never counted
    assert w.nodes["node-0001"].unschedulable is True  # stays cordoned, as a failed node does
    assert w.inner["currentFailureRetry"] == 0
    assert of_type(result, SetPolicyPause) == []
    # step 1 is done (1 upgraded + 1 tolerated = 2); a tolerated node is not unavailable, so
    # maxUnavailable 0 does not hold step 2's fresh starts
    assert w.inner["currentStepIndex"] == 2
    assert sorted(deletions(result)) == ["node-0003", "node-0004"]
    assert "1 failure tolerated, left on the failed driver: node-0001 (step 1)" in (
        w.inner["message"])
    w.ready("node-0003", "node-0004")
    result = w.settle(90)
    assert w.status["phase"] == "Idling"
    assert w.inner["currentStepState"] == "Completed"
    assert w.inner["lastPodSpecRevision"] == NEW_REV
    assert w.inner["totalUpgradeReadyReplicas"] == 3
    conditions = w.conditions()
    assert "BatchFailed" not in conditions and "RolledBack" not in conditions
    tolerated = conditions["FailuresTolerated"]
    assert tolerated["reason"] == "FailuresTolerated"
    assert tolerated["message"] == ("failures tolerated, left cordoned on the failed driver: "
                                    "node-0001 (step 1)")
    assert w.policy_raw.get("pause") is not True
    # never retried: its failed pod was deleted once, when it started
    assert [n for n, rev in w.deleted if n == "node-0001"] == ["node-0001"]
    assert w.nodes["node-0001"].unschedulable is True


def test_the_tolerated_failure_is_an_event_and_no_retry_is_planned() -> None:
    w = World(2, policy(upgradeSteps=tolerating(("100%", 0, 1)), maxParallel=1,
                        maxFailureThreshold=1), settings=PlannerSettings(retry_backoff=30))
    w.settle(0)
    w.pod("node-0001", waiting_reason="CrashLoopBackOff", restart_count=3)
    result = w.plan(40)
    [event] = events(w, "NodeFailureTolerated")
    assert event.type == "Warning" and event.node == "node-0001" and event.step == 1
    assert "tolerated by step 1 (toleration 1)" in event.message
    assert events(w, "NodeFailed") == []
    # the next fresh start, and no wake-up for a retry of node-0001 (its back-off would be 70)
    assert deletions(result) == ["node-0002"]
    assert result.requeue_at == pytest.approx(w.settings.ready_timeout + 40 + 1767225600.0)
    assert deletions(w.plan(500)) == []


def test_failures_beyond_the_toleration_count_and_fire_the_fallback() -> None:
    """T = 1, maxFailureThreshold 3: the first failing node is left behind, the next three
    failures fire the fallback."""
    w = World(6, policy(upgradeSteps=tolerating(("100%", 0, 1)), maxParallel=4,
                        maxFailureThreshold=3))
    assert deletions(w.settle(0)) == ["node-0001", "node-0002", "node-0003", "node-0004"]
    expected = [(f"node-000{i}", retry) for i, retry in ((1, 0), (2, 1), (3, 2))]
    for t, (name, retry) in enumerate(expected, start=1):
        w.pod(name, waiting_reason="ErrImagePull")
        started = deletions(w.plan(t * 10))
        assert w.inner["currentFailureRetry"] == retry, name
        # the tolerated node's slot is refilled at once (it is not unavailable); a counted
        # failure is unavailable, and maxUnavailable 0 holds fresh starts
        assert started == (["node-0005"] if name == "node-0001" else []), name
        assert "BatchFailed" not in w.conditions()
    assert w.annotation("node-0001", ANN_FAILURE_TOLERATED) == f"1@{NEW_REV}"
    assert w.annotation("node-0002", ANN_FAILURE_TOLERATED) is None
    w.pod("node-0004", waiting_reason="ErrImagePull")
    result = w.plan(40)
    assert w.inner["currentFailureRetry"] == 3
    assert of_type(result, SetPolicyPause) == [SetPolicyPause(True)]
    message = w.conditions()["BatchFailed"]["message"]
    assert "node-0002, node-0003, node-0004" in message and "node-0001" not in message
    # a person resumes: the counted nodes are retried, the tolerated one is not
    w.policy_raw["pause"] = False
    assert deletions(w.plan(50)) == ["node-0002", "node-0003", "node-0004"]


def test_failures_in_one_pass_are_tolerated_in_rollout_order() -> None:
    w = World(4, policy(upgradeSteps=tolerating(("100%", 0, 1)), maxParallel=3,
                        maxFailureThreshold=5), canary=["node-0003"])
    assert deletions(w.settle(0)) == ["node-0003", "node-0001", "node-0002"]
    for name in ("node-0001", "node-0002", "node-0003"):
        w.pod(name, waiting_reason="ErrImagePull")
    w.plan(10)
    # the canary first (rollout order), the two others counted
    assert w.annotation("node-0003", ANN_FAILURE_TOLERATED) == f"1@{NEW_REV}"
    assert w.annotation("node-0001", ANN_FAILURE_TOLERATED) is None
    assert w.annotation("node-0002", ANN_FAILURE_TOLERATED) is None
    assert w.inner["currentFailureRetry"] == 2
    assert w.nodes["node-0003"].labels.get(CANARY_LABEL) == "true"


def test_each_step_tolerates_its_own_failures() -> None:
    w = World(4, policy(upgradeSteps=tolerating((2, 0, 1), ("100%", 0, 1)), maxParallel=2,
                        maxFailureThreshold=1))
    w.settle(0)
    w.pod("node-0001", waiting_reason="ErrImagePull")
    w.ready("node-0002")
    w.settle(30)
    assert w.inner["currentStepIndex"] == 2
    w.pod("node-0003", waiting_reason="ErrImagePull")
    w.ready("node-0004")
    w.settle(60)
    assert w.annotation("node-0003", ANN_FAILURE_TOLERATED) == f"2@{NEW_REV}"
    assert w.status["phase"] == "Idling" and w.inner["currentStepState"] == "Completed"
    assert w.conditions()["FailuresTolerated"]["message"].endswith(
        "node-0001 (step 1), node-0003 (step 2)")


def test_a_step_without_toleration_counts_the_failure_even_after_an_earlier_step_tolerated(
) -> None:
    w = World(4, policy(upgradeSteps=tolerating((2, 0, 2), ("100%", 0, None)), maxParallel=2,
                        maxFailureThreshold=1))
    w.settle(0)
    w.pod("node-0001", waiting_reason="ErrImagePull")
    w.ready("node-0002")
    w.settle(30)
    assert w.inner["currentStepIndex"] == 2  # one of step 1's two tolerations used
    w.pod("node-0003", waiting_reason="ErrImagePull")
    w.plan(60)
    assert w.annotation("node-0003", ANN_FAILURE_TOLERATED) is None
    assert w.inner["currentFailureRetry"] == 1
    assert "BatchFailed" in w.conditions()


def test_a_tolerated_node_whose_driver_turns_ready_counts_as_upgraded() -> None:
    w = World(3, policy(upgradeSteps=tolerating(("100%", 0, 1)), maxParallel=1))
    w.settle(0)
    w.pod("node-0001", waiting_reason="ErrImagePull")
    w.plan(10)
    assert w.annotation("node-0001", ANN_FAILURE_TOLERATED) == f"1@{NEW_REV}"
    w.pod("node-0001", waiting_reason=None, ready=True)  # the image appeared after all
    result = w.plan(20)
    assert Uncordon("node-0001") in result.actions
    assert w.annotation("node-0001", ANN_STATE) == "done"
    assert w.annotation("node-0001", ANN_FAILURE_TOLERATED) is None
    assert w.inner["totalUpgradeReadyReplicas"] == 1
    assert "tolerated" not in w.inner["message"]


def test_after_the_rollout_a_tolerated_node_that_recovers_is_released() -> None:
    w = World(2, policy(upgradeSteps=tolerating(("100%", 0, 1)), maxParallel=2))
    w.settle(0)
    w.pod("node-0001", waiting_reason="ErrImagePull")
    w.ready("node-0002")
    w.settle(30)
    assert w.status["phase"] == "Idling" and "FailuresTolerated" in w.conditions()
    assert w.plan(40).actions == ()  # idle: nothing to do while it stays broken
    w.pod("node-0001", waiting_reason=None, ready=True)
    result = w.plan(50)
    assert result.actions[0] == Uncordon("node-0001")
    assert w.annotation("node-0001", ANN_STATE) == "done"
    assert w.annotation("node-0001", ANN_FAILURE_TOLERATED) is None
    assert w.annotation("node-0001", ANN_WAS_UNSCHEDULABLE) is None
    assert not w.nodes["node-0001"].unschedulable
    assert w.plan(60).actions == ()


def test_a_tolerated_node_someone_uncordons_is_cordoned_again() -> None:
    w = World(3, policy(upgradeSteps=tolerating(("100%", 0, 1)), maxParallel=1))
    w.settle(0)
    w.pod("node-0001", waiting_reason="ErrImagePull")
    w.plan(10)
    w.set("node-0001", unschedulable=False)
    assert Cordon("node-0001") in w.plan(20).actions


def test_a_rollback_moves_a_tolerated_node_back() -> None:
    w = World(4, policy(upgradeSteps=tolerating(("100%", 0, 1)), maxParallel=2,
                        maxFailureThreshold=1, fallback="rollback"))
    w.settle(0)
    w.pod("node-0001", waiting_reason="ErrImagePull")
    w.ready("node-0002")
    w.plan(10)
    assert w.annotation("node-0001", ANN_FAILURE_TOLERATED) == f"1@{NEW_REV}"
    assert w.status["phase"] == "Progressing"
    w.pod("node-0003", waiting_reason="ErrImagePull")
    w.settle(20)
    assert w.status["phase"] == "Terminating"
    # failed nodes first: the tolerated one is moved back like any failed node
    assert w.annotation("node-0001", ANN_TARGET) == OLD_REV
    assert w.annotation("node-0001", ANN_FAILURE_TOLERATED) is None
    for t in range(30, 200, 10):
        w.ready_all_in_flight()
        w.settle(t)
    assert w.status["phase"] == "Idling" and "RolledBack" in w.conditions()
    assert "FailuresTolerated" not in w.conditions()
    assert w.ready_on(OLD_REV) == list(w.nodes)
    assert not any(n.unschedulable for n in w.nodes.values())


def test_a_rollback_resumed_after_a_lost_status_moves_a_tolerated_node_back_at_once() -> None:
    """The fallback's pass lands (RestorePayload, SetDaemonSetImage), its status write does not:
    the next pass reads Progressing, finds the payload and the template back (decision 13) and
    moves nodes back in that pass. The tolerated node goes back like any failed node, its record
    dropped (a rollback move, never a retry to the new revision); the node in flight after its
    cordon ahead is turned around in its slot. Rollback moves are repairs: maxUnavailable 0 does
    not hold them while the counted failure is unavailable (the property's falsifying examples,
    tests/rollout/test_properties.py, read both as moves of a rollout)."""
    w = World(5, policy(upgradeSteps=tolerating((2, 0, 1), ("100%", 0, None)), maxParallel=2,
                        maxFailureThreshold=1, maxUnavailable=0, fallback="rollback"))
    assert deletions(w.settle(0)) == ["node-0001", "node-0002"]
    w.pod("node-0001", waiting_reason="ErrImagePull")
    w.ready("node-0002")
    assert deletions(w.settle(10)) == ["node-0003", "node-0004"]  # node-0005 cordoned ahead
    assert w.annotation("node-0001", ANN_FAILURE_TOLERATED) == f"1@{NEW_REV}"
    w.pod("node-0003", waiting_reason="ErrImagePull")  # counted: the threshold, the fallback
    lost = w.plan(20, write_status=False)
    assert lost.status["phase"] == "Terminating"
    assert [type(a) for a in lost.actions[-2:]] == [RestorePayload, SetDaemonSetImage]
    assert w.status["phase"] == "Progressing" and w.payload == OLD_PAYLOAD
    result = w.plan(20)
    assert w.status["phase"] == "Terminating"
    assert w.conditions()["RollingBack"]["reason"] == "FailureThresholdReached"
    assert deletions(result) == ["node-0004", "node-0001"]
    assert w.deleted[-2:] == [("node-0004", OLD_REV), ("node-0001", OLD_REV)]
    assert w.annotation("node-0001", ANN_TARGET) == OLD_REV
    assert w.annotation("node-0001", ANN_FAILURE_TOLERATED) is None
    assert events(w, "NodeRetried") == []
    for t in range(30, 200, 10):
        w.ready_all_in_flight()
        w.settle(t)
    assert w.status["phase"] == "Idling" and "RolledBack" in w.conditions()
    assert w.ready_on(OLD_REV) == list(w.nodes)
    assert not any(n.unschedulable for n in w.nodes.values())
    # node-0001 went to the new revision once (its start), never again
    assert [rev for n, rev in w.deleted if n == "node-0001"] == [NEW_REV, OLD_REV]


def test_a_record_for_another_revision_or_a_record_not_failed_counts_for_nothing() -> None:
    w = World(3, policy(upgradeSteps=tolerating(("100%", 0, 1)), maxParallel=1,
                        maxFailureThreshold=5))
    w.settle(0)
    # someone copied a record from an older rollout onto the node in flight
    w.set("node-0001", annotations={**w.nodes["node-0001"].annotations,
                                    ANN_FAILURE_TOLERATED: "1@0123456789"})
    w.pod("node-0001", waiting_reason="ErrImagePull")
    w.plan(10)
    # it was not tolerated already, so this failure is the step's one toleration
    assert w.annotation("node-0001", ANN_FAILURE_TOLERATED) == f"1@{NEW_REV}"
    assert w.inner["currentFailureRetry"] == 0


def test_a_new_rollout_removes_the_records_of_the_last_one() -> None:
    w = World(2, policy())
    old = {ANN_STATE: "failed", ANN_TARGET: OLD_REV, ANN_FAILURE_TOLERATED: f"1@{OLD_REV}"}
    w.set("node-0002", annotations=old)
    w.pod("node-0002", ready=False, waiting_reason="CrashLoopBackOff")
    result = w.plan(0)
    assert AnnotateNode("node-0002", {ANN_FAILURE_TOLERATED: None}) in result.actions
    assert ANN_FAILURE_TOLERATED not in w.nodes["node-0002"].annotations
    assert w.payload == NEW_PAYLOAD


def test_a_restart_that_lost_the_status_counts_the_toleration_once() -> None:
    w = World(3, policy(upgradeSteps=tolerating(("100%", 0, 1)), maxParallel=2,
                        maxFailureThreshold=2))
    w.settle(0)
    w.pod("node-0001", waiting_reason="ErrImagePull")
    w.plan(10, write_status=False)  # its record landed, the status write did not
    w.pod("node-0002", waiting_reason="ErrImagePull")
    w.plan(20)
    assert w.annotation("node-0001", ANN_FAILURE_TOLERATED) == f"1@{NEW_REV}"
    assert w.annotation("node-0002", ANN_FAILURE_TOLERATED) is None
    assert w.inner["currentFailureRetry"] == 1
