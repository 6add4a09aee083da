"""The firmware planner on a virtual clock (pure; tests/firmware/world.py plays the cluster)."""

from __future__ import annotations

import dataclasses

from reconciler.firmware.actions import (
    AnnotateNode,
    ApplyFirmwareSpec,
    Cordon,
    RecordEvent,
    RunRebootHook,
)
from reconciler.firmware.model import FirmwareRequest, FirmwareSettings, StageTimeouts
from reconciler.firmware.planner import flow_id, plan
from reconciler.names import BOOT_ID_ANNOTATION, CORDONED_BEFORE_ANNOTATION
from tests.firmware.world import VBIOS, World

REQUEST = FirmwareRequest("PreferCloud", False, "abc123")


def started(count: int = 3, **options: object) -> World:
    world = World.of(count, **options)
    world.request = REQUEST
    world.settle()
    return world


def test_nothing_to_do_without_a_request() -> None:
    world = World.of(2)
    result = world.step()
    assert result.actions == ()
    assert world.status["phase"] == "Idle"
    assert world.status["preflight"]["nodes"] == 2


def test_refusal_touches_nothing_and_names_each_node() -> None:
    world = World.of(3)
    world.nodes["node-0002"].labels["metax-tech.com/gpu.vfio-pci"] = "true"
    world.nodes["node-0003"].labels["metax-tech.com/node.virtual-machine"] = "true"
    world.request = REQUEST
    world.settle()
    assert world.status["phase"] == "Refused"
    assert [(r["node"], r["rule"]) for r in world.status["refusals"]] == [
        ("node-0002", "vfio-pci"), ("node-0003", "virtual-machine")]
    # nothing touched; Never applied under the controller's field manager for the write-back
    flow = world.status["flow"]
    assert [a for a in world.actions if not isinstance(a, RecordEvent)] == [
        ApplyFirmwareSpec("Never", None, done=f"{flow}:Refused")]
    assert world.events[0].type == "Warning" and "node-0002" in world.events[0].message
    assert not any(n.unschedulable for n in world.nodes.values())
    assert world.driver["fwUpgradePolicy"] == "Never"
    # the same request is not tried again, even once the facts are fixed
    del world.nodes["node-0002"].labels["metax-tech.com/gpu.vfio-pci"]
    del world.nodes["node-0003"].labels["metax-tech.com/node.virtual-machine"]
    world.settle()
    assert world.status["phase"] == "Refused"
    # a new request is
    world.request = dataclasses.replace(REQUEST, source_commit="def456")
    world.settle()
    assert world.status["phase"] == "Upgrading"


def test_refused_during_a_driver_rollout() -> None:
    world = World.of(2, rollout_phase="Progressing")
    world.request = REQUEST
    world.settle()
    assert world.status["phase"] == "Refused"
    assert world.status["refusals"][0]["rule"] == "rollout-active"


def test_virtualised_request_on_non_virtualised_firmware_is_refused() -> None:
    world = World.of(2)
    world.nodes["node-0001"].labels["metax-tech.com/gpu.sriov"] = "Support"
    world.request = dataclasses.replace(REQUEST, fw_enable_virt=True)
    world.settle()
    assert world.status["phase"] == "Refused"
    assert [(r["node"], r["rule"]) for r in world.status["refusals"]] == [
        ("node-0002", "sriov-unsupported")]


