"""The controller killed at random moments, and the API misbehaving under it: the rollout resumes
with no node upgraded twice and no limit exceeded (docs/rollout.md#upgrading-one-node, issue 5)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from reconciler.controller.act import Target
from reconciler.controller.loop import RolloutController
from reconciler.kube.api import KubeApi
from reconciler.kube.objects import cluster_operator_path
from reconciler.names import CLUSTER_OPERATOR_NAME
from reconciler.rollout.model import PlannerSettings
from reconciler.sim.control_plane import ControlPlane
from reconciler.sim.operator_install import install_crd
from reconciler.sim.waiting import wait_for
from tests.controller.helpers import (
    InvariantObserver,
    cluster_operator,
    inner,
    start_rollout,
    upgrade_status,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

KILL_POLICY = {
    "enableRollout": True,
    "upgradeSteps": [
        {"replicas": "25%", "pauseDuration": 0},
        {"replicas": "50%", "pauseDuration": 500},
        {"replicas": "100%", "pauseDuration": 0},
    ],
    "pause": False,
    "maxParallel": 2,
    "maxUnavailable": 0,
    "maxFailureThreshold": 1,
    "fallback": "pause",
}


def _spawn(kubeconfig: Path) -> subprocess.Popen[bytes]:
    log = open(kubeconfig.parent / "controller.log", "ab")  # noqa: SIM115 - lives with the child
    return subprocess.Popen(
        [sys.executable, "-m", "reconciler.cli.main", "run", "--role", "controller",
         "--kubeconfig", str(kubeconfig), "--log-level", "warning",
         "--ops-listen", "off"],  # a fixed port may be taken on a shared machine
        stdout=log, stderr=log, start_new_session=True,
    )


def _completed(kube: KubeApi) -> bool:
    status = upgrade_status(kube)
    return status.get("phase") == "Idling" and inner(kube).get("currentStepState") == "Completed"


@pytest.mark.parametrize("version", ["2.33.0.9", "2.34.0.1"])
def test_sigkill_at_random_moments_keeps_the_invariants(
    kube: KubeApi, control_plane: ControlPlane, fleet_factory: Any, version: str
) -> None:
    fleet = fleet_factory(nodes=16, install_seconds=(0.8, 2.0))  # long enough for >= 10 kills
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 16, timeout=60, what="16 Ready pods")
    rng = random.Random(version)
    observer = InvariantObserver(kube, max_parallel=2, max_unavailable=0).start()
    process = _spawn(control_plane.kubeconfig)
    kills = 0
    try:
        start_rollout(kube, version, KILL_POLICY)
        deadline = time.monotonic() + 240
        while not _completed(kube):
            assert time.monotonic() < deadline, f"not completed: {upgrade_status(kube)}"
            time.sleep(rng.uniform(0.2, 1.5))
            if _completed(kube):
                break
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
            kills += 1
            process = _spawn(control_plane.kubeconfig)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(20)
        observer.stop()
    assert kills >= 10, f"only {kills} kills happened before completion"
    assert observer.violations == []
    assert sorted(observer.deletions) == fleet.node_names
    assert all(len(revs) == 1 for revs in observer.deletions.values()), observer.deletions
    assert sorted(fleet.ready_driver_nodes(version)) == fleet.node_names
    for node in fleet.node_names:
        assert not kube.get(f"/api/v1/nodes/{node}")["spec"].get("unschedulable")


def test_sigterm_stops_cleanly(kube: KubeApi, control_plane: ControlPlane, fleet: Any) -> None:
    process = _spawn(control_plane.kubeconfig)
    wait_for(lambda: upgrade_status(kube).get("phase"), timeout=30, what="a first status")
    process.send_signal(signal.SIGTERM)
    assert process.wait(15) == 0


def _controller(kube: KubeApi) -> RolloutController:
    install_crd(kube)
    ctl = RolloutController(kube, Target(cluster_operator=CLUSTER_OPERATOR_NAME),
                            settings=PlannerSettings(ready_timeout=30)).start()
    assert ctl.wait_synced(30)
    return ctl


def test_status_write_conflicts_are_retried(kube: KubeApi, fleet_factory: Any) -> None:
    """Another writer keeps bumping the object's resourceVersion; the controller's status writes
    conflict, it re-reads and carries on."""
    fleet = fleet_factory(nodes=8)
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 8, timeout=60, what="8 Ready pods")
    ctl = _controller(kube)
    stop = threading.Event()

    def meddle() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            kube.patch(cluster_operator_path(CLUSTER_OPERATOR_NAME),
                       {"metadata": {"annotations": {"example.com/meddler": str(n)}}})
            time.sleep(0.01)

    meddler = threading.Thread(target=meddle, daemon=True)
    try:
        meddler.start()
        start_rollout(kube, "2.33.0.9", {**KILL_POLICY, "maxParallel": 1})
        wait_for(lambda: _completed(kube), timeout=120, what="completion under conflicts",
                 observe=lambda: upgrade_status(kube))
    finally:
        stop.set()
        meddler.join(5)
        ctl.stop()
    assert ctl.stats.conflicts > 0
    assert sorted(fleet.ready_driver_nodes("2.33.0.9")) == fleet.node_names


@pytest.mark.compat
def test_apiserver_restart_mid_rollout(
    kube: KubeApi, control_plane: ControlPlane, fleet_factory: Any
) -> None:
    """The API server goes away mid-rollout (watches break, requests fail); the controller
    relists and completes."""
    fleet = fleet_factory(nodes=8, install_seconds=1.0)
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 8, timeout=60, what="8 Ready pods")
    ctl = _controller(kube)
    observer = InvariantObserver(kube, max_parallel=1).start()
    try:
        start_rollout(kube, "2.33.0.9", {**KILL_POLICY, "maxParallel": 1})
        wait_for(lambda: len(fleet.ready_driver_nodes("2.33.0.9")) >= 2, timeout=60,
                 what="two nodes upgraded")
        lists_before = sum(w.lists for w in ctl.watches)
        control_plane.restart_apiserver()
        wait_for(lambda: _completed(kube), timeout=180, what="completion after the restart",
                 observe=lambda: upgrade_status(kube))
    finally:
        observer.stop()
        ctl.stop()
    assert sum(w.lists for w in ctl.watches) >= lists_before  # watches came back
    assert observer.violations == []
    assert sorted(fleet.ready_driver_nodes("2.33.0.9")) == fleet.node_names


def _compact_etcd(etcd_url: str) -> None:
    """Compacts etcd's history up to now, as the API server does every few minutes: watches
    from an older resourceVersion then answer 410 Gone."""
    import base64
    import json
    import urllib.request

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(f"{etcd_url}{path}", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            result: dict[str, Any] = json.loads(response.read())
            return result

    revision = post("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"]
    post("/v3/kv/compaction", {"revision": revision, "physical": True})


@pytest.mark.compat
def test_watch_expiry_relists(
    kube: KubeApi, control_plane: ControlPlane, fleet: Any
) -> None:
    """History compacted under a running controller: its watches get 410 Gone when they
    reconnect, relist, and the controller keeps acting on fresh data."""
    ctl = _controller(kube)
    try:
        wait_for(lambda: upgrade_status(kube).get("phase"), timeout=30, what="status")
        old_rv = cluster_operator(kube)["metadata"]["resourceVersion"]
        for i in range(5):  # move history on, then drop it
            kube.patch(cluster_operator_path(CLUSTER_OPERATOR_NAME),
                       {"metadata": {"annotations": {"example.com/bump": str(i)}}})
        _compact_etcd(control_plane.etcd_url)
        lists = {w.name: w.lists for w in ctl.watches}
        control_plane.restart_apiserver()  # every watch reconnects from a compacted revision
        # what the controller's watches were told when they reconnected
        answers = list(kube.watch(cluster_operator_path(), resource_version=old_rv,
                                  timeout_seconds=2))
        assert any(a.get("type") == "ERROR" and a["object"].get("code") == 410
                   for a in answers), answers
        wait_for(lambda: all(w.lists > lists[w.name] for w in ctl.watches), timeout=60,
                 what="every watch to relist", observe=lambda: {w.name: w.lists
                                                                 for w in ctl.watches})
        start_rollout(kube, "2.33.0.9", {**KILL_POLICY, "maxParallel": 4})
        wait_for(lambda: _completed(kube), timeout=120, what="a rollout after the relist",
                 observe=lambda: upgrade_status(kube))
    finally:
        ctl.stop()
