"""The read model's node states of live clusters (docs/live-clusters.md#the-drain and
docs/rollout.md#topology-aware-waves): ``draining`` and ``skipped``, what they mean for a rollout
(``NodeStates``), and the progress per topology domain."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.names import (
    ANN_SKIPPED,
    ANN_STATE,
    ANN_TARGET,
    ANN_WAS_UNSCHEDULABLE,
    LABEL_UPGRADE_SKIP,
)
from reconciler.views.nodes import (
    NODE_STATES,
    DomainProgress,
    NodeFacts,
    PodFacts,
    classify,
    classify_all,
    domain_progress,
    topology_key,
)

OLD, NEW = "rev-old", "rev-new"
SKIP = {LABEL_UPGRADE_SKIP: "true"}
RACK = "example.com/rack"


def _ann(state: str, target: str = NEW) -> dict[str, str]:
    return {ANN_STATE: state, ANN_TARGET: target, ANN_WAS_UNSCHEDULABLE: "false"}


def _old(**kw: Any) -> PodFacts:
    return PodFacts("d-old", OLD, ready=True, **kw)


def _new(ready: bool = True) -> PodFacts:
    return PodFacts("d-new", NEW, ready=ready)


#: (case, node, rollout active, state expected)
STATES: list[tuple[str, NodeFacts, bool, str]] = [
    ("draining", NodeFacts("n", pod=_old(), unschedulable=True, annotations=_ann("draining"),
                           workloads=("serve/web-1",)), True, "draining"),
    ("draining for another target is not ours",
     NodeFacts("n", pod=_old(), annotations=_ann("draining", "rev-other")), True, "old"),
    ("draining, cordoned by us: not left alone after the target changed",
     NodeFacts("n", pod=_old(), unschedulable=True,
               annotations=_ann("draining", "rev-other")), True, "old"),
    ("drained: the driver pod is being deleted",
     NodeFacts("n", pod=_old(deleting=True), unschedulable=True,
               annotations=_ann("draining")), True, "in-flight"),
    ("draining while NotReady", NodeFacts("n", ready=False, pod=_old(),
                                          annotations=_ann("draining")), True, "not-ready"),
    ("draining with a pod Ready on the target: verifying",
     NodeFacts("n", pod=_new(), annotations=_ann("draining")), True, "verifying"),
    ("skip label, not moved", NodeFacts("n", pod=_old(), labels=SKIP), True, "skipped"),
    ("skip label, no rollout", NodeFacts("n", pod=_old(), labels=SKIP), False, "skipped"),
    ("skip label on a node cordoned ahead, not started yet: skipped",
     NodeFacts("n", pod=_old(), unschedulable=True, labels=SKIP, annotations=_ann("cordoned")),
     True, "skipped"),
    ("skip label on a draining node: it started, it finishes",
     NodeFacts("n", pod=_old(), unschedulable=True, labels=SKIP, annotations=_ann("draining")),
     True, "draining"),
    ("skip label on a node in flight: it finishes",
     NodeFacts("n", pod=_new(False), labels=SKIP, annotations=_ann("upgrading")), True,
     "in-flight"),
    ("skip label on a node already upgraded",
     NodeFacts("n", pod=_new(), labels=SKIP, annotations=_ann("done")), True, "upgraded"),
    ("skip label false", NodeFacts("n", pod=_old(), labels={LABEL_UPGRADE_SKIP: "false"}), True,
     "old"),
    ("skipped for the target (NotReady when its turn came)",
     NodeFacts("n", ready=False, pod=_old(), annotations={ANN_SKIPPED: NEW}), True, "skipped"),
    ("skipped for the target (cordoned by someone else), rollout over",
     NodeFacts("n", pod=_old(), unschedulable=True, annotations={ANN_SKIPPED: NEW}), False,
     "skipped"),
    ("skipped for an earlier target", NodeFacts("n", pod=_old(),
                                                annotations={ANN_SKIPPED: "rev-older"}), True,
     "old"),
    ("skip label without a driver pod: not a rollout node",
     NodeFacts("n", pod=None, labels=SKIP), True, "left-alone"),
]


@pytest.mark.parametrize(("node", "active", "expected"), [c[1:] for c in STATES],
                         ids=[c[0] for c in STATES])
def test_a_node_s_state(node: NodeFacts, active: bool, expected: str) -> None:
    assert classify(node, target=NEW, active=active) == expected


def test_the_legend_has_draining_and_skipped_once() -> None:
    assert NODE_STATES.count("draining") == NODE_STATES.count("skipped") == 1
    assert NODE_STATES.index("cordoned") < NODE_STATES.index("draining") < NODE_STATES.index(
        "in-flight")


UPGRADE: dict[str, Any] = {
    "phase": "Progressing",
    "status": {"lastPodSpecRevision": OLD, "upgradingPodSpecRevision": NEW},
}


def test_draining_and_skipped_nodes_are_neither_busy_nor_unavailable() -> None:
    states = classify_all([
        NodeFacts("a", pod=_old(), unschedulable=True, annotations=_ann("draining"),
                  workloads=("serve/web-1", "serve/web-2")),
        NodeFacts("b", ready=False, pod=_old(), annotations={ANN_SKIPPED: NEW}),
        NodeFacts("c", pod=_old(), unschedulable=True, labels=SKIP),
        NodeFacts("d", pod=_old(), workloads=("ml/job-1",)),
        NodeFacts("e", ready=False, pod=_old()),
    ], upgrade=UPGRADE)
    assert states.draining == {"a": ("serve/web-1", "serve/web-2")}
    assert states.skipped == ("b", "c")
    assert states.busy == {"d": ("ml/job-1",)}
    assert states.unavailable == {"e": "NotReady"}
    assert states.domains == ()  # no topology in the status


def _at(rack: str | None, state: str, *, canary: bool = False, pod: bool = True) -> tuple[
        NodeFacts, str]:
    labels = {RACK: rack} if rack is not None else {}
    return NodeFacts(f"{rack}-{state}", canary=canary, labels=labels,
                     pod=_old() if pod else None), state


#: (case, nodes with their states, [(domain, {state: count})] expected in order)
DOMAINS: list[tuple[str, list[tuple[NodeFacts, str]], list[tuple[str | None, dict[str, int]]]]] = [
    ("by value as strings", [_at("r10", "old"), _at("r2", "upgraded"), _at("r1", "old")],
     [("r1", {"old": 1}), ("r10", {"old": 1}), ("r2", {"upgraded": 1})]),
    ("unlabelled last", [_at(None, "old"), _at("z", "old"), _at("a", "failed")],
     [("a", {"failed": 1}), ("z", {"old": 1}), (None, {"old": 1})]),
    ("canary domains first", [_at("a", "old"), _at("m", "upgraded", canary=True),
                              _at("b", "draining")],
     [("m", {"upgraded": 1}), ("a", {"old": 1}), ("b", {"draining": 1})]),
    ("an unlabelled canary goes first too", [_at("a", "old"), _at(None, "in-flight",
                                                                  canary=True)],
     [(None, {"in-flight": 1}), ("a", {"old": 1})]),
    ("states counted in legend order",
     [_at("a", "skipped"), _at("a", "upgraded"), _at("a", "draining"), _at("a", "upgraded")],
     [("a", {"draining": 1, "upgraded": 2, "skipped": 1})]),
    ("no driver pod: not a rollout node", [_at("a", "left-alone", pod=False), _at("b", "old")],
     [("b", {"old": 1})]),
    ("an empty label value is a domain of its own", [_at("", "old"), _at(None, "old")],
     [("", {"old": 1}), (None, {"old": 1})]),
]


@pytest.mark.parametrize(("nodes", "expected"), [c[1:] for c in DOMAINS],
                         ids=[c[0] for c in DOMAINS])
def test_progress_per_domain(nodes: list[tuple[NodeFacts, str]],
                             expected: list[tuple[str | None, dict[str, int]]]) -> None:
    got = domain_progress(nodes, key=RACK)
    assert [(d.domain, dict(d.states)) for d in got] == expected
    assert [list(d.states) for d in got] == [list(s) for _, s in expected]


def test_a_domain_s_columns_and_when_it_is_done() -> None:
    busy = DomainProgress("r1", {"draining": 1, "in-flight": 2, "upgraded": 3, "verifying": 1,
                                 "failed": 1, "skipped": 1, "old": 2, "busy": 1,
                                 "not-ready": 1})
    assert busy.to_json() == {
        "domain": "r1", "nodes": 13, "upgraded": 4, "inFlight": 3, "draining": 1, "failed": 1,
        "skipped": 1, "pending": 3, "unavailable": 1, "done": False,
        "states": {"draining": 1, "in-flight": 2, "upgraded": 3, "verifying": 1, "failed": 1,
                   "skipped": 1, "old": 2, "busy": 1, "not-ready": 1}}
    assert DomainProgress("r2", {"upgraded": 3, "failed": 1, "skipped": 1, "old": 0}).done
    assert not DomainProgress("r3", {"upgraded": 3, "not-ready": 1}).done


def test_classify_all_groups_by_the_status_s_topology_key() -> None:
    upgrade = {**UPGRADE, "topology": {"key": RACK, "order": "sequential"}}
    assert topology_key(upgrade) == RACK and topology_key(UPGRADE) == ""
    states = classify_all([
        NodeFacts("a1", pod=_new(), labels={RACK: "a"}, annotations=_ann("done")),
        NodeFacts("a2", pod=_old(), labels={RACK: "a"}, unschedulable=True,
                  annotations=_ann("draining")),
        NodeFacts("b1", pod=_old(), labels={RACK: "b", **SKIP}),
        NodeFacts("b2", pod=_old(), labels={RACK: "b"}),
        NodeFacts("x", pod=_old()),
    ], upgrade=upgrade)
    assert [(d.domain, d.to_json()["upgraded"], d.to_json()["inFlight"], d.to_json()["skipped"],
             d.to_json()["pending"]) for d in states.domains] == [
        ("a", 1, 1, 0, 0), ("b", 0, 0, 1, 1), (None, 0, 0, 0, 1)]


def test_the_status_s_skipped_list_is_frozen_for_the_rollout() -> None:
    """A node in ``upgradeStatus.skipped`` stays skipped when its label goes or it recovers
    (docs/live-clusters.md#when-a-change-applies: decisions frozen for the rollout), unless it is on
    the target already."""
    back = NodeFacts("back", pod=_old())  # label removed, Ready again
    assert classify(back, target=NEW, active=True) == "old"
    assert classify(back, target=NEW, active=True, skipped={"back"}) == "skipped"
    moved = NodeFacts("moved", pod=_new())
    assert classify(moved, target=NEW, active=True, skipped={"moved"}) == "upgraded"
    states = classify_all([back, NodeFacts("other", pod=_old())],
                          upgrade={**UPGRADE, "skipped": ["back"]})
    assert states.skipped == ("back",)
