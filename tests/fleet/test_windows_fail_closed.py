"""A ``windows`` section that does not validate fails closed (docs/health.md and
docs/configuration.md#maintenance-windows): on the real control plane, the cluster starts no new
node, and the status message and a Warning Event carry the located error
(``reconciler.yaml:LINE:COL: ... [rule]``), the Event once per error."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from reconciler.config.document import load
from reconciler.config.settings import resolve
from reconciler.controller.act import Target
from reconciler.controller.loop import RolloutController
from reconciler.fleet.windows import WindowCalendar
from reconciler.kube.api import KubeApi, resource_path
from reconciler.kube.objects import cluster_operator_path
from reconciler.names import CLUSTER_OPERATOR_NAME
from reconciler.rollout.model import PlannerSettings
from reconciler.sim.fleet import Fleet
from reconciler.sim.operator_install import install_crd
from reconciler.sim.waiting import wait_for
from tests.controller.helpers import cluster_operator, start_rollout, upgrade_status

pytestmark = pytest.mark.cluster
NEW = "2.33.0.9"
BROKEN = "sync: {}\nclusters:\n  prod-a:\n    windows: {timezone: Mars/Olympus}\n"
LOCATED = "reconciler.yaml:4:25: clusters.prod-a.windows.timezone: unknown time zone"


@pytest.fixture
def calendar() -> list[WindowCalendar | None]:
    return [resolve(load(BROKEN), "prod-a", source="test").windows]


@pytest.fixture
def controller(kube: KubeApi, calendar: list[WindowCalendar | None]
               ) -> Iterator[RolloutController]:
    install_crd(kube)
    ctl = RolloutController(
        kube, Target(cluster_operator=CLUSTER_OPERATOR_NAME),
        settings=PlannerSettings(ready_timeout=20, retry_backoff=0.5, retry_backoff_max=2),
        windows=lambda: calendar[0],
    ).start()
    assert ctl.wait_synced(30)
    yield ctl
    ctl.stop()


def _warnings(kube: KubeApi, reason: str) -> list[str]:
    uid = cluster_operator(kube)["metadata"]["uid"]
    events = kube.list(resource_path("v1", "events", namespace="default"),
                       query={"fieldSelector": f"involvedObject.uid={uid}"})["items"]
    return [str(e.get("message")) for e in events
            if e.get("reason") == reason and e.get("type") == "Warning"]


def test_an_invalid_windows_section_starts_no_node_and_says_where_in_status_and_event(
    kube: KubeApi, fleet_factory: Callable[..., Fleet], controller: RolloutController,
    calendar: list[WindowCalendar | None],
) -> None:
    fleet = fleet_factory(nodes=2, install_seconds=0.2)
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 2, timeout=60, what="2 Ready pods")
    start_rollout(kube, NEW, {"enableRollout": True, "pause": False, "maxParallel": 2,
                              "upgradeSteps": [{"replicas": "100%", "pauseDuration": 0}]})
    wait_for(lambda: LOCATED in str(upgrade_status(kube)), timeout=30,
             what="the status naming the located windows error",
             observe=lambda: upgrade_status(kube))
    assert "windows unusable" in str(upgrade_status(kube))
    events = wait_for(lambda: _warnings(kube, "WindowsConfigInvalid"), timeout=20,
                      what="the Warning Event")
    assert len(events) == 1 and LOCATED in events[0] and "no node starts" in events[0]
    # passes go on: still no node started, the Event not repeated
    assert controller.wait_passes(3, timeout=30), "three more passes"
    assert fleet.ready_driver_nodes(NEW) == []
    assert all(view.version != NEW for view in fleet.driver_pods().values())
    assert len(_warnings(kube, "WindowsConfigInvalid")) == 1
    # fixed: the rollout goes on (no window section: always open)
    calendar[0] = None
    # a new commit's settings reach the controller with the next change of the object
    kube.patch(cluster_operator_path(CLUSTER_OPERATOR_NAME),
               {"metadata": {"labels": {"windows-fixed": "true"}}})
    wait_for(lambda: len(fleet.ready_driver_nodes(NEW)) == 2, timeout=60,
             what="the rollout after the fix", observe=fleet.driver_pods)
