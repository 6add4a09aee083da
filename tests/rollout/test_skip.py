"""Skipped nodes (docs/live-clusters.md#a-node-under-repair): the ``upgrade.skip`` label and
``rollout.unavailableNodes: skip``, against the pure planner on a hand-driven fleet."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.gitops.status_policy import last_rollout
from reconciler.names import ANN_SKIPPED, ANN_STATE, LABEL_UPGRADE_SKIP, STATE_CORDONED
from reconciler.policy.upgrade_policy import UpgradePolicy
from reconciler.rollout.actions import AnnotateNode, Cordon, RecordEvent, Uncordon
from reconciler.rollout.model import PlannerSettings
from reconciler.rollout.skipped import COND_NODES_SKIPPED
from reconciler.rollout.status import UpgradeStatus

from .world import NEW_PAYLOAD, NEW_REV, OLD_REV, World, deletions, of_type, policy, steps

SKIP = PlannerSettings(unavailable_nodes="skip")
COUNT = PlannerSettings(unavailable_nodes="count")


def drive(w: World, start: float = 0.0, passes: int = 40) -> float:
    """Plan, let every new pod turn Ready, plan again, until the rollout ends."""
    t = start
    w.settle(t)
    for _ in range(passes):
        if w.status.get("phase") != "Progressing":
            break
        w.ready_all_in_flight()
        t += 60
        w.settle(t)
    return t


def completed(w: World) -> bool:
    return bool(w.status["phase"] == "Idling" and w.inner["currentStepState"] == "Completed"
            and w.inner["lastPodSpecRevision"] == NEW_REV)


def skipped_condition(w: World) -> dict[str, Any]:
    cond = w.conditions()[COND_NODES_SKIPPED]
    assert cond["status"] == "True"
    return cond


# ------------------------------------------------------------------ a node cordoned for repair


def test_count_blocks_a_rollout_under_max_unavailable_zero_and_says_why() -> None:
    w = World(4, policy(), settings=COUNT)
    w.set("node-0003", unschedulable=True)  # cordoned for repair by someone else
    result = w.settle(0)
    assert deletions(result) == []
    assert w.status["phase"] == "Progressing"
    assert w.inner["message"] == ("1 rollout nodes unavailable (maxUnavailable 0): no new node "
                                  "starts")
    assert result.unavailable == 1
    assert "skipped" not in w.status
    w.settle(600)
    assert w.on(NEW_REV) == []


def test_skip_completes_without_the_node_under_repair_and_names_it() -> None:
    w = World(4, policy(), settings=SKIP)
    w.set("node-0003", unschedulable=True)
    first = w.settle(0)
    # not counted unavailable while its turn has not come: the first node starts at once
    assert deletions(first) == ["node-0001"]
    assert first.unavailable == 0
    drive(w)
    assert completed(w)
    assert w.on(OLD_REV) == ["node-0003"]  # keeps its old driver
    assert w.nodes["node-0003"].unschedulable  # still cordoned for its repair
    assert w.annotation("node-0003", ANN_SKIPPED) == NEW_REV
    assert w.status["skipped"] == ["node-0003"]
    assert "node-0003" in skipped_condition(w)["message"]
    assert w.inner["totalUpgradeReplicas"] == 3
    assert w.inner["totalUpgradeReadyReplicas"] == 3


def test_skip_decides_at_the_nodes_turn_with_an_event_and_the_step_message() -> None:
    w = World(3, policy(), settings=SKIP)
    w.set("node-0002", ready=False)
    w.settle(0)
    assert "skipped" not in w.status  # its turn has not come
    w.ready_all_in_flight()
    result = w.plan(60)
    assert w.status["skipped"] == ["node-0002"]
    events = [a for a in result.actions if isinstance(a, RecordEvent)
              and a.reason == "NodeSkipped"]
    assert [e.node for e in events] == ["node-0002"] and "NotReady" in events[0].message
    assert AnnotateNode("node-0002", {ANN_SKIPPED: NEW_REV}) in result.actions
    assert deletions(result) == ["node-0003"]  # the next one takes its turn
    assert "1 node skipped: node-0002" in w.inner["message"]


def test_a_node_that_recovers_before_its_turn_is_upgraded() -> None:
    w = World(3, policy(), settings=SKIP)
    w.set("node-0003", ready=False)
    w.settle(0)
    w.set("node-0003", ready=True)
    drive(w)
    assert completed(w)
    assert w.on(OLD_REV) == []
    assert "skipped" not in w.status
    assert COND_NODES_SKIPPED not in w.conditions()


def test_a_restart_keeps_the_decision_after_the_node_recovers() -> None:
    w = World(3, policy(), settings=SKIP)
    w.set("node-0001", unschedulable=True)
    w.settle(0)
    assert w.annotation("node-0001", ANN_SKIPPED) == NEW_REV
    # repaired and uncordoned; the controller restarts and its last status write was lost
    w.set("node-0001", unschedulable=False)
    w.status = {**w.status, "skipped": []}
    drive(w, 60)
    assert completed(w)
    assert w.on(OLD_REV) == ["node-0001"]
    assert w.status["skipped"] == ["node-0001"]
    assert "node-0001" in skipped_condition(w)["message"]


def test_status_alone_keeps_a_skip_whose_label_was_removed() -> None:
    w = World(3, policy(), settings=COUNT)
    w.set("node-0002", labels={LABEL_UPGRADE_SKIP: "true"})
    w.settle(0)
    assert w.status["skipped"] == ["node-0002"]
    w.set("node-0002", labels={})  # frozen for the rollout
    drive(w, 60)
    assert completed(w)
    assert w.on(OLD_REV) == ["node-0002"]


# ------------------------------------------------------------------ the label


def test_a_labelled_node_is_not_a_rollout_node_and_the_rollout_completes() -> None:
    w = World(4, policy(), settings=COUNT)
    w.set("node-0002", labels={LABEL_UPGRADE_SKIP: "true"}, unschedulable=True)
    first = w.settle(0)
    assert first.unavailable == 0  # not counted unavailable, even cordoned (not by us)
    assert w.inner["totalUpgradeReplicas"] == 3
    t = drive(w)
    assert completed(w)
    assert w.on(OLD_REV) == ["node-0002"]
    assert w.status["skipped"] == ["node-0002"]
    assert "node-0002" in skipped_condition(w)["message"]
    assert w.annotation("node-0002", ANN_SKIPPED) is None  # the label is its record
    assert t > 0


def test_n_shrinks_and_step_targets_are_resolved_again() -> None:
    # 10 nodes, 50% then 100%: 5 nodes in step 1; with two labelled, 50% of 8 = 4
    w = World(10, policy(upgradeSteps=steps(("50%", None), ("100%", 0)), maxParallel=10),
              settings=COUNT)
    for name in ("node-0002", "node-0007"):
        w.set(name, labels={LABEL_UPGRADE_SKIP: "true"})
    result = w.settle(0)
    assert w.inner["totalUpgradeReplicas"] == 8
    assert w.inner["currentUpgradeReplicas"] == 4
    assert deletions(result) == ["node-0001", "node-0003", "node-0004", "node-0005"]


def test_a_skip_at_its_turn_resolves_the_step_target_again_within_the_pass() -> None:
    # 4 nodes, 75% first: 3 nodes; node-0002 NotReady at its turn: 75% of 3 = 3 still,
    # then with two skipped, 75% of 2 = 2, and no third node starts in that pass
    w = World(4, policy(upgradeSteps=steps(("75%", None), ("100%", 0)), maxParallel=4),
              settings=SKIP)
    w.set("node-0002", ready=False)
    w.set("node-0003", unschedulable=True)
    w.settle(0)
    assert sorted(w.status["skipped"]) == ["node-0002", "node-0003"]
    assert [n for n, _ in w.deleted] == ["node-0001", "node-0004"]
    assert w.inner["totalUpgradeReplicas"] == 2


def test_a_label_on_a_node_in_flight_lets_it_finish() -> None:
    w = World(2, policy(), settings=COUNT)
    assert deletions(w.settle(0)) == ["node-0001"]
    w.set("node-0001", labels={LABEL_UPGRADE_SKIP: "true"})
    drive(w, 0)
    assert completed(w)
    assert sorted(w.on(NEW_REV)) == ["node-0001", "node-0002"]
    assert "skipped" not in w.status


def test_a_label_put_during_the_rollout_skips_a_node_cordoned_ahead_and_releases_it() -> None:
    w = World(3, policy(maxParallel=1), settings=COUNT)
    w.settle(0)
    assert w.annotation("node-0002", ANN_STATE) == STATE_CORDONED  # next in line
    w.set("node-0002", labels={LABEL_UPGRADE_SKIP: "true"})
    result = w.plan(10)
    assert Uncordon("node-0002") in result.actions
    assert w.status["skipped"] == ["node-0002"]
    drive(w, 10)
    assert completed(w)
    assert w.on(OLD_REV) == ["node-0002"]
    assert not w.nodes["node-0002"].unschedulable
    assert w.annotation("node-0002", ANN_STATE) is None
    assert "node-0002" in skipped_condition(w)["message"]


# ------------------------------------------------------------------ the next rollout


def test_a_new_rollout_forgets_the_skips_of_the_last_one() -> None:
    w = World(3, policy(), settings=SKIP)
    w.set("node-0003", unschedulable=True)
    t = drive(w)
    assert completed(w) and w.status["skipped"] == ["node-0003"]
    # repaired; a new version: the node is a rollout node again
    w.set("node-0003", unschedulable=False)
    w.payload = {**NEW_PAYLOAD, "version": "2.34.0.1"}
    result = w.plan(t + 60)
    assert AnnotateNode("node-0003", {ANN_SKIPPED: None}) in result.actions
    assert "skipped" not in w.status
    drive(w, t + 60)
    assert w.status["phase"] == "Idling" and w.inner["currentStepState"] == "Completed"
    assert w.on(OLD_REV) == [] and w.on(NEW_REV) == []  # every node on the third revision
    assert COND_NODES_SKIPPED not in w.conditions()


def test_no_cordon_and_no_move_ever_reaches_a_skipped_node() -> None:
    w = World(3, policy(maxParallel=3), settings=SKIP)
    w.set("node-0001", ready=False)
    w.set("node-0002", labels={LABEL_UPGRADE_SKIP: "true"})
    seen: list[Any] = []
    t = 0.0
    w.settle(t)
    for _ in range(10):
        if w.last is not None:
            seen.extend(w.last.actions)
        if w.status.get("phase") != "Progressing":
            break
        w.ready_all_in_flight()
        t += 60
        w.settle(t)
    assert completed(w)
    touched = {a.node for a in seen if isinstance(a, Cordon)} | set(
        n for n, _ in w.deleted)
    assert touched.isdisjoint({"node-0001", "node-0002"})


# ------------------------------------------------------------------ status and promotion


def test_skipped_is_left_out_of_the_status_when_empty_and_round_trips() -> None:
    empty = UpgradeStatus.from_json({})
    assert "skipped" not in empty.to_json()
    listed = empty.evolve(skipped=("a", "b")).to_json()
    assert listed["skipped"] == ["a", "b"]
    assert UpgradeStatus.from_json(listed).skipped == ("a", "b")
    assert "skipped" not in UpgradeStatus.from_json(listed).evolve(skipped=()).to_json()


def test_promotion_reads_a_rollout_with_skipped_nodes_as_completed() -> None:
    w = World(3, policy(), settings=SKIP)
    w.set("node-0002", unschedulable=True)
    drive(w)
    assert completed(w)
    record = last_rollout(w.status, None, active_version=None, now_text="2026-01-02T00:00:00Z")
    assert record is not None
    assert record["result"] == "Completed" and record["version"] == NEW_PAYLOAD["version"]


def test_events_name_each_label_skip_once() -> None:
    w = World(3, policy(), settings=COUNT)
    w.set("node-0003", labels={LABEL_UPGRADE_SKIP: "true"})
    events: list[RecordEvent] = []
    w.settle(0)
    assert w.last is not None
    t = 0.0
    for _ in range(8):
        assert w.last is not None
        events += [a for a in of_type(w.last, RecordEvent) if a.reason == "NodeSkipped"]
        if w.status.get("phase") != "Progressing":
            break
        w.ready_all_in_flight()
        t += 60
        w.settle(t)
    # (settle may plan more than once a pass: the first pass records it, none after)
    assert [e.node for e in events] == ["node-0003"]


# ------------------------------------------------------------------ any fleet


@st.composite
def fleets(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(2, 10))
    names = [f"node-{i:04d}" for i in range(1, n + 1)]
    kind = st.sampled_from(["ok", "ok", "labelled", "cordoned", "notready"])
    percents = sorted(set(draw(st.lists(st.integers(1, 100), min_size=1, max_size=3))))
    if percents[-1] != 100:
        percents.append(100)
    return {
        "nodes": dict(zip(names, draw(st.lists(kind, min_size=n, max_size=n)), strict=True)),
        "steps": [(f"{p}%", 0) for p in percents],
        "max_parallel": draw(st.integers(1, 3)),
        "canary": draw(st.lists(st.sampled_from(names), max_size=2, unique=True)),
    }


@settings(max_examples=60, deadline=None)
@given(fleets())
def test_skip_completes_any_fleet_without_touching_a_skipped_node(fleet: dict[str, Any]) -> None:
    w = World(len(fleet["nodes"]),
              policy(upgradeSteps=steps(*fleet["steps"]), maxParallel=fleet["max_parallel"]),
              canary=fleet["canary"], settings=SKIP)
    for name, kind in fleet["nodes"].items():
        if kind == "labelled":
            w.set(name, labels={LABEL_UPGRADE_SKIP: "true"})
        elif kind == "cordoned":
            w.set(name, unschedulable=True)
        elif kind == "notready":
            w.set(name, ready=False)
    expected = sorted(n for n, kind in fleet["nodes"].items() if kind != "ok")
    policy_ = UpgradePolicy.from_spec(w.policy_raw)
    t = 0.0
    for _ in range(60):
        w.settle(t)
        listed = w.status.get("skipped") or []
        index = int(w.inner.get("currentStepIndex") or 0)
        n = len(w.nodes) - len(listed)
        if n and index:
            # never past the step's target, resolved against N without the skipped nodes
            assert len(w.on(NEW_REV)) <= policy_.step_targets(n)[index - 1]
        if w.status.get("phase") != "Progressing":
            break
        w.ready_all_in_flight()
        t += 60
    assert completed(w)  # also when every node was skipped (no rollout node left)
    assert w.status.get("skipped", []) == expected
    assert sorted(w.on(OLD_REV)) == expected
    assert {node for node, _ in w.deleted}.isdisjoint(expected)
    assert w.inner["totalUpgradeReplicas"] == len(w.nodes) - len(expected)
    if expected:
        assert all(name in skipped_condition(w)["message"] for name in expected)


def test_a_rollback_leaves_a_skipped_node_on_the_previous_driver_and_completes() -> None:
    w = World(3, policy(fallback="rollback"), settings=SKIP)
    w.set("node-0001", unschedulable=True)  # skipped at its turn
    w.settle(0)
    assert w.status["skipped"] == ["node-0001"]
    assert [n for n, _ in w.deleted] == ["node-0002"]
    w.pod("node-0002", waiting_reason="ErrImagePull")
    t = 60.0
    for _ in range(10):
        w.settle(t)
        if w.status["phase"] != "Terminating":
            break
        w.ready_all_in_flight()
        t += 60
    assert w.conditions()["RolledBack"]["status"] == "True"
    assert w.status["phase"] == "Idling"
    assert sorted(w.ready_on(OLD_REV)) == ["node-0001", "node-0002", "node-0003"]
    assert all(node != "node-0001" for node, _ in w.deleted)
    assert COND_NODES_SKIPPED not in w.conditions()  # it did not complete
