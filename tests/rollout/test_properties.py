"""Property tests: random fleets, policies, faults, timings and controller crashes, with an
observer that checks the docs/rollout.md#upgrading-one-node invariants after every planning call
from the fleet itself."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as s

from reconciler.names import (
    ANN_ATTEMPT,
    ANN_DELETED_AT,
    ANN_FAILURE_TOLERATED,
    ANN_FAILURES,
    ANN_STATE,
    ANN_TARGET,
    STATE_CORDONED,
)
from reconciler.policy.upgrade_policy import UpgradePolicy
from reconciler.rollout.actions import Action, AnnotateNode, DeleteDriverPod
from reconciler.rollout.model import FAILURE_REASONS, PlannerSettings, RolloutNode, RolloutSnapshot
from reconciler.rollout.node_class import tolerated_step
from reconciler.rollout.planner import Plan, plan
from reconciler.rollout.simulator import EPOCH, SimConfig, Simulation
from reconciler.timefmt import LATEST_TIME, parse_time

from .world import NEW_PAYLOAD, NEW_REV, OLD_REV, OLD_VERSION

SETTINGS = PlannerSettings(ready_timeout=600)


def in_flight(node: RolloutNode, now: float) -> bool:
    """docs/rollout.md#upgrading-one-node, computed from the node alone."""
    ann = node.annotations
    target = ann.get(ANN_TARGET)
    pod = node.pod
    if ann.get(ANN_STATE) == STATE_CORDONED:
        if pod is not None and not pod.deleting and pod.revision != target:
            return False  # cordoned ahead, its old pod not deleted
    elif ann.get(ANN_STATE) != "upgrading":
        return False
    if (
        pod is not None and pod.revision == target and not pod.deleting
        and (pod.ready or pod.waiting_reason in FAILURE_REASONS)
    ):
        return False
    if ANN_DELETED_AT not in ann:
        return True  # deleted after its cordon ahead; the record follows the deletion
    deleted_at = parse_time(ann[ANN_DELETED_AT])
    return now < deleted_at + SETTINGS.ready_timeout


def unavailable(nodes: list[RolloutNode], now: float) -> int:
    count = 0
    for node in nodes:
        if in_flight(node, now):
            continue
        if tolerated_step(node.annotations, NEW_REV) is not None:
            continue  # left behind by a step's toleration: not unavailable
        pod = node.pod
        ours = node.annotations.get(ANN_STATE) in ("upgrading", "failed", STATE_CORDONED)
        if (
            not node.ready or pod is None or not pod.ready or pod.deleting
            or (node.unschedulable and not ours)
        ):
            count += 1
    return count


def moves(before: RolloutSnapshot, actions: Sequence[Action]) -> list[tuple[str, str | None]]:
    """(node, target revision) of each driver pod deletion among ``actions``: the target of the
    node's record written earlier in the same plan, else of the record it had. A deletion for
    the rollout's revision (``NEW_REV``) is a start or a retry; one for the previous revision is
    a rollback move, a repair (docs/rollout.md#upgrading-one-node, 5), whatever the status read
    before the pass says: a pass that finds the payload back on the previous version (its own
    RestorePayload landed, the status write did not) begins the rollback and, the template
    being back too, moves nodes in that very pass (decision 13)."""
    recorded: dict[str, str | None] = {}
    found: list[tuple[str, str | None]] = []
    for action in actions:
        if isinstance(action, AnnotateNode) and ANN_TARGET in action.annotations:
            recorded[action.node] = action.annotations[ANN_TARGET]
        elif isinstance(action, DeleteDriverPod):
            target = (recorded[action.node] if action.node in recorded
                      else before.nodes[action.node].annotations.get(ANN_TARGET))
            found.append((action.node, target))
    return found


