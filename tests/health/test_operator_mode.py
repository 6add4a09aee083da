"""Operator mode (SPEC 9): the vendor runs the rollout (stand-in: the rollout controller without
health checks, in-process); the sync role's ``VendorHealthWatch`` runs the node checks on the
nodes it upgraded, against a real Prometheus, and asks for ``pause: true`` with the reason."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from reconciler.controller.act import Target
from reconciler.controller.loop import RolloutController
from reconciler.health.section import read_health
from reconciler.kube.api import KubeApi
from reconciler.names import ANN_VENDOR_HEALTH, CLUSTER_OPERATOR_NAME
from reconciler.rollout.model import PlannerSettings
from reconciler.sim.faults import Fault, FaultKind
from reconciler.sim.operator_install import install_crd
from reconciler.sim.waiting import wait_for
from reconciler.sync.drift import WriteBacks
from reconciler.sync.health_watch import VendorHealthWatch
from tests.conftest import FleetFactory
from tests.controller.helpers import event_reasons, start_rollout, upgrade_status
from tests.health.conftest import PrometheusFactory
from tests.sim.test_fleet import NEW


def config(url: str) -> str:
    return yaml.safe_dump({"health": {
        "prometheus": {"url": url, "timeout": "2s"},
        "interval": "500ms",
        "nodeChecks": [{
            "name": "gpus-available",
            "query": 'min(mx_gpu_state{Hostname="{{node}}", driver_version="{{version}}"})',
            "expect": "== 1",
            "within": "2s",
        }],
    }})


@pytest.mark.cluster
def test_a_failed_check_on_a_vendor_upgraded_node_asks_for_pause_with_the_reason(
    kube: KubeApi, fleet_factory: FleetFactory, prometheus_for: PrometheusFactory,
) -> None:
    fleet = fleet_factory(nodes=4, install_seconds=1.5, faults=[
        Fault("node-0001", FaultKind.GPU_UNAVAILABLE, version=NEW.version)])
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 4, timeout=60,
             what="4 Ready driver pods", observe=fleet.driver_pods)
    prometheus = prometheus_for(fleet)
    install_crd(kube)
    vendor = RolloutController(kube, Target(cluster_operator=CLUSTER_OPERATOR_NAME),
                               settings=PlannerSettings(ready_timeout=30)).start()
    pauses: list[str] = []
    asked = threading.Event()

    def on_failure(reason: str, live: Mapping[str, Any]) -> None:
        pauses.append(reason)
        asked.set()

    section = read_health(config(prometheus.url))
    watch = VendorHealthWatch(kube, cluster_operator=CLUSTER_OPERATOR_NAME, section=section,
                              on_failure=on_failure).start()
    try:
        assert vendor.wait_synced(30)
        start_rollout(kube, NEW.version, {
            "enableRollout": True, "upgradeSteps": [{"replicas": "100%", "pauseDuration": 0}],
            "maxParallel": 1, "maxUnavailable": 1, "maxFailureThreshold": 1,
            "fallback": "pause"})
        assert asked.wait(90), upgrade_status(kube)
        assert len(pauses) == 1
        assert "gpus-available" in pauses[0] and "node-0001" in pauses[0]
        assert "value 0" in pauses[0]
        stored = json.loads(kube.get("/api/v1/nodes/node-0001")["metadata"]["annotations"]
                            [ANN_VENDOR_HEALTH])
        assert stored["failure"] == pauses[0]
        # a healthy node the vendor upgraded passes (and is not reported)
        def passed() -> bool:
            ann = kube.get("/api/v1/nodes/node-0002")["metadata"].get("annotations") or {}
            return "gpus-available" in json.loads(ann.get(ANN_VENDOR_HEALTH, "{}")).get(
                "passed", {})

        wait_for(passed, timeout=60, what="node-0002's check passed")
        assert "HealthCheckFailed" in event_reasons(kube)
        assert len(pauses) == 1  # reported once
    finally:
        watch.stop()
        vendor.stop()


class _Spec:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def pause(self, cluster: str, *, reason: str, step: str | None = None,
              source_commit: str | None = None) -> Any:
        self.calls.append({"cluster": cluster, "reason": reason, "step": step})

        class Change:
            change_id = f"c{len(self.calls)}"
            subject = f"policy({cluster}): pause the rollout: {reason}"
        return Change()


class _Publisher:
    kicks = 0

    def kick(self) -> None:
        self.kicks += 1


class _Repo:
    def __init__(self) -> None:
        self.spec = _Spec()
        self.policy_publisher = _Publisher()


def test_operator_mode_pause_commit_names_the_check_and_is_dispatched_once() -> None:
    from reconciler.sync.record import SyncStats

    repo = _Repo()
    backs = WriteBacks(repo, cluster="prod-a", monotonic=lambda: 0.0,  # type: ignore[arg-type]
                       applied_commit=lambda: "a" * 40, stats=SyncStats())
    live = {"status": {"upgradeStatus": {"phase": "Progressing",
                                         "status": {"currentStepIndex": 1}}},
            "spec": {"driver": {"upgradePolicy": {"upgradeSteps": [{"replicas": 1}]}}}}
    reason = "health check gpus-available failed on node gpu-7: value 0 (query q)"
    backs.pause_for_health(reason, live)
    backs.pause_for_health(reason, live)  # a commit for it is still pending
    assert [c["reason"] for c in repo.spec.calls] == [f"health check failed: {reason}"]
    assert repo.policy_publisher.kicks == 1
