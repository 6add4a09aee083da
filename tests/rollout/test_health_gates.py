"""The health gates of docs/health.md in the pure planner, on a virtual clock: a node is upgraded
only once its pod is Ready and its node checks passed; a step's checks come before StepReady."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as hs

from reconciler.health.checks import (
    HealthConfig,
    HealthRecord,
    NoSample,
    QueryError,
    Reading,
)
from reconciler.names import (
    ANN_FAILURE_REASON,
    ANN_HEALTH,
    ANN_HEALTH_FAILURE,
    ANN_STATE,
    ANN_TARGET,
    STATE_CORDONED,
    STATE_DONE,
    STATE_UPGRADING,
)
from reconciler.rollout.actions import RecordEvent, SetPolicyPause
from reconciler.rollout.health_gate import pending_queries
from reconciler.rollout.model import (
    DriverPod,
    HealthInput,
    HealthReading,
    PlannerSettings,
    RolloutNode,
    RolloutSnapshot,
)
from reconciler.rollout.planner import Plan
from reconciler.rollout.simulator import EPOCH

from .world import NEW_REV, World, deletions, of_type, policy, steps

HEALTH: dict[str, Any] = {
    "prometheus": {"url": "http://127.0.0.1:9090"},
    "interval": "10s",
    "nodeChecks": [{"name": "gpus-available",
                    "query": 'min(mx_gpu_state{Hostname="{{node}}"})',
                    "expect": "== 1", "within": "60s"}],
    "stepChecks": [{"name": "no-throttling",
                    "query": 'max(mx_clk_thr{Hostname=~"{{nodes}}"}) or vector(0)',
                    "expect": "== 0", "for": "20s"}],
}


class HealthWorld(World):
    """The World with a Prometheus stand-in: before each plan, every pending query is answered
    the way the controller would feed it (``node_values`` per node, ``step_value``)."""

    def __init__(self, n: int, policy_raw: Mapping[str, Any], *,
                 health: Mapping[str, Any] = HEALTH, error: str | None = None,
                 **kw: Any) -> None:
        super().__init__(n, policy_raw, **kw)
        self.config = HealthConfig.from_obj(health) if error is None else None
        self.error = error
        self.node_values: dict[str, Reading] = {}
        self.default_node_value: Reading = 1.0
        self.step_value: Reading = 0.0
        self.readings: tuple[dict[str, dict[str, HealthReading]], dict[str, HealthReading]] = (
            {}, {})
        self.queries: list[str] = []

    def snapshot(self) -> RolloutSnapshot:
        base = World.snapshot(self)
        nodes, step = self.readings
        return RolloutSnapshot(base.nodes, base.daemonset, base.payload, base.policy,
                               base.status, HealthInput(self.config, nodes, step, self.error))

    def plan(self, t: float, *, apply: bool = True, write_status: bool = True) -> Plan:
        self.readings = ({}, {})
        base = World.snapshot(self)
        bare = RolloutSnapshot(base.nodes, base.daemonset, base.payload, base.policy,
                               base.status, HealthInput(self.config, error=self.error))
        for q in pending_queries(bare):
            self.queries.append(q.query)
            if q.node is not None:
                value = self.node_values.get(q.node, self.default_node_value)
                self.readings[0].setdefault(q.node, {})[q.check] = HealthReading(EPOCH + t,
                                                                                value)
            else:
                self.readings[1][q.check] = HealthReading(EPOCH + t, self.step_value)
        return super().plan(t, apply=apply, write_status=write_status)


def events(result: Plan, reason: str) -> list[RecordEvent]:
    return [e for e in of_type(result, RecordEvent) if e.reason == reason]


def started(w: World) -> HealthWorld:
    assert isinstance(w, HealthWorld)
    w.plan(0)
    w.plan(0)
    return w


# --------------------------------------------------------------------------- node checks


def test_ready_node_stays_in_flight_and_uncounted_until_its_node_check_passes() -> None:
    w = started(HealthWorld(3, policy()))
    assert w.deleted == [("node-0001", NEW_REV)]
    w.ready("node-0001")
    first = w.plan(1)  # Ready: the checks start now (record stored), no reading yet
    assert deletions(first) == [] and first.in_flight == 1
    assert w.inner["totalUpgradeReadyReplicas"] == 0
    assert w.inner["CurrentUpgradeReadyReplicas"] == 0
    assert HealthRecord.from_text(w.annotation("node-0001", ANN_HEALTH), 0).started == EPOCH + 1
    assert first.requeue_at == EPOCH + 11  # the next reading, one interval later
    passed = w.plan(11)
    assert events(passed, "HealthCheckPassed")
    assert w.annotation("node-0001", ANN_STATE) == STATE_DONE
    assert w.inner["totalUpgradeReadyReplicas"] == 1
    assert deletions(passed) == ["node-0002"]  # the slot is free only now


def test_a_node_started_from_its_cordon_ahead_is_checked_before_it_counts() -> None:
    w = started(HealthWorld(3, policy(maxParallel=1)))
    assert w.annotation("node-0002", ANN_STATE) == STATE_CORDONED
    w.ready("node-0001")
    w.plan(1)
    refill = w.plan(11)  # node-0001 passed; node-0002 starts by its deletion alone
    assert deletions(refill) == ["node-0002"]
    assert w.annotation("node-0002", ANN_STATE) == STATE_CORDONED, "no record after it"
    w.ready("node-0002")
    first = w.plan(12)
    assert first.in_flight == 1 and w.inner["totalUpgradeReadyReplicas"] == 1
    assert HealthRecord.from_text(w.annotation("node-0002", ANN_HEALTH), 0).started == EPOCH + 12
    w.plan(22)
    assert w.annotation("node-0002", ANN_STATE) == STATE_DONE
    assert w.inner["totalUpgradeReadyReplicas"] == 2


def test_false_reading_before_within_waits_and_after_within_fails_the_node() -> None:
    # a node that failed a check is unavailable (docs/rollout.md#upgrading-one-node): maxUnavailable
    # 1 lets the next start
    w = started(HealthWorld(3, policy(maxFailureThreshold=2, maxUnavailable=1)))
    w.node_values["node-0001"] = 0.0
    w.ready("node-0001")
    w.plan(1)
    waiting = w.plan(30)
    assert not events(waiting, "NodeFailed") and waiting.in_flight == 1
    assert deletions(waiting) == []
    failed = w.plan(61)  # 60 s after the pod turned Ready
    assert [e.node for e in events(failed, "NodeFailed")] == ["node-0001"]
    [event] = events(failed, "HealthCheckFailed")
    assert "gpus-available" in event.message and "node-0001" in event.message
    assert "value 0" in event.message
    assert w.annotation("node-0001", ANN_FAILURE_REASON) == "HealthCheckFailed"
    assert w.inner["currentFailureRetry"] == 1
    assert w.inner["totalUpgradeReadyReplicas"] == 0
    assert deletions(failed) == ["node-0002"]  # below the threshold: the batch goes on


def test_node_check_failures_at_the_threshold_pause_with_a_health_condition() -> None:
    w = started(HealthWorld(4, policy(maxFailureThreshold=1)))
    w.node_values["node-0001"] = 0.0
    w.ready("node-0001")
    w.plan(1)
    result = w.plan(61)
    cond = w.conditions()
    assert cond["BatchFailed"]["status"] == "True"
    health = cond["HealthCheckFailed"]
    assert health["status"] == "True"
    for part in ("gpus-available", "node-0001", "value 0"):
        assert part in health["message"]
    assert SetPolicyPause(True) in result.actions
    assert w.inner["currentStepState"] == "StepPaused"
    again = w.plan(200)
    assert deletions(again) == []
    assert [n for n, _ in w.deleted] == ["node-0001"]  # no node outside the canary touched


def test_node_check_failure_with_rollback_rolls_the_batch_back() -> None:
    w = started(HealthWorld(3, policy(fallback="rollback")))
    w.node_values["node-0001"] = 0.0
    w.ready("node-0001")
    w.plan(1)
    w.plan(61)
    assert w.status["phase"] == "Terminating"
    assert w.conditions()["HealthCheckFailed"]["status"] == "True"


def test_no_answer_starts_nothing_fails_nothing_and_names_the_check_and_since() -> None:
    w = started(HealthWorld(4, policy(maxParallel=2, maxUnavailable=2)))
    assert [n for n, _ in w.deleted] == ["node-0001", "node-0002"]
    w.ready("node-0001")
    w.node_values["node-0001"] = QueryError(None, "connection refused")
    w.plan(1)
    w.ready("node-0002")
    for t in (11, 21, 100, 400):
        result = w.plan(t)
        assert not events(result, "NodeFailed")
        assert deletions(result) == []
        message = w.inner["message"]
        assert "gpus-available" in message and "waiting since" in message
        assert "1970" not in message and "node-0001" in message
    assert w.inner["currentFailureRetry"] == 0
    w.node_values["node-0001"] = 1.0
    back = w.plan(410)
    assert deletions(back)  # Prometheus answers again: the rollout goes on


def test_no_sample_is_no_answer_as_well() -> None:
    w = started(HealthWorld(2, policy()))
    w.node_values["node-0001"] = NoSample()
    w.ready("node-0001")
    w.plan(1)
    result = w.plan(500)
    assert not events(result, "NodeFailed") and result.in_flight == 1


def test_restarted_planner_resumes_the_stored_timer() -> None:
    w = started(HealthWorld(2, policy()))
    w.node_values["node-0001"] = 0.0
    w.ready("node-0001")
    w.plan(1)
    stored = w.annotation("node-0001", ANN_HEALTH)
    w.plan(40)
    assert w.annotation("node-0001", ANN_HEALTH) == stored  # a false reading changes no timer
    # a new planner (no memory) still fails it 60 s after Ready, not 60 s after its start
    result = w.plan(61)
    assert events(result, "NodeFailed")


def test_retry_after_a_health_failure_runs_the_checks_afresh() -> None:
    w = started(HealthWorld(2, policy(maxFailureThreshold=3, maxUnavailable=1),
                            settings=PlannerSettings(retry_backoff=5)))
    w.node_values["node-0001"] = 0.0
    w.ready("node-0001")
    w.plan(1)
    w.plan(61)
    assert w.annotation("node-0001", ANN_HEALTH_FAILURE)
    w.node_values["node-0001"] = 1.0
    # node-0002 started meanwhile; once it is Ready and passed, the retry gets a slot
    w.ready("node-0002")
    w.plan(62)
    retry = w.plan(72)
    assert "node-0001" in deletions(retry)
    assert w.annotation("node-0001", ANN_HEALTH) is None
    assert w.annotation("node-0001", ANN_HEALTH_FAILURE) is None


# --------------------------------------------------------------------------- nodes joining


def join(w: World, name: str, *, ready: bool = True) -> None:
    """A node joins mid-rollout: the DaemonSet gives it the current (new) template."""
    w.nodes[name] = RolloutNode(name, pod=DriverPod(f"drv-{name}-join", w.ds.current_revision,
                                                    ready=ready))


def test_node_joining_on_the_new_driver_is_checked_in_flight_before_it_counts() -> None:
    w = started(HealthWorld(2, policy(maxParallel=2, maxUnavailable=1,
                                      upgradeSteps=steps((1, 0), ("100%", 0)))))
    assert [n for n, _ in w.deleted] == ["node-0001"]
    join(w, "node-0003")
    seen = w.plan(5)
    # recorded as moved to the target (no pod deleted for it), its checks start now
    assert w.annotation("node-0003", ANN_STATE) == STATE_UPGRADING
    assert w.annotation("node-0003", ANN_TARGET) == NEW_REV
    assert HealthRecord.from_text(w.annotation("node-0003", ANN_HEALTH), 0).started == EPOCH + 5
    assert seen.in_flight == 2 and w.inner["totalUpgradeReadyReplicas"] == 0
    assert "node-0003" not in deletions(seen) and ("node-0003", NEW_REV) not in w.deleted
    asked = w.plan(15)  # one interval later its query is sent and passes
    assert any('Hostname="node-0003"' in q for q in w.queries)
    assert [e.node for e in events(asked, "HealthCheckPassed")] == ["node-0003"]
    assert w.annotation("node-0003", ANN_STATE) == STATE_DONE
    assert w.inner["totalUpgradeReadyReplicas"] == 1


def test_node_joining_with_unusable_gpus_fails_its_check_and_pauses_the_batch() -> None:
    w = started(HealthWorld(3, policy(maxFailureThreshold=1, maxUnavailable=1)))
    join(w, "node-0004")
    w.node_values["node-0004"] = 0.0
    w.plan(1)
    assert w.annotation("node-0004", ANN_HEALTH) is not None
    waiting = w.plan(30)
    assert not events(waiting, "NodeFailed")
    assert w.inner["totalUpgradeReadyReplicas"] == 0
    failed = w.plan(61)  # `within` after it was first seen Ready on the new driver
    assert [e.node for e in events(failed, "NodeFailed")] == ["node-0004"]
    assert w.annotation("node-0004", ANN_FAILURE_REASON) == "HealthCheckFailed"
    health = w.conditions()["HealthCheckFailed"]
    assert health["status"] == "True" and "node-0004" in health["message"]
    assert SetPolicyPause(True) in failed.actions
    assert w.inner["currentStepState"] == "StepPaused"


def test_node_joining_while_it_is_not_ready_is_checked_once_ready() -> None:
    w = started(HealthWorld(2, policy(maxUnavailable=1)))
    join(w, "node-0003", ready=False)
    w.plan(1)
    assert w.annotation("node-0003", ANN_STATE) is None  # pending like any joiner
    w.ready("node-0003")
    w.plan(2)
    assert w.annotation("node-0003", ANN_STATE) == STATE_UPGRADING
    assert HealthRecord.from_text(w.annotation("node-0003", ANN_HEALTH), 0).started == EPOCH + 2


def test_joined_node_passing_its_checks_takes_part_in_the_step_checks() -> None:
    w = started(HealthWorld(1, policy(maxUnavailable=1)))
    join(w, "node-0002")
    w.ready("node-0001")
    t = run_step(w)
    assert w.annotation("node-0002", ANN_STATE) == STATE_DONE
    for later in (t, t + 10, t + 20):
        w.plan(later)
    # the step checks' {{nodes}} name the joined node beside the moved one
    assert any('"node-0001|node-0002"' in q for q in w.queries), w.queries
    assert w.inner["currentStepState"] == "Completed"


def test_invalid_health_section_fails_closed_no_node_starts() -> None:
    w = HealthWorld(3, policy(), error="reconciler.yaml:5:14: health.nodeChecks[0].expect: bad")
    w.plan(0)
    result = w.plan(0)
    assert deletions(result) == []
    assert "reconciler.yaml:5:14" in w.inner["message"]


def test_without_health_checks_no_health_key_is_written() -> None:
    w = World(2, policy())
    w.plan(0)
    w.plan(0)
    w.ready_all_in_flight()
    w.plan(1)
    assert "health" not in w.status


# --------------------------------------------------------------------------- step checks


def run_step(w: HealthWorld, t: float = 1) -> float:
    """Ready and pass every started node until the step's target is reached."""
    for _ in range(20):
        w.ready_all_in_flight()
        w.plan(t)
        t += 10
        if w.inner["totalUpgradeReadyReplicas"] >= w.inner["currentUpgradeReplicas"] and (
            w.inner["currentUpgradeReplicas"]
        ):
            return t
    raise AssertionError(w.status)


