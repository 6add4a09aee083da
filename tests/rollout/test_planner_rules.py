"""One table test per decision of docs/rollout.md#the-state-machine, against the pure planner."""

from __future__ import annotations

import pytest

from reconciler.names import (
    ANN_ATTEMPT,
    ANN_DELETED_AT,
    ANN_DELETED_POD,
    ANN_FAILURE_REASON,
    ANN_STATE,
    ANN_TARGET,
    ANN_WAS_UNSCHEDULABLE,
    CANARY_LABEL,
    STATE_CORDONED,
)
from reconciler.rollout.actions import (
    AnnotateNode,
    Cordon,
    DeleteDriverPod,
    RecordEvent,
    RestorePayload,
    SetDaemonSetImage,
    SetPolicyPause,
    Uncordon,
)
from reconciler.rollout.model import DriverPod, PlannerSettings, RolloutNode
from reconciler.rollout.planner import plan
from reconciler.rollout.simulator import EPOCH
from reconciler.timefmt import format_time, parse_time

from .world import (
    NEW_IMAGE,
    NEW_REV,
    NEW_VERSION,
    OLD_IMAGE,
    OLD_PAYLOAD,
    OLD_REV,
    World,
    deletions,
    of_type,
    policy,
    steps,
)

# --------------------------------------------------------------------------- starting (4.2)


def test_version_change_with_enable_rollout_starts_a_rollout() -> None:
    w = World(4, policy())
    first = w.plan(0)
    assert of_type(first, SetDaemonSetImage) == [SetDaemonSetImage(NEW_IMAGE)]
    assert deletions(first) == []  # nothing moves before the template carries the new revision
    assert w.status["phase"] == "Progressing" and w.status["upgrading"] is True
    assert w.inner["currentStepState"] == "StepUpgradeInit"
    assert w.inner["currentStepIndex"] == 1
    assert w.inner["lastPodSpecRevision"] == OLD_REV
    assert w.status["lastCoDriverSpec"] == {"payload": OLD_PAYLOAD}
    second = w.plan(0)
    assert w.inner["upgradingPodSpecRevision"] == NEW_REV
    assert w.inner["currentStepState"] == "StepUpgrade"
    assert deletions(second) == ["node-0001"]


def test_arch_suffix_alone_starts_no_rollout() -> None:
    w = World(3, policy())
    w.payload = {**OLD_PAYLOAD, "version": OLD_PAYLOAD["version"] + "-amd64"}
    result = w.plan(0)
    assert result.actions == ()
    assert w.status["phase"] == "Idling" and w.status["upgrading"] is False


def test_version_change_with_rollout_disabled_only_updates_the_template() -> None:
    w = World(3, policy(enableRollout=False))
    result = w.plan(0)
    assert of_type(result, SetDaemonSetImage) == [SetDaemonSetImage(NEW_IMAGE)]
    assert deletions(result) == []
    assert w.status["phase"] == "Disabled" and w.status["upgrading"] is False
    again = w.plan(10)
    assert deletions(again) == [] and w.status["phase"] == "Disabled"
    assert w.on(OLD_REV) == list(w.nodes)  # OnDelete: pods stay until someone deletes them


def test_template_set_but_rollout_never_recorded_is_started_from_the_status() -> None:
    w = World(3, policy())
    w.plan(0, write_status=False)  # crash after SetDaemonSetImage, before the status write
    assert w.ds.current_image == NEW_IMAGE
    w.plan(0)
    assert w.status["phase"] == "Progressing"
    assert w.inner["lastPodSpecRevision"] == OLD_REV
    w.plan(0)
    assert w.inner["upgradingPodSpecRevision"] == NEW_REV
    assert len(w.deleted) == 1


# --------------------------------------------------------------------------- steps (3, 4.4)


def test_percent_steps_round_up_and_max_parallel_resolves_against_the_batch() -> None:
    # 5% of 30 = 1.5 -> 2 nodes; maxParallel 50% of a batch of 2 -> 1
    w = World(30, policy(upgradeSteps=steps(("5%", 0), ("100%", 0)), maxParallel="50%"))
    result = w.settle(0)
    assert w.inner["currentUpgradeReplicas"] == 2
    assert deletions(result) == ["node-0001"]
    w.ready("node-0001")
    result = w.plan(60)
    assert deletions(result) == ["node-0002"]
    w.ready("node-0002")
    result = w.settle(120)
    # step 2 adds 28 nodes, maxParallel ceil(14) = 14
    assert w.inner["currentStepIndex"] == 2 and w.inner["currentUpgradeReplicas"] == 28
    assert len(deletions(result)) == 14


def test_current_step_index_is_one_based_and_counters_follow_the_batch() -> None:
    w = World(10, policy(upgradeSteps=steps((2, 0), (5, 0), ("100%", 0)), maxParallel="100%"))
    w.settle(0)
    assert w.inner["currentStepIndex"] == 1
    assert w.inner["currentUpgradeReplicas"] == 2
    w.ready_all_in_flight()
    w.plan(60)
    assert w.inner["currentStepIndex"] == 2
    assert w.inner["currentUpgradeReplicas"] == 3
    assert w.inner["CurrentUpgradeReadyReplicas"] == 0
    assert w.inner["totalUpgradeReadyReplicas"] == 2
    assert w.inner["totalUpgradeReplicas"] == 10


