"""Drain rollouts end to end (docs/live-clusters.md#the-drain, issue 32) on the dev cluster with
workloads: pods of real Deployments, DaemonSets and Jobs, budgets computed by the real disruption
controller and enforced by the real API server on eviction (``policy/v1``: not ``compat``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from reconciler.config.settings import ClusterSettings
from reconciler.controller.act import Target
from reconciler.controller.loop import RolloutController
from reconciler.kube.api import KubeApi, resource_path
from reconciler.names import (
    ANN_DRAIN_STARTED,
    ANN_FAILED_AT,
    ANN_FAILURE_REASON,
    ANN_FAILURES,
    ANN_STATE,
    CLUSTER_OPERATOR_NAME,
    LABEL_DRAIN_SKIP,
    STATE_DRAINING,
)
from reconciler.policy.label_selector import LabelSelector
from reconciler.policy.rollout_settings import DrainSettings, RolloutSettings, WaitForSettings
from reconciler.rollout.model import PlannerSettings
from reconciler.sim.control_plane import ControlPlane
from reconciler.sim.fleet import Fleet
from reconciler.sim.operator_install import install_crd
from reconciler.sim.waiting import wait_for
from reconciler.timefmt import parse_time
from tests.conftest import FleetFactory
from tests.controller.drain_objects import (
    PodRecorder,
    agent_daemonset,
    budget,
    budget_status,
    create,
    deployment,
    job,
    mirror_pod,
    pods,
    ready,
)
from tests.controller.helpers import StatusRecorder, event_reasons, start_rollout, upgrade_status
from tests.health.test_controller_sigkill import Controllers
from tests.loops import started_loops

pytestmark = pytest.mark.cluster

NEW = "2.33.0.9"


def _policy(max_parallel: int) -> dict[str, Any]:
    return {"enableRollout": True, "upgradeSteps": [{"replicas": "100%", "pauseDuration": 0}],
            "pause": False, "maxParallel": max_parallel, "maxUnavailable": 0,
            "maxFailureThreshold": 5, "fallback": "pause"}


@pytest.fixture
def controller_for(kube: KubeApi) -> Iterator[Callable[[RolloutSettings], RolloutController]]:
    def make(rollout: RolloutSettings) -> RolloutController:
        install_crd(kube)
        return RolloutController(
            kube, Target(cluster_operator=CLUSTER_OPERATOR_NAME),
            settings=PlannerSettings(retry_backoff=120, retry_backoff_max=120),
            config=lambda: ClusterSettings(rollout=rollout)).start()

    with started_loops(make) as start:
        yield start


def _annotations(kube: KubeApi, node: str) -> dict[str, str]:
    return dict(kube.get(resource_path("v1", "nodes", node))["metadata"].get("annotations")
                or {})


def _completed(kube: KubeApi) -> bool:
    status = upgrade_status(kube)
    return (status.get("phase") == "Idling"
            and (status.get("status") or {}).get("currentStepState") == "Completed")


def _all_ready(kube: KubeApi, ns: str, count: int) -> bool:
    return len([p for p in pods(kube, ns) if ready(p)
                and not p["metadata"].get("deletionTimestamp")]) >= count


def test_a_budget_allowing_one_disruption_holds_a_six_node_drain_rollout(
    kube: KubeApi, fleet_factory: FleetFactory, workload_namespace: str,
    controller_for: Callable[[RolloutSettings], RolloutController],
) -> None:
    """Never more than one of the budget's pods down; the nodes the budget holds show
    ``draining`` with the budget named; DaemonSet, mirror and drain.skip pods never evicted."""
    ns = workload_namespace
    fleet = fleet_factory(nodes=6, workloads=True)
    create(kube, deployment("web", ns, 6, gpus=4))
    create(kube, budget("web", ns, min_available=5))
    create(kube, deployment("keep", ns, 1, gpus=4, labels={LABEL_DRAIN_SKIP: "true"}))
    create(kube, agent_daemonset("agent", ns, fleet.fleet_id))
    first = fleet.node_names[0]
    create(kube, mirror_pod(kube, "static-agent", ns, first))
    wait_for(lambda: _all_ready(kube, ns, 6 + 1 + 6 + 1)
             and budget_status(kube, "web", ns).get("disruptionsAllowed") == 1,
             timeout=60, what="every pod Ready, one disruption allowed",
             observe=lambda: budget_status(kube, "web", ns))
    controller = controller_for(RolloutSettings(ready_timeout=30, drain=DrainSettings()))
    with PodRecorder(kube, app="web", replicas=6) as recorded, StatusRecorder(kube) as statuses:
        start_rollout(kube, NEW, _policy(max_parallel=3))
        wait_for(lambda: _completed(kube), timeout=120, what="the rollout Completed",
                 observe=lambda: upgrade_status(kube).get("status"))
    assert sorted(fleet.ready_driver_nodes(NEW)) == fleet.node_names
    assert recorded.max_down == 1, "the budget allows one pod down, and one was"
    evicted = recorded.evicted(f"{ns}/")
    assert any(k.startswith(f"{ns}/web-") for k in evicted)
    assert not [k for k in evicted if not k.startswith(f"{ns}/web-")], \
        "DaemonSet, mirror and drain.skip pods are never evicted"
    held = [entry for s in statuses.seen for entry in s.get("draining") or ()
            if entry.get("budgets") == [f"{ns}/web"]]
    assert held, "a node the budget held showed draining with the budget named"
    assert all(entry["node"] in fleet.node_names and entry["pods"] for entry in held)
    assert "NodeDrainBlocked" in event_reasons(kube)
    assert controller.executor.evictions.get("evicted", 0) >= len(
        [k for k in evicted if k.startswith(f"{ns}/web-")])


def test_on_timeout_fail_counts_one_failure_and_a_wait_for_job_is_waited_for(
    kube: KubeApi, fleet_factory: FleetFactory, workload_namespace: str,
    controller_for: Callable[[RolloutSettings], RolloutController],
) -> None:
    ns = workload_namespace
    fleet = fleet_factory(nodes=3, workloads=True)
    training, serving, idle = fleet.node_names
    create(kube, job("train", ns, run_seconds=4, node=training, labels={"wait": "true"}))
    solo = deployment("solo", ns, 1)
    solo["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": serving}
    create(kube, solo)
    create(kube, budget("solo", ns, min_available=1))
    wait_for(lambda: _all_ready(kube, ns, 2)
             and budget_status(kube, "solo", ns).get("currentHealthy") == 1,
             timeout=60, what="the job's and the served pod Ready",
             observe=lambda: [(p["metadata"]["name"], ready(p)) for p in pods(kube, ns)])
    controller_for(RolloutSettings(
        ready_timeout=30,
        drain=DrainSettings(timeout=3.0, on_timeout="fail"),
        wait_for=WaitForSettings(pod_selector=LabelSelector.parse("wait=true"))))
    with PodRecorder(kube) as recorded:
        start_rollout(kube, NEW, _policy(max_parallel=3))
        failed = wait_for(lambda: _annotations(kube, serving).get(ANN_FAILURE_REASON),
                          timeout=60, what=f"{serving}'s drain timed out",
                          observe=lambda: upgrade_status(kube).get("status"))
        assert failed == "DrainTimeout"
        assert _annotations(kube, serving)[ANN_FAILURES].endswith("|1"), "one failure"
        wait_for(lambda: event_reasons(kube).count("NodeFailed") == 1, timeout=30,
                 what="the NodeFailed event", observe=lambda: event_reasons(kube))
        wait_for(lambda: {training, idle} <= set(fleet.ready_driver_nodes(NEW)), timeout=60,
                 what="the training node upgraded once its job completed",
                 observe=lambda: upgrade_status(kube).get("status"))
    assert event_reasons(kube).count("NodeFailed") == 1, "one failure, no other"
    assert _annotations(kube, serving)[ANN_FAILURES].endswith("|1")
    [train] = [k for k in recorded.finished if k.startswith(f"{ns}/train-")]
    assert train not in recorded.deleting or recorded.deleting[train] > recorded.finished[train]
    driver = [position for key, position in recorded.deleting.items()
              if key.startswith("metax-operator/") and _on(recorded, key) == training]
    assert driver and min(driver) > recorded.finished[train], \
        "the training node's driver pod went after the job completed"
    assert not [k for k in recorded.deleting if k.startswith(f"{ns}/solo-")], \
        "the budget's pod stayed: the drain failed instead"


def _on(recorded: PodRecorder, key: str) -> str:
    return next(str(obj["spec"].get("nodeName")) for _, k, obj in recorded.events if k == key)


#: long enough that a new process, however slow to start on a loaded machine, acts well
#: before a timer it had restarted would run out
DRAIN_TIMEOUT = 24.0


def test_a_sigkilled_controller_resumes_the_drain_with_the_same_timer(
    kube: KubeApi, control_plane: ControlPlane, fleet_factory: FleetFactory,
    workload_namespace: str, tmp_path: Path,
) -> None:
    ns = workload_namespace
    fleet: Fleet = fleet_factory(nodes=2, workloads=True)
    held_node = fleet.node_names[0]
    solo = deployment("solo", ns, 1)
    solo["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": held_node}
    create(kube, solo)
    create(kube, budget("solo", ns, min_available=1))
    wait_for(lambda: budget_status(kube, "solo", ns).get("currentHealthy") == 1, timeout=60,
             what="the served pod healthy", observe=lambda: budget_status(kube, "solo", ns))
    controllers = Controllers(control_plane.kubeconfig, tmp_path / "reconciler.yaml")
    controllers.repo_config.write_text(yaml.safe_dump({"rollout": {
        "readyTimeout": "30s",
        "drain": {"timeout": f"{DRAIN_TIMEOUT:g}s", "onTimeout": "fail"}}}))
    try:
        first = controllers.spawn()
        start_rollout(kube, NEW, _policy(max_parallel=2))
        started_text = wait_for(
            lambda: _annotations(kube, held_node).get(ANN_STATE) == STATE_DRAINING
            and _annotations(kube, held_node).get(ANN_DRAIN_STARTED),
            timeout=60, what=f"{held_node} draining",
            observe=lambda: upgrade_status(kube).get("status"))
        started = parse_time(str(started_text))
        controllers.sigkill(first)
        time.sleep(6)  # no controller for a while; the next one starts well before the deadline
        restarted_at = time.time()
        assert restarted_at < started + DRAIN_TIMEOUT - 6
        second = controllers.spawn()
        wait_for(lambda: _annotations(kube, held_node).get(ANN_FAILURE_REASON), timeout=60,
                 what="the drain's timeout", observe=lambda: upgrade_status(kube).get("status"))
        assert second.poll() is None  # the new process did it, still running
    finally:
        controllers.stop_all()
    annotations = _annotations(kube, held_node)
    assert annotations[ANN_DRAIN_STARTED] == started_text, "the same drain, the same start"
    failed_at = parse_time(annotations[ANN_FAILED_AT])
    # the same absolute deadline (plus the new process's start and a pass), well before a
    # timer restarted by the second process could have run out
    assert started + DRAIN_TIMEOUT - 1 <= failed_at
    assert failed_at < restarted_at + DRAIN_TIMEOUT, "not a timer restarted by the process"
    wait_for(lambda: fleet.ready_driver_nodes(NEW) == fleet.node_names[1:], timeout=30,
             what="the other node upgraded", observe=fleet.driver_pods)
