"""Health gates end to end: the rollout controller (in-process) on the real control plane, the
fleet's MX Exporter stand-in and a real Prometheus server scraping it (docs/health.md)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from reconciler.clock import Clock, wall
from reconciler.controller.act import Target
from reconciler.controller.health import HealthFeeder
from reconciler.controller.loop import RolloutController
from reconciler.health.checks import HealthRecord
from reconciler.kube.api import KubeApi
from reconciler.names import ANN_FAILED_AT, ANN_HEALTH, CANARY_LABEL, CLUSTER_OPERATOR_NAME
from reconciler.ops.metrics import Metrics
from reconciler.rollout.model import PlannerSettings
from reconciler.sim.faults import Fault, FaultKind
from reconciler.sim.operator_install import install_crd
from reconciler.sim.waiting import wait_for
from reconciler.timefmt import parse_time
from tests.conftest import FleetFactory
from tests.controller.helpers import (
    InvariantObserver,
    event_reasons,
    start_rollout,
    upgrade_status,
)
from tests.health.conftest import PrometheusFactory, health_of
from tests.loops import started_loops
from tests.sim.test_fleet import NEW

pytestmark = pytest.mark.cluster

ControllerFactory = Callable[..., RolloutController]


class ShiftedClock:
    """Wall time plus a shift the test moves forward: the controller's time gets past a wait
    (a check's ``within``) at once instead of the test waiting it out."""

    def __init__(self) -> None:
        self.shift = 0.0

    def __call__(self) -> float:
        return time.time() + self.shift


def health_yaml(url: str, *, step_checks: bool = False) -> str:
    section: dict[str, Any] = {
        "prometheus": {"url": url, "timeout": "2s"},
        "interval": "1s",
        "nodeChecks": [{
            "name": "gpus-available",
            # only the new driver's samples: a scrape of the old pod never passes the check
            "query": 'min(mx_gpu_state{Hostname="{{node}}", driver_version="{{version}}"})',
            "expect": "== 1",
            "within": "4s",
        }],
    }
    if step_checks:
        section["stepChecks"] = [{
            "name": "no-throttling",
            "query": 'max(mx_clk_thr{Hostname=~"{{nodes}}"}) or vector(0)',
            "expect": "== 0",
            "for": "1s",
        }]
    return yaml.safe_dump({"health": section})


@pytest.fixture
def controller_with(kube: KubeApi) -> Iterator[ControllerFactory]:
    def make(config_text: str, clock: Clock = wall) -> RolloutController:
        install_crd(kube)
        section = health_of(config_text)
        assert section.config is not None, section.error
        metrics = Metrics()
        ctl = RolloutController(
            kube, Target(cluster_operator=CLUSTER_OPERATOR_NAME),
            settings=PlannerSettings(ready_timeout=30, retry_backoff=0.5, retry_backoff_max=2),
            health=HealthFeeder(section, clock=clock, on_result=metrics.count_health_check),
            clock=clock,
        )
        ctl.metrics = metrics  # type: ignore[attr-defined]
        return ctl.start()

    with started_loops(make) as start:
        yield start


def conditions(kube: KubeApi) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in upgrade_status(kube).get("conditions") or ()}


