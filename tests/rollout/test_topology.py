"""Topology-aware waves (docs/rollout.md#topology-aware-waves) on a hand-driven fleet: the order of
both kinds, the sequential gate, the per-domain budget and its message, steps ending inside a
domain, and the topology frozen for the rollout."""

from __future__ import annotations

import dataclasses

from jsonschema import Draft202012Validator

from reconciler.controller.index import NodeIndex
from reconciler.names import ANN_STATE, CANARY_LABEL
from reconciler.policy.quantity import Quantity
from reconciler.policy.rollout_settings import TopologySettings
from reconciler.policy.schema import load_schema
from reconciler.rollout import topology
from reconciler.rollout.actions import Cordon
from reconciler.rollout.model import PLANNER_LABELS, PlannerSettings, RolloutNode
from reconciler.rollout.topology import Topology

from .world import World, deletions, of_type, policy, steps

ZONE = "topology.kubernetes.io/zone"


def zoned(world: World, zones: dict[str, str]) -> None:
    for name, zone in zones.items():
        world.set(name, labels={**world.nodes[name].labels, ZONE: zone})


def three_zones(settings: TopologySettings | None, **policy_overrides: object) -> World:
    """12 nodes, zone-1 .. zone-3 of 4 nodes each (node-0001..0004 in zone-1)."""
    world = World(12, policy(**policy_overrides),
                  settings=PlannerSettings(topology=settings))
    zoned(world, {f"node-{i:04d}": f"zone-{(i - 1) // 4 + 1}" for i in range(1, 13)})
    return world


def names(nodes: list[RolloutNode]) -> list[str]:
    return [n.name for n in nodes]


def test_the_order_of_both_kinds_puts_canaries_first_and_the_unlabelled_domain_last() -> None:
    def node(name: str, zone: str | None, canary: bool = False) -> RolloutNode:
        labels = {ZONE: zone} if zone is not None else {}
        if canary:
            labels[CANARY_LABEL] = "true"
        return RolloutNode(name, labels=labels)

    fleet = [node("a1", "a"), node("a2", "a"), node("a3", "a"), node("b1", "b"),
             node("c1", "c"), node("c2", "c", canary=True), node("n1", None), node("n2", None)]
    sequential = Topology.of(TopologySettings(ZONE, "sequential"), fleet)
    # c holds a canary: first (its canary first); then a, b by value; the unlabelled last
    assert names(sequential.in_order(fleet)) == ["c2", "c1", "a1", "a2", "a3", "b1", "n1",
                                                 "n2"]
    spread = Topology.of(TopologySettings(ZONE, "spread"), fleet)
    # the canaries, then the domains in turn (in the domain order: c, a, b, unlabelled)
    assert names(spread.in_order(fleet)) == ["c2", "c1", "a1", "b1", "n1", "a2", "n2", "a3"]
    # the order is the fleet's, whichever nodes are asked about
    assert names(spread.in_order([fleet[2], fleet[7], fleet[0]])) == ["a1", "n2", "a3"]


def test_sequential_finishes_a_domain_before_it_cordons_or_starts_the_next() -> None:
    world = three_zones(TopologySettings(ZONE, "sequential"), maxParallel=3,
                        maxUnavailable="100%")
    first = world.settle(0)
    assert deletions(first) == ["node-0001", "node-0002", "node-0003"]
    # the zone's last node waits cordoned ahead; nothing of zone-2 is touched
    assert [a.node for a in of_type(first, Cordon)] == [
        "node-0001", "node-0002", "node-0003", "node-0004"]
    assert world.annotation("node-0004", ANN_STATE) == "cordoned"
    assert world.annotation("node-0005", ANN_STATE) is None
    world.ready("node-0001", "node-0002")
    second = world.plan(60)
    assert deletions(second) == ["node-0004"]
    assert not of_type(second, Cordon)  # two slots free, zone-1 not done: zone-2 waits
    assert "domain zone-2 waits until domain zone-1 is done (2/4 upgraded or failed)" in (
        world.inner["message"])
    world.ready("node-0003", "node-0004")
    third = world.plan(120)
    assert deletions(third) == ["node-0005", "node-0006", "node-0007"]


def test_a_failed_node_lets_the_next_domain_go_on() -> None:
    world = three_zones(TopologySettings(ZONE, "sequential"), maxParallel=4,
                        maxUnavailable="100%", maxFailureThreshold=5)
    world.settle(0)
    world.ready("node-0001", "node-0002", "node-0003")
    world.pod("node-0004", waiting_reason="ErrImagePull")
    assert deletions(world.plan(60)) == ["node-0005", "node-0006", "node-0007", "node-0008"]
    world.ready("node-0005", "node-0006", "node-0007", "node-0008")
    # its retry (after the 30 s back-off) makes zone-1 not done again: zone-3 waits for it
    assert deletions(world.plan(100)) == ["node-0004"]
    assert "domain zone-3 waits until domain zone-1 is done (3/4 upgraded or failed)" in (
        world.inner["message"])
    world.ready("node-0004")
    assert deletions(world.plan(160)) == ["node-0009", "node-0010", "node-0011", "node-0012"]


