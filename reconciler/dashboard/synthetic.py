"""A synthetic cluster in the middle of a rollout, for the benchmark and the page's tests when
no real fleet of that size is up: N nodes, step 2 of 4 upgrading, some nodes in flight, failed,
busy, NotReady. Pure; ``advance`` moves the rollout on by a wave, as a live update would."""

from __future__ import annotations

import dataclasses
from typing import Any

from reconciler.dashboard.model import ClusterFacts, EventFacts
from reconciler.names import (
    ANN_DELETED_AT,
    ANN_FAILED_AT,
    ANN_FAILURE_REASON,
    ANN_STATE,
    ANN_TARGET,
    STATE_DONE,
    STATE_FAILED,
    STATE_UPGRADING,
)
from reconciler.rollout import status as st
from reconciler.views.nodes import NodeFacts, PodFacts

OLD_REV, NEW_REV = "rev-old", "rev-new"
OLD_IMAGE = "registry.local/driver-image:2.32.0.5-amd64"
NEW_IMAGE = "registry.local/driver-image:2.33.0.9-amd64"
POLICY: dict[str, Any] = {
    "enableRollout": True,
    "upgradeSteps": [
        {"replicas": "5%"},  # pauseDuration left out: a gate
        {"replicas": "30%", "pauseDuration": 300000},
        {"replicas": "60%", "pauseDuration": 300000},
        {"replicas": "100%"},
    ],
    "pause": False,
    "maxParallel": "50%",
    "maxUnavailable": "10%",
    "maxFailureThreshold": 5,
    "fallback": "pause",
}


def synthetic_facts(nodes: int, *, now: float, upgraded: float = 0.2, in_flight: int = 50,
                    failed: int = 3, busy: int = 5, not_ready: int = 2,
                    cluster: str = "synthetic") -> ClusterFacts:
    width = max(4, len(str(nodes)))
    stamp = st.format_time(now - 30)
    done = int(nodes * upgraded)
    rows = []
    for index in range(nodes):
        name = f"node-{index + 1:0{width}d}"
        ann: dict[str, str] = {}
        pod = PodFacts(f"metax-driver-{index}", OLD_REV, ready=True, created_at=now - 86400)
        ready = True
        workloads: tuple[str, ...] = ()
        if index < done:
            ann = {ANN_STATE: STATE_DONE, ANN_TARGET: NEW_REV}
            pod = PodFacts(f"metax-driver-{index}-n", NEW_REV, ready=True,
                           created_at=now - 600 + index * 0.01, ready_since=now - 480)
        elif index < done + failed:
            ann = {ANN_STATE: STATE_FAILED, ANN_TARGET: NEW_REV, ANN_FAILED_AT: stamp,
                   ANN_FAILURE_REASON: "ErrImagePull"}
            pod = PodFacts(f"metax-driver-{index}-n", NEW_REV, waiting_reason="ImagePullBackOff",
                           created_at=now - 60)
        elif index < done + failed + in_flight:
            ann = {ANN_STATE: STATE_UPGRADING, ANN_TARGET: NEW_REV, ANN_DELETED_AT: stamp}
            pod = PodFacts(f"metax-driver-{index}-n", NEW_REV, created_at=now - 30)
        elif index < done + failed + in_flight + busy:
            workloads = (f"training/job-{index}",)
        elif index < done + failed + in_flight + busy + not_ready:
            ready = False
        rows.append(NodeFacts(name=name, ready=ready, annotations=ann, pod=pod,
                              workloads=workloads))
    total = nodes
    co = {
        "metadata": {"name": "cluster-operator", "uid": "u1"},
        "spec": {"driver": {"payload": {"registry": "registry.local", "name": "driver-image",
                                        "version": "2.33.0.9"},
                            "upgradePolicy": POLICY}},
        "status": {"upgradeStatus": {
            "phase": "Progressing", "upgrading": True, "message": "",
            "lastAppliedSpec": {"payload": {"version": "2.33.0.9"}},
            "lastCoDriverSpec": {"payload": {"version": "2.32.0.5"}},
            "conditions": [{"type": "Progressing", "reason": "StepStarted", "message": "step 2",
                            "lastTransitionTime": st.format_time(now - 900)}],
            "status": {"currentStepIndex": 2, "currentStepState": "StepUpgrade",
                       "totalUpgradeReplicas": total, "totalUpgradeReadyReplicas": done,
                       "currentFailureRetry": failed, "lastPodSpecRevision": OLD_REV,
                       "upgradingPodSpecRevision": NEW_REV},
        }},
    }
    events = [EventFacts(now - 1800, "RolloutStarted", "rollout started"),
              EventFacts(now - 1500, "GateOpened", "step 1 done: waiting for a person"),
              EventFacts(now - 900, "StepStarted", "step 2 of 4")]
    return ClusterFacts(cluster=cluster, cluster_operator=co, nodes=rows,
                        revision_images={OLD_REV: OLD_IMAGE, NEW_REV: NEW_IMAGE},
                        current_revision=NEW_REV, events=events)


def advance(facts: ClusterFacts, *, now: float, wave: int) -> ClusterFacts:
    """The next ``wave`` nodes in flight turn Ready, as many old ones start."""
    nodes = list(facts.nodes)
    finished = started = 0
    stamp = st.format_time(now)
    for i, node in enumerate(nodes):
        state = node.annotations.get(ANN_STATE)
        if state == STATE_UPGRADING and finished < wave and node.pod is not None:
            nodes[i] = dataclasses.replace(
                node, annotations={ANN_STATE: STATE_DONE, ANN_TARGET: NEW_REV},
                pod=dataclasses.replace(node.pod, ready=True, ready_since=now))
            finished += 1
        elif (state is None and node.ready and not node.workloads and started < wave
              and node.pod is not None and node.pod.revision == OLD_REV):
            nodes[i] = dataclasses.replace(
                node, annotations={ANN_STATE: STATE_UPGRADING, ANN_TARGET: NEW_REV,
                                   ANN_DELETED_AT: stamp},
                pod=PodFacts(node.pod.name + "-n", NEW_REV, created_at=now))
            started += 1
    co = dict(facts.cluster_operator or {})
    status = dict(co["status"])
    upgrade = dict(status["upgradeStatus"])
    inner = dict(upgrade["status"])
    inner["totalUpgradeReadyReplicas"] = int(inner["totalUpgradeReadyReplicas"]) + finished
    upgrade["status"] = inner
    status["upgradeStatus"] = upgrade
    co["status"] = status
    return dataclasses.replace(facts, nodes=nodes, cluster_operator=co)