def test_step_that_adds_no_nodes_still_pauses() -> None:
    # 10% and 1 of 10 nodes both resolve to 1
    w = World(10, policy(upgradeSteps=steps(("10%", 0), (1, 30_000), ("100%", 0))))
    w.settle(0)
    w.ready("node-0001")
    result = w.settle(60)
    assert w.inner["currentStepIndex"] == 2
    assert w.inner["currentUpgradeReplicas"] == 0
    assert w.inner["currentStepState"] == "StepPaused"
    assert w.inner["recheckTime"] == format_time(EPOCH + 90)
    assert deletions(result) == []
    result = w.settle(90)
    assert w.inner["currentStepIndex"] == 3 and deletions(result) == ["node-0002"]


def test_pause_duration_timer_comes_from_the_stored_recheck_time() -> None:
    w = World(4, policy(upgradeSteps=steps((2, 300_000), ("100%", 0)), maxParallel=2))
    w.settle(0)
    w.ready_all_in_flight()
    result = w.plan(100)
    assert w.inner["currentStepState"] == "StepPaused"
    assert w.inner["recheckTime"] == format_time(EPOCH + 400)
    assert result.requeue_at == EPOCH + 400
    # a restarted planner (same stored status) keeps the deadline, it does not restart it
    later = plan(w.snapshot(), EPOCH + 399)
    assert later.status["status"]["recheckTime"] == format_time(EPOCH + 400)
    assert deletions(later) == []
    w.plan(399)
    result = w.settle(400)
    assert w.inner["currentStepIndex"] == 2 and len(deletions(result)) == 2


def test_zero_pause_duration_continues_at_once() -> None:
    w = World(2, policy(upgradeSteps=steps((1, 0), ("100%", 0))))
    w.settle(0)
    w.ready("node-0001")
    result = w.settle(60)
    assert w.inner["currentStepIndex"] == 2 and deletions(result) == ["node-0002"]


def test_step_state_walks_init_upgrade_paused_then_next_step() -> None:
    w = World(2, policy(upgradeSteps=steps((1, 10_000), ("100%", 0))))
    w.plan(0)
    assert w.inner["currentStepState"] == "StepUpgradeInit"
    w.plan(0)
    assert w.inner["currentStepState"] == "StepUpgrade"
    w.ready("node-0001")
    w.plan(60)
    assert w.inner["currentStepState"] == "StepPaused"
    advance = w.plan(70)
    # the next step is on record before any of its nodes starts
    assert (w.inner["currentStepIndex"], w.inner["currentStepState"]) == (2, "StepUpgradeInit")
    assert advance.again is True and deletions(advance) == []
    assert "StepStarted" in [e.reason for e in of_type(advance, RecordEvent)]
    w.plan(70)
    assert (w.inner["currentStepIndex"], w.inner["currentStepState"]) == (2, "StepUpgrade")


def test_completed_rollout_ends_idling_with_the_new_revision() -> None:
    w = World(2, policy(maxParallel=2))
    w.settle(0)
    w.ready_all_in_flight()
    w.plan(60)
    assert w.status["phase"] == "Idling" and w.status["upgrading"] is False
    assert w.inner["currentStepState"] == "Completed"
    assert w.inner["currentStepIndex"] == 1
    assert w.inner["lastPodSpecRevision"] == NEW_REV
    assert "RolledBack" not in w.conditions()


# --------------------------------------------------------------------------- gates


def test_manual_gate_pauses_the_policy_and_a_person_releases_it() -> None:
    w = World(4, policy(upgradeSteps=steps((1, None), ("100%", 0)), maxParallel=4))
    w.settle(0)
    w.ready("node-0001")
    result = w.plan(60)
    assert of_type(result, SetPolicyPause) == [SetPolicyPause(True)]
    assert w.policy_raw["pause"] is True
    assert w.inner["currentStepState"] == "StepPaused"
    assert w.conditions()["ManualGate"]["status"] == "True"
    assert deletions(w.plan(3600)) == []  # waits for a person, however long
    w.policy_raw["pause"] = False
    result = w.settle(3700)
    assert w.inner["currentStepIndex"] == 2
    assert len(deletions(result)) == 3
    assert "ManualGate" not in w.conditions()


def test_gate_on_the_last_step_holds_completion() -> None:
    w = World(2, policy(upgradeSteps=steps(("100%", None)), maxParallel=2))
    w.settle(0)
    w.ready_all_in_flight()
    w.plan(60)
    assert w.status["phase"] == "Progressing"
    assert w.inner["currentStepState"] == "StepPaused"
    w.policy_raw["pause"] = False
    w.plan(120)
    assert w.status["phase"] == "Idling" and w.inner["currentStepState"] == "Completed"


# --------------------------------------------------------------------------- pause