def test_full_flow_with_manual_reboots() -> None:
    world = World.of(4)
    world.nodes["node-0003"].unschedulable = True  # cordoned by someone before
    world.request = REQUEST
    world.settle()
    # cordon everything first, remembering who was cordoned, then PreferCloud
    cordons = [a for a in world.actions if isinstance(a, Cordon)]
    applies = [a for a in world.actions if isinstance(a, ApplyFirmwareSpec)]
    assert len(cordons) == 4 and applies == [ApplyFirmwareSpec("PreferCloud", False)]
    assert world.actions.index(applies[0]) > max(world.actions.index(c) for c in cordons)
    assert world.nodes["node-0003"].annotations[CORDONED_BEFORE_ANNOTATION] == "true"
    assert world.nodes["node-0001"].annotations[CORDONED_BEFORE_ANNOTATION] == "false"
    assert world.status["phase"] == "Upgrading"
    assert set(world.stages().values()) == {"awaiting-upgrade"}

    world.advance(5)
    world.report("node-0001", "node-0002")
    world.settle()
    assert world.status["phase"] == "AwaitingReboot"
    assert world.stage("node-0001") == "awaiting-reboot"
    assert "reboot: node-0001, node-0002" in world.status["message"]
    assert not world.hooks  # manual: a person reboots

    world.advance(5)
    world.report()
    world.reboot("node-0001", come_back=False)
    world.settle()
    assert world.stage("node-0001") == "rebooting"
    world.advance(60)
    world.boot("node-0001")
    for name in ("node-0002", "node-0003", "node-0004"):
        world.reboot(name)
    world.settle()
    assert set(world.stages().values()) == {"verified"}
    assert world.status["phase"] == "Completed"
    assert world.driver["fwUpgradePolicy"] == "Never"
    # restored: uncordoned except node-0003, annotations gone
    assert [n.unschedulable for n in world.nodes.values()] == [False, False, True, False]
    assert all(not any(k.startswith("gpu.metax-tech.com/firmware-") for k in n.annotations)
               for n in world.nodes.values())
    never = [a for a in world.actions if isinstance(a, ApplyFirmwareSpec)][-1]
    # the restore: the flow's records removed (one patch with the uncordon)
    first_restore = next(a for a in world.actions if isinstance(a, AnnotateNode)
                         and a.annotations.get(CORDONED_BEFORE_ANNOTATION, "") is None)
    assert never == ApplyFirmwareSpec("Never", False, done=f"{world.status['flow']}:Completed")
    assert world.actions.index(never) < world.actions.index(first_restore)
    assert world.events[-1].reason == "FirmwareUpgradeCompleted"
    # done: the same request never runs again
    before = len(world.actions)
    world.advance(3600)
    world.settle()
    assert world.status["phase"] == "Completed" and len(world.actions) == before


def test_node_that_never_reports_fails_after_the_upgrade_timeout() -> None:
    world = started(3)
    world.nodes["node-0002"].no_report = True
    world.advance(10)
    world.report()
    for name in ("node-0001", "node-0003"):
        world.reboot(name)
    world.settle()
    assert world.stage("node-0002") == "awaiting-upgrade"
    assert world.status["phase"] == "Upgrading"
    result = world.plan()
    assert result.requeue_at == world.now - 10 + 1800  # the timeout is the next wake-up
    world.advance(1800)
    world.settle()
    assert world.stage("node-0002") == "failed"
    assert "no NodeNeedReboot event within 30m" in world.status["nodes"]["node-0002"]["message"]
    assert world.status["phase"] == "Failed"
    assert "node-0002" in world.status["message"]
    # fwUpgradePolicy back to Never all the same; the failed node stays cordoned
    assert world.driver["fwUpgradePolicy"] == "Never"
    assert world.nodes["node-0002"].unschedulable
    assert world.nodes["node-0002"].annotations[CORDONED_BEFORE_ANNOTATION] == "false"
    assert not world.nodes["node-0001"].unschedulable


def test_node_that_comes_back_with_the_wrong_version_fails() -> None:
    world = started(2)
    world.with_settings(timeouts=StageTimeouts(verify=30))
    world.nodes["node-0001"].wrong_version = True
    world.report()
    world.reboot("node-0001")
    world.reboot("node-0002")
    world.settle()
    assert world.stage("node-0002") == "verified"
    assert world.stage("node-0001") == "rebooting"
    assert "waiting for the version label" in world.status["nodes"]["node-0001"]["message"]
    world.advance(31)
    world.settle()
    entry = world.status["nodes"]["node-0001"]
    assert entry["stage"] == "failed"
    assert entry["message"] == ("came back with VBIOS 1.12.0.0, expected a version other than "
                                "1.12.0.0")
    assert world.status["phase"] == "Failed"


def test_expected_version_is_checked() -> None:
    world = World.of(1)
    world.request = dataclasses.replace(REQUEST, expected_version="1.14.0.0")
    world.with_settings(timeouts=StageTimeouts(verify=5))
    world.settle()
    world.report()
    world.reboot("node-0001")  # comes back with 1.13.0.0
    world.settle()
    world.advance(6)
    world.settle()
    assert world.status["nodes"]["node-0001"]["message"] == (
        "came back with VBIOS 1.13.0.0, expected 1.14.0.0")