def test_step_check_must_hold_for_its_duration_before_the_step_is_done() -> None:
    w = started(HealthWorld(4, policy(upgradeSteps=steps((2, 0), ("100%", 0)),
                                      maxParallel=2)))
    t = run_step(w)
    assert w.inner["currentStepIndex"] == 1 and w.inner["currentStepState"] == "StepUpgrade"
    w.plan(t)  # first true reading: the hold begins
    assert w.inner["currentStepIndex"] == 1
    w.plan(t + 10)
    assert w.inner["currentStepIndex"] == 1  # 10 s of 20
    result = w.plan(t + 20)
    assert events(result, "HealthCheckPassed")
    assert w.inner["currentStepIndex"] == 2
    assert any('"node-0001|node-0002"' in q for q in w.queries)


def test_step_check_without_answer_restarts_its_hold() -> None:
    w = started(HealthWorld(2, policy(upgradeSteps=steps((1, 0), ("100%", 0)))))
    t = run_step(w)
    w.plan(t)
    w.step_value = NoSample()
    w.plan(t + 10)
    assert "no-throttling" in w.inner["message"]
    w.step_value = 0.0
    w.plan(t + 20)
    w.plan(t + 30)
    assert w.inner["currentStepIndex"] == 1  # the hold restarted at t + 20
    w.plan(t + 40)
    assert w.inner["currentStepIndex"] == 2


