"""The controller's snapshot for the drain (SPEC 13) from the real API server: with ``drain``
set, each rollout node carries its pods (all but the driver pod: DaemonSet, mirror and bare
pods flagged) and the snapshot the PodDisruptionBudgets as the disruption controller computed
them; with neither ``drain`` nor ``waitFor`` nothing of either is kept and no budget is
watched."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from reconciler.controller.act import Target
from reconciler.controller.loop import RolloutController
from reconciler.kube.api import JSON, KubeApi, resource_path
from reconciler.names import ANN_MIRROR_POD, CLUSTER_OPERATOR_NAME
from reconciler.policy.rollout_settings import DrainSettings, RolloutSettings
from reconciler.rollout.model import PlannerSettings, RolloutNode
from reconciler.settings.cluster import ClusterSettings
from reconciler.sim.fleet import FLEET_LABEL
from reconciler.sim.operator_install import install_crd
from reconciler.sim.waiting import wait_for
from tests.conftest import FleetFactory
from tests.controller.drain_objects import budget, create, deployment

pytestmark = pytest.mark.cluster

DRAIN = ClusterSettings(rollout=RolloutSettings(drain=DrainSettings()))


@pytest.fixture
def settings() -> list[ClusterSettings]:
    return [DRAIN]


@pytest.fixture
def controller(kube: KubeApi, settings: list[ClusterSettings]) -> Iterator[RolloutController]:
    install_crd(kube)
    ctl = RolloutController(kube, Target(cluster_operator=CLUSTER_OPERATOR_NAME),
                            settings=PlannerSettings(ready_timeout=20),
                            config=lambda: settings[0]).start()
    assert ctl.wait_synced(30)
    yield ctl
    ctl.stop()


def _views(ctl: RolloutController) -> dict[str, RolloutNode]:
    with ctl._lock:
        return dict(ctl.index.views)


def _pods(ctl: RolloutController) -> dict[str, list[str]]:
    return {name: [p.key for p in view.pods] for name, view in _views(ctl).items()}


def _until(check: Callable[[], object], what: str, observe: Callable[[], object]) -> None:
    wait_for(check, timeout=30, what=what, observe=observe)


def test_nodes_carry_their_pods_and_the_snapshot_the_budgets_while_drain_is_set(
    kube: KubeApi, fleet_factory: FleetFactory, workload_namespace: str,
    controller: RolloutController, settings: list[ClusterSettings],
) -> None:
    ns = workload_namespace
    fleet = fleet_factory(nodes=3, workloads=True)
    create(kube, deployment("web", ns, 3))
    create(kube, budget("web", ns, min_available=2))
    kube.create(resource_path("apps/v1", "daemonsets", namespace=ns), {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": ns},
        "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": {
            "metadata": {"labels": {"app": "agent"}},
            "spec": {"nodeSelector": {FLEET_LABEL: fleet.fleet_id},
                     "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "agent", "image": "registry.local/agent:1"}]}}}})
    first, second = fleet.node_names[:2]
    node_uid = kube.get(resource_path("v1", "nodes", first))["metadata"]["uid"]
    _bare(kube, ns, "static-agent", first, annotations={ANN_MIRROR_POD: "hash"},
          owner={"apiVersion": "v1", "kind": "Node", "name": first, "uid": node_uid,
                 "controller": True})
    _bare(kube, ns, "scratch", second, empty_dir=True)

    def budget_seen() -> object:
        snap = controller.snapshot()
        return snap is not None and snap[0].budgets.get(f"{ns}/web") is not None and (
            snap[0].budgets[f"{ns}/web"].disruptions_allowed == 1)

    def every_pod_seen() -> bool:
        pods = _pods(controller)
        keys = [k for keys in pods.values() for k in keys if k.startswith(f"{ns}/")]
        return (len([k for k in keys if "/web-" in k]) == 3
                and len([k for k in keys if "/agent-" in k]) == 3
                and f"{ns}/static-agent" in pods[first] and f"{ns}/scratch" in pods[second])

    _until(every_pod_seen, "every pod on its node", lambda: _pods(controller))
    _until(budget_seen, "the budget, one disruption allowed",
           lambda: controller.snapshot() and controller.snapshot()[0].budgets)  # type: ignore[index]
    views = _views(controller)
    pods = {p.name: p for view in views.values() for p in view.pods if p.namespace == ns}
    web = next(p for name, p in pods.items() if name.startswith("web-"))
    agent = next(p for name, p in pods.items() if name.startswith("agent-"))
    assert web.gpu and web.controller_kind == "ReplicaSet" and not web.mirror
    assert not agent.gpu and agent.controller_kind == "DaemonSet"
    assert pods["static-agent"].mirror and pods["static-agent"].controller_kind == "Node"
    assert pods["scratch"].empty_dir and pods["scratch"].controller_kind is None
    assert all(not p.name.startswith("metax-driver") for view in views.values()
               for p in view.pods), "the driver pod is never one of them"
    snap = controller.snapshot()
    assert snap is not None and snap[0].budgets[f"{ns}/web"].covers(web)
    assert all(sorted(view.workloads) == sorted(p.key for p in view.pods if p.gpu)
               for view in views.values()), "workloads: the GPU pods, as before"

    # drain off (a later commit): the pods and the budgets are forgotten, the watch stopped
    settings[0] = ClusterSettings()
    controller.kick()
    _until(lambda: controller.budgets_watch is None and not any(_pods(controller).values()),
           "pods and budgets forgotten", lambda: _pods(controller))
    assert not controller.index.budgets and not controller.index.node_pods
    assert sum(len(v.workloads) for v in _views(controller).values()) == 3


def _bare(kube: KubeApi, ns: str, name: str, node: str, *, annotations: dict[str, str] | None
          = None, owner: JSON | None = None, empty_dir: bool = False) -> None:
    meta: JSON = {"name": name, "namespace": ns, "annotations": dict(annotations or {})}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    kube.create(resource_path("v1", "pods", namespace=ns), {
        "apiVersion": "v1", "kind": "Pod", "metadata": meta,
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "c", "image": "registry.local/c:1"}],
                 "volumes": [{"name": "scratch", "emptyDir": {}}] if empty_dir else []}})
