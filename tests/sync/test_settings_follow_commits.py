"""``reconciler run`` as a process: reconciler.yaml's settings follow each commit it applies
(docs/live-clusters.md: read at every commit, like the rest of the file). A commit that changes only
``rollout.readyTimeout`` changes the timeout the running controller applies, no restart; with
``--role controller --repo-config F``, rewriting F does the same. Seen through behaviour: a node
whose new driver pod never turns Ready fails after the new timeout (with the old one, an hour,
it would not within the test)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from reconciler.kube.api import KubeApi
from reconciler.names import ANN_STATE
from reconciler.sim.control_plane import ControlPlane
from reconciler.sim.faults import Fault, FaultKind
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from tests.conftest import FleetFactory
from tests.controller.helpers import start_rollout
from tests.gitops.conftest import Person, Remote
from tests.sync.conftest import CLUSTER, NEW, PAYLOAD, POLICY_PATH, REPO_CONFIG, policy
from tests.sync.daemon import Daemon, wait_port_ready
from tests.sync.helpers import source_commit

pytestmark = pytest.mark.cluster

NEVER_READY = [Fault("node-0001", FaultKind.NEVER_READY, version=NEW)]


def _one_node(fleet_factory: FleetFactory) -> Fleet:
    fleet = fleet_factory(nodes=1, payload=PAYLOAD, install_seconds=0.2, faults=NEVER_READY)
    wait_for(lambda: len(fleet.ready_driver_nodes()) == 1, timeout=60,
             what="1 Ready driver pod", observe=fleet.driver_pods)
    return fleet


def _failed(kube: KubeApi) -> bool:
    node = kube.get("/api/v1/nodes/node-0001")
    return (node["metadata"].get("annotations") or {}).get(ANN_STATE) == "failed"


def _in_force(daemon: Daemon, ready_timeout: str) -> None:
    wait_for(lambda: f"readyTimeout {ready_timeout}" in daemon.log(), timeout=30,
             what=f"readyTimeout {ready_timeout} in force", observe=lambda: daemon.log()[-2000:])


def test_a_commit_changing_only_ready_timeout_changes_the_running_controllers_timeout(
    kube: KubeApi, control_plane: ControlPlane, fleet_factory: FleetFactory,
    policy_remote: Remote, alice: Person, tmp_path: Path,
) -> None:
    _one_node(fleet_factory)
    alice.commit_and_push("an hour for a driver pod",
                          {"reconciler.yaml": REPO_CONFIG + "rollout: {readyTimeout: 1h}\n"})
    daemon = Daemon(["--repo", policy_remote.url, "--cluster", CLUSTER, "--kubeconfig",
                     str(control_plane.kubeconfig), "--fetch-interval", "300ms"],
                    workdir=tmp_path, name="all")
    try:
        wait_port_ready(daemon)
        _in_force(daemon, "1h")
        assert daemon.proc is not None
        pid = daemon.proc.pid
        change = alice.commit_and_push(
            "3 seconds for a driver pod",
            {"reconciler.yaml": REPO_CONFIG + "rollout: {readyTimeout: 3s}\n"})
        wait_for(lambda: source_commit(kube) == change, timeout=30, what="the change applied")
        _in_force(daemon, "3s")
        alice.commit_and_push(f"Upgrade prod-a to {NEW}", {POLICY_PATH: policy(NEW)})
        wait_for(lambda: _failed(kube), timeout=60, what="node-0001 failed by readyTimeout 3s")
        assert daemon.alive() and daemon.proc.pid == pid  # the same process: no restart
    finally:
        assert daemon.stop() == 0, daemon.log()[-3000:]


def _replace(path: Path, text: str) -> None:
    """As an editor or a ConfigMap update does: a new file renamed over the old one."""
    new = path.with_name(path.name + ".new")
    new.write_text(text, encoding="utf-8")
    os.replace(new, path)


def test_role_controller_reads_repo_config_again_when_it_changes(
    kube: KubeApi, control_plane: ControlPlane, fleet_factory: FleetFactory, tmp_path: Path,
) -> None:
    _one_node(fleet_factory)
    config = tmp_path / "config" / "reconciler.yaml"
    config.parent.mkdir()
    config.write_text("rollout: {readyTimeout: 1h}\n", encoding="utf-8")
    daemon = Daemon(["--role", "controller", "--kubeconfig", str(control_plane.kubeconfig),
                     "--repo-config", str(config)], workdir=tmp_path, name="controller")
    try:
        wait_port_ready(daemon)
        _in_force(daemon, "1h")
        _replace(config, "rollout: {readyTimeout: 10 minutes}\n")  # refused: 1h stays
        wait_for(lambda: "refused, the settings of" in daemon.log(), timeout=30,
                 what="the bad file refused")
        _replace(config, "rollout: {readyTimeout: 3s}\n")
        _in_force(daemon, "3s")
        start_rollout(kube, NEW, {
            "enableRollout": True, "upgradeSteps": [{"replicas": "100%", "pauseDuration": 0}],
            "maxParallel": 1, "maxUnavailable": 1, "maxFailureThreshold": 1,
            "fallback": "pause"})
        wait_for(lambda: _failed(kube), timeout=60, what="node-0001 failed by readyTimeout 3s")
    finally:
        assert daemon.stop() == 0, daemon.log()[-3000:]
