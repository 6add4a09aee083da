"""The dashboard's read model, from synthetic facts: no cluster, no Git, no clock."""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import pytest

from reconciler.config.settings import ClusterSettings
from reconciler.dashboard.audit import CommitFacts, GitAudit, classify
from reconciler.dashboard.model import (
    ClusterFacts,
    EventFacts,
    GitContext,
    NodeFacts,
    PodFacts,
    Prediction,
    build_view,
    step_times,
)
from reconciler.dashboard.model import (
    classify as classify_node,
)
from reconciler.dashboard.predict import predict, prediction_key
from reconciler.dashboard.server import DashboardApp
from reconciler.dashboard.synthetic import NEW_REV, OLD_REV, advance, synthetic_facts
from reconciler.names import (
    ANN_DELETED_AT,
    ANN_DRAIN_STARTED,
    ANN_FAILED_AT,
    ANN_FAILURE_REASON,
    ANN_FAILURES,
    ANN_SKIPPED,
    ANN_STATE,
    ANN_TARGET,
    ANN_WAS_UNSCHEDULABLE,
    LABEL_UPGRADE_SKIP,
)
from reconciler.policy.quantity import Quantity
from reconciler.policy.rollout_settings import DrainSettings, RolloutSettings, TopologySettings
from reconciler.rollout import status as st
from reconciler.rollout.model import PlannerSettings

NOW = 1_800_000_000.0


def _old_pod(**kw: Any) -> PodFacts:
    return PodFacts("p-old", OLD_REV, ready=True, created_at=NOW - 9000, **kw)


def _new_pod(**kw: Any) -> PodFacts:
    return PodFacts("p-new", NEW_REV, created_at=NOW - 30, **kw)


def _ann(state: str, **extra: str) -> dict[str, str]:
    return {ANN_STATE: state, ANN_TARGET: NEW_REV, **extra}


@pytest.mark.parametrize(("node", "active", "expected"), [
    (NodeFacts("n", pod=_old_pod()), True, "old"),
    (NodeFacts("n", pod=_old_pod(), unschedulable=True,
               annotations=_ann("cordoned", **{ANN_WAS_UNSCHEDULABLE: "false"})),
     True, "cordoned"),
    (NodeFacts("n", pod=_new_pod(), annotations=_ann("upgrading")), True, "in-flight"),
    # cordoned ahead and started: its deletion writes no record, its pods say it is in flight
    (NodeFacts("n", pod=_old_pod(deleting=True), unschedulable=True,
               annotations=_ann("cordoned")), True, "in-flight"),
    (NodeFacts("n", pod=_new_pod(), unschedulable=True, annotations=_ann("cordoned")), True,
     "in-flight"),
    (NodeFacts("n", pod=_new_pod(ready=True), unschedulable=True,
               annotations=_ann("cordoned")), True, "verifying"),
    (NodeFacts("n", pod=_old_pod(), unschedulable=True, annotations=_ann("cordoned")), True,
     "cordoned"),
    (NodeFacts("n", pod=None, annotations=_ann("upgrading")), True, "left-alone"),
    (NodeFacts("n", pod=_new_pod(ready=True), annotations=_ann("upgrading")), True, "verifying"),
    (NodeFacts("n", pod=_new_pod(ready=True), annotations=_ann("done")), True, "upgraded"),
    (NodeFacts("n", pod=_new_pod(waiting_reason="ErrImagePull"),
               annotations=_ann("upgrading")), True, "failed"),
    (NodeFacts("n", pod=_new_pod(), annotations=_ann("failed")), True, "failed"),
    (NodeFacts("n", pod=_old_pod(), workloads=("ml/job",)), True, "busy"),
    (NodeFacts("n", pod=_old_pod(), workloads=("ml/job",)), False, "old"),
    (NodeFacts("n", ready=False, pod=_old_pod()), True, "not-ready"),
    (NodeFacts("n", pod=_old_pod(), unschedulable=True), True, "left-alone"),
    (NodeFacts("n", pod=None), True, "left-alone"),
    # a state recorded for another revision counts for nothing
    (NodeFacts("n", pod=_old_pod(), annotations={ANN_STATE: "failed", ANN_TARGET: "other"}),
     True, "old"),
    (NodeFacts("n", pod=_new_pod(ready=True)), False, "upgraded"),
])
def test_each_node_state_is_read_from_its_pod_and_annotations(
        node: NodeFacts, active: bool, expected: str) -> None:
    assert classify_node(node, target=NEW_REV, active=active) == expected