def test_pause_true_stops_new_starts_but_in_flight_nodes_finish() -> None:
    w = World(4, policy(maxParallel=2))
    w.settle(0)
    w.policy_raw["pause"] = True
    w.ready("node-0001", "node-0002")
    result = w.plan(60)
    assert deletions(result) == []
    assert w.inner["currentStepState"] == "StepPaused"
    assert w.status["phase"] == "Progressing" and w.status["upgrading"] is True
    assert w.inner["totalUpgradeReadyReplicas"] == 2
    # the finished nodes, then the two cordoned ahead: nothing starts while paused
    assert of_type(result, Uncordon) == [Uncordon(f"node-000{i}") for i in (1, 2, 3, 4)]
    assert all(not n.unschedulable for n in w.nodes.values())
    w.policy_raw["pause"] = False
    assert deletions(w.plan(61)) == ["node-0003", "node-0004"]


# --------------------------------------------------------------------------- node handling


def test_busy_node_waits_and_status_names_the_blocking_pods() -> None:
    w = World(3, policy())
    w.set("node-0001", workloads=("ml/train-0",))
    result = w.settle(0)
    assert deletions(result) == ["node-0002"]
    assert "node-0001 (ml/train-0)" in w.inner["message"]
    w.ready("node-0002")
    assert deletions(w.plan(60)) == ["node-0003"]
    w.ready("node-0003")
    w.plan(120)
    assert w.inner["totalUpgradeReadyReplicas"] == 2 and w.status["phase"] == "Progressing"
    w.set("node-0001", workloads=())
    assert deletions(w.plan(180)) == ["node-0001"]


def test_cordon_is_remembered_and_restored() -> None:
    # cordoned by a person before the rollout: unavailable, so maxUnavailable must allow it
    w = World(2, policy(maxParallel=2, maxUnavailable=1))
    w.set("node-0002", unschedulable=True)
    result = w.settle(0)
    assert of_type(result, Cordon) == [Cordon("node-0001")]
    assert w.annotation("node-0001", ANN_WAS_UNSCHEDULABLE) == "false"
    assert w.annotation("node-0002", ANN_WAS_UNSCHEDULABLE) == "true"
    w.ready_all_in_flight()
    result = w.plan(60)
    assert of_type(result, Uncordon) == [Uncordon("node-0001")]
    assert w.nodes["node-0001"].unschedulable is False
    assert w.nodes["node-0002"].unschedulable is True  # stays the way the person left it


def test_annotation_is_written_before_the_pod_is_deleted() -> None:
    w = World(1, policy())
    w.plan(0)
    result = w.plan(0)
    kinds = [type(a).__name__ for a in result.actions if not isinstance(a, RecordEvent)]
    assert kinds == ["AnnotateNode", "Cordon", "DeleteDriverPod"]


def test_canary_nodes_go_first() -> None:
    w = World(5, policy(maxParallel=2), canary=["node-0004", "node-0005"])
    assert w.nodes["node-0004"].labels[CANARY_LABEL] == "true"
    result = w.settle(0)
    assert deletions(result) == ["node-0004", "node-0005"]


def test_max_unavailable_zero_stops_fresh_starts_when_a_node_is_unavailable() -> None:
    w = World(3, policy())
    w.set("node-0003", ready=False)
    result = w.settle(0)
    assert deletions(result) == []
    assert "unavailable" in w.inner["message"]


def test_max_unavailable_allows_that_many_unavailable_nodes() -> None:
    w = World(4, policy(maxUnavailable=1))
    w.set("node-0004", ready=False)
    assert deletions(w.settle(0)) == ["node-0001"]
    w.set("node-0003", unschedulable=True)  # cordoned by someone else: unavailable too
    w.ready("node-0001")
    assert deletions(w.plan(60)) == []


def test_not_ready_node_is_not_started() -> None:
    w = World(2, policy(maxUnavailable=1, maxParallel=2))
    w.set("node-0001", ready=False)
    assert deletions(w.settle(0)) == ["node-0002"]


def test_node_leaving_is_dropped_and_does_not_block_completion() -> None:
    w = World(3, policy(maxParallel=1))
    w.settle(0)
    del w.nodes["node-0003"]
    w.ready("node-0001")
    w.plan(60)
    assert w.inner["totalUpgradeReplicas"] == 2
    w.ready("node-0002")
    w.plan(120)
    assert w.status["phase"] == "Idling" and w.inner["currentStepState"] == "Completed"


def test_node_joining_takes_the_template_and_counts_without_a_slot() -> None:
    w = World(2, policy(maxParallel=1))
    w.settle(0)
    w.nodes["node-0003"] = RolloutNode("node-0003", pod=DriverPod("drv-new", NEW_REV))
    w.ready("node-0001")
    result = w.plan(60)
    assert w.inner["totalUpgradeReplicas"] == 3
    assert deletions(result) == []  # the joiner's pod is coming up: no slot, no overshoot
    w.ready("node-0003")
    result = w.plan(61)
    assert deletions(result) == ["node-0002"]
    assert w.inner["totalUpgradeReadyReplicas"] == 2


# --------------------------------------------------------------------------- cordon ahead


def cordoned(w: World) -> list[str]:
    """Cordoned ahead and waiting: the old pod still there (a started one's is gone)."""
    return [n.name for n in w.nodes.values()
            if n.annotations.get(ANN_STATE) == STATE_CORDONED and n.unschedulable
            and n.pod is not None and n.pod.revision != n.annotations.get(ANN_TARGET)]


