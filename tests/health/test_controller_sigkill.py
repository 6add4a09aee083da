"""The rollout controller as a real process (`reconciler run --role controller --repo-config F`)
SIGKILLed while a node verifies: the process started after it resumes the node check's timer
from the stored timestamp, so the `within` deadline is the same absolute moment (docs/health.md:
restart-safe timers), against the real control plane and a real Prometheus."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.health.checks import HealthRecord
from reconciler.kube.api import KubeApi
from reconciler.names import ANN_FAILED_AT, ANN_HEALTH
from reconciler.sim.control_plane import ControlPlane
from reconciler.sim.faults import Fault, FaultKind
from reconciler.sim.waiting import wait_for
from reconciler.timefmt import parse_time
from tests.conftest import FleetFactory
from tests.controller.helpers import start_rollout, upgrade_status
from tests.health.conftest import PrometheusFactory
from tests.health.test_rollout_gates import conditions, health_yaml
from tests.sim.test_fleet import NEW

pytestmark = pytest.mark.cluster

WITHIN = 16.0  # long enough to kill, wait and restart well inside it
INTERVAL = 1.0  # the check's health.interval (health_yaml)


class Controllers:
    """Child controllers, each in its own process group; at teardown every group still alive
    gets SIGTERM, then SIGKILL after a grace time, so no child outlives the test."""

    def __init__(self, kubeconfig: Path, repo_config: Path) -> None:
        self.kubeconfig = kubeconfig
        self.repo_config = repo_config
        self.started: list[subprocess.Popen[bytes]] = []

    def spawn(self) -> subprocess.Popen[bytes]:
        log = open(self.kubeconfig.parent / "health-controller.log", "ab")  # noqa: SIM115
        process = subprocess.Popen(
            [sys.executable, "-m", "reconciler.cli.main", "run", "--role", "controller",
             "--kubeconfig", str(self.kubeconfig), "--repo-config", str(self.repo_config),
             # no ops port: a fixed one may be taken by other work on the machine
             "--ops-listen", "off", "--log-level", "warning"],
            stdout=log, stderr=log, start_new_session=True,
        )
        log.close()  # the child has its own descriptor
        self.started.append(process)
        return process

    @staticmethod
    def sigkill(process: subprocess.Popen[bytes]) -> None:
        os.killpg(process.pid, signal.SIGKILL)
        assert process.wait(10) == -signal.SIGKILL

    def stop_all(self) -> None:
        for process in self.started:
            if process.poll() is not None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
        for process in self.started:  # nothing of any group is left either
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)


@pytest.fixture
def controllers(control_plane: ControlPlane, tmp_path: Path) -> Iterator[Controllers]:
    made = Controllers(control_plane.kubeconfig, tmp_path / "reconciler.yaml")
    yield made
    made.stop_all()


def test_sigkilled_controller_resumes_the_verifying_nodes_within_deadline_from_the_stored_time(
    kube: KubeApi, fleet_factory: FleetFactory, prometheus_for: PrometheusFactory,
    controllers: Controllers,
) -> None:
    # node-0001 (the first node of the only step) gets the new driver Ready but its GPUs
    # unavailable: its node check cannot pass, so it verifies until `within` runs out
    fleet = fleet_factory(nodes=3, faults=[
        Fault("node-0001", FaultKind.GPU_UNAVAILABLE, version=NEW.version)])
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 3, timeout=60,
             what="3 Ready driver pods", observe=fleet.driver_pods)
    prometheus = prometheus_for(fleet)
    controllers.repo_config.write_text(
        health_yaml(prometheus.url).replace("within: 4s", f"within: {WITHIN:g}s"))
    first = controllers.spawn()
    wait_for(lambda: upgrade_status(kube).get("phase"), timeout=60,
             what="the first controller's status", observe=lambda: first.poll())
    start_rollout(kube, NEW.version, {
        "enableRollout": True, "upgradeSteps": [{"replicas": "100%", "pauseDuration": 0}],
        "maxParallel": 1, "maxUnavailable": 1, "maxFailureThreshold": 1, "fallback": "pause"})

    def record() -> str | None:
        ann = kube.get("/api/v1/nodes/node-0001")["metadata"].get("annotations") or {}
        return ann.get(ANN_HEALTH)

    stored = wait_for(record, timeout=90, what="node-0001's stored health record",
                      observe=lambda: upgrade_status(kube))
    assert stored is not None
    started = HealthRecord.from_text(stored, 0).started
    # the check is pending: the status names it as waiting, nothing has failed yet
    wait_for(lambda: "gpus-available" in str(upgrade_status(kube).get("status", {})
                                             .get("message")),
             timeout=30, what="the status naming the pending check",
             observe=lambda: upgrade_status(kube))
    assert "HealthCheckFailed" not in conditions(kube)

    killed_at = time.time()
    controllers.sigkill(first)
    assert killed_at < started + WITHIN - 10, "the node verified too long before the kill"
    time.sleep(8)  # no controller at all for a while; the new one starts before the deadline
    restarted_at = time.time()
    second = controllers.spawn()

    def failed() -> dict[str, Any] | None:
        # listed = in force: the CRD's conditions carry no status (a condition no longer in
        # force is removed)
        return conditions(kube).get("HealthCheckFailed")

    cond = wait_for(failed, timeout=90, what="the failure at the stored within",
                    observe=lambda: (second.poll(), upgrade_status(kube)))
    assert cond is not None and "node-0001" in cond["message"]
    assert "gpus-available" in cond["message"]
    assert second.poll() is None  # the new process did it, still running

    # the stored start is the first process's, unchanged by the second
    after = record()
    assert after is not None and HealthRecord.from_text(after, 0).started == started
    failed_text = kube.get("/api/v1/nodes/node-0001")["metadata"]["annotations"][ANN_FAILED_AT]
    failed_at = parse_time(failed_text)
    # same absolute deadline: at started + within (plus at most a check interval and a pass),
    # well before a timer restarted by the second process could have run out
    assert started + WITHIN - 0.5 <= failed_at <= started + WITHIN + INTERVAL + 5
    assert failed_at < restarted_at + WITHIN - 2
    status = upgrade_status(kube)["status"]
    assert status["currentStepState"] == "StepPaused"
    assert status["totalUpgradeReadyReplicas"] == 0