def test_node_that_does_not_come_back_fails_after_the_reboot_timeout() -> None:
    world = started(1)
    world.report()
    world.reboot("node-0001", come_back=False)
    world.settle()
    world.advance(901)
    world.settle()
    assert world.status["nodes"]["node-0001"]["message"] == (
        "did not come back (Ready with a new boot ID) within 15m")


def test_reboot_hook_reboots_at_most_k_nodes_at_a_time() -> None:
    settings = FirmwareSettings(reboot_mode="hook", reboot_command=("reboot-node",),
                                max_concurrent_reboots=2)
    world = started(5, settings=settings)
    world.report()
    world.settle()
    assert [h.node for h in world.hooks] == ["node-0001", "node-0002"]
    assert world.status["phase"] == "AwaitingReboot"
    max_rebooting = 0
    for _ in range(10):
        for hook in list(world.hooks):
            if world.nodes[hook.node].pending:
                world.reboot(hook.node)
        world.settle()
        rebooting = sum(1 for s in world.stages().values() if s == "rebooting")
        max_rebooting = max(max_rebooting, rebooting)
    assert max_rebooting <= 2
    assert [h.node for h in world.hooks] == [f"node-000{i}" for i in range(1, 6)]
    assert len({h.token for h in world.hooks}) == 5
    assert world.status["phase"] == "Completed"


def test_failed_hook_marks_the_node_failed() -> None:
    settings = FirmwareSettings(reboot_mode="hook", reboot_command=("reboot-node",))
    world = started(1, settings=settings)
    world.report()
    world.settle()
    token = world.hooks[0].token
    world.hook_failures[token] = "reboot-node exited with 3: no route to BMC"
    world.settle()
    assert world.status["nodes"]["node-0001"]["message"] == (
        "reboot hook failed: reboot-node exited with 3: no route to BMC")


def test_other_request_during_the_flow_is_refused_and_never_run() -> None:
    world = started(2)
    world.request = dataclasses.replace(REQUEST, fw_enable_virt=True, source_commit="zzz")
    world.settle()
    assert world.status["phase"] == "Upgrading"
    assert world.status["request"]["sourceCommit"] == "abc123"
    assert world.status["refusals"][0]["rule"] == "firmware-running"
    assert "zzz" in world.status["refusals"][0]["reason"]
    world.report()
    for name in world.nodes:
        world.reboot(name)
    world.settle()
    assert world.status["phase"] == "Completed"
    assert world.driver == {"fwUpgradePolicy": "Never", "fwEnableVirt": False}


def test_a_person_changing_firmware_parameters_mid_flow_is_overridden() -> None:
    world = started(2)
    world.driver["fwUpgradePolicy"] = "Never"
    world.settle()
    assert world.driver["fwUpgradePolicy"] == "PreferCloud"
    assert world.status["refusals"][0]["rule"] == "firmware-locked"
    assert any(e.reason == "FirmwareParametersRestored" for e in world.events)


def test_a_node_uncordoned_mid_flow_is_cordoned_again() -> None:
    world = started(2)
    world.nodes["node-0001"].unschedulable = False
    world.settle()
    assert world.nodes["node-0001"].unschedulable
    # the record of who was cordoned before is not overwritten
    assert world.nodes["node-0001"].annotations[CORDONED_BEFORE_ANNOTATION] == "false"


def test_plans_are_idempotent_on_the_same_snapshot() -> None:
    """A controller that died before its status write plans the same again (restart)."""
    world = World.of(3)
    world.request = REQUEST
    first = world.plan()
    second = world.plan()
    assert first.actions == second.actions and first.status == second.status
    world.settle()
    world.report()
    world.reboot("node-0001")
    a, b = world.plan(), world.plan()
    assert a.status == b.status and a.actions == b.actions


def test_restart_mid_flow_resumes_from_status_and_annotations() -> None:
    world = started(3)
    world.report()
    world.reboot("node-0001")
    world.settle()
    boot_ids = {n: node.annotations[BOOT_ID_ANNOTATION] for n, node in world.nodes.items()}
    # a fresh planner sees only what a restarted controller would read
    clone = World(nodes=world.nodes, driver=dict(world.driver), status=dict(world.status),
                  request=world.request, now=world.now + 120)
    clone.settle()
    assert clone.stage("node-0001") == "verified"
    # the records made before the restart are kept, nothing is cordoned or rebooted twice
    assert {n: node.annotations[BOOT_ID_ANNOTATION]
            for n, node in clone.nodes.items()} == boot_ids
    assert not [a for a in clone.actions if isinstance(a, Cordon | RunRebootHook)]
    for name in ("node-0002", "node-0003"):
        clone.reboot(name)
    clone.settle()
    assert clone.status["phase"] == "Completed"