def test_nodes_next_in_line_are_cordoned_ahead_and_refilled_by_the_deletion_alone() -> None:
    w = World(6, policy(maxParallel=2))
    start = w.settle(0)
    assert deletions(start) == ["node-0001", "node-0002"]
    # at most maxParallel ahead, in rollout order, recorded for the target, old pod untouched
    assert cordoned(w) == ["node-0003", "node-0004"]
    assert w.annotation("node-0003", ANN_TARGET) == NEW_REV
    assert w.annotation("node-0003", ANN_WAS_UNSCHEDULABLE) == "false"
    assert w.on(OLD_REV) == ["node-0003", "node-0004", "node-0005", "node-0006"]
    assert start.in_flight == 2  # a node cordoned ahead is not in flight
    w.ready("node-0001")
    refill = w.plan(60)
    ours = [a for a in refill.actions if getattr(a, "node", None) == "node-0003"]
    # the deletion alone: no cordon (it is ours already), no record (its pods tell when)
    assert ours == [DeleteDriverPod("node-0003", "drv-node-0003-0")]
    assert ours[0].at == EPOCH + 60
    assert cordoned(w) == ["node-0004", "node-0005"]
    for t in (120, 180, 240):
        w.ready_all_in_flight()
        w.plan(t)
    assert w.status["phase"] == "Idling"
    assert all(not n.unschedulable for n in w.nodes.values())
    assert all(n.annotations.get(ANN_STATE) == "done" for n in w.nodes.values())
    assert sorted(w.deleted) == [(n, NEW_REV) for n in w.nodes]


def test_cordon_ahead_never_reaches_past_the_current_step() -> None:
    w = World(6, policy(upgradeSteps=steps((2, None), ("100%", 0)), maxParallel=1))
    assert deletions(w.settle(0)) == ["node-0001"]
    assert cordoned(w) == ["node-0002"]  # the step adds 2 nodes: one starts, one waits
    # (and a gate follows: the next step's nodes are not cordoned ahead)
    w.ready("node-0001")
    w.plan(60)
    assert cordoned(w) == []
    w.ready("node-0002")
    w.plan(120)  # step 1 done: the gate opens with no node of step 2 cordoned
    assert w.inner["currentStepState"] == "StepPaused"
    assert cordoned(w) == [] and all(not n.unschedulable for n in w.nodes.values())


def test_a_step_that_continues_at_once_has_the_next_steps_first_wave_cordoned() -> None:
    # step 1 adds 4 nodes (maxParallel 2), then step 2 at once adds 4 more (maxParallel 2)
    w = World(8, policy(upgradeSteps=steps((4, 0), ("100%", 0)), maxParallel=2))
    w.settle(0)
    assert cordoned(w) == ["node-0003", "node-0004"]  # this step's second wave
    w.ready("node-0001", "node-0002")
    w.plan(60)
    # this step's nodes are all started: the next step's first wave waits cordoned
    assert cordoned(w) == ["node-0005", "node-0006"]
    assert w.inner["currentStepIndex"] == 1
    w.ready("node-0003", "node-0004")
    advance = w.plan(120)
    assert advance.again and deletions(advance) == []  # the new step goes on record first
    assert cordoned(w) == ["node-0005", "node-0006"]  # kept across the step change
    start = w.plan(120)
    assert w.inner["currentStepIndex"] == 2
    assert [type(a) for a in start.actions if getattr(a, "node", None) == "node-0005"] == [
        DeleteDriverPod]
    assert cordoned(w) == ["node-0007", "node-0008"]


def test_a_timed_pause_keeps_the_next_step_uncordoned() -> None:
    w = World(6, policy(upgradeSteps=steps((2, 300_000), ("100%", 0)), maxParallel=2))
    w.settle(0)
    assert cordoned(w) == []
    w.ready("node-0001", "node-0002")
    w.plan(60)
    assert w.inner["currentStepState"] == "StepPaused"
    assert cordoned(w) == [] and all(not n.unschedulable for n in w.nodes.values())


def test_cordon_ahead_off_cordons_a_node_only_at_its_start() -> None:
    w = World(6, policy(maxParallel=2), settings=PlannerSettings(cordon_ahead=False))
    w.settle(0)
    assert [n.name for n in w.nodes.values() if n.unschedulable] == ["node-0001", "node-0002"]
    assert not any(a.get(ANN_STATE) == STATE_CORDONED
                   for a in (n.annotations for n in w.nodes.values()))


def test_busy_and_not_ready_nodes_are_not_cordoned_ahead() -> None:
    w = World(6, policy(maxParallel=2, maxUnavailable=1))
    w.set("node-0003", workloads=("default/train-0",))
    w.set("node-0004", ready=False)
    w.settle(0)
    assert cordoned(w) == ["node-0005", "node-0006"]
    assert not w.nodes["node-0003"].unschedulable