class Observer:
    def __init__(self, policy: UpgradePolicy) -> None:
        self.policy = policy
        self.sim: Simulation | None = None
        self.deletions: dict[tuple[str, str], list[int]] = defaultdict(list)
        #: (node, phase of the status read before the pass) of each rollback move
        self.moved_back: list[tuple[str, str | None]] = []
        self.checked = 0

    def __call__(self, before: RolloutSnapshot, plan: Plan, applied: int) -> None:
        assert self.sim is not None
        sim = self.sim
        now = EPOCH + sim.t
        crashed = sim.calls in sim.config.crash_calls
        status = before.status if crashed else plan.status
        inner = status.get("status") or {}
        policy = self.policy
        n = len(before.nodes)
        targets = policy.step_targets(n)
        index = int(inner.get("currentStepIndex") or 0)
        actions = plan.actions[:applied]
        phase_before = before.status.get("phase")
        # no node's pod deleted twice for one target, except a counted retry
        pending_attempt: dict[str, str] = {}
        for action in actions:
            if isinstance(action, AnnotateNode) and ANN_ATTEMPT in action.annotations:
                pending_attempt[action.node] = str(action.annotations[ANN_ATTEMPT])
            if isinstance(action, DeleteDriverPod):
                node = sim.nodes[action.node]
                target = node.annotations[ANN_TARGET]
                attempt = int(pending_attempt.get(action.node) or node.annotations[ANN_ATTEMPT])
                history = self.deletions[(action.node, target)]
                assert not history or attempt > history[-1], (
                    f"{action.node} deleted again for {target} without a counted retry"
                )
                history.append(attempt)
        # fresh starts only while unavailable <= maxUnavailable: a move to the rollout's
        # revision of a node with no record for it, or only cordoned ahead for it (a rollback
        # move is a repair, held by maxParallel alone, also in a pass whose status before still
        # said Progressing)
        self.moved_back += [(node, phase_before) for node, target in moves(before, actions)
                            if target != NEW_REV]
        fresh = [
            node for node, target in moves(before, actions)
            if phase_before == "Progressing" and target == NEW_REV
            and not (before.nodes[node].annotations.get(ANN_TARGET) == NEW_REV
                     and before.nodes[node].annotations.get(ANN_STATE) != STATE_CORDONED)
        ]
        if fresh:
            # nodes moved in this very plan (retries) are in flight, not unavailable; nodes a
            # step's toleration left behind in it are not unavailable either
            moved = {a.node for a in actions if isinstance(a, DeleteDriverPod) or (
                isinstance(a, AnnotateNode) and a.annotations.get(ANN_FAILURE_TOLERATED))}
            seen = unavailable([n for n in before.nodes.values() if n.name not in moved], now)
            assert seen <= policy.resolved_max_unavailable(n), (
                f"started {len(fresh)} nodes while {seen} unavailable"
            )
        # in flight <= maxParallel of the current batch (the stopped one during a rollback)
        if 0 < index <= len(targets):
            if status.get("phase") in ("Terminating", "Disabling"):
                batch = int(inner.get("currentUpgradeReplicas") or 0)
            else:
                batch = targets[index - 1] - max(targets[: index - 1], default=0)
            # checked when the plan adds to the nodes in flight: nodes leaving can shrink the
            # batch (and its maxParallel) under nodes already in flight, which then only finish
            flying = {name for name, node in sim.nodes.items() if in_flight(node, now)}
            was_flying = {name for name, node in before.nodes.items() if in_flight(node, now)}
            if flying - was_flying:
                assert len(flying) <= policy.batch_max_parallel(max(batch, 0)), (
                    f"{len(flying)} in flight, step {index} batch {batch}"
                )
            # upgraded <= the current step's target
            # checked when the plan starts a node, for the same reason (a percentage target
            # can shrink under upgraded nodes when nodes leave)
            if fresh and not crashed and status.get("phase") == "Progressing":
                upgraded = sum(
                    1 for node in sim.nodes.values()
                    if (node.annotations.get(ANN_TARGET) == NEW_REV
                        and node.annotations.get(ANN_STATE) != STATE_CORDONED)
                    or (node.pod is not None and node.pod.revision == NEW_REV
                        and not node.name.startswith("node-9"))  # joiners take the template
                )
                # a step not above an earlier one adds no nodes
                # (docs/policy.md#how-the-numbers-resolve)
                effective = max(targets[:index])
                assert upgraded <= effective, (upgraded, effective)
        self.checked += 1