def _rollout(nodes: list[NodeFacts], *, state: str = "StepUpgrade", index: int = 1,
             conditions: list[dict[str, str]] | None = None, pause: bool = False,
             steps: list[dict[str, Any]] | None = None, recheck: str = "",
             events: list[EventFacts] | None = None) -> ClusterFacts:
    steps = steps or [{"replicas": 2},
                      {"replicas": "100%", "pauseDuration": 60000}]
    co = {
        "metadata": {"name": "cluster-operator"},
        "spec": {"driver": {"payload": {"version": "2.33.0.9"},
                            "upgradePolicy": {"enableRollout": True, "upgradeSteps": steps,
                                              "pause": pause, "maxFailureThreshold": 3}}},
        "status": {"upgradeStatus": {
            "phase": "Progressing", "upgrading": True,
            "lastAppliedSpec": {"payload": {"version": "2.33.0.9"}},
            "lastCoDriverSpec": {"payload": {"version": "2.32.0.5"}},
            "condition": conditions or [],
            "status": {"currentStepIndex": index, "currentStepState": state,
                       "totalUpgradeReplicas": len(nodes),
                       "totalUpgradeReadyReplicas": sum(
                           1 for n in nodes if n.pod and n.pod.ready
                           and n.pod.revision == NEW_REV),
                       "currentFailureRetry": 0, "lastPodSpecRevision": OLD_REV,
                       "upgradingPodSpecRevision": NEW_REV, "recheckTime": recheck},
        }},
    }
    return ClusterFacts("lab", co, nodes, {OLD_REV: "r/d:2.32.0.5", NEW_REV: "r/d:2.33.0.9"},
                        NEW_REV, events or [])


def _fleet(count: int = 4) -> list[NodeFacts]:
    return [NodeFacts(f"node-{i:04d}", pod=_old_pod()) for i in range(1, count + 1)]


def test_nodes_are_grouped_by_the_step_they_went_in_started_nodes_first() -> None:
    nodes = _fleet(4)
    # node-0004 started first (it was next when node-0001 was busy), node-0002 second
    nodes[3] = NodeFacts("node-0004", pod=_new_pod(ready=True), annotations=_ann("done"))
    nodes[1] = NodeFacts("node-0002", pod=dataclasses.replace(_new_pod(), created_at=NOW - 5),
                         annotations=_ann("upgrading", **{ANN_DELETED_AT: st.format_time(
                             NOW - 5)}))
    nodes[0] = NodeFacts("node-0001", pod=_old_pod(), workloads=("ml/train",))
    alone = [NodeFacts("node-0005", pod=None),
             NodeFacts("node-0006", pod=_old_pod(), unschedulable=True)]
    view = build_view(_rollout([*nodes, *alone]), now=NOW)
    # nodes the rollout leaves alone: a node without a driver pod is not a rollout node, so
    # it is not "unavailable"; one cordoned by someone else is
    (unavailable,) = [w for w in view.waiting if w.kind == "unavailable"]
    assert unavailable.items == ("node-0006: cordoned by someone else",)
    assert [r.state for r in view.nodes[-2:]] == ["left-alone", "left-alone"]
    view = build_view(_rollout(nodes), now=NOW)
    assert [(r.name, r.step, r.state) for r in view.nodes] == [
        ("node-0004", 1, "upgraded"), ("node-0002", 1, "in-flight"),
        ("node-0001", 2, "busy"), ("node-0003", 2, "old")]
    assert view.counts()["busy"] == 1
    assert view.header["nodesOnNew"] == 1
    assert view.header["oldVersion"] == "2.32.0.5"
    assert view.header["newVersion"] == "2.33.0.9"
    # the busy node's pods are what a person waits for
    busy = next(w for w in view.waiting if w.kind == "busy")
    assert busy.items == ("node-0001: ml/train",)


