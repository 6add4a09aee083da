"""A 200-node fleet on a control plane of its own: set up, every driver Ready, torn down, and
nothing left running (no process of the control plane, no thread of the fleet)."""

from __future__ import annotations

import threading

import pytest

from reconciler.kube.api import resource_path
from reconciler.sim.control_plane import ControlPlane
from reconciler.sim.fleet import FLEET_LABEL, Fleet
from reconciler.sim.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def test_200_node_fleet_setup_and_teardown_leaves_nothing_behind() -> None:
    threads_before = set(threading.enumerate())
    with ControlPlane() as plane:
        api = plane.api(pool_size=24)
        fleet = Fleet(api, nodes=200, install_seconds=(0.5, 2.0), seed=7).start()
        try:
            wait_for(lambda: len(fleet.ready_driver_nodes()) == 200, timeout=180,
                     what="200 Ready driver pods",
                     observe=lambda: f"{len(fleet.ready_driver_nodes())} Ready")
            nodes = api.list(resource_path("v1", "nodes"),
                             query={"labelSelector": f"{FLEET_LABEL}=default"})["items"]
            assert len(nodes) == 200
            assert fleet.node_names[0] == "node-0001" and fleet.node_names[-1] == "node-0200"
        finally:
            fleet.stop(cleanup=True)
        assert fleet.threads() == []
        assert fleet.errors == []
        assert api.list(resource_path("v1", "nodes"),
                        query={"labelSelector": f"{FLEET_LABEL}=default"})["items"] == []
        assert api.list(resource_path("v1", "pods", namespace="metax-operator"))["items"] == []
        api.close()
    assert plane.leaked_processes() == []
    leftover = [t for t in set(threading.enumerate()) - threads_before if t.is_alive()]
    assert leftover == [], leftover