def test_node_that_leaves_is_reported() -> None:
    world = started(2)
    del world.nodes["node-0002"]
    world.settle()
    assert world.status["nodes"]["node-0002"] == {
        "stage": "failed", "since": world.status["nodes"]["node-0002"]["since"],
        "message": "left the cluster during the firmware upgrade"}


def test_already_on_the_expected_version_after_an_early_reboot() -> None:
    world = started(1)
    world.nodes["node-0001"].labels[VBIOS] = "1.13.0.0"
    world.nodes["node-0001"].boot_id = "rebooted-before-reporting"
    world.settle()
    assert world.stage("node-0001") == "verified"


def test_bad_request_and_unrequested_prefer_cloud_are_reported_once() -> None:
    world = World.of(1)
    snap = dataclasses.replace(world.snapshot(), request_error="annotation is not JSON")
    result = plan(snap, world.now, world.settings)
    assert result.status["message"] == "request not taken over: annotation is not JSON"
    assert [a.reason for a in result.actions if isinstance(a, RecordEvent)] == [
        "FirmwareRequestIgnored"]
    again = plan(dataclasses.replace(snap, status=result.status), world.now, world.settings)
    assert again.actions == () and not again.changed
    world.driver["fwUpgradePolicy"] = "PreferCloud"  # a person's kubectl patch, no request
    world.settle()
    assert "no firmware request asked for it" in world.status["message"]
    assert world.status["phase"] == "Idle"
    assert not any(n.unschedulable for n in world.nodes.values())
    assert len(world.events) == 1


def _rebooted_with_every_status_write_lost(world: World) -> World:
    """The request run to every node's reboot by a controller that died before each status
    write."""
    world.request = REQUEST
    for _ in range(3):
        world.step(lose_status=True)
    world.report()
    world.step(lose_status=True)
    for name in world.nodes:
        world.reboot(name)
    return world


def test_a_flow_whose_status_writes_were_all_lost_is_not_run_again() -> None:
    """The controller acted on every pass and died before every status write: the final
    Never carries the flow's end, so the request is recognised as done."""
    world = _rebooted_with_every_status_write_lost(World.of(2))
    for _ in range(3):
        world.step(lose_status=True)
    assert world.done == f"{flow_id(REQUEST.to_json())}:Completed"
    assert world.driver["fwUpgradePolicy"] == "Never"
    assert not any(n.unschedulable for n in world.nodes.values())
    before = len(world.actions)
    world.settle()
    assert world.status["phase"] == "Completed"
    assert "already ran to Completed" in world.status["message"]
    assert [a for a in world.actions[before:] if not isinstance(a, RecordEvent)] == []


def test_waits_for_gpu_workloads_before_prefer_cloud() -> None:
    world = World.of(3)
    world.nodes["node-0002"].workloads = ("jobs/train-1", "jobs/train-2")
    world.request = REQUEST
    world.settle()
    # cordoned (no new work), but PreferCloud waits for the running jobs (the seed: no
    # workload may run during the upgrade)
    assert all(n.unschedulable for n in world.nodes.values())
    assert world.driver["fwUpgradePolicy"] == "Never"
    assert world.status["phase"] == "Cordoning"
    assert world.status["message"] == ("all GPU nodes cordoned; waiting for 2 GPU workload(s) "
                                       "on 1 node(s) to finish: node-0002")
    assert world.status["nodes"]["node-0002"]["message"] == (
        "waiting for GPU workload(s) to finish: jobs/train-1, jobs/train-2")
    world.advance(3600)  # no timeout by default
    world.settle()
    assert world.status["phase"] == "Cordoning"
    world.nodes["node-0002"].workloads = ()
    world.settle()
    assert world.status["phase"] == "Upgrading"
    assert "message" not in world.status["nodes"]["node-0002"]