quantity_count = s.integers(min_value=1, max_value=6)
percent = s.integers(min_value=1, max_value=100).map(lambda p: f"{p}%")
pause = s.one_of(s.just(0), s.integers(min_value=1, max_value=600_000), s.just(None))


@s.composite
def scenarios(draw: Any) -> dict[str, Any]:
    n = draw(s.integers(min_value=1, max_value=24))
    count = draw(s.integers(min_value=0, max_value=3))
    # a gate: pauseDuration left out
    raw_steps = [
        {"replicas": draw(s.one_of(quantity_count, percent)),
         **({} if (p := draw(pause)) is None else {"pauseDuration": p})}
        for _ in range(count)
    ]
    last = draw(pause)
    raw_steps.append({"replicas": "100%", **({} if last is None else {"pauseDuration": last})})
    policy = {
        "enableRollout": True,
        "upgradeSteps": raw_steps,
        "maxParallel": draw(s.one_of(quantity_count, percent)),
        "maxUnavailable": draw(s.one_of(s.integers(min_value=0, max_value=3),
                                        s.integers(min_value=0, max_value=100).map(
                                            lambda p: f"{p}%"))),
        "maxFailureThreshold": draw(s.integers(min_value=1, max_value=4)),
        "fallback": draw(s.sampled_from(["pause", "rollback"])),
    }
    width = 4
    names = [f"node-{i:0{width}d}" for i in range(1, n + 1)]
    faults = draw(s.dictionaries(
        s.sampled_from(names),
        s.sampled_from(["imagepull", "crashloop", "never-ready", "node-notready"]),
        max_size=3,
    ))
    return {
        "n": n,
        "policy": policy,
        "faults": faults,
        "install": draw(s.integers(min_value=1, max_value=400)),
        "confirm": draw(s.integers(min_value=0, max_value=120)),
        "crashes": draw(s.frozensets(s.integers(min_value=1, max_value=80), max_size=6)),
        "crash_seed": draw(s.integers(min_value=0, max_value=1000)),
        "interventions": (),
    }


@s.composite
def scenarios_with_people(draw: Any) -> dict[str, Any]:
    """The same, plus people and the cluster acting mid-rollout."""
    scenario = draw(scenarios())
    names = [f"node-{i:04d}" for i in range(1, scenario["n"] + 1)]
    kinds = s.sampled_from(["disable", "pause", "resume", "busy", "free", "join", "leave"])
    interventions = []
    for _ in range(draw(s.integers(min_value=1, max_value=5))):
        kind = draw(kinds)
        if kind == "join":
            node = f"node-{draw(s.integers(min_value=9000, max_value=9003)):04d}"
        elif kind in ("busy", "free", "leave"):
            node = draw(s.sampled_from(names))
        else:
            node = ""
        interventions.append((float(draw(s.integers(min_value=1, max_value=4000))), kind, node))
    scenario["interventions"] = tuple(sorted(interventions))
    return scenario


ObserverT = TypeVar("ObserverT", bound=Observer)


def run(scenario: dict[str, Any]) -> tuple[Simulation, Any, Observer]:
    return run_observed(scenario, Observer(UpgradePolicy.from_spec(scenario["policy"])))


