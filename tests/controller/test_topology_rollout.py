"""Topology-aware waves (docs/rollout.md#topology-aware-waves) end to end: the rollout controller on
the real control plane with the simulated fleet, 3 zones of 4 nodes (the dev cluster's ``--domains``
labels), ``order: sequential``. Seen from the API alone: the first time a node of a zone carries our
upgrade state (cordoned ahead or upgrading), every node of the zones before it runs a Ready
driver pod of the new revision."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from reconciler.config.settings import ClusterSettings
from reconciler.controller.loop import RolloutController
from reconciler.kube.api import JSON, KubeApi, resource_path
from reconciler.kube.observe import driver_pod_view, is_driver_pod
from reconciler.kube.watch import ListWatch
from reconciler.names import ANN_STATE
from reconciler.policy.rollout_settings import RolloutSettings, TopologySettings
from reconciler.rollout.model import PlannerSettings
from reconciler.sim.waiting import wait_for
from reconciler.sim.workloads import ZONE_LABEL, domain_labels
from tests.controller.helpers import (
    InvariantObserver,
    WatchRecorder,
    running_controller,
    start_rollout,
    upgrade_status,
)

pytestmark = pytest.mark.cluster

NEW = "2.33.0.9"
NAMES = [f"node-{i:04d}" for i in range(1, 13)]
ZONES = {name: labels[ZONE_LABEL] for name, labels in domain_labels(NAMES, 3).items()}


@pytest.fixture
def controller(kube: KubeApi) -> Iterator[RolloutController]:
    settings = ClusterSettings(rollout=RolloutSettings(
        ready_timeout=20, topology=TopologySettings(ZONE_LABEL, "sequential")))
    yield from running_controller(
        kube, PlannerSettings(ready_timeout=20, retry_backoff=0.5, retry_backoff_max=2),
        config=lambda: settings)


class ZoneWatch(WatchRecorder):
    """Node events: the first time each node carries our upgrade state, in order, and what the
    API server said then about the zones before it (a list after the event: a quorum read)."""

    def __init__(self, kube: KubeApi, old_revision: str) -> None:
        self.kube = kube
        self.old = old_revision
        self.touched: list[str] = []
        self.violations: list[str] = []
        self._lock = threading.Lock()
        self.watch = ListWatch(kube, resource_path("v1", "nodes"), on_event=self._on_node,
                               name="zone watch")

    def upgraded(self) -> set[str]:
        pods = self.kube.list(resource_path("v1", "pods"))["items"]
        done = set()
        for pod in pods:
            if not is_driver_pod(pod):
                continue
            view = driver_pod_view(pod)
            if view.ready and not view.deleting and view.revision != self.old:
                done.add(str(pod["spec"]["nodeName"]))
        return done

    def _on_node(self, event: str, obj: JSON) -> None:
        name = str(obj["metadata"]["name"])
        state = (obj["metadata"].get("annotations") or {}).get(ANN_STATE)
        with self._lock:
            if name not in ZONES or state not in ("cordoned", "upgrading") \
                    or name in self.touched:
                return
            self.touched.append(name)
        earlier = [n for n in NAMES if ZONES[n] < ZONES[name]]
        if earlier:
            waiting = sorted(set(earlier) - self.upgraded())
            if waiting:
                self.violations.append(f"{name} ({ZONES[name]}) touched while {waiting} "
                                       "of an earlier zone were not upgraded")


def test_sequential_zones_upgrade_one_after_another(
    kube: KubeApi, fleet_factory: Any, controller: RolloutController
) -> None:
    fleet = fleet_factory(nodes=12, install_seconds=1,
                          node_labels=domain_labels(NAMES, 3))
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 12, timeout=90,
             what="12 Ready driver pods")
    old = {view.revision for view in fleet.driver_pods().values()}
    assert len(old) == 1
    observer = InvariantObserver(kube, max_parallel=3, max_unavailable=0).start()
    try:
        with ZoneWatch(kube, old.pop()) as zones:
            start_rollout(kube, NEW, {
                "enableRollout": True,
                "upgradeSteps": [{"replicas": 5, "pauseDuration": 0},
                                 {"replicas": "100%", "pauseDuration": 0}],
                "pause": False, "maxParallel": 3, "maxUnavailable": 0,
                "maxFailureThreshold": 3, "fallback": "pause",
            })
            wait_for(lambda: (upgrade_status(kube).get("status") or {}).get(
                         "currentStepState") == "Completed"
                     and upgrade_status(kube).get("phase") == "Idling",
                     timeout=180, what="the rollout to complete",
                     observe=lambda: upgrade_status(kube).get("status"))
    finally:
        observer.stop()
    assert observer.violations == []
    assert zones.violations == []
    # every node was touched, zone by zone
    assert sorted(zones.touched) == NAMES
    assert [ZONES[n] for n in zones.touched] == sorted(ZONES[n] for n in zones.touched)
    assert upgrade_status(kube)["topology"] == {"key": ZONE_LABEL, "order": "sequential"}
    assert sorted(fleet.ready_driver_nodes(NEW)) == NAMES
