"""The simulated kubelets' heartbeats (``Fleet(lease_seconds=...)``): like a kubelet with node
leases, each node's Lease in ``kube-node-lease`` is renewed every ``lease_seconds`` (the fleet's
renewals spread evenly over the interval), none while the machine reboots. Without
``lease_seconds`` there is no Lease and no heartbeat at all (the node lifecycle controller, which
would read them, is off in the dev cluster)."""

from __future__ import annotations

import functools
import random
from datetime import UTC, datetime

from reconciler.kube.api import Conflict, NotFound, resource_path
from reconciler.sim.fleet_state import FLEET_LABEL, FleetState, SimNode

LEASE_NAMESPACE = "kube-node-lease"
#: a kubelet's lease lasts four renewal intervals (40 s renewed every 10 s by default)
LEASE_DURATION_INTERVALS = 4


def lease_path(node: str) -> str:
    return resource_path("coordination.k8s.io/v1", "leases", node, namespace=LEASE_NAMESPACE)


def _micro_now() -> str:
    """A Lease's ``renewTime`` (MicroTime)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Leases:
    """The nodes' Leases and their renewals (see the module docstring)."""

    def __init__(self, state: FleetState, seconds: float | None, *, seed: int) -> None:
        self._state = state
        #: the renewal interval (None: no Leases)
        self.seconds = seconds
        #: Lease renewals sent (heartbeats; the creations not counted)
        self.renewals = 0
        self._rng = random.Random(f"{seed}-leases")  # the install draws stay as they were

    def create(self, node: SimNode) -> None:
        state = self._state
        assert self.seconds is not None and state.timers is not None
        spec = {"holderIdentity": node.name, "renewTime": _micro_now(),
                "leaseDurationSeconds": max(1, round(LEASE_DURATION_INTERVALS * self.seconds))}
        owners = [{"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node.uid}]
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": node.name, "namespace": LEASE_NAMESPACE,
                             "labels": {FLEET_LABEL: state.fleet_id}, "ownerReferences": owners},
                "spec": spec}
        try:
            state.call("POST", resource_path("coordination.k8s.io/v1", "leases",
                                             namespace=LEASE_NAMESPACE), body)
        except Conflict:  # a node of that name before (its Node's garbage not collected yet)
            state.call("PATCH", lease_path(node.name),
                       {"metadata": {"ownerReferences": owners}, "spec": spec},
                       content_type="application/merge-patch+json")
        # the first renewal at a random point of the interval: the fleet's heartbeats spread
        state.timers.call_later(self._rng.uniform(0, self.seconds), node.name,
                                functools.partial(self._renew, node))

    def _renew(self, node: SimNode) -> None:
        """One heartbeat (the kubelet's lease renewal), then the next one an interval later."""
        state = self._state
        if node.removed or state.timers is None or self.seconds is None:
            return
        if not node.rebooting:  # no kubelet runs while the machine boots
            try:
                state.call("PATCH", lease_path(node.name), {"spec": {"renewTime": _micro_now()}},
                           content_type="application/merge-patch+json")
                self.renewals += 1
            except NotFound:
                if not node.removed:
                    self.create(node)  # deleted by someone: the kubelet makes it again
                return
        state.timers.call_later(self.seconds, node.name, functools.partial(self._renew, node))