def run_observed(scenario: dict[str, Any], observer: ObserverT, *,
                 settings: PlannerSettings = SETTINGS,
                 **config: Any) -> tuple[Simulation, Any, ObserverT]:
    """The scenario simulated with ``observer`` checking every planning call; ``config``: more
    of ``SimConfig`` (a fleet of its own)."""
    sim_config = SimConfig(
        nodes=scenario["n"],
        from_version=OLD_VERSION,
        install_seconds=scenario["install"],
        auto_confirm=scenario["confirm"],
        faults=scenario["faults"],
        settings=settings,
        verify_idempotent=not scenario["crashes"],
        crash_calls=scenario["crashes"],
        crash_seed=scenario["crash_seed"],
        observer=observer,
        interventions=scenario["interventions"],
        **config,
    )
    sim = Simulation({"payload": NEW_PAYLOAD, "upgradePolicy": scenario["policy"]}, sim_config)
    observer.sim = sim
    return sim, sim.run(), observer


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_invariants_hold_at_every_tick(scenario: dict[str, Any]) -> None:
    sim, result, observer = run(scenario)
    event(f"stop: {result.stop_reason}")
    crashed = bool(scenario["crashes"] & set(range(1, result.planning_calls + 1)))
    event(f"crashes applied: {crashed}")
    assert observer.checked == result.planning_calls
    faults = scenario["faults"]
    notready = {name for name, fault in faults.items() if fault == "node-notready"}
    if result.completed:
        assert all(
            n.pod is not None and n.pod.revision == NEW_REV and n.pod.ready
            for n in sim.nodes.values()
        )
        assert result.final["status"]["currentStepState"] == "Completed"
        assert not any(n.unschedulable for n in sim.nodes.values())
    if result.rolled_back:
        for node in sim.nodes.values():
            assert node.pod is not None and node.pod.revision == OLD_REV
            if node.name not in notready:
                assert node.pod.ready and not node.unschedulable
        assert result.final["phase"] == "Idling"
        assert result.final["status"]["currentStepState"] == "Completed"
    if not faults:
        assert result.completed, result.stop_reason
        # virtual time adds nothing: each batch takes ceil(batch / maxParallel) waves
        policy = UpgradePolicy.from_spec(scenario["policy"])
        if not scenario["crashes"]:
            assert round(result.duration_seconds * 1000) == minimum_duration_ms(policy, scenario)
    elif not notready:
        expected = "rolled-back" if scenario["policy"]["fallback"] == "rollback" else (
            "fallback-pause"
        )
        assert result.stop_reason == expected


def minimum_duration_ms(policy: UpgradePolicy, scenario: dict[str, Any]) -> int:
    """Sum over batches of waves x install time, plus pauses and gate confirmations."""
    n = scenario["n"]
    targets = policy.step_targets(n)
    total = 0
    previous = 0
    for step, target in zip(policy.steps, targets, strict=True):
        batch = max(target - previous, 0)
        previous = max(previous, target)
        if batch:
            waves = math.ceil(batch / policy.batch_max_parallel(batch))
            total += waves * scenario["install"] * 1000
        total += scenario["confirm"] * 1000 if step.pause_ms is None else step.pause_ms
    return total


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios_with_people())
def test_invariants_hold_when_people_and_nodes_act_mid_rollout(scenario: dict[str, Any]) -> None:
    sim, result, observer = run(scenario)
    event(f"stop: {result.stop_reason}")
    assert observer.checked == result.planning_calls
    notready = {name for name, fault in scenario["faults"].items() if fault == "node-notready"}
    if result.completed:
        assert all(
            n.pod is not None and n.pod.revision == NEW_REV and n.pod.ready
            and not n.unschedulable
            for n in sim.nodes.values()
        )
    if result.rolled_back:
        for node in sim.nodes.values():
            assert node.pod is not None and node.pod.revision == OLD_REV, node
            if node.name not in notready:
                assert node.pod.ready
        assert result.final["phase"] == ("Idling" if sim.policy.enable_rollout else "Disabled")
    if not result.completed and not scenario["faults"] and result.stop_reason != "until":
        # without faults only a person (pause, disable) or a busy node stops a rollout
        kinds = {kind for _, kind, _ in scenario["interventions"]}
        assert kinds & {"pause", "disable", "busy"}, result.stop_reason


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
int64 = s.one_of(
    s.integers(min_value=INT64_MIN, max_value=INT64_MAX),
    s.sampled_from([INT64_MIN, -1, 0, 1, 2**62, INT64_MAX]),
)
int64_or_percent = s.one_of(
    int64, s.integers(min_value=0, max_value=INT64_MAX).map(lambda p: f"{p}%"),
)