def test_spread_takes_the_domains_in_turn_and_the_budget_holds_each_domain() -> None:
    settings = TopologySettings(ZONE, "spread", Quantity(1, False))
    world = three_zones(settings, maxParallel="100%", maxUnavailable="100%")
    first = world.settle(0)
    # one node per zone: the budget of 1 holds the rest; each zone's next one waits cordoned
    assert deletions(first) == ["node-0001", "node-0005", "node-0009"]
    message = world.inner["message"]
    assert "domain zone-1: 1 in flight or unavailable (maxUnavailablePerDomain 1), its next " \
           "nodes wait" in message
    world.ready("node-0005")
    assert deletions(world.plan(60)) == ["node-0006"]
    # an unavailable node uses its domain's budget: zone-3 starts nothing while one is down
    world.ready("node-0001", "node-0009")
    world.set("node-0010", ready=False)
    second = world.plan(120)
    assert "node-0011" not in deletions(second)
    assert deletions(second) == ["node-0002"]


def test_a_step_ends_inside_a_domain_and_the_next_step_continues_in_it() -> None:
    world = three_zones(TopologySettings(ZONE, "sequential"), maxParallel="100%",
                        maxUnavailable="100%", upgradeSteps=steps((2, 0), ("100%", 0)))
    assert deletions(world.settle(0)) == ["node-0001", "node-0002"]
    # the next step's first wave waits cordoned ahead, up to the zone's end
    assert world.annotation("node-0004", ANN_STATE) == "cordoned"
    assert world.annotation("node-0005", ANN_STATE) is None
    world.ready("node-0001", "node-0002")
    world.settle(60)  # step 1 done, step 2 starts the rest of zone-1
    assert [name for name, _ in world.deleted] == [f"node-{i:04d}" for i in range(1, 5)]


def test_the_topology_is_frozen_when_the_rollout_starts() -> None:
    settings = TopologySettings(ZONE, "spread", Quantity(50, True))
    world = three_zones(settings, maxParallel=1)
    world.settle(0)
    frozen = {"key": ZONE, "order": "spread", "maxUnavailablePerDomain": "50%"}
    assert world.status["topology"] == frozen
    assert topology.read(frozen) == settings
    schema = load_schema("status-snapshot")
    Draft202012Validator({**schema["$defs"]["UpgradeStatus"], "$defs": schema["$defs"]}
                         ).validate({"topology": world.status["topology"]})
    # changed or removed mid-rollout: the rollout keeps its own
    world.settings = dataclasses.replace(world.settings, topology=None)
    world.ready_all_in_flight()
    assert deletions(world.plan(60)) == ["node-0005"]  # spread: zone-2 next
    assert world.status["topology"] == frozen


def test_a_rollout_started_without_topology_stays_without() -> None:
    world = three_zones(None, maxParallel=1)
    world.settle(0)
    assert "topology" not in world.status
    world.settings = dataclasses.replace(
        world.settings, topology=TopologySettings(ZONE, "spread"))
    world.ready_all_in_flight()
    assert deletions(world.plan(60)) == ["node-0002"]  # by name, as docs/policy.md#the-fields
    assert "topology" not in world.status


def test_a_rollback_moves_nodes_back_in_the_topology_order() -> None:
    world = three_zones(TopologySettings(ZONE, "spread"), maxParallel=3,
                        maxUnavailable="100%", maxFailureThreshold=1, fallback="rollback")
    world.settle(0)
    assert deletions(world.last) == ["node-0001", "node-0005", "node-0009"]
    world.ready("node-0001", "node-0005")
    world.pod("node-0009", waiting_reason="ErrImagePull")
    world.settle(60)
    assert world.status["phase"] == "Terminating"
    # every moved node goes back, failed first, then the others in the spread order
    moved = [name for name, _ in world.deleted[3:]]
    assert moved[0] == "node-0009"
    assert sorted(moved) == ["node-0001", "node-0005", "node-0009"]


def test_the_controllers_node_views_keep_the_topology_key_when_asked() -> None:
    index = NodeIndex()
    index.on_node("ADDED", {"metadata": {"name": "n1", "resourceVersion": "1", "labels": {
        ZONE: "a", "kubernetes.io/os": "linux", CANARY_LABEL: "true"}}, "spec": {},
        "status": {}})
    assert index.views["n1"].labels == {CANARY_LABEL: "true"}
    assert index.keep_labels(PLANNER_LABELS | {ZONE})
    assert index.views["n1"].labels == {CANARY_LABEL: "true", ZONE: "a"}
    assert not index.keep_labels(PLANNER_LABELS | {ZONE})


def test_a_topology_record_nobody_could_have_written_reads_as_none_or_without_a_limit() -> None:
    assert topology.read({}) is None
    assert topology.read({"key": 5, "order": "sequential"}) is None
    assert topology.read({"key": ZONE, "order": "zigzag"}) is None
    assert topology.read({"key": ZONE, "maxUnavailablePerDomain": "lots"}) == TopologySettings(
        ZONE)
    assert topology.read({"key": ZONE, "order": "spread", "maxUnavailablePerDomain": 0}) == (
        TopologySettings(ZONE, "spread"))
    # the planner goes on with what it can read
    world = three_zones(TopologySettings(ZONE, "sequential"), maxParallel=1)
    world.settle(0)
    world.status = {**world.status, "topology": {"key": ["not", "a", "key"]}}
    world.ready_all_in_flight()
    assert deletions(world.plan(60)) == ["node-0002"]
