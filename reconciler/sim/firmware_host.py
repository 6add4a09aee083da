"""The simulated machines' firmware and power: the vendor driver-manager's flashing and the
reboots that apply it.

When ``spec.driver.fwUpgradePolicy`` becomes ``PreferCloud`` (the vendor stand-in tells,
reconciler/sim/vendor_operator.py), each GPU node whose VBIOS differs from the payload's firmware
records it as pending after ``firmware_seconds`` and emits a ``NodeNeedReboot`` Event on the
Node. A reboot (``reboot(node)``, or the node annotation
``gpu.metax-tech.com/reboot-requested=<token>``) makes the node NotReady for ``reboot_seconds``;
it comes back with a new boot ID, the pending VBIOS version in its label and
``gpu.metax-tech.com/rebooted=<token>``; its pods' containers count a restart.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable

from reconciler.kube.api import resource_path
from reconciler.names import (
    NODE_NEED_REBOOT_MESSAGE,
    NODE_NEED_REBOOT_REASON,
    REBOOTED_ANNOTATION,
    VBIOS_VERSION_LABEL,
)
from reconciler.sim.faults import FaultKind
from reconciler.sim.fleet_state import Duration, FleetState, SimNode, draw, timestamp
from reconciler.sim.node_status import NodeStatus

EVENT_NAMESPACE = "default"
DRIVER_MANAGER = "driver-manager"


class FirmwareHost:
    """Firmware flashing and reboots of the fleet's machines (see the module docstring)."""

    def __init__(self, state: FleetState, node_status: NodeStatus, *,
                 firmware_seconds: Duration, reboot_seconds: Duration,
                 firmware_version: str | Callable[[str], str]) -> None:
        self._state = state
        self._node_status = node_status
        self.firmware_seconds = firmware_seconds
        self.reboot_seconds = reboot_seconds
        #: the payload's firmware: a version, or one per driver version
        self.firmware_version = firmware_version
        self._epoch = 0
        self._active = False

    def upgrade_policy(self, active: bool, driver_version: str) -> None:
        """``fwUpgradePolicy`` seen: on becoming active, every GPU node flashes the firmware of
        ``driver_version``'s payload; a flash not done yet when it stops being active is not."""
        state = self._state
        with state.lock:
            if active == self._active:
                return
            self._active = active
            self._epoch += 1
            epoch = self._epoch
            nodes = [n for n in state.nodes.values() if n.gpu and not n.removed]
        if not active:
            return
        target = (self.firmware_version(driver_version) if callable(self.firmware_version)
                  else self.firmware_version)
        assert state.timers is not None
        for node in nodes:
            delay = draw(self.firmware_seconds, state.rng)
            state.timers.call_later(
                delay, node.name, functools.partial(self._flash, node, target, epoch)
            )

    def _flash(self, node: SimNode, target: str, epoch: int) -> None:
        if epoch != self._epoch or node.removed or node.rebooting:
            return
        if node.vbios == target or node.pending_firmware == target:
            return
        if any(f.kind == FaultKind.FIRMWARE_NO_REPORT for f in node.faults):
            return
        node.pending_firmware = target
        now = timestamp()
        self._state.call("POST", resource_path("v1", "events", namespace=EVENT_NAMESPACE), {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{node.name}.{uuid.uuid4().hex[:16]}",
                         "namespace": EVENT_NAMESPACE},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node.name,
                               "uid": node.uid},
            "reason": NODE_NEED_REBOOT_REASON,
            "message": NODE_NEED_REBOOT_MESSAGE,
            "type": "Normal",
            "source": {"component": DRIVER_MANAGER, "host": node.name},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "reportingComponent": DRIVER_MANAGER, "reportingInstance": node.name,
        })

    def reboot(self, name: str, token: str) -> None:
        """Reboots the machine (on the node's worker) unless ``token``'s reboot was done."""
        assert self._state.workers is not None
        self._state.workers.submit(name, lambda: self._begin_reboot(name, token))

    def _begin_reboot(self, name: str, token: str) -> None:
        node = self._state.nodes.get(name)
        if node is None or node.removed or node.rebooting or node.reboot_token == token:
            return
        node.rebooting = True
        node.reboot_token = token
        self._node_status.report(node, False)  # every container stops with the machine
        self._state.later(draw(self.reboot_seconds, self._state.rng), name,
                          lambda: self._end_reboot(node, token))

    def _end_reboot(self, node: SimNode, token: str) -> None:
        if node.removed or node.reboot_token != token:
            return
        state = self._state
        node.boot_id = str(uuid.uuid4())
        if node.pending_firmware is not None:
            if not any(f.kind == FaultKind.FIRMWARE_WRONG_VERSION for f in node.faults):
                node.vbios = node.pending_firmware
            node.pending_firmware = None
        node.rebooting = False
        state.call("PATCH", resource_path("v1", "nodes", node.name),
                   {"metadata": {"labels": {VBIOS_VERSION_LABEL: node.vbios},
                                 "annotations": {REBOOTED_ANNOTATION: token}}},
                   content_type="application/merge-patch+json")
        node.labels[VBIOS_VERSION_LABEL] = node.vbios
        with state.lock:
            for pod in state.pods.values():
                if pod.node == node.name and not pod.deleting:
                    pod.restarts += 1
        self._node_status.report(node, self._node_status.should_be_ready(node),
                                 extra_status={"nodeInfo": {"bootID": node.boot_id}})