def test_false_step_check_pauses_the_batch_at_once_with_the_check_value_and_query() -> None:
    w = started(HealthWorld(4, policy(upgradeSteps=steps((1, 0), ("100%", 0)))))
    w.step_value = 3.0
    t = run_step(w)
    result = w.plan(t)
    cond = w.conditions()["HealthCheckFailed"]
    assert cond["status"] == "True"
    assert "no-throttling" in cond["message"] and "value 3" in cond["message"]
    assert "mx_clk_thr" in cond["message"]
    assert w.conditions()["BatchFailed"]["status"] == "True"
    assert SetPolicyPause(True) in result.actions
    assert w.inner["currentStepState"] == "StepPaused"
    w.plan(t + 100)
    assert [n for n, _ in w.deleted] == ["node-0001"]


def test_false_step_check_with_rollback_falls_back_at_once() -> None:
    w = started(HealthWorld(3, policy(upgradeSteps=steps((1, 0), ("100%", 0)),
                                      fallback="rollback")))
    w.step_value = 1.0
    t = run_step(w)
    w.plan(t)
    assert w.status["phase"] == "Terminating"
    assert w.conditions()["HealthCheckFailed"]["status"] == "True"


def test_resume_after_a_step_check_failure_runs_the_step_checks_again() -> None:
    w = started(HealthWorld(2, policy(upgradeSteps=steps((1, 0), ("100%", 0)))))
    w.step_value = 1.0
    t = run_step(w)
    w.plan(t)
    w.step_value = 0.0
    w.policy_raw["pause"] = False
    w.plan(t + 10)
    assert "HealthCheckFailed" not in w.conditions()
    w.plan(t + 20)
    w.plan(t + 40)
    assert w.inner["currentStepIndex"] == 2


