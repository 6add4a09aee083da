"""The firmware orchestrator's own spec writes pass the webhook by their content (PreferCloud
with the flow's fwEnableVirt while it runs, Never with the annotation that ends the flow), and a
person's firmware change mid-flow is refused by the API server (docs/firmware.md and
docs/admission.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from reconciler.firmware.controller import FirmwareController
from reconciler.firmware.model import FirmwareSettings
from reconciler.kube.api import KubeApi
from reconciler.sim.control_plane import ControlPlane
from reconciler.sim.waiting import wait_for
from tests.admission.test_cluster import DENIED, Daemon, daemon, kubectl  # noqa: F401
from tests.firmware.helpers import cluster_operator, firmware_status, request_firmware, stages

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture
def orchestrator(kube: KubeApi) -> Iterator[FirmwareController]:
    controller = FirmwareController(kube, settings=FirmwareSettings()).start()
    assert controller.wait_synced(30)
    yield controller
    controller.stop()


def test_the_firmware_flow_passes_the_webhook_and_a_persons_change_does_not(
        control_plane: ControlPlane, kube: KubeApi, daemon: Daemon,  # noqa: F811
        fleet_factory: Any, orchestrator: FirmwareController) -> None:
    fleet = fleet_factory(nodes=3, firmware_seconds=0.3, reboot_seconds=0.5)
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 3, timeout=60,
             what="3 Ready driver pods", observe=fleet.driver_pods)
    wait_for(lambda: firmware_status(kube).get("phase") == "Idle", timeout=20,
             what="the first firmware status", observe=lambda: firmware_status(kube))
    request_firmware(kube, source_commit="f1rmware")
    wait_for(lambda: firmware_status(kube).get("phase") == "AwaitingReboot"
             and set(stages(kube).values()) == {"awaiting-reboot"}, timeout=60,
             what="PreferCloud applied through the webhook and every node awaiting its reboot",
             observe=lambda: firmware_status(kube))
    assert cluster_operator(kube)["spec"]["driver"]["fwUpgradePolicy"] == "PreferCloud"
    patch = [{"op": "replace", "path": "/spec/driver/fwEnableVirt", "value": True}]
    refused = kubectl(control_plane, "patch", "ClusterOperator/cluster-operator",
                      "--type", "json", "--patch", json.dumps(patch))
    assert refused.returncode != 0
    assert DENIED + "/spec/driver/fwEnableVirt: " in refused.stderr
    assert "[firmware-locked-field]" in refused.stderr
    for name in stages(kube):
        fleet.reboot(name)
    wait_for(lambda: firmware_status(kube).get("phase") == "Completed", timeout=60,
             what="Completed (the final Never through the webhook)",
             observe=lambda: firmware_status(kube))
    driver = cluster_operator(kube)["spec"]["driver"]
    assert (driver["fwUpgradePolicy"], driver["fwEnableVirt"]) == ("Never", False)
    assert orchestrator.stats.errors == 0
