"""The vendor GPU operator's behaviour, as the simulated fleet plays it (what it installs:
reconciler/sim/operator_install.py).

- It installs its objects (unless the fleet is told not to): the ``ClusterOperator`` before the
  nodes register, the ``metax-driver`` DaemonSet after them, so the DaemonSet controller sees
  them all at once.
- Deleting the ``cluster-operator`` object: it removes its finalizer
  (``gpu.metax-tech.com/finalizers``) once the object is being deleted, so the deletion
  completes.
- ``spec.driver.fwUpgradePolicy``: its driver-manager flashes firmware while it is
  ``PreferCloud`` (reconciler/sim/firmware_host.py).
"""

from __future__ import annotations

from reconciler.kube.api import JSON
from reconciler.names import CLUSTER_OPERATOR_NAME
from reconciler.sim.firmware_host import FirmwareHost
from reconciler.sim.fleet_state import FleetState
from reconciler.sim.operator_install import FINALIZER, install_operator, release_finalizer


class VendorOperator:
    """The vendor operator stand-in of one fleet (see the module docstring)."""

    def __init__(self, state: FleetState, firmware: FirmwareHost, *, install: bool) -> None:
        self._state = state
        self._firmware = firmware
        #: whether the fleet installs (and cleans away) the operator's objects
        self.install = install

    def install_objects(self, *, daemonset: bool) -> None:
        if self.install:
            install_operator(self._state.api, self._state.payload, daemonset=daemonset)

    def on_event(self, event_type: str, obj: JSON) -> None:
        """A ``ClusterOperator`` event (the fleet's watch)."""
        workers = self._state.workers
        if obj["metadata"].get("name") != CLUSTER_OPERATOR_NAME or workers is None:
            return
        meta = obj["metadata"]
        if (event_type != "DELETED" and meta.get("deletionTimestamp") is not None
                and FINALIZER in (meta.get("finalizers") or [])):
            # the vendor operator's cleanup is done at once: nothing of its own to remove here
            workers.submit(CLUSTER_OPERATOR_NAME, self._release_finalizer)
        driver = ((obj.get("spec") or {}).get("driver") or {}) if event_type != "DELETED" else {}
        self._firmware.upgrade_policy(
            driver.get("fwUpgradePolicy") == "PreferCloud",
            str((driver.get("payload") or {}).get("version") or self._state.payload.version))

    def _release_finalizer(self) -> None:
        release_finalizer(self._state.api)
