"""Skipped nodes (docs/live-clusters.md#a-node-under-repair) end to end: the rollout controller on
the real control plane and the simulated fleet, a node cordoned for repair and one labelled
``upgrade.skip``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from reconciler.controller.loop import RolloutController
from reconciler.kube.api import KubeApi
from reconciler.names import ANN_SKIPPED, LABEL_UPGRADE_SKIP
from reconciler.rollout.model import PlannerSettings
from reconciler.rollout.skipped import COND_NODES_SKIPPED
from reconciler.sim.waiting import wait_for
from tests.controller.helpers import running_controller, start_rollout, upgrade_status

pytestmark = pytest.mark.cluster

NEW = "2.33.0.9"


@pytest.fixture
def controller(kube: KubeApi) -> Iterator[RolloutController]:
    yield from running_controller(
        kube, PlannerSettings(ready_timeout=20, retry_backoff=0.5, retry_backoff_max=2,
                              unavailable_nodes="skip"))


def test_a_node_under_repair_and_a_labelled_node_are_skipped_and_the_rollout_completes(
    kube: KubeApi, fleet_factory: Any, controller: RolloutController
) -> None:
    fleet = fleet_factory(nodes=4)
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 4, timeout=60, what="4 Ready pods",
             observe=fleet.driver_pods)
    old = fleet.driver_pods()["node-0002"].version  # as installed
    assert old and old != NEW
    kube.patch("/api/v1/nodes/node-0002", {"spec": {"unschedulable": True}})  # under repair
    kube.patch("/api/v1/nodes/node-0004",
               {"metadata": {"labels": {LABEL_UPGRADE_SKIP: "true"}}})
    start_rollout(kube, NEW, {
        "enableRollout": True,
        "upgradeSteps": [{"replicas": "50%", "pauseDuration": 0},
                         {"replicas": "100%", "pauseDuration": 0}],
        "pause": False, "maxParallel": 1, "maxUnavailable": 0, "maxFailureThreshold": 1,
        "fallback": "pause",
    })

    def done() -> dict[str, Any] | None:
        status = upgrade_status(kube)
        inner = status.get("status") or {}
        return status if (status.get("phase") == "Idling"
                          and inner.get("currentStepState") == "Completed"
                          and inner.get("totalUpgradeReadyReplicas") == 2) else None

    status = wait_for(done, timeout=90, what="the rollout to complete",
                      observe=lambda: upgrade_status(kube))
    assert status is not None
    assert status["skipped"] == ["node-0002", "node-0004"]
    assert status["status"]["totalUpgradeReplicas"] == 2
    conditions = {c["type"]: c for c in status["conditions"]}
    assert "RolledBack" not in conditions
    skipped = conditions[COND_NODES_SKIPPED]
    assert "status" not in skipped, "the CRD's conditions have no status: listed = in force"
    assert "node-0002" in skipped["message"] and "node-0004" in skipped["message"]
    assert sorted(fleet.ready_driver_nodes(NEW)) == ["node-0001", "node-0003"]
    assert sorted(fleet.ready_driver_nodes(old)) == ["node-0002", "node-0004"]
    repaired = kube.get("/api/v1/nodes/node-0002")
    assert repaired["spec"].get("unschedulable") is True  # its repair's cordon, untouched
    assert repaired["metadata"]["annotations"][ANN_SKIPPED] == status["status"][
        "lastPodSpecRevision"]
    labelled = kube.get("/api/v1/nodes/node-0004")
    assert not labelled["spec"].get("unschedulable")
    assert ANN_SKIPPED not in (labelled["metadata"].get("annotations") or {})