@s.composite
def int64_policies(draw: Any) -> dict[str, Any]:
    """Any policy whose integers are Kubernetes int64 (validation accepts fewer of them)."""
    # pauseDuration: an int64, left out (a gate), or {} (a gate stored under an older CRD)
    raw_steps = [
        {"replicas": draw(int64_or_percent),
         **({} if (p := draw(s.one_of(int64, s.just({}), s.none()))) is None
            else {"pauseDuration": p}),
         **({} if (t := draw(s.one_of(s.none(), int64_or_percent))) is None
            else {"toleration": t})}
        for _ in range(draw(s.integers(min_value=0, max_value=5)))
    ]
    return {
        # mostly rollouts that run: disabled or paused ones plan little
        "enableRollout": draw(s.sampled_from([True, True, True, False])),
        "upgradeSteps": raw_steps,
        "pause": draw(s.sampled_from([False, False, False, True])),
        "maxParallel": draw(int64_or_percent),
        "maxUnavailable": draw(int64_or_percent),
        "maxFailureThreshold": draw(int64),
        "fallback": draw(s.sampled_from(["pause", "rollback"])),
    }


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=int64_policies(),
    n=s.integers(min_value=1, max_value=6),
    faults=s.lists(s.sampled_from(["imagepull", "crashloop", "never-ready", "node-notready"]),
                   max_size=2),
    confirm=s.integers(min_value=0, max_value=600),
    late=s.floats(min_value=0, max_value=LATEST_TIME - EPOCH - 1),
)
def test_plan_never_raises_for_any_int64_policy(
    policy: dict[str, Any], n: int, faults: list[str], confirm: int, late: float,
) -> None:
    """The simulator plans every pass of a rollout (pauses, gates confirmed, failures,
    fallbacks) for a day of virtual time; then the planner plans the state it reached at any
    later instant up to year 9999."""
    config = SimConfig(
        nodes=n, from_version=OLD_VERSION, install_seconds=60, auto_confirm=confirm,
        until=86400, settings=SETTINGS,
        faults={f"node-{i:04d}": f for i, f in enumerate(faults, start=1)},  # type: ignore
    )
    sim = Simulation({"payload": NEW_PAYLOAD, "upgradePolicy": policy}, config)
    result = sim.run()
    event(f"stop: {result.stop_reason}")
    assert result.planning_calls >= 1
    later = plan(sim._snapshot(), EPOCH + late, SETTINGS)
    recheck = (later.status.get("status") or {}).get("recheckTime")
    if recheck:
        assert parse_time(recheck) <= LATEST_TIME
    if later.requeue_at is not None:
        assert later.requeue_at <= LATEST_TIME + SETTINGS.ready_timeout


# --------------------------------------------------------------------------- toleration