def test_a_gate_names_the_git_change_to_merge_in_the_policy_file() -> None:
    nodes = _fleet(4)
    for i in (0, 1):
        nodes[i] = NodeFacts(nodes[i].name, pod=_new_pod(ready=True), annotations=_ann("done"))
    gate = [{"type": "ManualGate", "status": "True", "reason": "WaitingForConfirmation",
             "message": "step 1 done", "lastTransitionTime": "2027-01-15T08:00:00Z"}]
    facts = _rollout(nodes, state="StepPaused", conditions=gate, pause=True)
    git = GitContext(policy_file="clusters/lab/cluster-operator.yaml", pause_line=17)
    view = build_view(facts, now=NOW, git=git)
    (first,) = [w for w in view.waiting if w.kind == "gate"]
    assert first.change == {"path": "clusters/lab/cluster-operator.yaml", "line": 17,
                            "before": "pause: true", "after": "pause: false",
                            "field": "spec.driver.upgradePolicy.pause"}
    assert "clusters/lab/cluster-operator.yaml:17" in first.action
    assert "main" in first.action
    # without --repo: the seed's way, a patch of the object
    view = build_view(facts, now=NOW, object_name="co-x")
    (first,) = [w for w in view.waiting if w.kind == "gate"]
    assert first.change is None
    assert first.action == ("kubectl patch clusteroperator co-x --type merge -p "
                            "'{\"spec\":{\"driver\":{\"upgradePolicy\":{\"pause\":false}}}}'")
    assert view.audit is None


def test_a_timed_pause_says_until_when() -> None:
    nodes = [NodeFacts(n.name, pod=_new_pod(ready=True), annotations=_ann("done"))
             for n in _fleet(2)]
    steps = [{"replicas": 2, "pauseDuration": 300000}, {"replicas": "100%", "pauseDuration": 0}]
    facts = _rollout(nodes, state="StepPaused", steps=steps,
                     recheck=st.format_time(NOW + 125))
    (pause,) = [w for w in build_view(facts, now=NOW).waiting if w.kind == "pause"]
    assert pause.until == "2027-01-15T08:02:05Z"
    assert "2m05s left" in pause.title


def test_a_failure_fallback_lists_the_failed_nodes_with_their_reasons() -> None:
    nodes = _fleet(3)
    epoch = "1@2027-01-15T07:00:00.000Z"
    nodes[0] = NodeFacts("node-0001", pod=_new_pod(waiting_reason="ImagePullBackOff"),
                         annotations=_ann("failed", **{ANN_FAILURE_REASON: "ErrImagePull",
                                                       ANN_FAILED_AT: st.format_time(NOW - 9),
                                                       ANN_FAILURES: f"{epoch}|3"}))
    conditions = [
        {"type": "Progressing", "status": "True", "reason": "StepStarted", "message": "",
         "lastTransitionTime": "2027-01-15T07:00:00.000Z"},
        {"type": "BatchFailed", "status": "True", "reason": "FailureThresholdReached",
         "message": "3 failures: node-0001", "lastTransitionTime": "x"}]
    view = build_view(_rollout(nodes, state="StepPaused", conditions=conditions, pause=True),
                      now=NOW)
    (fallback,) = [w for w in view.waiting if w.kind == "fallback"]
    assert fallback.nodes == ("node-0001",)
    assert fallback.items == ("node-0001: ErrImagePull",)
    assert "enableRollout: false" in fallback.action
    row = view.node("node-0001")
    assert row is not None
    assert (row.state, row.failure_reason, row.pod_reason, row.failures) == (
        "failed", "ErrImagePull", "ImagePullBackOff", 3)
    assert row.to_json()["since"] == st.format_time(NOW - 9)[:19] + "Z"


