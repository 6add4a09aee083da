"""The controller's side of the drain (docs/live-clusters.md#the-drain) on the real API server (one
fleet for both, to keep the time down).

The snapshot: with ``drain`` set, each rollout node carries its pods (all but the driver pod:
DaemonSet, mirror and bare pods flagged) and the snapshot the PodDisruptionBudgets as the
disruption controller computed them; with neither ``drain`` nor ``waitFor`` nothing of either is
kept and no budget is watched.

The executor: a budget's refusal (429) backs the pod off for at least 5 s (with jitter, on the
clock seam), names the budget in a ``NodeDrainBlocked`` Event once per refusal, and every result
is counted for ``gpu_reconciler_drain_evictions_total``."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import pytest

from reconciler.config.settings import ClusterSettings
from reconciler.controller.act import (
    EVICTION_BACKOFF_SECONDS,
    EVICTION_JITTER,
    ActionExecutor,
    Target,
)
from reconciler.controller.loop import RolloutController
from reconciler.kube.api import KubeApi, resource_path
from reconciler.names import CLUSTER_OPERATOR_NAME
from reconciler.ops.metrics import Metrics
from reconciler.policy.rollout_settings import DrainSettings, RolloutSettings
from reconciler.rollout import actions as act
from reconciler.rollout.model import PlannerSettings, RolloutNode
from reconciler.sim.waiting import wait_for
from tests.conftest import FleetFactory
from tests.controller.drain_objects import (
    agent_daemonset,
    bare_pod,
    budget,
    budget_status,
    create,
    deployment,
    mirror_pod,
    pods,
)
from tests.controller.helpers import cluster_operator, event_reasons, running_controller

pytestmark = pytest.mark.cluster

DRAIN = ClusterSettings(rollout=RolloutSettings(drain=DrainSettings()))


@pytest.fixture
def settings() -> list[ClusterSettings]:
    return [DRAIN]


@pytest.fixture
def controller(kube: KubeApi, settings: list[ClusterSettings]) -> Iterator[RolloutController]:
    yield from running_controller(kube, PlannerSettings(ready_timeout=20),
                                  config=lambda: settings[0])


def _views(ctl: RolloutController) -> dict[str, RolloutNode]:
    with ctl._lock:
        return dict(ctl.index.views)


def _pods(ctl: RolloutController) -> dict[str, list[str]]:
    return {name: [p.key for p in view.pods] for name, view in _views(ctl).items()}


def _until(check: Callable[[], object], what: str, observe: Callable[[], object]) -> None:
    wait_for(check, timeout=30, what=what, observe=observe)


def test_nodes_carry_their_pods_and_budgets_while_drain_is_set_and_refusals_back_off(
    kube: KubeApi, fleet_factory: FleetFactory, workload_namespace: str,
    controller: RolloutController, settings: list[ClusterSettings],
) -> None:
    ns = workload_namespace
    fleet = fleet_factory(nodes=3, workloads=True)
    create(kube, deployment("web", ns, 3))
    create(kube, budget("web", ns, min_available=2))
    create(kube, agent_daemonset("agent", ns, fleet.fleet_id))
    first, second = fleet.node_names[:2]
    create(kube, mirror_pod(kube, "static-agent", ns, first))
    create(kube, bare_pod("scratch", ns, second, empty_dir=True))

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

    _refusals(kube, ns)


def _refusals(kube: KubeApi, ns: str) -> None:
    """A budget allowing no disruption refuses the executor's eviction: back-off, Event,
    metric; once it allows one, the eviction goes through."""
    path = resource_path("policy/v1", "poddisruptionbudgets", "web", namespace=ns)
    kube.patch(path, {"spec": {"minAvailable": 3}})
    wait_for(lambda: budget_status(kube, "web", ns).get("disruptionsAllowed") == 0
             and budget_status(kube, "web", ns).get("observedGeneration") == 2, timeout=30,
             what="no disruption allowed", observe=lambda: budget_status(kube, "web", ns))
    pod = next(p for p in pods(kube, ns) if p["metadata"]["name"].startswith("web-"))
    name, node = pod["metadata"]["name"], pod["spec"]["nodeName"]
    now = [1000.0]
    metrics = Metrics()
    executor = ActionExecutor(kube, Target(CLUSTER_OPERATOR_NAME), clock=lambda: now[0],
                              on_eviction=metrics.count_drain_eviction, rng=random.Random(7))
    co = cluster_operator(kube)
    evict = act.EvictPod(node, ns, name)
    blocked_before = event_reasons(kube).count("NodeDrainBlocked")

    def blocked() -> int:
        return event_reasons(kube).count("NodeDrainBlocked") - blocked_before

    executor.execute(evict, co)
    assert executor.evictions == {"refused": 1}
    wait_for(lambda: blocked() == 1, timeout=30, what="the NodeDrainBlocked event",
             observe=lambda: event_reasons(kube))
    [message] = [m for m in _messages(kube, "NodeDrainBlocked") if name in m]
    assert f"node={node}" in message and f"budget {ns}/web" in message, message

    # a pass that only repeats it holds it back (no action: no pass again at once) until its
    # back-off ends
    other = act.Cordon(node)
    kept, until = executor.held_back([evict, other])
    assert kept == [other]
    assert until is not None and (now[0] + EVICTION_BACKOFF_SECONDS <= until
                                  <= now[0] + EVICTION_BACKOFF_SECONDS * (1 + EVICTION_JITTER))

    # within the back-off nothing is asked, nothing counted, no second Event
    now[0] += EVICTION_BACKOFF_SECONDS - 0.01
    executor.execute(evict, co)
    assert executor.evictions == {"refused": 1}
    now[0] += EVICTION_BACKOFF_SECONDS * EVICTION_JITTER + 0.02
    executor.execute(evict, co)
    assert executor.evictions == {"refused": 2}
    wait_for(lambda: blocked() == 2, timeout=30,
             what="a second NodeDrainBlocked after the back-off")
    exposition = metrics.exposition().decode()
    assert 'gpu_reconciler_drain_evictions_total{result="refused"} 2.0' in exposition
    assert 'gpu_reconciler_drain_evictions_total{result="evicted"} 0.0' in exposition

    # a pod that is gone counts as gone; an accepted eviction is not asked again at once
    executor.execute(act.EvictPod(node, ns, "no-such-pod"), co)
    now[0] += EVICTION_BACKOFF_SECONDS * (1 + EVICTION_JITTER) + 0.01
    kube.patch(path, {"spec": {"minAvailable": 2}})
    wait_for(lambda: budget_status(kube, "web", ns).get("disruptionsAllowed") == 1, timeout=30,
             what="one disruption allowed", observe=lambda: budget_status(kube, "web", ns))
    executor.execute(evict, co)
    executor.execute(evict, co)
    assert executor.evictions == {"refused": 2, "gone": 1, "evicted": 1}


def _messages(kube: KubeApi, reason: str) -> list[str]:
    uid = cluster_operator(kube)["metadata"]["uid"]
    events = kube.list("/api/v1/namespaces/default/events",
                       query={"fieldSelector": f"involvedObject.uid={uid},reason={reason}"})
    return [str(e.get("message")) for e in events["items"]]