class TolerationObserver(Observer):
    """The invariants of a step's toleration (docs/rollout.md#failures-tolerated-in-a-step), on
    top of the others: a step's tolerated nodes never exceed its T_i; a tolerated failure never
    moves ``currentFailureRetry`` (it is the failures counted in the batch epoch, capped); a
    tolerated node is never retried; the fallback fires only on counted failures."""

    def __init__(self, policy: UpgradePolicy) -> None:
        super().__init__(policy)
        self.tolerated_seen: set[str] = set()
        self.fallbacks = 0

    def __call__(self, before: RolloutSnapshot, plan: Plan, applied: int) -> None:
        super().__call__(before, plan, applied)
        assert self.sim is not None
        sim = self.sim
        policy = self.policy
        allowed = policy.step_tolerations(len(before.nodes))
        actions = plan.actions[:applied]
        for action in actions:
            if isinstance(action, AnnotateNode) and action.annotations.get(
                    ANN_FAILURE_TOLERATED):
                assert ANN_FAILURES not in action.annotations, action  # not counted
                self.tolerated_seen.add(action.node)
        # a tolerated node is never retried (moved to the rollout's revision again); a rollback
        # moves it back like any failed node, and its move drops the record
        for name, target in moves(before, actions):
            if tolerated_step(before.nodes[name].annotations, NEW_REV) is None:
                continue
            assert target != NEW_REV, f"{name} retried after its failure was tolerated"
            assert plan.status.get("phase") in ("Terminating", "Disabling"), (
                f"{name} moved to {target} outside a rollback")
            assert ANN_FAILURE_TOLERATED not in sim.nodes[name].annotations, (
                f"{name} moved back with its toleration record")
        per_step: dict[int, int] = defaultdict(int)
        for node in sim.nodes.values():
            step = tolerated_step(node.annotations, NEW_REV)
            if step is not None:
                per_step[step] += 1
        for step, count in per_step.items():
            assert count <= allowed[step - 1], (step, count, allowed)
        if sim.calls in sim.config.crash_calls:
            return
        status = plan.status
        inner = status.get("status") or {}
        threshold = policy.max_failure_threshold
        if status.get("phase") == "Progressing" and before.status.get("phase") == "Progressing":
            assert inner["currentFailureRetry"] == min(threshold, counted(sim.nodes, status))
        was = before.status.get("status") or {}
        paused = _has(status, "BatchFailed") and not _has(before.status, "BatchFailed")
        rolled = (status.get("phase") == "Terminating"
                  and before.status.get("phase") == "Progressing")
        if paused or rolled:
            self.fallbacks += 1
            assert counted(sim.nodes, before.status) >= threshold, (
                "fallback without enough counted failures", was)


def _has(status: dict[str, Any], ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status", "True") == "True"
               for c in status.get("conditions") or ())


def counted(nodes: dict[str, RolloutNode], status: dict[str, Any]) -> int:
    """Failures the nodes record in the batch epoch of ``status`` (``<step>@<epoch start>``)."""
    index = (status.get("status") or {}).get("currentStepIndex") or 0
    since = next((c.get("lastTransitionTime") or "" for c in status.get("conditions") or ()
                  if c.get("type") == "Progressing"), "")
    prefix = f"{index}@{since}|"
    total = 0
    for node in nodes.values():
        failures = node.annotations.get(ANN_FAILURES) or ""
        if failures.startswith(prefix):
            total += int(failures[len(prefix):])
    return total


toleration = s.one_of(s.none(), s.integers(min_value=0, max_value=3),
                      s.integers(min_value=0, max_value=100).map(lambda p: f"{p}%"))


@s.composite
def tolerating_scenarios(draw: Any) -> dict[str, Any]:
    """Rollouts whose steps tolerate failures, with failing nodes (never NotReady ones: those
    are never started)."""
    scenario = draw(scenarios())
    for step in scenario["policy"]["upgradeSteps"]:
        if (value := draw(toleration)) is not None:
            step["toleration"] = value
    names = [f"node-{i:04d}" for i in range(1, scenario["n"] + 1)]
    scenario["faults"] = draw(s.dictionaries(
        s.sampled_from(names), s.sampled_from(["imagepull", "crashloop", "never-ready"]),
        max_size=4))
    return scenario


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tolerating_scenarios())
def test_toleration_invariants_hold_at_every_tick(scenario: dict[str, Any]) -> None:
    _, result, observer = check_toleration(scenario)
    event(f"stop: {result.stop_reason}")
    event(f"tolerated: {bool(observer.tolerated_seen)}")