def test_a_cordoned_nodes_start_writes_no_record_and_ready_timeout_runs_from_its_deletion(
) -> None:
    w = World(3, policy(maxParallel=1, maxFailureThreshold=5),
              settings=PlannerSettings(ready_timeout=600))
    w.settle(0)
    w.ready("node-0001")
    w.plan(60)  # node-0002 starts: its deletion alone
    # the old pod deleting (its deletionTimestamp says when it was asked for): in flight
    w.set("node-0002", pod=DriverPod("drv-node-0002-0", OLD_REV, deleting=True,
                                     deletion_requested_at=EPOCH + 60), pod_deleted_at=0.0)
    again = w.plan(61)
    assert again.in_flight == 1 and deletions(again) == []
    assert w.annotation("node-0002", ANN_STATE) == STATE_CORDONED, "no record written"
    assert ANN_DELETED_AT not in w.nodes["node-0002"].annotations
    # gone, the new pod not there yet: the time the controller saw the deletion asked for
    w.set("node-0002", pod=None, pod_deleted_at=EPOCH + 60)
    assert w.plan(659).in_flight == 1
    w.set("node-0002", pod=DriverPod("drv-node-0002-1", NEW_REV, created_at=EPOCH + 65),
          pod_deleted_at=EPOCH + 60)
    w.plan(660)  # readyTimeout from the deletion, not from the new pod's creation
    assert w.annotation("node-0002", ANN_STATE) == "failed"
    assert w.inner["currentFailureRetry"] == 1


def test_after_a_restart_the_new_pods_creation_tells_a_cordoned_nodes_start() -> None:
    w = World(3, policy(maxParallel=1, maxFailureThreshold=5),
              settings=PlannerSettings(ready_timeout=600))
    w.settle(0)
    w.ready("node-0001")
    w.plan(60)
    # a new controller: its index never saw the old pod go; the new pod says when, a little
    # late (readyTimeout runs late by the old pod's termination)
    w.set("node-0002", pod=DriverPod("drv-node-0002-1", NEW_REV, created_at=EPOCH + 70),
          pod_deleted_at=0.0)
    assert w.plan(669).in_flight == 1
    assert ANN_DELETED_AT not in w.nodes["node-0002"].annotations
    w.plan(670)
    assert w.annotation("node-0002", ANN_STATE) == "failed"


def test_controller_restarted_after_the_old_pod_went_records_the_deletion_from_then() -> None:
    w = World(4, policy(maxParallel=1))
    w.settle(0)
    w.ready("node-0001")
    w.plan(60)
    # a new controller finds the old pod gone and no new one yet: nothing says when the
    # deletion was asked for
    w.set("node-0002", pod=None, pod_deleted_at=0.0)
    assert w.annotation("node-0002", ANN_STATE) == STATE_CORDONED
    again = w.plan(61)
    # the node counts in flight (maxParallel 1: nothing else starts), is not deleted again,
    # and its deletion is recorded now, so readyTimeout runs
    assert deletions(again) == []
    assert again.in_flight == 1
    assert w.annotation("node-0002", ANN_STATE) == "upgrading"
    assert w.annotation("node-0002", ANN_DELETED_AT) == format_time(EPOCH + 61)
    assert w.deleted == [("node-0001", NEW_REV), ("node-0002", NEW_REV)]
    w.set("node-0002", pod=DriverPod("drv-node-0002-1", NEW_REV, created_at=EPOCH + 62))
    w.ready("node-0002")
    w.plan(120)
    assert w.annotation("node-0002", ANN_STATE) == "done"
    assert not w.nodes["node-0002"].unschedulable


def test_node_uncordoned_by_someone_after_its_cordon_ahead_is_cordoned_again_at_its_start() -> None:
    w = World(3, policy(maxParallel=1))
    w.settle(0)
    w.set("node-0002", unschedulable=False)
    w.ready("node-0001")
    refill = w.plan(60)
    kinds = [type(a) for a in refill.actions if getattr(a, "node", None) == "node-0002"]
    assert kinds == [AnnotateNode, Cordon, DeleteDriverPod]
    assert w.annotation("node-0002", ANN_WAS_UNSCHEDULABLE) == "false"


def test_rollback_releases_the_nodes_cordoned_ahead() -> None:
    w = World(6, policy(maxParallel=2, fallback="rollback"))
    w.settle(0)
    assert cordoned(w) == ["node-0003", "node-0004"]
    w.pod("node-0001", waiting_reason="ErrImagePull")
    w.plan(60)
    assert w.status["phase"] == "Terminating"
    result = w.plan(60)
    assert of_type(result, Uncordon) == [Uncordon("node-0003"), Uncordon("node-0004")]
    assert cordoned(w) == [] and w.nodes["node-0003"].annotations == {}
    for t in (120, 180):
        w.ready_all_in_flight()
        w.plan(t)
    assert w.status["phase"] == "Idling"
    assert w.ready_on(OLD_REV) == list(w.nodes)
    assert all(not n.unschedulable for n in w.nodes.values())
    assert ("node-0003", NEW_REV) not in w.deleted


def test_a_cordoned_ahead_node_left_from_an_old_rollout_is_released_when_idle() -> None:
    w = World(2, policy())
    w.set("node-0002", unschedulable=True, annotations={
        ANN_STATE: STATE_CORDONED, ANN_TARGET: "elsewhere", ANN_WAS_UNSCHEDULABLE: "false",
        ANN_ATTEMPT: "1"})
    w.payload = dict(OLD_PAYLOAD)
    result = w.plan(0)
    assert of_type(result, Uncordon) == [Uncordon("node-0002")]
    assert w.nodes["node-0002"].annotations == {}


