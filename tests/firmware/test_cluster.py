"""The firmware flow on the real control plane with the simulated fleet (docs/firmware.md, issue 8):
manual reboots by a person, the reboot hook, a node that never reports, one that comes back on
the old firmware."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from reconciler.firmware.controller import FirmwareController
from reconciler.firmware.model import FirmwareSettings, StageTimeouts
from reconciler.firmware.status_view import firmware_rows
from reconciler.kube.api import KubeApi, resource_path
from reconciler.kube.objects import cluster_operator_path
from reconciler.names import CLUSTER_OPERATOR_NAME, CORDONED_BEFORE_ANNOTATION, VBIOS_VERSION_LABEL
from reconciler.sim.control_plane import ControlPlane
from reconciler.sim.faults import Fault, FaultKind
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from tests.firmware.helpers import (
    NodeObserver,
    cluster_operator,
    firmware_status,
    gpu_nodes,
    request_firmware,
    stages,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

HOOK = (sys.executable, "-m", "reconciler.firmware.annotate_reboot")


@pytest.fixture
def controllers() -> Iterator[list[FirmwareController]]:
    started: list[FirmwareController] = []
    yield started
    for controller in started:
        controller.stop()


def start_controller(kube: KubeApi, controllers: list[FirmwareController],
                     settings: FirmwareSettings, **options: Any) -> FirmwareController:
    controller = FirmwareController(kube, settings=settings, **options).start()
    controllers.append(controller)
    assert controller.wait_synced(30)
    return controller


def ready_fleet(fleet_factory: Any, **options: Any) -> Fleet:
    fleet: Fleet = fleet_factory(**options)
    count = options.get("nodes", 10)
    wait_for(lambda: len(fleet.ready_driver_nodes()) == count, timeout=60,
             what=f"{count} Ready driver pods", observe=fleet.driver_pods)
    return fleet


def phase_is(kube: KubeApi, *phases: str) -> bool:
    return firmware_status(kube).get("phase") in phases


def test_full_flow_with_manual_reboots_on_ten_nodes(
    kube: KubeApi, fleet_factory: Any, controllers: list[FirmwareController]
) -> None:
    fleet = ready_fleet(fleet_factory, nodes=10, firmware_seconds=(0.5, 2.0), reboot_seconds=1.0)
    kube.patch(resource_path("v1", "nodes", "node-0004"), {"spec": {"unschedulable": True}})
    observer = NodeObserver(kube).start()
    try:
        start_controller(kube, controllers, FirmwareSettings())
        wait_for(lambda: phase_is(kube, "Idle"), timeout=20, what="the first status",
                 observe=lambda: firmware_status(kube))
        request_firmware(kube, source_commit="c0ffee")
        # every GPU node is cordoned before PreferCloud is applied
        wait_for(lambda: cluster_operator(kube)["spec"]["driver"].get("fwUpgradePolicy")
                 == "PreferCloud", timeout=30, what="PreferCloud applied",
                 observe=lambda: firmware_status(kube))
        assert all(n["spec"].get("unschedulable") for n in gpu_nodes(kube).values())
        assert gpu_nodes(kube)["node-0004"]["metadata"]["annotations"][
            CORDONED_BEFORE_ANNOTATION] == "true"
        # a person reboots what the status lists, as it lists it
        rebooted: set[str] = set()

        def reboot_listed() -> bool:
            status = firmware_status(kube)
            for name, entry in (status.get("nodes") or {}).items():
                if entry.get("stage") == "awaiting-reboot" and name not in rebooted:
                    fleet.reboot(name)
                    rebooted.add(name)
            return status.get("phase") == "Completed"

        wait_for(reboot_listed, timeout=90, what="Completed",
                 observe=lambda: firmware_status(kube))
    finally:
        observer.stop()
    status = firmware_status(kube)
    assert set(stages(kube).values()) == {"verified"} and len(stages(kube)) == 10
    assert rebooted == set(stages(kube))
    assert observer.boots == dict.fromkeys(stages(kube), 1)  # one reboot per node, no more
    co = cluster_operator(kube)
    assert co["spec"]["driver"]["fwUpgradePolicy"] == "Never"
    managers = {m["manager"] for m in co["metadata"]["managedFields"]
                if "f:fwUpgradePolicy" in str(m.get("fieldsV1"))}
    assert "gpu-rollout-controller" in managers  # the sync role sees it as the controller's
    nodes = gpu_nodes(kube)
    assert {n: bool(o["spec"].get("unschedulable")) for n, o in nodes.items()} == {
        n: n == "node-0004" for n in nodes}
    assert all(o["metadata"]["labels"][VBIOS_VERSION_LABEL] == "1.13.0.0" for o in nodes.values())
    assert not any(k.startswith("gpu.metax-tech.com/firmware-")
                   for o in nodes.values() for k in o["metadata"].get("annotations") or {})
    assert status["sourceCommit"] == "c0ffee" and status["finishedAt"]
    assert [(r.stage, r.message) for r in firmware_rows(status)] == [
        ("verified", "VBIOS 1.13.0.0 after reboot")] * 10
    # the same request is never run again
    assert controllers[0].wait_passes(2, timeout=30), "two more passes"
    assert firmware_status(kube)["finishedAt"] == status["finishedAt"]


def test_reboot_hook_reboots_at_most_k_nodes_at_a_time(
    kube: KubeApi, control_plane: ControlPlane, fleet_factory: Any,
    controllers: list[FirmwareController],
) -> None:
    ready_fleet(fleet_factory, nodes=10, firmware_seconds=0.5, reboot_seconds=(1.0, 2.5))
    observer = NodeObserver(kube).start()
    settings = FirmwareSettings(reboot_mode="hook", reboot_command=HOOK,
                                max_concurrent_reboots=3)
    try:
        controller = start_controller(kube, controllers, settings,
                                      hook_env={"KUBECONFIG": str(control_plane.kubeconfig)})
        request_firmware(kube, source_commit="beef01")
        wait_for(lambda: phase_is(kube, "Completed", "Failed"), timeout=120, what="the end",
                 observe=lambda: firmware_status(kube))
    finally:
        observer.stop()
    assert firmware_status(kube)["phase"] == "Completed", firmware_status(kube)
    assert observer.boots == {f"node-{i:04d}": 1 for i in range(1, 11)}
    assert 1 <= observer.max_not_ready <= 3
    assert controller.stats.hooks_run == 10
    assert controller.stats.max_hooks_at_once <= 3
    assert not any(n["spec"].get("unschedulable") for n in gpu_nodes(kube).values())


def test_node_that_never_reports_and_node_on_the_wrong_version_are_reported(
    kube: KubeApi, fleet_factory: Any, controllers: list[FirmwareController],
    control_plane: ControlPlane,
) -> None:
    ready_fleet(fleet_factory, nodes=4, firmware_seconds=0.3, reboot_seconds=0.5, faults=[
        Fault("node-0002", FaultKind.FIRMWARE_NO_REPORT),
        Fault("node-0003", FaultKind.FIRMWARE_WRONG_VERSION),
    ])
    settings = FirmwareSettings(
        reboot_mode="hook", reboot_command=HOOK, max_concurrent_reboots=4,
        timeouts=StageTimeouts(upgrade=8.0, verify=1.0))
    start_controller(kube, controllers, settings,
                     hook_env={"KUBECONFIG": str(control_plane.kubeconfig)})
    request_firmware(kube, source_commit="bad001")
    wait_for(lambda: phase_is(kube, "Completed", "Failed"), timeout=90, what="the end",
             observe=lambda: firmware_status(kube))
    status = firmware_status(kube)
    assert status["phase"] == "Failed"
    nodes = status["nodes"]
    assert {n: e["stage"] for n, e in nodes.items()} == {
        "node-0001": "verified", "node-0002": "failed", "node-0003": "failed",
        "node-0004": "verified"}
    assert nodes["node-0002"]["message"] == (
        "no NodeNeedReboot event within 8s after PreferCloud was applied")
    assert nodes["node-0003"]["message"] == (
        "came back with VBIOS 1.12.0.0, expected a version other than 1.12.0.0")
    assert "node-0002, node-0003" in status["message"]
    # nothing keeps flashing; failed nodes stay cordoned, the others are restored
    assert cluster_operator(kube)["spec"]["driver"]["fwUpgradePolicy"] == "Never"
    assert {n: bool(o["spec"].get("unschedulable")) for n, o in gpu_nodes(kube).items()} == {
        "node-0001": False, "node-0002": True, "node-0003": True, "node-0004": False}
    events = kube.list(resource_path("v1", "events", namespace="default"),
                       query={"fieldSelector": "reason=FirmwareNodeFailed"})["items"]
    assert {e["message"].split(":")[0] for e in events} >= {"node node-0002", "node node-0003"}


def test_firmware_parameters_changed_mid_flow_are_refused(
    kube: KubeApi, fleet_factory: Any, controllers: list[FirmwareController]
) -> None:
    fleet = ready_fleet(fleet_factory, nodes=3, firmware_seconds=0.3, reboot_seconds=0.5)
    start_controller(kube, controllers, FirmwareSettings())
    request_firmware(kube, source_commit="first1")
    wait_for(lambda: phase_is(kube, "AwaitingReboot") and set(stages(kube).values())
             == {"awaiting-reboot"}, timeout=30, what="every node awaiting its reboot",
             observe=lambda: firmware_status(kube))
    # a new request (another merge), and a person's kubectl patch of the object itself
    request_firmware(kube, source_commit="second", enable_virt=True)
    kube.patch(cluster_operator_path(CLUSTER_OPERATOR_NAME),
               {"spec": {"driver": {"fwEnableVirt": True}}})

    def refused() -> bool:
        rules = {r["rule"] for r in firmware_status(kube).get("refusals") or ()}
        driver = cluster_operator(kube)["spec"]["driver"]
        return rules == {"firmware-running", "firmware-locked"} and \
            driver.get("fwEnableVirt") is False
    wait_for(refused, timeout=30, what="both changes refused, fwEnableVirt false again",
             observe=lambda: firmware_status(kube))
    for name in stages(kube):
        fleet.reboot(name)
    wait_for(lambda: phase_is(kube, "Completed"), timeout=60, what="Completed",
             observe=lambda: firmware_status(kube))
    status = firmware_status(kube)
    assert status["request"]["sourceCommit"] == "first1"
    assert status["ignoredRequest"]["sourceCommit"] == "second"
    # the refused request is not run once the flow is over
    assert controllers[0].wait_passes(2, timeout=30), "two more passes"
    assert firmware_status(kube)["finishedAt"] == status["finishedAt"]
    assert cluster_operator(kube)["spec"]["driver"] == {
        **cluster_operator(kube)["spec"]["driver"], "fwUpgradePolicy": "Never",
        "fwEnableVirt": False}


def test_refusal_touches_no_node(
    kube: KubeApi, fleet_factory: Any, controllers: list[FirmwareController]
) -> None:
    ready_fleet(fleet_factory, nodes=3, node_labels={
        "node-0002": {"metax-tech.com/gpu.vfio-pci": "true"},
        "node-0003": {VBIOS_VERSION_LABEL: "1.11.0.0_1.13.0.0"},
    })
    start_controller(kube, controllers, FirmwareSettings())
    request_firmware(kube, source_commit="nope01")
    wait_for(lambda: phase_is(kube, "Refused"), timeout=30, what="Refused",
             observe=lambda: firmware_status(kube))
    status = firmware_status(kube)
    assert [(r["node"], r["rule"]) for r in status["refusals"]] == [
        ("node-0002", "vfio-pci"), ("node-0003", "vbios-straddle")]
    assert "node-0002" in status["message"] and "node-0003" in status["message"]
    nodes = gpu_nodes(kube)
    assert not any(n["spec"].get("unschedulable") for n in nodes.values())
    assert not any(n["metadata"].get("annotations", {}).get(CORDONED_BEFORE_ANNOTATION)
                   for n in nodes.values())
    co = cluster_operator(kube)
    assert co["spec"]["driver"]["fwUpgradePolicy"] == "Never"
    assert any(m["manager"] == "gpu-rollout-controller" and "f:fwUpgradePolicy"
               in str(m.get("fieldsV1")) for m in co["metadata"]["managedFields"])


def test_waits_for_running_gpu_workloads(
    kube: KubeApi, fleet_factory: Any, controllers: list[FirmwareController]
) -> None:
    fleet = ready_fleet(fleet_factory, nodes=3, firmware_seconds=0.3, reboot_seconds=0.5)
    job = fleet.add_workload("node-0002")
    start_controller(kube, controllers, FirmwareSettings())
    request_firmware(kube, source_commit="busy01")
    wait_for(lambda: "waiting for 1 GPU workload(s)" in str(firmware_status(kube).get("message")),
             timeout=30, what="the wait for the job", observe=lambda: firmware_status(kube))
    assert firmware_status(kube)["nodes"]["node-0002"]["message"] == (
        f"waiting for GPU workload(s) to finish: gpu-workloads/{job}")
    assert all(n["spec"].get("unschedulable") for n in gpu_nodes(kube).values())
    assert controllers[0].wait_passes(2, timeout=30), "two more passes while the job runs"
    assert cluster_operator(kube)["spec"]["driver"]["fwUpgradePolicy"] == "Never"
    kube.delete(resource_path("v1", "pods", job, namespace="gpu-workloads"),
                grace_period_seconds=0)
    wait_for(lambda: phase_is(kube, "AwaitingReboot"), timeout=30, what="AwaitingReboot",
             observe=lambda: firmware_status(kube))
    assert cluster_operator(kube)["spec"]["driver"]["fwUpgradePolicy"] == "PreferCloud"


def test_failing_reboot_hook_fails_the_node_with_its_error(
    kube: KubeApi, fleet_factory: Any, controllers: list[FirmwareController]
) -> None:
    ready_fleet(fleet_factory, nodes=2, firmware_seconds=0.3)
    broken = (sys.executable, "-c", "import sys; sys.exit('no BMC answers for ' + sys.argv[1])")
    start_controller(kube, controllers, FirmwareSettings(
        reboot_mode="hook", reboot_command=broken, max_concurrent_reboots=2))
    request_firmware(kube, source_commit="hook01")
    wait_for(lambda: phase_is(kube, "Failed"), timeout=30, what="Failed",
             observe=lambda: firmware_status(kube))
    nodes = firmware_status(kube)["nodes"]
    for name in ("node-0001", "node-0002"):
        assert nodes[name]["stage"] == "failed"
        assert nodes[name]["message"] == (
            f"reboot hook failed: {sys.executable} exited with 1: no BMC answers for {name}")