#: the property's falsifying examples of a rollback resumed after a lost status write: step 1
#: tolerates node-0001 and node-0002, node-0003's four counted failures in step 3 fire the
#: rollback, and the controller dies after that pass's RestorePayload and SetDaemonSetImage
#: (call 19, every action landed), so the next pass reads Progressing and moves nodes back at
#: once: the tolerated node-0001 (n=6), and node-0007, in flight after its cordon ahead, turned
#: around while node-0003 is unavailable (n=7). Both are rollback moves, which the observer
#: took for a retry of a tolerated node and a fresh start under maxUnavailable 0.
ROLLBACK_AFTER_A_LOST_STATUS = [
    {"n": n,
     "policy": {"enableRollout": True,
                "upgradeSteps": [{"replicas": 2, "pauseDuration": 1, "toleration": 2},
                                 {"replicas": 1},
                                 {"replicas": "100%", "pauseDuration": 0}],
                "maxParallel": 2, "maxUnavailable": 0, "maxFailureThreshold": 4,
                "fallback": "rollback"},
     "faults": {"node-0001": "imagepull", "node-0002": "imagepull", "node-0003": "imagepull"},
     "install": 1, "confirm": 0, "crashes": frozenset([19, 1]), "crash_seed": 0,
     "interventions": ()}
    for n in (6, 7)
]


@pytest.mark.parametrize("scenario", ROLLBACK_AFTER_A_LOST_STATUS, ids=["n6", "n7"])
def test_a_rollback_resumed_after_a_lost_status_moves_tolerated_nodes_back(
    scenario: dict[str, Any],
) -> None:
    sim, result, observer = check_toleration(scenario)
    assert result.stop_reason == "rolled-back"
    assert observer.tolerated_seen == {"node-0001", "node-0002"}
    crashed = [e.message for e in result.events if e.type == "ControllerCrashed"]
    assert crashed[-1] == "controller died after 5 of 5 actions, status not written"
    # the pass after it read Progressing and moved nodes back: the tolerated node-0001 first
    # of the failed ones, and (n=7) node-0007, in flight after its cordon ahead, turned around
    first = {node for node, phase in observer.moved_back if phase == "Progressing"}
    assert first == ({"node-0001", "node-0007"} if scenario["n"] == 7 else {"node-0001",
                                                                            "node-0002"})
    assert all(node.pod is not None and node.pod.revision == OLD_REV and node.pod.ready
               and not node.unschedulable and ANN_FAILURE_TOLERATED not in node.annotations
               for node in sim.nodes.values())


def check_toleration(scenario: dict[str, Any]) -> tuple[Simulation, Any, TolerationObserver]:
    """The scenario simulated under ``TolerationObserver``, and its end as the policy and the
    faults say (a tolerated end, or the fallback)."""
    policy = UpgradePolicy.from_spec(scenario["policy"])
    sim, result, observer = run_observed(scenario, TolerationObserver(policy))
    assert observer.checked == result.planning_calls
    faults = set(scenario["faults"])
    # nodes start in name order, a step's nodes those between the earlier targets and its own
    # (a tolerated node counts toward them as an upgraded one does): every step whose faulty
    # nodes are within its toleration leaves them behind, any other step falls back
    n = scenario["n"]
    targets = policy.step_targets(n)
    allowed = policy.step_tolerations(n)
    within = True
    for index, target in enumerate(targets):
        first = max(targets[:index], default=0)
        step_nodes = {f"node-{i:04d}" for i in range(first + 1, target + 1)}
        within = within and len(step_nodes & faults) <= allowed[index]
    left = {e["node"] for e in result.tolerated or ()}
    if within:
        assert result.stop_reason == "completed", result.stop_reason
        assert result.completed
        assert left == faults
        # left behind cordoned, the others upgraded and schedulable again
        assert all(node.unschedulable == (name in left) for name, node in sim.nodes.items())
        condition = next((c for c in result.final.get("conditions") or ()
                          if c["type"] == "FailuresTolerated"), None)
        assert (condition is not None) == bool(faults)
        if condition is not None:
            assert all(name in condition["message"] for name in faults)
        assert result.final["status"]["currentFailureRetry"] == 0
        assert observer.fallbacks == 0
    else:
        expected = ("rolled-back" if scenario["policy"]["fallback"] == "rollback"
                    else "fallback-pause")
        assert result.stop_reason == expected
        assert not result.completed
        assert observer.fallbacks >= 1
    return sim, result, observer
