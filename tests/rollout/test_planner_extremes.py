"""Table tests of the pure planner at the edges: steps that are done the moment they begin
(targets capped at N), and every integer field at the ends of Kubernetes' int64."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.names import ANN_ATTEMPT, ANN_FAILED_AT, ANN_STATE, ANN_TARGET
from reconciler.rollout.actions import RecordEvent, SetPolicyPause
from reconciler.rollout.model import DriverPod, RolloutNode
from reconciler.rollout.planner import plan
from reconciler.rollout.simulator import EPOCH
from reconciler.timefmt import LATEST_TIME, LATEST_TIME_TEXT, format_time

from .world import NEW_REV, World, deletions, of_type, policy, steps

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


def started_steps(*results: Any) -> list[int]:
    return [a.step for r in results for a in of_type(r, RecordEvent) if a.reason == "StepStarted"]


def three_nodes_one_by_one(w: World) -> None:
    """Steps 1, 2, 3 of 3 nodes, one node each; returns with node-0003 just turned Ready."""
    w.settle(0)
    for t, node in ((60, "node-0001"), (120, "node-0002")):
        w.ready(node)
        result = w.settle(t)
        assert len(deletions(result)) == 1
    w.ready("node-0003")


def test_steps_capped_at_n_with_no_pause_all_advance_in_the_same_pass() -> None:
    # steps 1..50 then 100% on 3 nodes: steps 3..51 all resolve to 3
    w = World(3, policy(upgradeSteps=steps(*((i, 0) for i in range(1, 51)), ("100%", 0))))
    three_nodes_one_by_one(w)
    result = w.plan(180)
    assert w.status["phase"] == "Idling"
    assert w.inner["currentStepState"] == "Completed"
    assert w.inner["currentStepIndex"] == 51
    assert started_steps(result) == list(range(4, 52))
    assert result.again is False and result.requeue_at is None
    done = [a.step for a in of_type(result, RecordEvent) if a.reason == "StepCompleted"]
    assert done == list(range(3, 52))


def test_a_done_step_with_a_pause_pauses_in_the_same_pass() -> None:
    w = World(3, policy(upgradeSteps=steps((1, 0), (2, 0), (3, 0), (4, 0), (5, 30_000),
                                           ("100%", 0))))
    three_nodes_one_by_one(w)
    result = w.plan(180)
    assert w.inner["currentStepIndex"] == 5
    assert w.inner["currentStepState"] == "StepPaused"
    assert w.inner["recheckTime"] == format_time(EPOCH + 210)
    assert result.requeue_at == EPOCH + 210 and result.again is False
    w.plan(210)
    assert w.inner["currentStepState"] == "Completed"


def test_a_done_gate_goes_on_record_before_it_opens_then_the_rest_advances_at_once() -> None:
    """A gate sets pause: true (written back to Git): the step is stored first, so a restart
    finds the gate it set; that is the next pass, at once (``again``)."""
    w = World(3, policy(upgradeSteps=steps((1, 0), (2, 0), (3, 0), (4, None), (5, 0),
                                           ("100%", 0))))
    three_nodes_one_by_one(w)
    result = w.plan(180)
    assert w.inner["currentStepIndex"] == 4 and w.inner["currentStepState"] == "StepUpgradeInit"
    assert result.again is True and of_type(result, SetPolicyPause) == []
    result = w.plan(180)
    assert of_type(result, SetPolicyPause) == [SetPolicyPause(True)]
    assert w.conditions()["ManualGate"]["status"] == "True"
    w.policy_raw["pause"] = False
    result = w.plan(200)
    assert w.inner["currentStepState"] == "Completed"
    assert started_steps(result) == [5, 6]


def test_a_step_begun_and_done_in_one_pass_counts_no_failure_of_the_step_before() -> None:
    # step 1 (2 nodes) is done by node-0001 and a node that joined on the new template, in the
    # pass where node-0002 fails; step 2 (2: done at once) begins and ends in that pass with a
    # count of its own, as it would in a pass of its own; step 3 (100%) is next
    w = World(3, policy(upgradeSteps=steps((2, 0), (2, 0), ("100%", 0)), maxParallel=2,
                        maxFailureThreshold=2))
    assert deletions(w.settle(0)) == ["node-0001", "node-0002"]
    w.nodes["node-0009"] = RolloutNode("node-0009", pod=DriverPod("drv-9", NEW_REV, ready=True))
    w.ready("node-0001")
    w.pod("node-0002", waiting_reason="ErrImagePull")
    result = w.plan(60)
    assert started_steps(result) == [2, 3]
    assert w.inner["currentStepIndex"] == 3 and w.inner["currentStepState"] == "StepUpgradeInit"
    assert w.inner["currentFailureRetry"] == 0
    assert w.annotation("node-0002", ANN_STATE) == "failed"
    assert "BatchFailed" not in w.conditions()
    assert result.again is True


@pytest.mark.parametrize("pause", [2**62, INT64_MAX])
def test_a_pause_past_year_9999_is_clamped_to_it(pause: int) -> None:
    w = World(2, policy(upgradeSteps=steps((1, pause), ("100%", 0))))
    w.settle(0)
    w.ready("node-0001")
    result = w.plan(60)
    assert w.inner["currentStepState"] == "StepPaused"
    assert w.inner["recheckTime"] == LATEST_TIME_TEXT == "9999-12-31T23:59:59.999Z"
    assert result.requeue_at == LATEST_TIME
    assert deletions(w.plan(10 * 365 * 86400)) == [], "a pause that long is a gate"
    # the stored deadline reads back: a restarted planner keeps it
    later = plan(w.snapshot(), EPOCH + 86400)
    assert later.status["status"]["recheckTime"] == LATEST_TIME_TEXT
    assert later.requeue_at == LATEST_TIME


def test_a_negative_pause_continues_at_once() -> None:
    w = World(2, policy(upgradeSteps=steps((1, INT64_MIN), ("100%", 0))))
    w.settle(0)
    w.ready("node-0001")
    result = w.settle(60)
    assert w.inner["currentStepIndex"] == 2 and deletions(result) == ["node-0002"]


def test_int64_counts_resolve_against_the_fleet() -> None:
    w = World(4, policy(upgradeSteps=steps((INT64_MAX, 0), ("100%", 0)), maxParallel=INT64_MAX,
                        maxUnavailable=INT64_MAX, maxFailureThreshold=INT64_MAX))
    result = w.settle(0)
    assert len(deletions(result)) == 4, "the step is capped at N, maxParallel at the batch"
    w.pod("node-0001", waiting_reason="ErrImagePull")
    w.plan(1)
    assert w.inner["currentFailureRetry"] == 1 and "BatchFailed" not in w.conditions()


def test_huge_percentages_and_a_threshold_below_one_do_not_raise() -> None:
    huge_percent = f"{INT64_MAX}%"
    w = World(3, policy(upgradeSteps=steps((huge_percent, 0), (huge_percent, INT64_MAX)),
                        maxParallel=huge_percent, maxUnavailable=huge_percent,
                        maxFailureThreshold=INT64_MIN))
    w.settle(0)
    # a threshold below 1 is reached by no failure at all: the batch falls back at once
    assert w.conditions()["BatchFailed"]["status"] == "True"


def test_a_garbage_attempt_count_does_not_overflow_the_retry_back_off() -> None:
    w = World(2, policy(maxFailureThreshold=3))
    w.settle(0)
    w.pod("node-0001", waiting_reason="ErrImagePull")
    w.plan(5)
    w.set("node-0001", annotations={**w.nodes["node-0001"].annotations,
                                    ANN_ATTEMPT: str(10**18)})
    result = w.plan(6)
    assert w.annotation("node-0001", ANN_STATE) == "failed"
    assert w.annotation("node-0001", ANN_TARGET) == NEW_REV
    assert w.annotation("node-0001", ANN_FAILED_AT) == format_time(EPOCH + 5)
    assert result.requeue_at == EPOCH + 5 + w.settings.retry_backoff_max


def test_a_percentage_resolves_exactly_at_any_size() -> None:
    from reconciler.policy.quantity import Quantity

    # a CR patched around validation may carry a percentage of hundreds of digits
    huge = Quantity(10**400, percent=True)
    assert huge.resolve(3) == 3 * 10**398
    # exact past 2**53, where a float would round: ceil(33 * (2**60 + 1) / 100)
    assert Quantity(33, percent=True).resolve(2**60 + 1) == -(-33 * (2**60 + 1) // 100)
    assert Quantity(1, percent=True).resolve(1) == 1 and Quantity(0, percent=True).resolve(7) == 0