def test_steps_carry_real_durations_and_the_model_predicts_the_rest() -> None:
    nodes = [NodeFacts(n.name, pod=_new_pod(ready=True), annotations=_ann("done"))
             for n in _fleet(2)] + _fleet(4)[2:]
    events = [EventFacts(NOW - 600, "RolloutStarted", "rollout started"),
              EventFacts(NOW - 500, "GateOpened", "step 1 done: waiting for a person"),
              EventFacts(NOW - 100, "GateConfirmed", "step 1: gate confirmed"),
              EventFacts(NOW - 100, "StepStarted", "step 2 of 2")]
    facts = _rollout(nodes, index=2, events=events)
    prediction = Prediction(step_seconds=(200.0, 400.0), upgrade_seconds=(200.0, 340.0),
                            install_seconds=60, measured=True, nodes=4)
    view = build_view(facts, now=NOW, prediction=prediction)
    one, two = view.steps
    assert (one.state, one.started_at, one.upgraded_at, one.ended_at) == (
        "done", NOW - 600, NOW - 500, NOW - 100)
    assert one.gate and one.pause == "gate"
    assert (two.state, two.started_at, two.ended_at) == ("running", NOW - 100, None)
    predicted = view.header["prediction"]
    assert predicted["remainingSeconds"] == 300.0  # 400 predicted, 100 passed
    assert predicted["gatesLeft"] == 0 and predicted["installMeasured"] is True


def test_step_times_forget_an_earlier_rollout() -> None:
    events = [(1.0, "RolloutStarted", 1), (5.0, "StepStarted", 2), (9.0, "RolloutCompleted", 2),
              (20.0, "RolloutStarted", 1), (25.0, "StepCompleted", 1)]
    assert step_times(events) == {1: {"started": 20.0, "upgraded": 25.0}}


def test_the_model_is_the_planner_run_on_a_virtual_fleet() -> None:
    driver = {"payload": {"version": "2"}, "upgradePolicy": {
        "enableRollout": True, "maxParallel": "100%",
        "upgradeSteps": [{"replicas": 1},
                         {"replicas": "100%", "pauseDuration": 30000}]}}
    model = predict(driver, nodes=10, install_samples=[40.0, 60.0, 50.0])
    assert model.install_seconds == 50.0 and model.measured
    # step 1: one wave; the gate is released at once in the model; step 2: one wave + pause
    assert model.step_seconds == (50.0, 80.0)
    assert predict(driver, nodes=10, install_samples=[]).install_seconds == 60.0
    # a few per cent more install time reuses the model; pause changes never re-run it
    assert prediction_key(driver, 10, 50.0) == prediction_key(driver, 10, 50.5)
    assert prediction_key(driver, 10, 50.0) != prediction_key(driver, 10, 80.0)


def test_the_payload_is_compact_and_sends_names_only_when_asked() -> None:
    facts = synthetic_facts(2000, now=NOW)
    view = build_view(facts, now=NOW)
    full, small = view.to_json(), view.to_json(with_names=False)
    assert len(full["fleet"]["names"]) == 2000 and "names" not in small["fleet"]
    assert len(small["fleet"]["states"]) == 2000
    assert sum(small["fleet"]["counts"].values()) == 2000
    later = build_view(advance(facts, now=NOW + 60, wave=10), now=NOW + 60)
    assert later.counts()["upgraded"] == view.counts()["upgraded"] + 10
    # nodes started since moved into their step: the key changes, the page reloads the names
    assert later.fleet_key() != view.fleet_key()
    # a node turning Ready keeps its place: the page repaints its cell only
    nodes = list(facts.nodes)
    i = next(i for i, n in enumerate(nodes) if n.annotations.get(ANN_STATE) == "upgrading")
    pod = nodes[i].pod
    assert pod is not None
    nodes[i] = dataclasses.replace(nodes[i], pod=dataclasses.replace(pod, ready=True))
    ready = build_view(dataclasses.replace(facts, nodes=nodes), now=NOW + 1)
    assert ready.fleet_key() == view.fleet_key()
    assert ready.to_json(with_names=False)["fleet"]["states"] != small["fleet"]["states"]