# --------------------------------------------------------------------------- failures


def test_image_pull_failure_is_counted_once_and_retried_after_back_off() -> None:
    settings = PlannerSettings(retry_backoff=30)
    w = World(2, policy(maxFailureThreshold=3), settings=settings)
    w.settle(0)
    w.pod("node-0001", waiting_reason="ErrImagePull")
    result = w.plan(5)
    assert w.inner["currentFailureRetry"] == 1
    assert w.annotation("node-0001", ANN_STATE) == "failed"
    assert result.requeue_at == EPOCH + 35
    w.pod("node-0001", waiting_reason="ImagePullBackOff")
    w.plan(20)
    assert w.inner["currentFailureRetry"] == 1  # the same attempt never counts twice
    assert deletions(w.plan(34)) == []
    result = w.plan(35)
    assert deletions(result) == ["node-0001"]
    assert w.annotation("node-0001", ANN_ATTEMPT) == "2"


def test_crash_loop_is_a_failure() -> None:
    w = World(2, policy(maxFailureThreshold=2))
    w.settle(0)
    w.pod("node-0001", waiting_reason="CrashLoopBackOff", restart_count=3)
    w.plan(90)
    assert w.inner["currentFailureRetry"] == 1
    assert w.annotation("node-0001", ANN_STATE) == "failed"


def test_ready_timeout_is_a_failure() -> None:
    w = World(2, policy(maxFailureThreshold=2), settings=PlannerSettings(ready_timeout=600))
    w.settle(0)
    assert w.plan(599).in_flight == 1
    w.plan(600)
    assert w.inner["currentFailureRetry"] == 1
    assert w.annotation("node-0001", ANN_STATE) == "failed"


def test_without_drain_a_changed_ready_timeout_applies_to_nodes_in_flight_at_the_next_pass(
) -> None:
    """Drain off: a start records no settings (no ``drain-settings``), so the readyTimeout of a
    node in flight is the pass's, the one of the latest commit (docs/rollout.md, "readyTimeout
    and a commit that changes it")."""
    w = World(2, policy(maxFailureThreshold=2), settings=PlannerSettings(ready_timeout=600))
    w.settle(0)
    assert w.plan(100).in_flight == 1
    # a commit lengthens it: the node started at 0 is still in flight at 600 ...
    w.settings = PlannerSettings(ready_timeout=1000)
    assert w.plan(600).in_flight == 1
    assert w.annotation("node-0001", ANN_STATE) == "upgrading"
    # ... a commit shortens it: at the next pass the node has run out (started 700 s ago)
    w.settings = PlannerSettings(ready_timeout=300)
    w.plan(700)
    assert w.annotation("node-0001", ANN_STATE) == "failed"
    assert w.annotation("node-0001", ANN_FAILURE_REASON) == "ReadyTimeout"


def test_failed_node_stays_cordoned_and_unavailable() -> None:
    w = World(3, policy(maxFailureThreshold=5, maxUnavailable=0))
    w.settle(0)
    w.pod("node-0001", waiting_reason="ErrImagePull")
    result = w.plan(1)
    assert w.nodes["node-0001"].unschedulable is True
    assert result.unavailable == 1
    assert deletions(result) == []  # maxUnavailable 0 blocks fresh starts


def test_threshold_reached_with_fallback_pause_pauses_and_names_the_failures() -> None:
    w = World(4, policy(maxParallel=2, maxFailureThreshold=2))
    w.settle(0)
    w.pod("node-0001", waiting_reason="ErrImagePull")
    w.pod("node-0002", waiting_reason="CrashLoopBackOff")
    result = w.plan(10)
    assert w.inner["currentFailureRetry"] == 2
    assert w.inner["currentStepState"] == "StepPaused"
    assert of_type(result, SetPolicyPause) == [SetPolicyPause(True)]
    cond = w.conditions()["BatchFailed"]
    assert cond["reason"] == "FailureThresholdReached"
    assert "node-0001" in cond["message"] and "node-0002" in cond["message"]
    assert deletions(w.plan(1000)) == []
    # a person fixes the image and resumes: counter resets, failed nodes retried at once
    w.policy_raw["pause"] = False
    result = w.plan(1001)
    assert w.inner["currentFailureRetry"] == 0
    assert sorted(deletions(result)) == ["node-0001", "node-0002"]


def test_failures_after_the_threshold_are_not_counted() -> None:
    w = World(4, policy(maxParallel=3, maxFailureThreshold=1))
    w.settle(0)
    w.pod("node-0001", waiting_reason="ErrImagePull")
    w.plan(10)
    w.pod("node-0002", waiting_reason="ErrImagePull")
    w.plan(20)
    assert w.inner["currentFailureRetry"] == 1


def test_counter_resets_at_the_start_of_each_batch() -> None:
    w = World(4, policy(upgradeSteps=steps((2, 0), ("100%", 0)), maxParallel=1,
                        maxFailureThreshold=3))
    w.settle(0)
    w.pod("node-0001", waiting_reason="ErrImagePull")
    w.plan(10)
    assert w.inner["currentFailureRetry"] == 1
    w.pod("node-0001", waiting_reason=None, ready=True)  # the image appeared: pod recovered
    w.plan(20)
    w.ready_all_in_flight()
    w.plan(40)
    w.ready_all_in_flight()
    w.plan(100)
    assert w.inner["currentStepIndex"] == 2
    assert w.inner["currentFailureRetry"] == 0


