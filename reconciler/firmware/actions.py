"""What the firmware planner asks the controller to do. Small, frozen and idempotent."""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.planning import RecordEvent as RecordEvent


@dataclass(frozen=True, slots=True)
class CordonNode:
    """Cordon the node and record, in the same patch, the flow's annotations (``annotations``;
    ``firmware-cordoned-before`` only when the node does not carry it yet)."""

    node: str
    annotations: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class RestoreNode:
    """Remove the flow's annotations; uncordon when the node was not cordoned before."""

    node: str
    uncordon: bool


@dataclass(frozen=True, slots=True)
class ApplyFirmwareSpec:
    """Server-side apply ``fwUpgradePolicy`` and ``fwEnableVirt`` (None: leave it out) under the
    controller's field manager (the sync role writes them back to Git)."""

    fw_upgrade_policy: str
    fw_enable_virt: bool | None
    #: the ``firmware-done`` annotation to apply with it (the flow's end), if any
    done: str | None = None


@dataclass(frozen=True, slots=True)
class RunRebootHook:
    """Run the reboot hook for one node; ``token`` is stable per node and flow."""

    node: str
    token: str


FirmwareAction = CordonNode | RestoreNode | ApplyFirmwareSpec | RunRebootHook | RecordEvent