def test_no_cluster_operator_says_so() -> None:
    view = build_view(ClusterFacts("lab", None), now=NOW, object_name="co-x")
    assert not view.found and view.error == "no ClusterOperator 'co-x'"
    assert view.waiting == [] and view.nodes == []


@pytest.mark.parametrize(("facts", "kind"), [
    (dict(kind="policy", pause_before=True, pause_after=False), "gate-release"),
    (dict(kind="policy", pause_before=False, pause_after=True), "pause"),
    (dict(kind="policy", version_before="1", version_after="2"), "version"),
    (dict(kind="policy"), "policy"),
    (dict(kind="policy", own=True, pause_before=False, pause_after=True), "write-back"),
    (dict(kind="status", own=True), "status"),
    (dict(kind="status", own=True, rejected="abc", rejection_reason="x.yaml:3 bad"),
     "rejection"),
])
def test_audit_entries_say_what_each_commit_did(facts: dict[str, Any], kind: str) -> None:
    base = dict(sha="a" * 40, author="Ana <ana@x>", committer="Bo <bo@x>", at=1, subject="s",
                own=False, merge=False)
    entry = classify(CommitFacts(**{**base, **facts}))
    assert entry["kind"] == kind
    assert entry["mergedBy"] == (None if facts.get("own") else "Bo <bo@x>")


def test_no_end_is_predicted_while_a_person_must_act() -> None:
    nodes = _fleet(3)
    conditions = [{"type": "BatchFailed", "status": "True", "reason": "FailureThresholdReached",
                   "message": "3 failures", "lastTransitionTime": "x"}]
    facts = _rollout(nodes, state="StepPaused", conditions=conditions, pause=True)
    prediction = Prediction((10.0, 20.0), (10.0, 10.0), 5.0, True, 3)
    header = build_view(facts, now=NOW, prediction=prediction).header
    assert header["prediction"]["at"] is None
    assert header["prediction"]["note"].startswith("held: a person: the batch failed")


# ----------------------------------------------------------------------------- live clusters

RACK = "example.com/rack"


def _live(nodes: list[NodeFacts], **upgrade: Any) -> ClusterFacts:
    facts = _rollout(nodes, steps=[{"replicas": 2},
                                   {"replicas": "100%", "pauseDuration": 0}])
    co: dict[str, Any] = dict(facts.cluster_operator or {})
    co["status"]["upgradeStatus"].update(upgrade)
    return dataclasses.replace(facts, cluster_operator=co)


