"""Operator mode (docs/health.md#operator-mode): the vendor runs the rollout (stand-in: the rollout
controller without health checks, in-process); the sync role's ``VendorHealthWatch`` runs the node
checks on the nodes it upgraded, against a real Prometheus, and asks for ``pause: true`` with the
reason."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from reconciler.controller.act import Target
from reconciler.controller.loop import RolloutController
from reconciler.kube.api import KubeApi
from reconciler.kube.objects import cluster_operator_path
from reconciler.names import ANN_VENDOR_HEALTH, CLUSTER_OPERATOR_NAME
from reconciler.rollout.model import PlannerSettings
from reconciler.sim.faults import Fault, FaultKind
from reconciler.sim.operator_install import install_crd
from reconciler.sim.waiting import wait_for
from reconciler.sync.drift import DriftRepair, WriteBacks
from reconciler.sync.health_watch import VendorHealthWatch, stop_vendor
from reconciler.sync.record import SyncStats
from tests.conftest import FleetFactory
from tests.controller.helpers import event_reasons, start_rollout, upgrade_status
from tests.health.conftest import PrometheusFactory, health_of
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

    section = health_of(config(prometheus.url))
    drift = DriftRepair(kube, CLUSTER_OPERATOR_NAME, cluster="prod-a", monotonic=lambda: 0.0,
                        stats=SyncStats())  # nothing applied yet: a merge patch
    watch = VendorHealthWatch(kube, cluster_operator=CLUSTER_OPERATOR_NAME, section=section,
                              on_failure=on_failure,
                              stop_vendor=lambda: stop_vendor(kube, CLUSTER_OPERATOR_NAME,
                                                              drift)).start()
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
        # the sync role applies the pause itself (its commit is no person's to apply)
        wait_for(lambda: (kube.get(cluster_operator_path(CLUSTER_OPERATOR_NAME))["spec"]
                          ["driver"]["upgradePolicy"].get("pause")) is True,
                 timeout=30, what="pause: true in the cluster")
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

    def health_pause(self, cluster: str, *, reason: str, step: str | None = None,
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


def test_operator_mode_pause_for_an_invalid_section_says_so_not_a_failed_check() -> None:
    from reconciler.sync.record import SyncStats

    repo = _Repo()
    backs = WriteBacks(repo, cluster="prod-a", monotonic=lambda: 0.0,  # type: ignore[arg-type]
                       applied_commit=lambda: "a" * 40, stats=SyncStats())
    error = "reconciler.yaml:7:15: error: health.nodeChecks[0].within: ... [health-duration]"
    backs.pause_for_health(error, {}, cause="health section invalid")
    assert [c["reason"] for c in repo.spec.calls] == [f"health section invalid: {error}"]


COMMIT_CONFIG = """\
health:
  prometheus: {url: 'http://127.0.0.1:9', timeout: 1s}
  interval: 100ms
  nodeChecks:
    - name: gpus-available
      query: 'min(mx_gpu_state{Hostname="{{node}}"})'
      expect: '== 1'
      within: 1m
"""


@pytest.mark.cluster
def test_the_watch_follows_each_commits_section_and_an_invalid_one_pauses_the_vendor(
    kube: KubeApi, fleet_factory: FleetFactory,
) -> None:
    """docs/health.md: ``health`` read at every commit (the sync's last handled one, as the daemon
    wires it); a section that does not validate commits ``pause: true`` with the located error
    and a Warning Event, once per error; checks are never silently switched off."""
    from reconciler.config.document import load
    from reconciler.settings.live import LiveSettings
    from tests.controller.helpers import cluster_operator

    live = LiveSettings(None)  # the sync's: it publishes each commit it applies
    fleet = fleet_factory(nodes=2, install_seconds=0.3)
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 2, timeout=60,
             what="2 Ready driver pods", observe=fleet.driver_pods)
    install_crd(kube)
    vendor = RolloutController(kube, Target(cluster_operator=CLUSTER_OPERATOR_NAME),
                               settings=PlannerSettings(ready_timeout=30)).start()
    failures: list[str] = []
    invalid: list[str] = []
    sent: list[str] = []

    def answer(expr: str) -> float:
        sent.append(expr)
        return 1.0

    watch = VendorHealthWatch(
        kube, cluster_operator=CLUSTER_OPERATOR_NAME,
        section=lambda: live.current().health,
        on_failure=lambda reason, live: failures.append(reason),
        on_invalid=lambda reason, live: invalid.append(reason),
        query=answer)
    try:
        assert vendor.wait_synced(30)
        watch.run_once()  # no section at all yet: nothing asked, nothing reported
        assert not sent and not invalid
        live.offer(load(COMMIT_CONFIG), source="commit 1")
        start_rollout(kube, NEW.version, {
            "enableRollout": True, "upgradeSteps": [{"replicas": "100%", "pauseDuration": 0}],
            "maxParallel": 2, "maxUnavailable": 2, "maxFailureThreshold": 1,
            "fallback": "pause"})

        def both_passed() -> bool:
            watch.run_once()
            for node in ("node-0001", "node-0002"):
                ann = kube.get(f"/api/v1/nodes/{node}")["metadata"].get("annotations") or {}
                stored = json.loads(ann.get(ANN_VENDOR_HEALTH, "{}"))
                if "gpus-available" not in stored.get("passed", {}):
                    return False
            return True

        wait_for(both_passed, timeout=60, what="both vendor-upgraded nodes checked",
                 observe=lambda: upgrade_status(kube))
        assert sent and 'Hostname="node-0001"' in " ".join(sent)

        # the next commit's section does not validate: fail closed, once per error
        live.offer(load(COMMIT_CONFIG.replace("within: 1m", "within: 0s")),
                   source="commit 2")
        asked = len(sent)
        watch.run_once()
        watch.run_once()
        assert len(invalid) == 1, invalid
        assert invalid[0].startswith("reconciler.yaml:8:15: ") and "[health-duration]" \
            in invalid[0]
        assert len(sent) == asked  # no checks run on an invalid section
        assert watch.config is None
        uid = cluster_operator(kube)["metadata"]["uid"]
        events = kube.list("/api/v1/namespaces/default/events",
                           query={"fieldSelector": f"involvedObject.uid={uid}"})["items"]
        found = [e for e in events if e.get("reason") == "HealthConfigInvalid"]
        assert len(found) == 1 and found[0]["type"] == "Warning"
        assert "[health-duration]" in found[0]["message"]

        # removed by a later commit: no checks, nothing reported
        live.offer(load("rollout: {readyTimeout: 5m}\n"), source="commit 3")
        watch.run_once()
        assert len(invalid) == 1 and watch.config is None
        # invalid again after that: reported again (a new fail-closed decision)
        live.offer(load(COMMIT_CONFIG.replace("== 1", "= 1")), source="commit 4")
        watch.run_once()
        assert len(invalid) == 2 and "[health-expect]" in invalid[1]
        assert not failures
    finally:
        vendor.stop()