def test_threshold_with_fallback_rollback_moves_everything_back() -> None:
    w = World(4, policy(upgradeSteps=steps((3, 0), ("100%", 0)), maxParallel=3,
                        fallback="rollback"))
    w.settle(0)
    w.ready("node-0001", "node-0002")
    w.pod("node-0003", waiting_reason="ErrImagePull")
    result = w.plan(60)
    assert w.status["phase"] == "Terminating"
    kinds = [type(a) for a in result.actions]
    assert kinds.index(RestorePayload) < kinds.index(SetDaemonSetImage)
    assert w.payload["version"] == OLD_PAYLOAD["version"]
    assert w.ds.current_image == OLD_IMAGE
    result = w.plan(60)
    # failed node first, then the upgraded ones, within maxParallel 3
    assert deletions(result) == ["node-0003", "node-0001", "node-0002"]
    w.ready_all_in_flight()
    w.plan(120)
    assert w.status["phase"] == "Idling" and w.status["upgrading"] is False
    assert w.inner["currentStepState"] == "Completed"
    assert w.inner["currentStepIndex"] == 1
    rolled = w.conditions()["RolledBack"]
    assert rolled["reason"] == "FailureThresholdReached" and NEW_VERSION in rolled["message"]
    # the planner's own record of what it rolled back (lastRollout reads it,
    # docs/configuration.md#the-completion-record)
    assert w.status["rolledBackSpec"]["payload"]["version"] == NEW_VERSION
    assert w.status["lastAppliedSpec"]["payload"]["version"] == OLD_PAYLOAD["version"]
    assert w.ready_on(OLD_REV) == list(w.nodes)
    assert all(not n.unschedulable for n in w.nodes.values())


def test_enable_rollout_false_mid_rollout_disables_after_moving_back() -> None:
    w = World(4, policy(maxParallel=2))
    w.settle(0)
    w.ready("node-0001")
    w.plan(60)
    w.policy_raw["enableRollout"] = False
    w.plan(70)
    assert w.status["phase"] == "Disabling" and w.status["upgrading"] is True
    w.plan(70)
    for t in (130, 190, 250):
        w.ready_all_in_flight()
        w.plan(t)
    assert w.status["phase"] == "Disabled" and w.status["upgrading"] is False
    assert w.conditions()["RolledBack"]["reason"] == "RolloutDisabled"
    assert w.ready_on(OLD_REV) == list(w.nodes)


def test_rollback_honours_max_parallel() -> None:
    w = World(6, policy(upgradeSteps=steps((4, 0), ("100%", 0)), maxParallel="50%"))
    w.settle(0)
    w.ready_all_in_flight()
    w.plan(60)
    w.ready_all_in_flight()
    w.plan(120)  # 4 upgraded, step 2 started 1 node (maxParallel 50% of 2)
    w.policy_raw["enableRollout"] = False
    w.plan(130)
    result = w.plan(130)
    assert result.in_flight <= 2


# --------------------------------------------------------------------------- restart safety


def test_no_node_is_deleted_twice_when_the_status_write_was_lost() -> None:
    w = World(3, policy(maxParallel=1))
    w.settle(0)
    assert w.deleted == [("node-0001", NEW_REV)]
    w.plan(5, write_status=False)  # crash: status never written
    w.plan(5, write_status=False)
    assert w.deleted == [("node-0001", NEW_REV)]
    assert w.annotation("node-0001", ANN_TARGET) == NEW_REV


def test_recorded_move_whose_delete_never_happened_is_finished() -> None:
    w = World(2, policy())
    w.plan(0)
    snapshot = w.snapshot()
    result = plan(snapshot, EPOCH + 0)
    annotate = result.actions[0]
    w.apply([annotate])  # crash right after the annotation
    assert w.deleted == []
    result = w.plan(1)
    assert deletions(result) == ["node-0001"]
    assert w.annotation("node-0001", ANN_ATTEMPT) == "1"


def _failed_once(fallback: str) -> World:
    """node-0001 failed its first attempt (1 failure of 2): the next pass after the back-off
    retries it."""
    w = World(3, policy(maxParallel=1, maxFailureThreshold=2, fallback=fallback))
    w.settle(0)
    w.plan(1)
    assert deletions_so_far(w) == ["node-0001"]
    w.pod("node-0001", waiting_reason="CrashLoopBackOff", restart_count=3)
    w.plan(2)
    assert w.annotation("node-0001", ANN_STATE) == "failed"
    return w


def deletions_so_far(w: World) -> list[str]:
    return [name for name, _ in w.deleted]