def test_unavailable_gpus_on_a_canary_pause_batch_one_naming_the_check_and_node(
    kube: KubeApi, fleet_factory: FleetFactory, prometheus_for: PrometheusFactory,
    controller_with: ControllerFactory,
) -> None:
    fleet = fleet_factory(nodes=12, faults=[
        Fault("node-0007", FaultKind.GPU_UNAVAILABLE, version=NEW.version)])
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 12, timeout=120,
             what="12 Ready driver pods", observe=fleet.driver_pods)
    kube.patch("/api/v1/nodes/node-0007", {"metadata": {"labels": {CANARY_LABEL: "true"}}})
    prometheus = prometheus_for(fleet)
    ctl = controller_with(health_yaml(prometheus.url))
    observer = InvariantObserver(kube, max_parallel=2).start()
    try:
        start_rollout(kube, NEW.version, {
            "enableRollout": True,
            "upgradeSteps": [{"replicas": 2},
                             {"replicas": "100%", "pauseDuration": 0}],
            "maxParallel": 2, "maxUnavailable": 1,
            "maxFailureThreshold": 1, "fallback": "pause",
        })

        def failed() -> dict[str, Any] | None:
            cond = conditions(kube).get("HealthCheckFailed")
            return cond if cond and cond.get("status", "True") == "True" else None

        found = wait_for(failed, timeout=120, what="the HealthCheckFailed condition",
                         observe=lambda: upgrade_status(kube))
        assert found is not None
        cond: dict[str, Any] = found
        for part in ("gpus-available", "node-0007", "value 0"):
            assert part in cond["message"]
        status = upgrade_status(kube)
        assert "BatchFailed" in conditions(kube)
        assert status["status"]["currentStepState"] == "StepPaused"
        assert status["status"]["currentStepIndex"] == 1
        co = kube.get(f"/apis/gpu.metax-tech.com/v1alpha1/clusteroperators/"
                      f"{CLUSTER_OPERATOR_NAME}")
        assert co["spec"]["driver"]["upgradePolicy"]["pause"] is True
        # node-0001 passed (counted); node-0007 failed and is not
        assert status["status"]["totalUpgradeReadyReplicas"] == 1
        assert set(observer.deletions) == {"node-0007", "node-0001"}  # batch 1 only
        assert not observer.violations
        reasons = event_reasons(kube)
        assert "HealthCheckPassed" in reasons and "HealthCheckFailed" in reasons
        exposition = ctl.metrics.exposition().decode()  # type: ignore[attr-defined]
        assert any(line.startswith(
            'reconciler_health_check_total{check="gpus-available",result="fail"} ')
            for line in exposition.splitlines())
    finally:
        observer.stop()


def test_clean_rollout_with_node_and_step_checks_completes(
    kube: KubeApi, fleet_factory: FleetFactory, prometheus_for: PrometheusFactory,
    controller_with: ControllerFactory,
) -> None:
    fleet = fleet_factory(nodes=4)
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 4, timeout=60,
             what="4 Ready driver pods", observe=fleet.driver_pods)
    prometheus = prometheus_for(fleet)
    ctl = controller_with(health_yaml(prometheus.url, step_checks=True))
    start_rollout(kube, NEW.version, {
        "enableRollout": True,
        "upgradeSteps": [{"replicas": 2, "pauseDuration": 0},
                         {"replicas": "100%", "pauseDuration": 0}],
        "maxParallel": 2, "maxUnavailable": 1, "maxFailureThreshold": 1, "fallback": "pause",
    })
    wait_for(lambda: upgrade_status(kube).get("status", {}).get("currentStepState")
             == "Completed", timeout=180, what="the rollout to complete",
             observe=lambda: upgrade_status(kube))
    status = upgrade_status(kube)
    assert status["phase"] == "Idling"
    assert status["status"]["totalUpgradeReadyReplicas"] == 4
    checks = status["health"]["checks"]
    assert checks["gpus-available"]["state"] == "Passed"
    assert checks["no-throttling"]["state"] == "Passed"
    assert fleet.ready_driver_nodes(NEW.version) == [f"node-000{i}" for i in range(1, 5)]
    assert ctl.health is not None and ctl.health.queries > 0


