"""A failed batch with ``fallback: rollback``: the controller restores the previous payload in
the cluster, the sync writes the restored version back to Git (round trip, comments kept), and
a person's later commit asking for a version again is applied
(docs/rollout.md#fallback-rollback-and-pause and docs/gitops.md#git-stays-the-truth)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from reconciler.controller.loop import RolloutController
from reconciler.kube.api import KubeApi
from reconciler.sim.faults import Fault, FaultKind
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from tests.sync.conftest import NEW, OLD, PAYLOAD, POLICY_PATH, Person, Remote, SyncFactory, policy
from tests.sync.helpers import driver, file_at_head, source_commit, step_state, subjects

pytestmark = pytest.mark.cluster


def _rollback_policy(version: str) -> str:
    return (policy(version, first_pause="0", max_parallel="2")
            .replace("maxFailureThreshold: 2", "maxFailureThreshold: 1")
            .replace("fallback: pause", "fallback: rollback"))


@pytest.fixture
def faulty_fleet(fleet_factory: Callable[..., Fleet]) -> Fleet:
    """Four nodes; node-0001 cannot pull the new driver."""
    fleet = fleet_factory(nodes=4, payload=PAYLOAD, install_seconds=0.2,
                          faults=[Fault("node-0001", FaultKind.IMAGE_PULL, NEW)])
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 4, timeout=60, what="4 Ready pods")
    return fleet


def test_a_rollback_restores_the_version_in_git_and_a_new_commit_is_applied(
    kube: KubeApi, faulty_fleet: Fleet, controller: RolloutController,
    policy_remote: Remote, alice: Person, make_sync: SyncFactory,
) -> None:
    fleet = faulty_fleet
    seed = policy_remote.head()  # before the sync role pushes status snapshots
    sync = make_sync(policy_remote.url)
    wait_for(lambda: source_commit(kube) == seed, timeout=30,
             what="the seed applied")
    alice.commit_and_push("Roll back on failure", {POLICY_PATH: _rollback_policy(OLD)})
    sync.trigger()
    merge = alice.commit_and_push(f"Upgrade prod-a to {NEW}",
                                  {POLICY_PATH: _rollback_policy(NEW)})
    sync.trigger()
    wait_for(lambda: source_commit(kube) == merge, timeout=20, what="the merge applied")
    wait_for(lambda: step_state(kube)[0] == "Idling" and step_state(kube)[2] == "Completed"
             and driver(kube)["payload"]["version"] == OLD, timeout=90,
             what="the rollback finished", observe=lambda: (step_state(kube), driver(kube)))
    wait_for(lambda: any(f"restore driver {OLD} after rolling back {NEW}" in s
                         for s in subjects(policy_remote)), timeout=30,
             what="the restored version written back", observe=lambda: subjects(policy_remote))
    text = file_at_head(policy_remote, POLICY_PATH)
    assert re.search(rf"version: {re.escape(OLD)} +# the driver the fleet should run", text), text
    assert sorted(fleet.ready_driver_nodes(OLD)) == sorted(fleet.node_names)

    # an unrelated commit does not re-request the failed version ...
    alice.pull()
    notes = alice.commit_and_push("Notes", {"README.md": "rolled back\n"})
    sync.trigger()
    wait_for(lambda: sync.handled_source == notes, timeout=20,
             what="the unrelated commit")
    assert driver(kube)["payload"]["version"] == OLD
    # ... a person's commit asking for a version is applied
    alice.pull()
    fixed = "2.33.0.10"
    retry = alice.commit_and_push(f"Try {fixed}", {POLICY_PATH: _rollback_policy(fixed)})
    sync.trigger()
    wait_for(lambda: source_commit(kube) == retry, timeout=20, what="the new version applied")
    assert driver(kube)["payload"]["version"] == fixed
