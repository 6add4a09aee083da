"""Property tests of topology-aware waves (docs/rollout.md#topology-aware-waves): random fleets with
random domain and canary labels, random policies and topologies, faults and controller crashes,
driven by the simulator; an observer checks after every planning call, from the fleet itself, that

- under ``sequential`` no node of a later domain starts (or is cordoned ahead) while an earlier
  domain has a node not upgraded or failed;
- after fresh starts, a domain's nodes in flight plus its unavailable nodes stay within
  ``maxUnavailablePerDomain``;
- everything the rollout's properties check without topology still holds (maxUnavailable,
  maxParallel, the steps' cumulative targets: ``test_properties.Observer``).
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as s

from reconciler.names import ANN_STATE, ANN_TARGET, CANARY_LABEL, STATE_CORDONED, STATE_FAILED
from reconciler.policy.quantity import parse_quantity
from reconciler.policy.rollout_settings import TopologySettings
from reconciler.policy.upgrade_policy import UpgradePolicy
from reconciler.rollout.actions import AnnotateNode, DeleteDriverPod
from reconciler.rollout.model import FAILURE_REASONS, PlannerSettings, RolloutNode, RolloutSnapshot
from reconciler.rollout.planner import Plan
from reconciler.rollout.simulator import EPOCH, Simulation

from .test_properties import (
    Observer,
    in_flight,
    run_observed,
    scenarios,
    scenarios_with_people,
    unavailable,
)
from .world import NEW_REV

KEY = "topology.kubernetes.io/zone"
READY_TIMEOUT = 600  # as test_properties' in_flight reads it


def domain_order(nodes: list[RolloutNode]) -> list[str | None]:
    """docs/rollout.md#topology-aware-waves, computed here on its own: domains holding canaries
    first, then by value; the nodes without the label last (among those with canaries or
    without)."""
    domains = {n.labels.get(KEY) for n in nodes}
    canary = {d for d in domains
              if any(n.labels.get(KEY) == d and n.labels.get(CANARY_LABEL) == "true"
                     for n in nodes)}
    return sorted(domains, key=lambda d: (d not in canary, d is None, d or ""))


def settled(node: RolloutNode, now: float) -> bool:
    """Upgraded or failed, from the node alone."""
    pod = node.pod
    if pod is not None and pod.revision == NEW_REV and pod.ready and not pod.deleting:
        return True
    ann = node.annotations
    if ann.get(ANN_TARGET) != NEW_REV:
        return False
    if ann.get(ANN_STATE) == STATE_FAILED:
        return True
    if ann.get(ANN_STATE) == STATE_CORDONED:
        if pod is not None and not pod.deleting and pod.revision != NEW_REV:
            return False  # cordoned ahead, not started
        # started by the deletion alone (no record): the simulator keeps when it was asked
        if pod is not None and pod.waiting_reason in FAILURE_REASONS:
            return True
        return now + 0.001 >= node.pod_deleted_at + READY_TIMEOUT
    return ann.get(ANN_STATE) == "upgrading" and not in_flight(node, now)


class TopologyObserver(Observer):
    def __init__(self, policy: UpgradePolicy, topology: TopologySettings) -> None:
        super().__init__(policy)
        self.topology = topology
        self.gated_checks = 0
        self.budget_checks = 0

    def __call__(self, before: RolloutSnapshot, plan: Plan, applied: int) -> None:
        super().__call__(before, plan, applied)
        assert self.sim is not None
        sim = self.sim
        if before.status.get("phase") != "Progressing":
            return
        now = EPOCH + sim.t
        actions = plan.actions[:applied]
        nodes = list(before.nodes.values())
        order = domain_order(nodes)
        domain = {n.name: n.labels.get(KEY) for n in nodes}
        fresh = {a.node for a in actions if isinstance(a, DeleteDriverPod)
                 and sim.nodes[a.node].annotations.get(ANN_TARGET) == NEW_REV
                 and not (before.nodes[a.node].annotations.get(ANN_TARGET) == NEW_REV
                          and before.nodes[a.node].annotations.get(ANN_STATE)
                          != STATE_CORDONED)}
        ahead = {a.node for a in actions if isinstance(a, AnnotateNode)
                 and a.annotations.get(ANN_STATE) == STATE_CORDONED}
        if self.topology.order == "sequential":
            for name in sorted(fresh | ahead):
                earlier = order[: order.index(domain[name])]
                waiting = [n.name for n in nodes
                           if n.labels.get(KEY) in earlier and not settled(n, now)]
                assert not waiting, (
                    f"{name} of domain {domain[name]} started or cordoned while {waiting} of "
                    f"an earlier domain are not upgraded or failed")
                self.gated_checks += 1
        if self.topology.max_unavailable_per_domain is None:
            return
        for touched in {domain[name] for name in fresh}:
            size = sum(1 for n in nodes if n.labels.get(KEY) == touched)
            limit = self.topology.per_domain_limit(size)
            assert limit is not None
            members = [n for n in sim.nodes.values() if n.labels.get(KEY) == touched]
            flying = sum(1 for n in members if in_flight(n, now))
            down = unavailable(members, now)
            assert flying + down <= limit, (
                f"domain {touched}: {flying} in flight + {down} unavailable > {limit}")
            self.budget_checks += 1


@s.composite
def topology_scenarios(draw: Any, people: bool = False) -> dict[str, Any]:
    scenario = draw(scenarios_with_people() if people else scenarios())
    values = draw(s.lists(s.sampled_from(["a", "b", "c", "d", None]), min_size=1, max_size=4,
                          unique=True))
    fleet = []
    for i in range(1, scenario["n"] + 1):
        labels: dict[str, str] = {}
        value = draw(s.sampled_from(values))
        if value is not None:
            labels[KEY] = value
        if draw(s.integers(min_value=0, max_value=5)) == 0:
            labels[CANARY_LABEL] = "true"
        fleet.append((f"node-{i:04d}", labels))
    limit = draw(s.one_of(s.none(), s.integers(min_value=1, max_value=3),
                          s.integers(min_value=1, max_value=100).map(lambda p: f"{p}%")))
    scenario["fleet"] = tuple(fleet)
    scenario["topology"] = TopologySettings(
        KEY, draw(s.sampled_from(["sequential", "spread"])),
        None if limit is None else parse_quantity(limit))
    return scenario


def run(scenario: dict[str, Any]) -> tuple[Simulation, Any, TopologyObserver]:
    policy = UpgradePolicy.from_spec(scenario["policy"])
    return run_observed(
        scenario, TopologyObserver(policy, scenario["topology"]),
        settings=PlannerSettings(ready_timeout=READY_TIMEOUT, topology=scenario["topology"]),
        fleet=scenario["fleet"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topology_scenarios())
def test_topology_invariants_hold_at_every_tick(scenario: dict[str, Any]) -> None:
    sim, result, observer = run(scenario)
    topology = scenario["topology"]
    event(f"{topology.order}, limit {topology.max_unavailable_per_domain}: "
          f"{result.stop_reason}")
    assert observer.checked == result.planning_calls
    assert result.final.get("topology", {}).get("key") == KEY
    if not scenario["faults"]:
        # no fault holds a domain: every topology and budget lets the rollout finish
        assert result.completed, result.stop_reason
        assert all(n.pod is not None and n.pod.revision == NEW_REV and n.pod.ready
                   and not n.unschedulable for n in sim.nodes.values())
        if topology.order == "sequential" and len(scenario["fleet"]) > 1:
            assert observer.gated_checks


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topology_scenarios(people=True))
def test_topology_invariants_hold_when_people_and_nodes_act_mid_rollout(
        scenario: dict[str, Any]) -> None:
    """Nodes join (without labels: the unlabelled domain) and leave, workloads come and go,
    people pause and disable."""
    sim, result, observer = run(scenario)
    event(f"{scenario['topology'].order}: {result.stop_reason}")
    assert observer.checked == result.planning_calls
    if result.completed:
        assert all(n.pod is not None and n.pod.revision == NEW_REV and n.pod.ready
                   for n in sim.nodes.values())
    if not result.completed and not scenario["faults"] and result.stop_reason != "until":
        kinds = {kind for _, kind, _ in scenario["interventions"]}
        assert kinds & {"pause", "disable", "busy"}, result.stop_reason