def test_unavailable_gpus_with_rollback_end_with_every_node_ready_on_the_old_version(
    kube: KubeApi, fleet_factory: FleetFactory, prometheus_for: PrometheusFactory,
    controller_with: ControllerFactory,
) -> None:
    fleet = fleet_factory(nodes=4, faults=[
        Fault("node-0001", FaultKind.GPU_UNAVAILABLE, version=NEW.version)])
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 4, timeout=60,
             what="4 Ready driver pods", observe=fleet.driver_pods)
    old = fleet.ready_driver_nodes()
    prometheus = prometheus_for(fleet)
    controller_with(health_yaml(prometheus.url))
    start_rollout(kube, NEW.version, {
        "enableRollout": True,
        "upgradeSteps": [{"replicas": 2},
                         {"replicas": "100%", "pauseDuration": 0}],
        "maxParallel": 2, "maxUnavailable": 1, "maxFailureThreshold": 1,
        "fallback": "rollback",
    })

    def rolled_back() -> bool:
        cond = conditions(kube).get("RolledBack")
        return bool(cond and cond.get("status", "True") == "True")

    wait_for(rolled_back, timeout=180, what="the rollback", observe=lambda: upgrade_status(kube))
    assert "HealthCheckFailed" in conditions(kube)
    assert "node-0001" in conditions(kube)["HealthCheckFailed"]["message"]
    assert upgrade_status(kube)["phase"] == "Idling"
    wait_for(lambda: sorted(fleet.ready_driver_nodes()) == sorted(old)
             and not fleet.ready_driver_nodes(NEW.version), timeout=60,
             what="every node Ready on the old version", observe=fleet.driver_pods)


def test_throttling_gpus_fail_the_step_check_and_pause_at_once(
    kube: KubeApi, fleet_factory: FleetFactory, prometheus_for: PrometheusFactory,
    controller_with: ControllerFactory,
) -> None:
    fleet = fleet_factory(nodes=4, faults=[
        Fault("node-0002", FaultKind.GPU_THROTTLING, version=NEW.version)])
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 4, timeout=60,
             what="4 Ready driver pods", observe=fleet.driver_pods)
    prometheus = prometheus_for(fleet)
    controller_with(health_yaml(prometheus.url, step_checks=True))
    start_rollout(kube, NEW.version, {
        "enableRollout": True,
        "upgradeSteps": [{"replicas": 2, "pauseDuration": 0},
                         {"replicas": "100%", "pauseDuration": 0}],
        "maxParallel": 2, "maxUnavailable": 1, "maxFailureThreshold": 1, "fallback": "pause",
    })

    def failed() -> dict[str, Any] | None:
        cond = conditions(kube).get("HealthCheckFailed")
        return cond if cond and cond.get("status", "True") == "True" else None

    found = wait_for(failed, timeout=120, what="the step check's failure",
                     observe=lambda: upgrade_status(kube))
    assert found is not None
    assert "no-throttling" in found["message"] and "mx_clk_thr" in found["message"]
    status = upgrade_status(kube)
    assert status["status"]["currentStepIndex"] == 1
    assert status["status"]["currentStepState"] == "StepPaused"
    assert status["status"]["currentFailureRetry"] == 0  # a step check is no node failure
    assert sorted(fleet.ready_driver_nodes(NEW.version)) == ["node-0001", "node-0002"]


class _Forwarder:
    """A loopback TCP forwarder with a fixed port whose target can change: Prometheus "down"
    (target None: connections are closed at once) and "back" (a new server's port)."""

    def __init__(self) -> None:
        import socket

        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.target: int | None = None
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        import socket

        self.listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            target = self.target
            if target is None:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", target), timeout=2)
            except OSError:
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: Any, dst: Any) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.close()

    def close(self) -> None:
        self._stop.set()
        self.listener.close()
        self.thread.join(5)