def test_status_carries_each_checks_last_value_and_verdict() -> None:
    w = started(HealthWorld(2, policy()))
    w.ready("node-0001")
    w.plan(1)
    w.plan(11)
    checks = w.status["health"]["checks"]
    assert checks["gpus-available"]["state"] == "Passed"
    assert checks["gpus-available"]["value"] == "1"
    assert checks["gpus-available"]["node"] == "node-0001"


# --------------------------------------------------------------------------- the property


@settings(max_examples=60, deadline=None)
@given(
    n=hs.integers(2, 6),
    unhealthy=hs.sets(hs.integers(1, 6)),
    parallel=hs.integers(1, 3),
    events_=hs.lists(hs.tuples(hs.integers(1, 6), hs.integers(1, 40)), max_size=25),
)
def test_an_unhealthy_node_never_counts_as_upgraded(
    n: int, unhealthy: set[int], parallel: int, events_: list[tuple[int, int]]
) -> None:
    w = HealthWorld(n, policy(maxParallel=parallel, maxUnavailable=parallel,
                              maxFailureThreshold=n + 1),
                    settings=PlannerSettings(retry_backoff=5))
    bad = {f"node-{i:04d}" for i in unhealthy if i <= n}
    for name in bad:
        w.node_values[name] = 0.0
    t = 0.0
    w.plan(t)
    for index, step in events_:
        t += step
        name = f"node-{min(index, n):04d}"
        pod = w.nodes[name].pod
        if pod is not None and pod.revision == NEW_REV:
            w.ready(name)
        w.plan(t)
        healthy_ready = [
            m for m in w.ready_on(NEW_REV) if m not in bad
        ]
        assert all(w.annotation(m, ANN_STATE) != STATE_DONE for m in bad)
        assert w.inner.get("totalUpgradeReadyReplicas", 0) <= len(healthy_ready)
        assert w.inner.get("CurrentUpgradeReadyReplicas", 0) <= len(healthy_ready)


def test_ten_thousand_nodes_waiting_for_an_answer_keep_the_status_small() -> None:
    # docs/rollout.md#scale: a wave of 5,000 nodes without an answer names a few of them, not all,
    # so the status write stays far below the API server's object size limit (1.5 MiB in etcd)
    w = started(HealthWorld(10_000, policy(maxParallel="50%", maxUnavailable="50%")))
    assert len(w.deleted) == 5_000
    w.default_node_value = QueryError(None, "connection refused")
    w.ready_all_in_flight()
    w.plan(1)
    result = w.plan(11)
    assert deletions(result) == [] and result.in_flight == 5_000
    message = w.inner["message"]
    limit = PlannerSettings().message_node_limit
    assert message.count("gpus-available") == limit
    assert message.endswith(f"and {5_000 - limit} more")
    assert len(json.dumps(w.status)) < 16 * 1024
