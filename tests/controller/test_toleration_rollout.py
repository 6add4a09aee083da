"""A step's toleration (docs/rollout.md#failures-tolerated-in-a-step) against the real control
plane and the simulated fleet: the acceptance of issue 41, item 2."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.controller.loop import RolloutController
from reconciler.kube.api import KubeApi
from reconciler.names import (
    ANN_FAILURE_TOLERATED,
    ANN_FAILURES,
    ANN_STATE,
    CLUSTER_OPERATOR_NAME,
)
from reconciler.rollout.model import PlannerSettings
from reconciler.sim.control_plane import ControlPlane
from reconciler.sim.waiting import wait_for
from tests.controller.helpers import (
    InvariantObserver,
    cluster_operator,
    event_reasons,
    running_controller,
    spec_41_problems,
    start_rollout,
    upgrade_status,
)

pytestmark = pytest.mark.cluster

NEW = "2.33.0.9"


@pytest.fixture
def controller(kube: KubeApi) -> Iterator[RolloutController]:
    yield from running_controller(
        kube, PlannerSettings(ready_timeout=60, retry_backoff=0.5, retry_backoff_max=2))


def test_toleration_one_on_the_first_step_and_one_faulty_node_completes(
    kube: KubeApi, fleet_factory: Any, controller: RolloutController,
    control_plane: ControlPlane,
) -> None:
    """The first step (3 nodes) tolerates 1 failure; node-0002's new driver image cannot be
    pulled. maxFailureThreshold 1 and maxUnavailable 0: a counted failure would fall back at
    once, an unavailable node would stop every fresh start. The rollout completes, the fault
    tolerated, no fallback."""
    fleet = fleet_factory(nodes=6)
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 6, timeout=60, what="6 Ready pods")
    fleet.set_fault("node-0002", "imagepull", version=NEW)
    observer = InvariantObserver(kube, max_parallel=1).start()
    policy = {
        "enableRollout": True,
        "upgradeSteps": [{"replicas": 3, "pauseDuration": 0, "toleration": 1},
                         {"replicas": "100%", "pauseDuration": 0}],
        "pause": False,
        "maxParallel": 1,
        "maxUnavailable": 0,
        "maxFailureThreshold": 1,
        "fallback": "pause",
    }
    try:
        start_rollout(kube, NEW, policy)
        # the API server kept the field (the CRD has it): what the controller plans with
        steps = cluster_operator(kube)["spec"]["driver"]["upgradePolicy"]["upgradeSteps"]
        assert steps[0]["toleration"] == 1
        final = wait_for(
            lambda: (s := upgrade_status(kube)).get("phase") == "Idling"
            and (s.get("status") or {}).get("currentStepState") == "Completed" and s,
            timeout=120, what="the rollout to complete", observe=lambda: upgrade_status(kube))
    finally:
        observer.stop()
    inner = final["status"]
    assert inner["currentStepIndex"] == 2 and inner["currentFailureRetry"] == 0
    assert inner["totalUpgradeReadyReplicas"] == 5 and inner["totalUpgradeReplicas"] == 6
    assert inner["lastPodSpecRevision"] == inner["upgradingPodSpecRevision"]
    conditions = {c["type"]: c for c in final.get("conditions") or []}
    assert "BatchFailed" not in conditions and "RolledBack" not in conditions
    assert conditions["FailuresTolerated"]["reason"] == "FailuresTolerated"
    assert "node-0002 (step 1)" in conditions["FailuresTolerated"]["message"]
    # no fallback: pause was never set, the version stays the new one
    spec = cluster_operator(kube)["spec"]["driver"]
    assert spec["upgradePolicy"]["pause"] is False and spec["payload"]["version"] == NEW
    # the faulty node is left behind: failed, cordoned, its toleration recorded, never counted
    node = kube.get("/api/v1/nodes/node-0002")
    annotations = node["metadata"]["annotations"]
    assert node["spec"].get("unschedulable") is True
    assert annotations[ANN_STATE] == "failed"
    assert annotations[ANN_FAILURE_TOLERATED] == f"1@{inner['upgradingPodSpecRevision']}"
    assert ANN_FAILURES not in annotations
    others = [n for n in fleet.node_names if n != "node-0002"]
    assert sorted(fleet.ready_driver_nodes(NEW)) == others
    for name in others:
        assert not kube.get(f"/api/v1/nodes/{name}")["spec"].get("unschedulable")
    # tolerated, never retried: its driver pod was deleted once, for the new version
    assert len(observer.deletions["node-0002"]) == 1
    assert observer.violations == []
    reasons = wait_for(lambda: (r := event_reasons(kube)) and "RolloutCompleted" in r and r,
                       timeout=10, what="the completion event")
    assert "NodeFailureTolerated" in reasons
    assert "NodeFailed" not in reasons and "FallbackPaused" not in reasons
    # what a person sees, in the vendor CRD's fields: kubectl's jsonpath and reconciler status
    shown = subprocess.run(
        [str(control_plane.binaries.kubectl), f"--kubeconfig={control_plane.kubeconfig}", "get",
         "clusteroperators", CLUSTER_OPERATOR_NAME, "-o", "jsonpath={.status.upgradeStatus}"],
        capture_output=True, text=True, timeout=60, check=True).stdout
    stored = json.loads(shown)
    assert spec_41_problems(stored) == [], stored
    assert stored["phase"] == "Idling" and stored["status"]["currentStepIndex"] == 2
    assert stored["status"]["CurrentUpgradeReadyReplicas"] == 2  # step 2's 3 nodes, 1 left
    assert stored["status"]["totalUpgradeReadyReplicas"] == 5
    assert [c["type"] for c in stored["conditions"]] == ["FailuresTolerated"]
    assert "status" not in stored["conditions"][0], "the CRD's conditions have no status"
    status = subprocess.run(
        [str(Path(sys.executable).parent / "reconciler"), "status", "--from", "cluster",
         "--kubeconfig",
         str(control_plane.kubeconfig), "--format", "json"],
        capture_output=True, text=True, timeout=120, check=True).stdout
    report = json.loads(status)
    (cluster,) = report if isinstance(report, list) else report.get("clusters", [report])
    assert cluster["phase"] == "Idling"
    assert any(c["type"] == "FailuresTolerated" for c in cluster["conditions"])
