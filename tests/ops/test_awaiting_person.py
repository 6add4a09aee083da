"""``gpu_reconciler_rollout_awaiting_person_timestamp_seconds`` (issue 34, item 3): when the
rollout began to wait for a person at a gate or a fallback, as the sync role reads it from the
ClusterOperator's status, which the real planner writes; the alert GpuRolloutAwaitingPerson
subtracts it from time() (its promtool tests are in deploy/monitoring/alerts_test.yaml)."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from reconciler.ops.metrics import Metrics
from reconciler.rollout.simulator import EPOCH
from reconciler.sync.rollout_metrics import RolloutMetrics, awaiting_person
from reconciler.timefmt import format_time
from tests.rollout.world import World, policy, steps

NAME = "gpu_reconciler_rollout_awaiting_person_timestamp_seconds"


def waits(metrics: Metrics, cluster: str = "prod-a") -> dict[str, float]:
    return {s.labels["wait"]: s.value
            for family in text_string_to_metric_families(metrics.exposition().decode())
            for s in family.samples if s.name == NAME and s.labels["cluster"] == cluster}


def observe(rollout: RolloutMetrics, world: World) -> None:
    """What the sync role's loop hands over: the live ClusterOperator."""
    rollout.observe({"spec": {"driver": {"upgradePolicy": world.policy_raw}},
                     "status": {"upgradeStatus": world.status}})


def test_a_gate_is_waited_at_from_when_the_step_finished_until_a_person_confirms() -> None:
    metrics = Metrics()
    rollout = RolloutMetrics(metrics, cluster="prod-a")
    w = World(4, policy(upgradeSteps=steps((1, None), ("100%", 0)), maxParallel=4))
    w.settle(0)
    observe(rollout, w)
    assert waits(metrics) == {"gate": 0, "fallback": 0}
    w.ready("node-0001")
    w.plan(60)  # step 1 done: the gate opens
    w.plan(3600)  # still waiting an hour later: the start does not move
    observe(rollout, w)
    assert w.conditions()["ManualGate"]["status"] == "True"
    assert waits(metrics) == {"gate": EPOCH + 60, "fallback": 0}
    w.policy_raw["pause"] = False  # a person merges pause: false
    w.settle(3700)
    observe(rollout, w)
    assert waits(metrics) == {"gate": 0, "fallback": 0}


def test_a_fallback_pause_is_waited_at_until_a_person_resumes() -> None:
    metrics = Metrics()
    rollout = RolloutMetrics(metrics, cluster="prod-a")
    w = World(4, policy(maxParallel=2, maxFailureThreshold=2))
    w.settle(0)
    w.pod("node-0001", waiting_reason="ErrImagePull")
    w.pod("node-0002", waiting_reason="CrashLoopBackOff")
    w.plan(10)
    observe(rollout, w)
    assert w.conditions()["BatchFailed"]["status"] == "True"
    assert waits(metrics) == {"gate": 0, "fallback": EPOCH + 10}
    w.policy_raw["pause"] = False
    w.plan(900)
    observe(rollout, w)
    assert "BatchFailed" not in w.conditions()
    assert waits(metrics) == {"gate": 0, "fallback": 0}


def condition(ctype: str, status: str, reason: str = "R", at: Any = None) -> dict[str, Any]:
    return {"type": ctype, "status": status, "reason": reason,
            "lastTransitionTime": format_time(EPOCH + 5) if at is None else at}


@pytest.mark.parametrize(("conditions", "expected"), [
    ([], {}),
    ([condition("ManualGate", "True", "WaitingForConfirmation")], {"gate": EPOCH + 5}),
    ([condition("ManualGate", "False", "Confirmed")], {}),
    # confirmed, nodes that joined meanwhile not Ready yet: waiting for nodes, not a person
    ([condition("ManualGate", "False", "ConfirmedPendingNodes")], {}),
    ([condition("BatchFailed", "True", "FailureThresholdReached")], {"fallback": EPOCH + 5}),
    ([condition("BatchFailed", "True"), condition("ManualGate", "True")],
     {"gate": EPOCH + 5, "fallback": EPOCH + 5}),
    ([condition("Progressing", "True"), condition("RolledBack", "True"),
      condition("HealthCheckFailed", "True")], {}),
    # a time that cannot be read: waiting since ever, so the alert fires instead of staying
    # silent (a Unix time of 0 would read as "not waiting")
    ([condition("ManualGate", "True", at="yesterday")], {"gate": 1.0}),
    ([condition("ManualGate", "True", at="")], {"gate": 1.0}),
], ids=["none", "gate", "gate-confirmed", "gate-confirmed-pending", "fallback", "both",
        "others", "unreadable-time", "no-time"])
def test_awaiting_person_from_conditions(conditions: list[dict[str, Any]],
                                         expected: dict[str, float]) -> None:
    assert awaiting_person(conditions) == expected
