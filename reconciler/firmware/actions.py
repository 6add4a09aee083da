"""What the firmware planner asks the controller to do. Small, frozen and idempotent. Nodes are
cordoned, recorded and restored in the node vocabulary both planners speak
(``reconciler.planning.NodeAction``)."""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.planning import AnnotateNode as AnnotateNode
from reconciler.planning import Cordon as Cordon
from reconciler.planning import RecordEvent as RecordEvent
from reconciler.planning import Uncordon as Uncordon


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


#: the node actions the flow uses: cordon (with its record), annotate, uncordon
FirmwareNodeAction = AnnotateNode | Cordon | Uncordon
FirmwareAction = FirmwareNodeAction | ApplyFirmwareSpec | RunRebootHook | RecordEvent