@pytest.mark.parametrize("fallback", ["rollback", "pause"])
def test_a_retry_killed_between_its_record_and_its_delete_is_not_a_second_failure(
        fallback: str) -> None:
    """The retry's record (attempt 2, deleted-at) landed, its deletion did not: the old pod,
    on the target revision and still crash-looping, is the pod the record names; it is deleted
    (decision 15), not counted as the retry's failure (which reached maxFailureThreshold and
    rolled the whole fleet back, or paused it)."""
    w = _failed_once(fallback)
    retry = w.plan(100, apply=False, write_status=False)
    first = retry.actions[0]
    assert isinstance(first, AnnotateNode) and first.node == "node-0001"
    assert first.annotations[ANN_DELETED_POD] == w.nodes["node-0001"].pod.name
    w.apply([first])  # killed here: the record landed, the deletion did not, nor the status
    after = w.plan(101)
    assert "NodeFailed" not in [a.reason for a in of_type(after, RecordEvent)]
    assert of_type(after, RestorePayload) == [] and of_type(after, SetPolicyPause) == []
    assert deletions(after) == ["node-0001"]  # the recorded deletion, carried out
    assert w.status["phase"] == "Progressing"
    assert w.annotation("node-0001", ANN_ATTEMPT) == "2"
    assert (w.annotation("node-0001", "gpu.metax-tech.com/failures") or "").endswith("|1")
    w.ready("node-0001")  # the retry's new pod: judged, and done
    w.plan(102)
    assert w.annotation("node-0001", ANN_STATE) == "done"
    assert w.annotation("node-0001", ANN_DELETED_POD) is None


def test_planning_twice_on_the_same_snapshot_gives_the_same_plan() -> None:
    w = World(5, policy(maxParallel=2, upgradeSteps=steps((2, 1000), ("100%", None))))
    w.settle(0)
    snap = w.snapshot()
    assert plan(snap, EPOCH + 3) == plan(snap, EPOCH + 3)


def test_nothing_changed_means_no_status_change_and_same_update_time() -> None:
    w = World(3, policy())
    w.settle(0)
    stamp = w.inner["lastUpdateTime"]
    result = w.plan(30)
    assert result.changed is False and result.actions == ()
    assert w.inner["lastUpdateTime"] == stamp
    w.ready("node-0001")
    result = w.plan(31)
    assert result.changed is True
    assert parse_time(w.inner["lastUpdateTime"]) == EPOCH + 31


def test_enable_rollout_without_steps_rolls_out_in_one_batch() -> None:
    w = World(3, policy(upgradeSteps=[], maxParallel=3))
    result = w.settle(0)
    assert len(deletions(result)) == 3
    assert w.inner["currentUpgradeReplicas"] == 3


def test_garbage_annotations_do_not_break_the_planner() -> None:
    w = World(2, policy(maxFailureThreshold=3))
    w.settle(0)
    w.set("node-0001", annotations={**w.nodes["node-0001"].annotations,
                                    "gpu.metax-tech.com/deleted-at": "yesterday",
                                    "gpu.metax-tech.com/attempt": "x"})
    result = w.plan(10)
    assert result.in_flight == 1


def test_restored_payload_without_its_status_continues_the_rollback() -> None:
    w = World(3, policy(maxParallel=2, fallback="rollback"))
    w.settle(0)
    w.ready("node-0001")
    w.pod("node-0002", waiting_reason="ErrImagePull")
    w.plan(60, write_status=False)  # RestorePayload + SetDaemonSetImage done, status lost
    assert w.payload["version"] == OLD_PAYLOAD["version"]
    assert w.status["phase"] == "Progressing"
    result = w.settle(60)
    assert w.status["phase"] == "Terminating"
    # what the lost write said, read back from the nodes' failure records
    assert w.inner["currentFailureRetry"] == 1
    assert w.conditions()["RollingBack"]["message"] == (
        "step 1: 1 failures reached maxFailureThreshold 1; spec.driver.payload is back on the "
        "previous version")
    assert SetDaemonSetImage(NEW_IMAGE) not in result.actions  # the new version is not re-applied
    assert w.ds.current_image == OLD_IMAGE
    for t in (120, 180):
        w.ready_all_in_flight()
        w.plan(t)
    assert w.status["phase"] == "Idling"
    assert w.conditions()["RolledBack"]["reason"] == "FailureThresholdReached"
    assert w.ready_on(OLD_REV) == list(w.nodes)


def test_a_person_reverting_the_version_mid_rollout_rolls_back() -> None:
    w = World(2, policy())
    w.settle(0)
    w.payload = dict(OLD_PAYLOAD)
    result = w.settle(10)
    assert w.status["phase"] == "Terminating"
    assert deletions(result) == ["node-0001"]
    w.ready_all_in_flight()
    w.plan(70)
    assert w.status["phase"] == "Idling"
    assert w.conditions()["RolledBack"]["reason"] == "PayloadReverted"


def test_rollback_waits_for_a_node_that_joined_on_the_old_template() -> None:
    w = World(2, policy(maxParallel=2))
    w.settle(0)
    w.policy_raw["enableRollout"] = False
    w.settle(10)
    w.nodes["node-0003"] = RolloutNode(
        "node-0003", pod=DriverPod("drv-late", OLD_REV, created_at=EPOCH + 10)
    )
    w.ready("node-0001", "node-0002")
    w.plan(70)
    assert w.status["phase"] == "Disabling"  # node-0003's driver is still starting
    w.ready("node-0003")
    w.plan(75)
    assert w.status["phase"] == "Disabled"
