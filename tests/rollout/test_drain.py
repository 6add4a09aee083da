"""The drain of docs/live-clusters.md#the-drain (``rollout.drain``, ``rollout.waitFor``) against the
pure planner, on hand-built fleets: a world whose pods terminate when the test says and whose
budgets the test recomputes, as the disruption controller would."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as s

from reconciler.names import (
    ANN_DRAIN_BLOCKED_BY,
    ANN_DRAIN_SETTINGS,
    ANN_DRAIN_STARTED,
    ANN_FAILURE_REASON,
    ANN_SCALE_DOWN_DISABLED,
    ANN_STATE,
    LABEL_DRAIN_SKIP,
    STATE_DRAINING,
)
from reconciler.policy.label_selector import LabelSelector
from reconciler.policy.rollout_settings import DrainSettings, WaitForSettings
from reconciler.policy.schema import SCHEMA_FILES, schemas_dir
from reconciler.rollout.actions import (
    AnnotateNode,
    DeletePod,
    EvictPod,
    RecordEvent,
)
from reconciler.rollout.drain import NodeDrainSettings
from reconciler.rollout.model import (
    DisruptionBudget,
    PlannerSettings,
    RolloutNode,
    RolloutSnapshot,
    WorkloadPod,
)
from reconciler.rollout.planner import Plan, plan
from reconciler.rollout.simulator import EPOCH
from reconciler.timefmt import format_time

from .world import NEW_REV, OLD_REV, World, deletions, of_type, policy

WEB = {"app": "web"}
WAIT_LABEL = {"gpu.metax-tech.com/wait-for-completion": "true"}


def drain(**kw: Any) -> DrainSettings:
    return DrainSettings(**kw)


def web(i: int, **kw: Any) -> WorkloadPod:
    return WorkloadPod("serve", f"web-{i}", labels=WEB, **kw)


class DrainWorld(World):
    """The world of ``world.World`` with pods that end when the test says and budgets the test
    sets (what the disruption controller computes)."""

    def __init__(self, n: int, policy_raw: dict[str, Any], **kw: Any) -> None:
        super().__init__(n, policy_raw, **kw)
        self.budgets: dict[str, DisruptionBudget] = {}

    def snapshot(self) -> RolloutSnapshot:
        return dataclasses.replace(super().snapshot(), budgets=dict(self.budgets))

    def budget(self, allowed: int, name: str = "web-pdb", selector: str = "app=web") -> None:
        self.budgets[f"serve/{name}"] = DisruptionBudget(
            "serve", name, LabelSelector.parse(selector), allowed)

    def pods(self, name: str, *pods: WorkloadPod) -> None:
        self.set(name, pods=tuple(pods), workloads=tuple(p.key for p in pods if p.gpu))

    def end_terminating(self) -> list[str]:
        """Terminating pods go (their grace period is over); returns their keys."""
        gone: list[str] = []
        for name, node in list(self.nodes.items()):
            keep = tuple(p for p in node.pods if not p.terminating)
            gone += [p.key for p in node.pods if p.terminating]
            if len(keep) != len(node.pods):
                self.pods(name, *keep)
        return gone

    def state(self, name: str) -> str | None:
        return self.annotation(name, ANN_STATE)


def evictions(result: Plan) -> list[str]:
    return [f"{a.namespace}/{a.pod}" for a in result.actions if isinstance(a, EvictPod)]


def events(result: Plan, reason: str) -> list[RecordEvent]:
    return [a for a in of_type(result, RecordEvent) if a.reason == reason]


# ----------------------------------------------------------------------------- budgets


def test_a_budget_allowing_one_disruption_never_has_two_pods_down_over_six_nodes() -> None:
    # six nodes, one serving pod each behind a budget of minAvailable 5 (one disruption);
    # every node may drain at once (maxParallel 6): the budget alone paces the evictions
    w = DrainWorld(6, policy(maxParallel=6), settings=PlannerSettings(drain=drain()))
    for i, name in enumerate(sorted(w.nodes)):
        w.pods(name, web(i))
    down: dict[str, int] = {}  # evicted -> passes until its replacement is Ready elsewhere
    asked = 0
    t = 0.0
    for _ in range(200):
        w.budget(max(0, 6 - len(down) - 5))
        result = w.plan(t)
        asked += len(evictions(result))
        down.update((key, 2) for key in evictions(result))
        assert len(down) <= 1
        # a refused node shows draining with the budget named
        for entry in w.status.get("draining", []):
            if entry["pods"] and entry["pods"][0] not in evictions(result):
                assert entry["budgets"] == ["serve/web-pdb"]
        t += 5
        w.end_terminating()
        w.ready_all_in_flight()
        down = {key: left - 1 for key, left in down.items() if left > 1}
        if w.status["phase"] == "Idling":
            break
    assert w.status["phase"] == "Idling"
    assert sorted(w.ready_on(NEW_REV)) == sorted(w.nodes)
    assert asked == 6  # one request per pod: the planner asks only what the budget allows


def test_a_held_node_is_named_with_its_budget_and_the_event_is_recorded_once() -> None:
    w = DrainWorld(2, policy(maxParallel=2), settings=PlannerSettings(drain=drain()))
    w.pods("node-0001", web(1))
    w.pods("node-0002", web(2))
    w.budget(1)
    result = w.settle(0)  # both start: the budget's one disruption goes to node-0001
    assert evictions(result) == ["serve/web-1"]
    assert [e.node for e in events(result, "NodeDrainBlocked")] == ["node-0002"]
    assert w.state("node-0001") == STATE_DRAINING and w.state("node-0002") == STATE_DRAINING
    entries = {e["node"]: e for e in w.status["draining"]}
    assert entries["node-0002"]["pods"] == ["serve/web-2"]
    assert entries["node-0002"]["budgets"] == ["serve/web-pdb"]
    assert entries["node-0001"] == {"node": "node-0001", "since": format_time(EPOCH),
                                    "pods": ["serve/web-1"], "budgets": [], "waitingFor": []}
    assert "node-0002: serve/web-2 held by budget serve/web-pdb" in w.inner["message"]
    assert w.annotation("node-0002", ANN_DRAIN_BLOCKED_BY) == "serve/web-pdb"
    w.budget(0)
    again = w.plan(3)
    entries = {e["node"]: e for e in w.status["draining"]}
    assert entries["node-0001"]["waitingFor"] == ["serve/web-1 (terminating)"]
    assert events(again, "NodeDrainBlocked") == []  # the same budgets: no second Event
    assert evictions(again) == []
    assert again.requeue_at == EPOCH + 3 + 5  # asked again after 5 s at the earliest
    # the status snapshot committed to Git holds it as its schema says
    schema = json.loads((schemas_dir() / SCHEMA_FILES["status-snapshot"]).read_text())
    draining = schema["$defs"]["UpgradeStatus"]["properties"]["draining"]
    jsonschema.validate(w.status["draining"], {**draining, "$defs": schema["$defs"]})


def test_first_pass_events_name_the_budget() -> None:
    w = DrainWorld(2, policy(maxParallel=2), settings=PlannerSettings(drain=drain()))
    w.pods("node-0001", web(1))
    w.pods("node-0002", web(2))
    w.budget(0)
    w.plan(0)
    result = w.plan(0)
    blocked = events(result, "NodeDrainBlocked")
    assert [e.node for e in blocked] == ["node-0001", "node-0002"]
    assert all("serve/web-pdb" in e.message and e.type == "Warning" for e in blocked)


@settings(max_examples=60, deadline=None)
@given(
    pods=s.lists(s.tuples(s.integers(0, 5), s.sampled_from(["a", "b", "c"]), s.booleans()),
                 max_size=18),
    allowed=s.fixed_dictionaries({"a": s.integers(0, 3), "b": s.integers(0, 3)}),
)
def test_one_pass_never_asks_more_than_a_budget_allows(
    pods: list[tuple[int, str, bool]], allowed: dict[str, int]
) -> None:
    w = DrainWorld(6, policy(maxParallel=6), settings=PlannerSettings(drain=drain()))
    per_node: dict[str, list[WorkloadPod]] = {}
    for i, (node, app, terminating) in enumerate(pods):
        per_node.setdefault(f"node-{node + 1:04d}", []).append(
            WorkloadPod("serve", f"p-{i}", labels={"app": app}, terminating=terminating))
    for name, found in per_node.items():
        w.pods(name, *found)
    for app, count in allowed.items():
        w.budget(count, name=f"pdb-{app}", selector=f"app={app}")
    labels = {f"serve/p-{i}": app for i, (_, app, _) in enumerate(pods)}
    going = {f"serve/p-{i}" for i, (_, _, t) in enumerate(pods) if t}
    everything: list[str] = []
    for _ in range(4):  # the template, the step, the starts: each pass on its own
        result = w.plan(0)
        asked = [labels[key] for key in evictions(result)]
        for app, count in allowed.items():
            assert asked.count(app) <= count
        assert not going.intersection(evictions(result))
        everything += asked
    # a pod no budget covers goes at once
    assert everything.count("c") == sum(1 for _, app, t in pods if app == "c" and not t)


# ----------------------------------------------------------------------------- what is evicted


def test_daemonset_mirror_skip_emptydir_and_bare_pods_are_never_evicted() -> None:
    w = DrainWorld(1, policy(), settings=PlannerSettings(drain=drain()))
    w.pods(
        "node-0001",
        WorkloadPod("kube-system", "exporter", controller_kind="DaemonSet"),
        WorkloadPod("kube-system", "static", controller_kind="Node", mirror=True),
        WorkloadPod("ml", "pinned", labels={LABEL_DRAIN_SKIP: "true"}),
        WorkloadPod("ml", "scratch", empty_dir=True),
        WorkloadPod("ml", "bare", controller_kind=None),
        WorkloadPod("ml", "cpu-only", gpu=False),
        WorkloadPod("ml", "train"),
    )
    seen = evictions(w.settle(0))
    for t in range(0, 100, 10):
        result = w.plan(t)
        seen += evictions(result)
        w.end_terminating()
    assert seen == ["ml/train"]
    assert w.state("node-0001") == STATE_DRAINING  # held by the pods drain will not evict
    (entry,) = w.status["draining"]
    assert entry["waitingFor"] == ["ml/bare (no controller)", "ml/scratch (emptyDir)"]
    assert "node-0001: waiting for ml/bare (no controller)" in w.inner["message"]
    # once they are gone the node upgrades, DaemonSet, mirror and skip-labelled pods still there
    w.pods("node-0001", *(p for p in w.nodes["node-0001"].pods
                          if p.name not in ("bare", "scratch")))
    result = w.plan(100)
    assert deletions(result) == ["node-0001"]
    assert w.state("node-0001") == "upgrading"
    assert "draining" not in w.status


def test_delete_empty_dir_evicts_emptydir_pods_and_a_selector_leaves_others_waiting() -> None:
    w = DrainWorld(1, policy(), settings=PlannerSettings(drain=drain(
        delete_empty_dir=True, pod_selector=LabelSelector.parse("app=web"))))
    w.pods("node-0001", web(1, empty_dir=True), WorkloadPod("ml", "train"))
    w.settle(0)
    result = w.plan(0)
    assert evictions(result) == []  # evicted in the start's pass already
    assert [p.terminating for p in w.nodes["node-0001"].pods] == [True, False]
    (entry,) = w.status["draining"]
    assert "ml/train (not selected by drain.podSelector)" in entry["waitingFor"]


# ----------------------------------------------------------------------------- waitFor


def test_wait_for_pods_are_waited_for_then_drained_after_the_timeout() -> None:
    job = WorkloadPod("ml", "train-0", labels=WAIT_LABEL, controller_kind="Job")
    w = DrainWorld(1, policy(), settings=PlannerSettings(
        drain=drain(timeout=3600), wait_for=WaitForSettings(timeout=600)))
    w.pods("node-0001", job, web(1))
    w.settle(0)
    result = w.plan(1)
    assert w.state("node-0001") == STATE_DRAINING
    assert "ml/train-0 (waitFor)" in w.status["draining"][0]["waitingFor"]
    assert evictions(result) == []  # web-1 went at the start; the job is waited for
    assert result.requeue_at == EPOCH + 600  # the waitFor timeout wakes the planner
    w.end_terminating()
    assert evictions(w.plan(599)) == []
    assert evictions(w.plan(600)) == ["ml/train-0"]
    w.end_terminating()
    assert deletions(w.plan(610)) == ["node-0001"]


def test_wait_for_without_drain_waits_cordoned_and_never_evicts() -> None:
    job = WorkloadPod("ml", "train-0", labels=WAIT_LABEL, controller_kind="Job", gpu=False)
    w = DrainWorld(2, policy(), settings=PlannerSettings(wait_for=WaitForSettings()))
    w.pods("node-0001", job)
    result = w.settle(0)
    assert deletions(result) == ["node-0002"]
    assert w.nodes["node-0001"].unschedulable  # cordoned ahead: no new job lands
    assert "node-0001 (ml/train-0)" in w.inner["message"]
    w.ready_all_in_flight()
    for t in (60, 600, 6000):
        result = w.plan(t)
        assert evictions(result) == [] and deletions(result) == []
        assert w.nodes["node-0001"].unschedulable
    w.pods("node-0001")
    assert deletions(w.plan(6001)) == ["node-0001"]


# ----------------------------------------------------------------------------- onTimeout


def _timeout_world(on_timeout: str, **kw: Any) -> DrainWorld:
    w = DrainWorld(2, policy(**kw), settings=PlannerSettings(
        drain=drain(timeout=300, on_timeout=on_timeout)))
    w.pods("node-0001", web(1))
    w.budget(0)
    return w


def test_on_timeout_wait_keeps_waiting_and_says_so() -> None:
    w = _timeout_world("wait")
    w.settle(0)
    result = w.plan(299)
    assert result.requeue_at is not None and result.requeue_at <= EPOCH + 300
    result = w.plan(300)
    assert w.state("node-0001") == STATE_DRAINING
    assert w.inner["currentFailureRetry"] == 0
    assert "timed out after 300s, onTimeout wait" in w.inner["message"]
    w.budget(1)
    assert evictions(w.plan(400)) == ["serve/web-1"]


def test_on_timeout_fail_counts_one_failure() -> None:
    w = _timeout_world("fail", maxFailureThreshold=2)
    w.settle(0)
    w.plan(299)
    assert w.inner["currentFailureRetry"] == 0
    result = w.plan(300)
    assert w.state("node-0001") == "failed"
    assert w.annotation("node-0001", ANN_FAILURE_REASON) == "DrainTimeout"
    assert w.inner["currentFailureRetry"] == 1
    assert [e.node for e in events(result, "NodeFailed")] == ["node-0001"]
    w.plan(301)
    assert w.inner["currentFailureRetry"] == 1  # one failure, not one per pass


def test_rollback_moves_drain_and_a_timeout_there_counts_no_failure() -> None:
    w = DrainWorld(3, policy(maxParallel=1, maxFailureThreshold=1, fallback="rollback"),
                   settings=PlannerSettings(drain=drain(timeout=300, on_timeout="fail")))
    w.settle(0)
    w.ready("node-0001")
    w.plan(60)  # node-0001 upgraded, node-0002 starts
    w.pod("node-0002", waiting_reason="CrashLoopBackOff")
    w.pods("node-0001", web(1))  # a serving pod landed on the upgraded node
    w.budget(0)
    w.plan(120)  # the failure reaches the threshold: rollback
    assert w.status["phase"] == "Terminating"
    for t in range(121, 1000, 60):
        w.plan(t)
        w.ready_all_in_flight()
    assert w.state("node-0001") == STATE_DRAINING  # held by its budget, failed never
    assert "timed out" in w.inner["message"]
    w.budget(1)
    w.plan(1000)
    w.end_terminating()
    w.plan(1001)
    w.ready_all_in_flight()
    for t in range(1002, 1010):
        w.plan(t)
    assert w.status["phase"] == "Idling"
    assert sorted(w.ready_on(OLD_REV)) == sorted(w.nodes)


def test_on_timeout_delete_deletes_what_is_left() -> None:
    w = _timeout_world("delete")
    w.settle(0)
    result = w.plan(300)
    assert of_type(result, DeletePod) == [DeletePod("node-0001", "serve", "web-1")]
    w.end_terminating()
    assert deletions(w.plan(301)) == ["node-0001"]


# ----------------------------------------------------------------------------- records


def test_settings_changed_mid_rollout_apply_from_the_next_node() -> None:
    w = DrainWorld(2, policy(maxFailureThreshold=3), settings=PlannerSettings(
        ready_timeout=50, drain=drain(timeout=100, on_timeout="fail")))
    w.pods("node-0001", web(1))
    w.budget(0)
    w.settle(0)
    record = NodeDrainSettings.from_text(w.annotation("node-0001", ANN_DRAIN_SETTINGS))
    assert record is not None and record.drain is not None and record.drain.timeout == 100
    # the settings change: node-0001 keeps its own (fails at 100, not 1000)
    w.settings = PlannerSettings(ready_timeout=1000, drain=drain(timeout=1000,
                                                                  on_timeout="fail"))
    w.plan(99)
    assert w.state("node-0001") == STATE_DRAINING
    w.plan(100)
    assert w.annotation("node-0001", ANN_FAILURE_REASON) == "DrainTimeout"
    # node-0002 starts with the new settings; node-0001's retry too
    w.plan(101)
    record2 = NodeDrainSettings.from_text(w.annotation("node-0002", ANN_DRAIN_SETTINGS))
    assert record2 is not None and record2.ready_timeout == 1000


def test_in_flight_nodes_keep_the_ready_timeout_they_started_with() -> None:
    w = DrainWorld(1, policy(maxFailureThreshold=3), settings=PlannerSettings(
        ready_timeout=50, drain=drain()))
    w.settle(0)
    assert w.state("node-0001") == "upgrading"  # idle: its pod went at once
    w.settings = PlannerSettings(ready_timeout=1000, drain=drain())
    w.plan(49)
    assert w.state("node-0001") == "upgrading"
    w.plan(50)
    assert w.annotation("node-0001", ANN_FAILURE_REASON) == "ReadyTimeout"


def test_a_restart_resumes_the_same_drain_with_the_same_timer() -> None:
    w = _timeout_world("fail")
    w.settle(0)
    started = w.annotation("node-0001", ANN_DRAIN_STARTED)
    assert started == format_time(EPOCH)
    # a new process: the planner keeps no memory, it reads the node annotations
    w.plan(200)
    assert w.annotation("node-0001", ANN_DRAIN_STARTED) == started
    again = plan(w.snapshot(), EPOCH + 200, w.settings)
    assert [a for a in again.actions if not isinstance(a, RecordEvent)] == []
    w.plan(300)
    assert w.annotation("node-0001", ANN_FAILURE_REASON) == "DrainTimeout"


def test_scale_down_disabled_is_set_while_draining_and_removed_only_when_ours() -> None:
    w = DrainWorld(2, policy(maxParallel=2), settings=PlannerSettings(drain=drain()))
    w.set("node-0002", annotations={ANN_SCALE_DOWN_DISABLED: "true"})  # a person's
    w.pods("node-0001", web(1))
    w.settle(0)
    assert w.annotation("node-0001", ANN_SCALE_DOWN_DISABLED) == "true"
    record = json.loads(w.annotation("node-0001", ANN_DRAIN_SETTINGS) or "{}")
    assert record.get("scaleDownDisabled") is True
    assert "scaleDownDisabled" not in json.loads(
        w.annotation("node-0002", ANN_DRAIN_SETTINGS) or "{}")
    w.end_terminating()
    w.plan(1)
    w.ready_all_in_flight()
    w.plan(60)
    assert w.status["phase"] == "Idling"
    assert w.annotation("node-0001", ANN_SCALE_DOWN_DISABLED) is None
    assert w.annotation("node-0002", ANN_SCALE_DOWN_DISABLED) == "true"
    for name in w.nodes:
        assert w.annotation(name, ANN_DRAIN_SETTINGS) is None
        assert w.annotation(name, ANN_DRAIN_STARTED) is None


# ----------------------------------------------------------------------------- drain off


def _fleet(pods_per_node: list[list[tuple[str, bool]]]) -> dict[str, RolloutNode]:
    nodes: dict[str, RolloutNode] = {}
    w = World(len(pods_per_node), policy())
    for (name, node), pods in zip(sorted(w.nodes.items()), pods_per_node, strict=True):
        found = tuple(WorkloadPod("ml", f"{name}-{i}", gpu=gpu, labels=WAIT_LABEL if i % 2 else {})
                      for i, (_, gpu) in enumerate(pods))
        nodes[name] = dataclasses.replace(
            node, pods=found, workloads=tuple(p.key for p in found if p.gpu))
    return nodes


@settings(max_examples=40, deadline=None)
@given(s.lists(s.lists(s.tuples(s.just(""), s.booleans()), max_size=3), min_size=1,
               max_size=6),
       s.integers(1, 4))
def test_drain_off_ignores_pods_and_budgets(pods: list[list[tuple[str, bool]]],
                                            parallel: int) -> None:
    """With drain and waitFor off the planner reads ``workloads`` alone, as before."""
    w = World(len(pods), policy(maxParallel=parallel))
    w.nodes = _fleet(pods)
    w.settle(0)
    with_pods = dataclasses.replace(w.snapshot(), budgets={
        "serve/x": DisruptionBudget("serve", "x", LabelSelector(), 0)})
    bare = dataclasses.replace(with_pods, budgets={}, nodes={
        n: dataclasses.replace(node, pods=()) for n, node in with_pods.nodes.items()})
    a = plan(with_pods, EPOCH + 1)
    b = plan(bare, EPOCH + 1)
    assert a == b
    assert not any(isinstance(x, EvictPod | DeletePod) for x in a.actions)
    assert not any(isinstance(x, AnnotateNode) and ANN_DRAIN_SETTINGS in x.annotations
                   for x in a.actions)


# ----------------------------------------------------------------------------- slots


def test_a_draining_node_holds_a_slot_and_is_not_unavailable() -> None:
    # maxParallel 1, maxUnavailable 0: node-0001 drains (held by its budget); nothing else
    # starts, and it does not count as unavailable
    w = DrainWorld(3, policy(maxParallel=1, maxUnavailable=0),
                   settings=PlannerSettings(drain=drain()))
    w.pods("node-0001", web(1))
    w.budget(0)
    w.settle(0)
    result = w.plan(10)
    assert result.in_flight == 1 and result.unavailable == 0
    assert w.state("node-0001") == STATE_DRAINING
    assert deletions(result) == [] and w.state("node-0003") is None
    w.budget(1)
    assert evictions(w.plan(20)) == ["serve/web-1"]
    w.end_terminating()
    assert deletions(w.plan(25)) == ["node-0001"]


def test_a_rollback_releases_a_node_draining_for_the_new_version() -> None:
    # node-0002 drains for the new version when node-0001's failure rolls the rollout back:
    # it still runs the old driver, so it is released (uncordoned, records and the
    # autoscaler annotation removed), never upgraded
    w = DrainWorld(2, policy(maxParallel=2, fallback="rollback"),
                   settings=PlannerSettings(drain=drain()))
    w.pods("node-0002", web(2))
    w.budget(0)
    w.settle(0)
    assert w.state("node-0002") == STATE_DRAINING
    w.pod("node-0001", waiting_reason="ErrImagePull")
    for t in (10, 11, 12):
        w.plan(t)
    assert w.status["phase"] == "Terminating"
    node = w.nodes["node-0002"]
    assert w.state("node-0002") is None and not node.unschedulable
    for key in (ANN_DRAIN_SETTINGS, ANN_DRAIN_STARTED, ANN_DRAIN_BLOCKED_BY,
                ANN_SCALE_DOWN_DISABLED):
        assert key not in node.annotations, key
    assert node.pod is not None and node.pod.revision == OLD_REV