def test_workload_timeout_ends_the_flow_before_anything_is_flashed() -> None:
    world = World.of(3, settings=FirmwareSettings(timeouts=StageTimeouts(workloads=600)))
    world.nodes["node-0003"].unschedulable = True
    world.nodes["node-0001"].workloads = ("jobs/train-1",)
    world.request = REQUEST
    world.settle()
    assert world.plan().requeue_at == world.now + 600
    world.advance(600)
    world.settle()
    assert world.status["phase"] == "Failed"
    assert world.status["message"] == ("GPU workload(s) still running after 10m on node-0001; "
                                       "nothing was upgraded; every node is restored")
    assert world.status["nodes"]["node-0001"]["message"] == (
        "GPU workload(s) still running: jobs/train-1")
    assert not [a for a in world.actions if isinstance(a, ApplyFirmwareSpec)
                and a.fw_upgrade_policy == "PreferCloud"]
    assert [n.unschedulable for n in world.nodes.values()] == [False, False, True]
    assert all(not n.annotations for n in world.nodes.values())


def test_killed_between_the_final_never_and_the_restores_restores_the_rest() -> None:
    """The last pass applied Never (with the flow's end) and died before uncordoning the
    nodes: the next controller finishes the restore instead of leaving them cordoned."""
    world = World.of(4)
    world.nodes["node-0003"].unschedulable = True  # cordoned by a person before: stays so
    world.request = REQUEST
    world.settle()
    world.advance(5)
    world.report()
    world.settle()
    for name in world.nodes:
        world.reboot(name)
    last = world.plan()
    never = next(i for i, a in enumerate(last.actions) if isinstance(a, ApplyFirmwareSpec))
    assert any(isinstance(a, AnnotateNode) for a in last.actions[never + 1:])
    assert last.actions[never + 1].node == "node-0001"  # type: ignore[union-attr]
    world.step(acted=never + 3)  # Never and node-0001's restore (one patch), then killed
    assert not world.nodes["node-0001"].unschedulable
    assert world.done == f"{world.status['flow']}:Completed"
    assert world.status["phase"] != "Completed"  # that status write was lost
    assert world.nodes["node-0002"].unschedulable
    world.settle()
    assert world.status["phase"] == "Completed"
    assert set(world.stages().values()) == {"verified"}
    assert {n: node.unschedulable for n, node in world.nodes.items()} == {
        "node-0001": False, "node-0002": False, "node-0003": True, "node-0004": False}
    assert all(not any(k.startswith("gpu.metax-tech.com/firmware-") for k in n.annotations)
               for n in world.nodes.values())


def test_killed_after_the_never_of_an_abort_restores_every_node() -> None:
    """The workload wait timed out; the pass applied Never with the flow's end (Failed) and
    died before any restore or status write: the next pass restores every node (nothing was
    flashed), not only the verified ones."""
    world = World.of(3, settings=FirmwareSettings(timeouts=StageTimeouts(workloads=600)))
    world.nodes["node-0003"].unschedulable = True
    world.nodes["node-0001"].workloads = ("jobs/train-1",)
    world.request = REQUEST
    world.settle()
    world.advance(600)
    last = world.plan()
    never = next(i for i, a in enumerate(last.actions) if isinstance(a, ApplyFirmwareSpec))
    world.step(acted=never + 1)
    assert world.done == f"{world.status['flow']}:Failed"
    assert world.status["phase"] == "Cordoning"
    assert all(n.unschedulable for n in world.nodes.values())
    world.settle()
    assert world.status["phase"] == "Failed"
    assert world.status["message"].endswith("nothing was upgraded; every node is restored")
    assert [n.unschedulable for n in world.nodes.values()] == [False, False, True]
    assert all(not n.annotations for n in world.nodes.values())


def test_killed_after_the_never_with_every_status_write_lost_restores_the_rest() -> None:
    """As above, but no status write of the flow ever landed: the end in the Never's
    annotation and the nodes' records are all there is to finish from."""
    world = World.of(3)
    world.nodes["node-0002"].unschedulable = True
    _rebooted_with_every_status_write_lost(world)
    last = world.plan()
    never = next(i for i, a in enumerate(last.actions) if isinstance(a, ApplyFirmwareSpec)
                 and a.fw_upgrade_policy == "Never")
    world.step(acted=never + 1)
    assert world.done == f"{flow_id(REQUEST.to_json())}:Completed"
    assert world.status == {} and all(n.unschedulable for n in world.nodes.values())
    world.settle()
    assert world.status["phase"] == "Completed"
    assert [n.unschedulable for n in world.nodes.values()] == [False, True, False]
    assert all(not n.annotations for n in world.nodes.values())
