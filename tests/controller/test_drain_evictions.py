"""The executor's side of the drain (SPEC 13) on the real API server: a budget's refusal (429)
backs the pod off for at least 5 s (with jitter, on the clock seam), names the budget in a
``NodeDrainBlocked`` Event once per refusal, and every result is counted for
``gpu_reconciler_drain_evictions_total``."""

from __future__ import annotations

import random

import pytest

from reconciler.controller.act import (
    EVICTION_BACKOFF_SECONDS,
    EVICTION_JITTER,
    ActionExecutor,
    Target,
)
from reconciler.kube.api import KubeApi
from reconciler.names import CLUSTER_OPERATOR_NAME
from reconciler.ops.metrics import Metrics
from reconciler.rollout import actions as act
from reconciler.sim.waiting import wait_for
from tests.conftest import FleetFactory
from tests.controller.drain_objects import budget, budget_status, create, deployment, pods, ready
from tests.controller.helpers import cluster_operator, event_reasons

pytestmark = pytest.mark.cluster


def test_a_refused_eviction_backs_off_names_the_budget_and_is_counted(
    kube: KubeApi, fleet_factory: FleetFactory, workload_namespace: str,
) -> None:
    ns = workload_namespace
    fleet_factory(nodes=2, workloads=True)
    create(kube, deployment("web", ns, 2))
    create(kube, budget("web", ns, min_available=2))
    wait_for(lambda: budget_status(kube, "web", ns).get("currentHealthy") == 2
             and len([p for p in pods(kube, ns) if ready(p)]) == 2, timeout=30,
             what="2 healthy pods, no disruption allowed",
             observe=lambda: budget_status(kube, "web", ns))
    pod = pods(kube, ns)[0]
    name, node = pod["metadata"]["name"], pod["spec"]["nodeName"]
    now = [1000.0]
    metrics = Metrics()
    executor = ActionExecutor(kube, Target(CLUSTER_OPERATOR_NAME), clock=lambda: now[0],
                              on_eviction=metrics.count_drain_eviction, rng=random.Random(7))
    co = cluster_operator(kube)
    evict = act.EvictPod(node, ns, name)

    executor.execute(evict, co)
    assert executor.evictions == {"refused": 1}
    wait_for(lambda: event_reasons(kube).count("NodeDrainBlocked") == 1, timeout=30,
             what="the NodeDrainBlocked event", observe=lambda: event_reasons(kube))
    [message] = _messages(kube, "NodeDrainBlocked")
    assert f"node={node}" in message and f"budget {ns}/web" in message, message

    # within the back-off nothing is asked, nothing counted, no second Event
    now[0] += EVICTION_BACKOFF_SECONDS - 0.01
    executor.execute(evict, co)
    assert executor.evictions == {"refused": 1}
    now[0] += EVICTION_BACKOFF_SECONDS * EVICTION_JITTER + 0.02
    executor.execute(evict, co)
    assert executor.evictions == {"refused": 2}
    wait_for(lambda: event_reasons(kube).count("NodeDrainBlocked") == 2, timeout=30,
             what="a second NodeDrainBlocked after the back-off")
    exposition = metrics.exposition().decode()
    assert 'gpu_reconciler_drain_evictions_total{result="refused"} 2.0' in exposition
    assert 'gpu_reconciler_drain_evictions_total{result="evicted"} 0.0' in exposition

    # a pod that is gone counts as gone; an accepted eviction is not asked again at once
    executor.execute(act.EvictPod(node, ns, "no-such-pod"), co)
    now[0] += EVICTION_BACKOFF_SECONDS * (1 + EVICTION_JITTER) + 0.01
    kube.patch(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/web",
               {"spec": {"minAvailable": 1}})
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
