"""A pure stand-in for the cluster, for planner tests on a virtual clock: nodes, the
ClusterOperator's firmware fields and status, and the driver-manager's NodeNeedReboot reports."""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field
from typing import Any, assert_never

from reconciler.firmware.actions import (
    AnnotateNode,
    ApplyFirmwareSpec,
    Cordon,
    FirmwareAction,
    FirmwareNodeAction,
    RecordEvent,
    RunRebootHook,
    Uncordon,
)
from reconciler.firmware.model import (
    FirmwareNode,
    FirmwareRequest,
    FirmwareSettings,
    FirmwareSnapshot,
)
from reconciler.firmware.planner import Plan, plan
from reconciler.rollout.model import RolloutNode
from reconciler.rollout.node_view import apply_node_action

VBIOS = "metax-tech.com/gpu.vbios.version"


@dataclass
class WorldNode:
    name: str
    labels: dict[str, str]
    annotations: dict[str, str] = field(default_factory=dict)
    unschedulable: bool = False
    ready: bool = True
    boot_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    need_reboot_at: float | None = None
    pending: str | None = None
    no_report: bool = False
    wrong_version: bool = False
    workloads: tuple[str, ...] = ()

    def view(self) -> FirmwareNode:
        return FirmwareNode(self.name, self.ready, self.unschedulable, dict(self.labels),
                            dict(self.annotations), self.boot_id, 0, self.need_reboot_at,
                            self.workloads)

    def land(self, action: FirmwareNodeAction) -> None:
        """A node action lands as on every world (``reconciler.rollout.node_view``): on the
        Kubernetes node's part of this one, its cordon and its annotations."""
        landed = apply_node_action(
            RolloutNode(self.name, self.ready, self.unschedulable, self.labels,
                        self.annotations, workloads=self.workloads), action)
        annotations = dict(landed.annotations)  # may be this node's own dict
        self.unschedulable = landed.unschedulable
        self.annotations.clear()
        self.annotations.update(annotations)


@dataclass
class World:
    settings: FirmwareSettings = field(default_factory=FirmwareSettings)
    nodes: dict[str, WorldNode] = field(default_factory=dict)
    driver: dict[str, Any] = field(default_factory=lambda: {"fwUpgradePolicy": "Never"})
    status: dict[str, Any] = field(default_factory=dict)
    request: FirmwareRequest | None = None
    rollout_phase: str | None = None
    now: float = 1_800_000_000.0
    firmware: str = "1.13.0.0"
    actions: list[FirmwareAction] = field(default_factory=list)
    events: list[RecordEvent] = field(default_factory=list)
    hooks: list[RunRebootHook] = field(default_factory=list)
    hook_failures: dict[str, str] = field(default_factory=dict)
    done: str | None = None
    writes: int = 0

    @classmethod
    def of(cls, count: int, **options: Any) -> World:
        world = cls(**options)
        for i in range(1, count + 1):
            name = f"node-{i:04d}"
            world.nodes[name] = WorldNode(name, {VBIOS: "1.12.0.0",
                                                 "metax-tech.com/gpu.sriov": "forbidden"})
        return world

    def snapshot(self) -> FirmwareSnapshot:
        return FirmwareSnapshot(
            nodes={n: node.view() for n, node in self.nodes.items()},
            driver_spec=dict(self.driver), request=self.request, request_error=None,
            status=self.status, rollout_phase=self.rollout_phase,
            hook_failures=dict(self.hook_failures), done=self.done)

    def plan(self) -> Plan:
        return plan(self.snapshot(), self.now, self.settings)

    def step(self, *, lose_status: bool = False, acted: int | None = None) -> Plan:
        """One pass; ``lose_status``: the controller dies after acting, before its status write;
        ``acted``: it dies after the pass's first ``acted`` actions (and loses the status)."""
        result = self.plan()
        for action in result.actions[:acted]:
            self.apply(action)
        lose_status = lose_status or acted is not None
        if result.changed and not lose_status:
            self.status = result.status
            self.writes += 1
        return result

    def settle(self, limit: int = 50) -> None:
        """Plan and act until a pass asks for nothing but events."""
        for _ in range(limit):
            result = self.step()
            if all(isinstance(a, RecordEvent) for a in result.actions):
                return
        raise AssertionError(f"no fixed point after {limit} passes: {self.status}")

    def apply(self, action: FirmwareAction) -> None:
        self.actions.append(action)
        match action:
            case Cordon() | Uncordon() | AnnotateNode():
                self.nodes[action.node].land(action)
            case ApplyFirmwareSpec(fw_upgrade_policy=policy, fw_enable_virt=virt, done=done):
                if done is not None:
                    self.done = done
                started = self.driver.get("fwUpgradePolicy") != "PreferCloud"
                self.driver = {**self.driver, "fwUpgradePolicy": policy, "fwEnableVirt": virt}
                if policy == "PreferCloud" and started:
                    for node in self.nodes.values():
                        node.pending = self.firmware
            case RunRebootHook():
                self.hooks.append(action)
            case RecordEvent():
                self.events.append(action)
            case _:
                assert_never(action)

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def report(self, *names: str) -> None:
        """The driver-manager flashed the firmware: NodeNeedReboot for these nodes (or all)."""
        for node in self.nodes.values():
            if (not names or node.name in names) and node.pending and not node.no_report:
                node.need_reboot_at = self.now

    def reboot(self, name: str, *, come_back: bool = True) -> None:
        node = self.nodes[name]
        node.ready = False
        if come_back:
            self.boot(name)

    def boot(self, name: str) -> None:
        node = self.nodes[name]
        node.ready = True
        node.boot_id = str(uuid.uuid4())
        if node.pending and not node.wrong_version:
            node.labels[VBIOS] = node.pending
        node.pending = None

    def stage(self, name: str) -> str:
        return str(self.status["nodes"][name]["stage"])

    def stages(self) -> dict[str, str]:
        return {n: str(e["stage"]) for n, e in self.status.get("nodes", {}).items()}

    def with_settings(self, **changes: Any) -> None:
        self.settings = dataclasses.replace(self.settings, **changes)