def test_prometheus_down_starts_nothing_fails_nothing_and_the_rollout_goes_on_once_back(
    kube: KubeApi, fleet_factory: FleetFactory, prometheus_for: PrometheusFactory,
    controller_with: ControllerFactory,
) -> None:
    fleet = fleet_factory(nodes=3)
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 3, timeout=60,
             what="3 Ready driver pods", observe=fleet.driver_pods)
    forwarder = _Forwarder()  # Prometheus down from the start
    observer = InvariantObserver(kube, max_parallel=1).start()
    try:
        clock = ShiftedClock()
        ctl = controller_with(health_yaml(f"http://127.0.0.1:{forwarder.port}"), clock=clock)
        start_rollout(kube, NEW.version, {
            "enableRollout": True, "upgradeSteps": [{"replicas": "100%", "pauseDuration": 0}],
            "maxParallel": 1, "maxUnavailable": 1, "maxFailureThreshold": 1,
            "fallback": "pause"})
        wait_for(lambda: "query error" in str(upgrade_status(kube).get("status", {})
                                              .get("message")),
                 timeout=60, what="the status naming the unanswered check",
                 observe=lambda: upgrade_status(kube))
        message = upgrade_status(kube)["status"]["message"]
        assert "gpus-available" in message and "waiting since" in message
        # past the check's 4 s `within` on the controller's clock: no answer is no failure
        clock.shift = 6.0
        queries = ctl.health.queries if ctl.health is not None else 0
        assert ctl.wait_passes(3, timeout=30), "three passes after the shift"
        assert ctl.health is not None and ctl.health.queries > queries, "asked again"
        status = upgrade_status(kube)
        assert status["status"]["currentFailureRetry"] == 0
        assert "BatchFailed" not in conditions(kube)
        assert set(observer.deletions) == {"node-0001"}  # nothing new started
        prometheus = prometheus_for(fleet)
        forwarder.target = int(prometheus.url.rsplit(":", 1)[1])  # back
        wait_for(lambda: upgrade_status(kube).get("status", {}).get("currentStepState")
                 == "Completed", timeout=120, what="the rollout to complete",
                 observe=lambda: upgrade_status(kube))
        assert upgrade_status(kube)["status"]["totalUpgradeReadyReplicas"] == 3
        assert not observer.violations
    finally:
        observer.stop()
        forwarder.close()


def test_a_new_controller_resumes_a_verifying_nodes_stored_timer(
    kube: KubeApi, fleet_factory: FleetFactory, prometheus_for: PrometheusFactory,
    controller_with: ControllerFactory,
) -> None:
    fleet = fleet_factory(nodes=3, faults=[
        Fault("node-0001", FaultKind.GPU_UNAVAILABLE, version=NEW.version)])
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 3, timeout=60,
             what="3 Ready driver pods", observe=fleet.driver_pods)
    prometheus = prometheus_for(fleet)
    text = health_yaml(prometheus.url).replace("within: 4s", "within: 8s")
    first = controller_with(text)
    start_rollout(kube, NEW.version, {
        "enableRollout": True, "upgradeSteps": [{"replicas": "100%", "pauseDuration": 0}],
        "maxParallel": 1, "maxUnavailable": 1, "maxFailureThreshold": 1, "fallback": "pause"})

    def record() -> str | None:
        ann = kube.get("/api/v1/nodes/node-0001")["metadata"].get("annotations") or {}
        return ann.get(ANN_HEALTH)

    stored = wait_for(record, timeout=60, what="node-0001's health record")
    first.stop()  # the controller goes away while the node is verifying
    # the next one starts 4 s later on its clock: time without a controller, not waited out
    clock = ShiftedClock()
    clock.shift = 4.0
    restarted_at = clock()
    second = controller_with(text, clock=clock)
    started = HealthRecord.from_text(stored, 0).started

    def failed() -> dict[str, Any] | None:
        cond = conditions(kube).get("HealthCheckFailed")
        return cond if cond and cond.get("status", "True") == "True" else None

    wait_for(failed, timeout=60, what="the failure after the stored within",
             observe=lambda: upgrade_status(kube))
    failed_at = kube.get("/api/v1/nodes/node-0001")["metadata"]["annotations"][ANN_FAILED_AT]
    # the failure came once 8 s had passed since the first controller started the checks,
    # before 8 s had passed since the second one began: the stored timer, not a new one
    assert HealthRecord.from_text(record(), 0).started == started
    moment = parse_time(failed_at)
    assert moment is not None and started + 8 - 0.5 <= moment < restarted_at + 8
    assert second.health is not None and second.health.queries > 0
