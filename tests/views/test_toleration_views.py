"""Nodes a step's toleration left behind (docs/rollout.md#failures-tolerated-in-a-step) in the read
model: the node state ``tolerated``, ``reconciler status`` (the nodes, each step's toleration, the
``FailuresTolerated`` condition) and the dashboard (the map, the steps)."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.cli.status import _render
from reconciler.dashboard.model import ClusterFacts, build_view
from reconciler.names import (
    ANN_FAILED_AT,
    ANN_FAILURE_REASON,
    ANN_FAILURE_TOLERATED,
    ANN_STATE,
    ANN_TARGET,
    ANN_WAS_UNSCHEDULABLE,
)
from reconciler.sync.status_view import report
from reconciler.views.nodes import (
    NODE_STATES,
    STATE_INDEX,
    NodeFacts,
    PodFacts,
    classify,
    classify_all,
    domain_progress,
)

OLD, NEW = "rev-old", "rev-new"
NOW = 1_800_000_000.0
RACK = "example.com/rack"


def left_behind(target: str = NEW, step: int = 1, state: str = "failed") -> dict[str, str]:
    return {ANN_STATE: state, ANN_TARGET: NEW, ANN_WAS_UNSCHEDULABLE: "false",
            ANN_FAILURE_REASON: "ErrImagePull", ANN_FAILED_AT: "2027-01-15T08:00:00Z",
            ANN_FAILURE_TOLERATED: f"{step}@{target}"}


FAILING = PodFacts("d-new", NEW, waiting_reason="ErrImagePull")


@pytest.mark.parametrize(("node", "active", "expected"), [
    (NodeFacts("n", pod=FAILING, unschedulable=True, annotations=left_behind()), True,
     "tolerated"),
    # the rollout ended, the node stays behind
    (NodeFacts("n", pod=FAILING, unschedulable=True, annotations=left_behind()), False,
     "tolerated"),
    # a record for another revision, or on a node no longer failed, counts for nothing
    (NodeFacts("n", pod=FAILING, unschedulable=True, annotations=left_behind("rev-other")),
     True, "failed"),
    (NodeFacts("n", pod=FAILING, annotations=left_behind(state="upgrading")), True,
     "failed"),
    # its driver turned Ready on the target after all: upgraded (the planner records it so)
    (NodeFacts("n", pod=PodFacts("d-new", NEW, ready=True), unschedulable=True,
               annotations=left_behind()), False, "upgraded"),
])
def test_a_tolerated_node_s_state(node: NodeFacts, active: bool, expected: str) -> None:
    assert classify(node, target=NEW, active=active) == expected


def test_the_legend_keeps_its_indexes_and_adds_tolerated_last() -> None:
    assert NODE_STATES[-1] == "tolerated" and STATE_INDEX["left-alone"] == 10


UPGRADE: dict[str, Any] = {
    "phase": "Progressing",
    "status": {"lastPodSpecRevision": OLD, "upgradingPodSpecRevision": NEW},
}


def fleet() -> list[NodeFacts]:
    return [
        NodeFacts("node-0001", pod=PodFacts("a", NEW, ready=True), labels={RACK: "r1"},
                  annotations={ANN_STATE: "done", ANN_TARGET: NEW}),
        NodeFacts("node-0002", pod=FAILING, unschedulable=True, labels={RACK: "r1"},
                  annotations=left_behind()),
        NodeFacts("node-0003", pod=FAILING, unschedulable=True, labels={RACK: "r2"},
                  annotations={**left_behind(), ANN_FAILURE_TOLERATED: ""}),
        NodeFacts("node-0004", pod=PodFacts("b", OLD, ready=True), labels={RACK: "r2"}),
    ]


def test_a_tolerated_node_is_neither_failed_nor_unavailable() -> None:
    states = classify_all(fleet(), upgrade=UPGRADE)
    assert states.tolerated == ("node-0002",)
    assert states.failed == {"node-0003": "ErrImagePull"}
    assert states.unavailable == {}


def test_a_domain_counts_it_failed_and_finished() -> None:
    nodes = fleet()
    progress = domain_progress(
        ((n, classify(n, target=NEW, active=True)) for n in nodes[:2]), key=RACK)
    [r1] = progress
    assert r1.to_json()["failed"] == 1 and r1.to_json()["states"] == {
        "upgraded": 1, "tolerated": 1}
    assert r1.done  # under sequential, the next domain may start


def status_snapshot(phase: str = "Progressing", state: str = "StepUpgrade",
                    conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "cluster": "prod-a",
        "upgradeStatus": {
            **UPGRADE, "phase": phase, "condition": conditions or [],
            "status": {**UPGRADE["status"], "currentStepIndex": 2, "currentStepState": state,
                       "totalUpgradeReplicas": 4, "totalUpgradeReadyReplicas": 1,
                       "currentFailureRetry": 0,
                       "message": "1 failure tolerated, left on the failed driver: node-0002 "
                                  "(step 1)"}},
        "spec": {"driver": {
            "payload": {"version": "2.33.0.9"},
            "upgradePolicy": {"enableRollout": True, "maxFailureThreshold": 1,
                              "upgradeSteps": [
                                  {"replicas": 2, "toleration": 1},
                                  {"replicas": "100%", "pauseDuration": 0,
                                   "toleration": "50%"}]}}},
    }


def test_status_shows_each_steps_toleration_and_the_nodes_left_behind(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    data = status_snapshot()
    result = report(data, now=NOW, nodes=classify_all(fleet(), upgrade=data["upgradeStatus"]))
    # step 1 a gate (pauseDuration left out), tolerating 1; step 2's 2 nodes, 50%: 1
    assert [(r.step, r.nodes, r.toleration, r.pause) for r in result.steps] == [
        (1, 2, 1, "gate (a person)"), (2, 2, 1, "none")]
    assert result.tolerated == ["node-0002"]
    assert result.to_json()["tolerated"] == ["node-0002"]
    monkeypatch.setenv("COLUMNS", "160")
    _render(result)
    out = capsys.readouterr().out
    assert "failures tolerated" in out  # the batches table's column
    assert "failures tolerated, left behind (1): node-0002" in out
    # from Git there are no nodes, and the step message says it
    from_git = report(data, now=NOW)
    assert from_git.tolerated == []
    assert "node-0002 (step 1)" in from_git.message


def test_status_shows_the_completed_rollouts_condition(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    condition = {"type": "FailuresTolerated", "status": "True", "reason": "FailuresTolerated",
                 "message": "failures tolerated, left cordoned on the failed driver: "
                            "node-0002 (step 1)"}
    data = status_snapshot("Idling", "Completed", [condition])
    monkeypatch.setenv("COLUMNS", "200")
    _render(report(data, now=NOW))
    out = capsys.readouterr().out
    assert "FailuresTolerated" in out and "node-0002 (step 1)" in out


def test_the_dashboard_shows_the_state_and_each_steps_toleration() -> None:
    data = status_snapshot()
    co = {"metadata": {"name": "cluster-operator"},
          "spec": data["spec"], "status": {"upgradeStatus": data["upgradeStatus"]}}
    facts = ClusterFacts("prod-a", co, fleet(), {OLD: "r/d:2.32.0.5", NEW: "r/d:2.33.0.9"}, NEW)
    view = build_view(facts, now=NOW)
    page = view.to_json()
    states = dict(zip(page["fleet"]["names"],
                      (page["fleet"]["legend"][ord(c) - 48] for c in page["fleet"]["states"]),
                      strict=True))
    assert states["node-0002"] == "tolerated" and states["node-0003"] == "failed"
    assert page["fleet"]["counts"]["tolerated"] == 1
    row = view.node("node-0002")
    assert row is not None and row.failure_reason == "ErrImagePull" and row.since is not None
    assert [(s["step"], s["toleration"], s["gate"]) for s in page["steps"]] == [
        (1, 1, True), (2, 1, False)]
    assert page["steps"][0]["counts"].get("tolerated") == 1
    # nothing waits for a tolerated node
    assert all("node-0002" not in w["text"] for w in page["waiting"])