def test_draining_and_skipped_nodes_are_on_the_map_and_in_the_payload() -> None:
    drain = {"node": "node-0002", "since": "2027-01-15T08:00:00Z", "pods": ["serve/web-1"],
             "budgets": ["serve/web-pdb"], "waitingFor": []}
    nodes = [
        NodeFacts("node-0001", pod=_new_pod(ready=True), annotations=_ann("done")),
        NodeFacts("node-0002", pod=_old_pod(), unschedulable=True, workloads=("serve/web-1",),
                  annotations=_ann("draining", **{ANN_WAS_UNSCHEDULABLE: "false",
                                                  ANN_DRAIN_STARTED: st.format_time(NOW - 60)})),
        NodeFacts("node-0003", pod=_old_pod(), labels={LABEL_UPGRADE_SKIP: "true"}),
        NodeFacts("node-0004", pod=_old_pod(), ready=False, annotations={ANN_SKIPPED: NEW_REV}),
        NodeFacts("node-0005", pod=_old_pod()),
        NodeFacts("node-0006", pod=_old_pod()),  # its label went: the status's list holds
    ]
    view = build_view(_live(nodes, draining=[drain], skipped=["node-0004", "node-0006"]),
                      now=NOW)
    by_name = {r.name: r for r in view.nodes}
    assert by_name["node-0002"].state == "draining"
    assert by_name["node-0002"].drain == drain
    # it started at its cordon: first on the map, since then
    assert view.nodes[0].name == "node-0002" and by_name["node-0002"].since == NOW - 60
    assert (by_name["node-0003"].state, by_name["node-0004"].state) == ("skipped", "skipped")
    # skipped nodes come last: they take no place of a rollout node in a step
    assert [r.name for r in view.nodes][-3:] == ["node-0003", "node-0004", "node-0006"]
    counts = view.counts()
    assert (counts["draining"], counts["skipped"], counts["not-ready"]) == (1, 3, 0)
    payload = view.to_json()
    fleet = payload["fleet"]
    assert fleet["legend"][ord(fleet["states"][fleet["names"].index("node-0002")]) - 48] == \
        "draining"
    assert payload["draining"] == [drain]
    assert payload["skipped"] == ["node-0003", "node-0004", "node-0006"]
    assert payload["domains"] == [] and payload["topology"] is None
    assert "domains" not in fleet
    (waiting,) = [w for w in view.waiting if w.kind == "draining"]
    assert waiting.items == ("node-0002: evicting serve/web-1; held by budget serve/web-pdb",)
    assert not [w for w in view.waiting if w.kind == "unavailable"]  # skipped: not counted


def test_with_a_topology_the_map_is_grouped_by_domain_in_the_rollout_s_order() -> None:
    def at(name: str, rack: str | None, **kw: Any) -> NodeFacts:
        kw.setdefault("pod", _old_pod())
        return NodeFacts(name, labels={RACK: rack} if rack is not None else {}, **kw)

    nodes = [
        at("node-0001", "r2", pod=_new_pod(ready=True), annotations=_ann("done")),
        at("node-0002", "r2", unschedulable=True,
           annotations=_ann("draining", **{ANN_WAS_UNSCHEDULABLE: "false"})),
        at("node-0003", "r1"), at("node-0004", None), at("node-0005", "r1"),
        at("node-0006", "r3", canary=True), at("node-0007", "r1", pod=None),
    ]
    topology = {"key": RACK, "order": "sequential", "maxUnavailablePerDomain": 1}
    view = build_view(_live(nodes, topology=topology), now=NOW)
    # the canary's domain first, then by value, the unlabelled last; a node without a driver
    # pod is no domain's
    assert [(d.domain, d.nodes) for d in view.domains] == [
        ("r3", 1), ("r1", 2), ("r2", 2), (None, 1)]
    assert [(r.name, r.domain) for r in view.nodes] == [
        ("node-0006", "r3"), ("node-0003", "r1"), ("node-0005", "r1"), ("node-0001", "r2"),
        ("node-0002", "r2"), ("node-0004", None), ("node-0007", "r1")]
    # steps follow the rollout order (sequential: domain by domain): node-0001 started first
    assert {r.name: r.step for r in view.nodes} == {
        "node-0001": 1, "node-0006": 1, "node-0003": 2, "node-0005": 2, "node-0002": 2,
        "node-0004": 2, "node-0007": 2}
    payload = view.to_json()
    assert payload["fleet"]["domains"] == [0, 1, 1, 2, 2, 3, -1]
    assert payload["topology"] == topology
    assert [(d["name"], d["upgraded"], d["inFlight"], d["draining"], d["pending"], d["done"])
            for d in payload["domains"]] == [
        ("r3", 0, 0, 0, 1, False), ("r1", 0, 0, 0, 2, False), ("r2", 1, 1, 1, 0, False),
        ("(no label)", 0, 0, 0, 1, False)]
    assert payload["domains"][3]["domain"] is None
    # the map's key changes with the grouping: the page rebuilds its groups
    plain = build_view(_live(nodes), now=NOW)
    assert plain.fleet_key() != view.fleet_key()
    assert "domains" not in plain.to_json()["fleet"]


