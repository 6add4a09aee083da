"""The sync role writes ``fleet: {nodes, installSeconds, domains}`` into the status snapshot once
a rollout completed (docs/plan.md), measured on the real control plane's driver pods and nodes;
``reconciler plan`` then predicts the next rollout of that cluster from it."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from reconciler.controller.loop import RolloutController
from reconciler.kube.api import KubeApi
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from tests.policy.commands import reconciler
from tests.sync import conftest as world
from tests.sync.helpers import source_commit, status_file, step_state

pytestmark = pytest.mark.cluster
NEW = world.NEW
INSTALL_SECONDS = 2.0
ZONE = "topology.kubernetes.io/zone"
TOPOLOGY = f"rollout:\n  topology: {{key: {ZONE}, order: spread}}\n"


def test_a_completed_rollout_leaves_its_fleet_in_the_snapshot_and_plan_reads_it(
    kube: KubeApi, fleet_factory: Callable[..., Fleet], request: pytest.FixtureRequest,
    policy_remote: world.Remote, alice: world.Person, make_sync: world.SyncFactory,
) -> None:
    # four nodes whose driver takes 2 s to install (API times are whole seconds), in two zones
    # and one without the label
    fleet = fleet_factory(nodes=4, payload=world.PAYLOAD, install_seconds=INSTALL_SECONDS,
                          node_labels={"node-0001": {ZONE: "zone-a"}, "node-0002": {ZONE: "zone-a"},
                                       "node-0003": {ZONE: "zone-b"}})
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 4, timeout=60,
             what="4 Ready driver pods", observe=fleet.driver_pods)
    controller = request.getfixturevalue("controller")  # once its DaemonSet exists
    assert isinstance(controller, RolloutController)
    seed = policy_remote.head()
    sync = make_sync(policy_remote.url)
    wait_for(lambda: source_commit(kube) == seed, timeout=30, what="the seed commit applied",
             observe=lambda: source_commit(kube))
    alice.commit_and_push(f"Upgrade prod-a to {NEW}, zone by zone",
                          {world.POLICY_PATH: world.policy(NEW, first_pause="0"),
                           "reconciler.yaml": world.REPO_CONFIG + TOPOLOGY})
    sync.trigger()
    wait_for(lambda: step_state(kube) == ("Idling", 3, "Completed"), timeout=120,
             what="the rollout completed", observe=lambda: step_state(kube))

    def in_git() -> dict[str, object]:
        return dict((status_file(policy_remote) or {}).get("fleet") or {})

    wait_for(lambda: in_git().get("installSeconds") is not None and "domains" in in_git(),
             timeout=30, what="the measured fleet in Git", observe=in_git)
    record = in_git()
    assert record["nodes"] == 4
    assert record["domains"] == {"key": ZONE,
                                 "nodes": {"(no label)": 1, "zone-a": 2, "zone-b": 1}}
    # creation and Ready times are whole seconds in the API: the mean is the simulated
    # install time give or take one second
    measured = record["installSeconds"]
    assert isinstance(measured, float)
    assert INSTALL_SECONDS - 1 <= measured <= INSTALL_SECONDS + 1.5, record

    # a pull request for the next version: the plan takes 4 nodes and that install time
    alice.pull()
    alice.write(world.POLICY_PATH, world.policy("2.34.0.1", first_pause="0"))
    done = reconciler(alice.dir, "plan", "--against", "origin/main", "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    (plan,) = json.loads(done.stdout)["clusters"]
    assert (plan["change"], plan["from_version"], plan["to_version"]) == (
        "rollout", NEW, "2.34.0.1")
    assert (plan["nodes"], plan["nodes_source"]) == (4, "fleet.nodes")
    assert (plan["install_seconds"], plan["install_assumed"]) == (measured, False)
    assert plan["domains"] == {"(no label)": 1, "zone-a": 2, "zone-b": 1}
    assert [s["nodes"] for s in plan["steps"]] == [1, 1, 2]