def test_spread_takes_the_domains_in_turn() -> None:
    nodes = [NodeFacts(f"node-{i:04d}", pod=_old_pod(), labels={RACK: rack})
             for i, rack in enumerate(["a", "a", "a", "b", "b", "c"], 1)]
    topology = {"key": RACK, "order": "spread"}
    view = build_view(_live(nodes, topology=topology), now=NOW)
    # the first step (2 nodes) takes the first node of a and of b
    assert {r.name for r in view.nodes if r.step == 1} == {"node-0001", "node-0004"}
    assert [r.domain for r in view.nodes] == ["a", "a", "a", "b", "b", "c"]


def test_the_page_has_a_colour_for_every_state_of_the_legend() -> None:
    from pathlib import Path

    from reconciler.views.nodes import NODE_STATES

    css = (Path(__file__).parents[2] / "reconciler/dashboard/static/app.css").read_text()
    for index, name in enumerate(NODE_STATES):
        assert f"--{name}:" in css, name
        if index:
            assert f".cells i.s{index} {{ background: var(--{name}); }}" in css, name


class _Audit:
    """What the page reads of the Git audit: reconciler.yaml at the branch head, resolved."""

    def __init__(self, settings: ClusterSettings | None) -> None:
        self.settings = settings
        self.context = GitContext(branch="main")
        self.entries: list[dict[str, Any]] = []
        self.snapshot = None
        self.error = None


def test_the_predicted_end_plans_with_the_controllers_settings() -> None:
    """Issue 42: the page's model plans with ``PlannerSettings.for_pass`` as the controller does:
    the cluster's ``rollout`` section (drain here) from reconciler.yaml, ``--ready-timeout`` over
    it, and the topology the rollout froze when it started, on the nodes' own labels."""
    nodes = [NodeFacts(f"node-{i:04d}", pod=_old_pod(), labels={RACK: rack})
             for i, rack in enumerate(["r1", "r1", "r1", "r2", "r2", "r2"], start=1)]
    topology = {"key": RACK, "order": "sequential", "maxUnavailablePerDomain": 1}
    facts = _live(nodes, topology=topology)
    section = RolloutSettings(ready_timeout=1200.0, drain=DrainSettings(),
                              topology=TopologySettings("other.example.com/zone"))
    app = DashboardApp(lambda: facts, object_name="cluster-operator", ready_timeout=300.0,
                       audit=cast(GitAudit, _Audit(ClusterSettings(rollout=section))))
    predicted = app._predict(facts, NEW_REV)
    # the frozen topology, not the one the head names now (a change waits for the next rollout)
    settings = PlannerSettings().for_pass(dataclasses.replace(
        section, ready_timeout=300.0, topology=TopologySettings(RACK, "sequential",
                                                                Quantity(1, False))))
    fleet = tuple((n.name, {RACK: n.labels[RACK]}) for n in nodes)
    assert predicted == predict(facts_driver(facts), nodes=6, install_samples=[],
                                settings=settings, fleet=fleet)
    # one node at a time per rack, rack after rack: 2 and 4 installs of 60 s where the plain
    # model's steps take one each
    assert predicted is not None and predicted.step_seconds == (120.0, 240.0)
    plain = predict(facts_driver(facts), nodes=6, install_samples=[])
    assert plain.step_seconds == (60.0, 60.0)
    # without a section from Git (no --repo): the defaults, the flag's readyTimeout
    bare = DashboardApp(lambda: facts, object_name="cluster-operator")
    assert bare._rollout_settings({}) == RolloutSettings()


def facts_driver(facts: ClusterFacts) -> dict[str, Any]:
    return dict((facts.cluster_operator or {})["spec"]["driver"])
