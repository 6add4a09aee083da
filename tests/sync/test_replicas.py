"""Two replicas of ``reconciler run --leader-elect`` against the real control plane: exactly one
acts; killing the leader hands over within the lease time and the rollout goes on with its
invariants intact (docs/rollout.md#upgrading-one-node: in-flight nodes never above maxParallel, no
node started twice)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from reconciler.kube.api import KubeApi, resource_path
from reconciler.sim.control_plane import ControlPlane
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from tests.controller.helpers import InvariantObserver
from tests.sync.conftest import CLUSTER, NEW, POLICY_PATH, Person, Remote, policy
from tests.sync.daemon import Daemon, metric_value, wait_port_ready
from tests.sync.helpers import source_commit, step_state, subjects

pytestmark = pytest.mark.cluster
LEASE = ["--lease-duration", "3s", "--renew-deadline", "2s", "--retry-period", "500ms"]


def _leading(daemon: Daemon) -> bool:
    try:
        return metric_value(daemon.metrics(), "gpu_reconciler_leader") == 1
    except OSError:
        return False


def test_two_replicas_one_acts_and_the_rollout_survives_killing_the_leader(
    kube: KubeApi, control_plane: ControlPlane, fleet10: Fleet, policy_remote: Remote,
    alice: Person, tmp_path: Path,
) -> None:
    args = ["--repo", policy_remote.url, "--cluster", CLUSTER, "--kubeconfig",
            str(control_plane.kubeconfig), "--fetch-interval", "300ms", "--leader-elect",
            "--leader-elect-namespace", "metax-operator", "--ready-timeout", "30s", *LEASE]
    seed = policy_remote.head()  # before the leader pushes status snapshots
    replicas = [Daemon(args, workdir=tmp_path, name=f"replica-{n}") for n in "ab"]
    observer = InvariantObserver(kube, max_parallel=5).start()
    try:
        for replica in replicas:
            wait_port_ready(replica)
        leader = wait_for(lambda: next((r for r in replicas if _leading(r)), None), timeout=20,
                          what="a leader")
        standby = next(r for r in replicas if r is not leader)
        wait_for(lambda: source_commit(kube) == seed, timeout=30,
                 what="the seed applied")
        merge = alice.commit_and_push(f"Upgrade prod-a to {NEW}",
                                      {POLICY_PATH: policy(NEW, first_pause="0")})
        wait_for(lambda: source_commit(kube) == merge, timeout=30, what="the merge applied")
        wait_for(lambda: step_state(kube)[0] == "Progressing", timeout=30, what="the rollout")
        assert not _leading(standby), "exactly one replica leads"
        assert "became the leader" not in standby.log()
        assert "applied" not in standby.log(), "the standby applies nothing"

        killed = time.monotonic()
        leader.stop(signal.SIGKILL)
        wait_for(lambda: _leading(standby), timeout=15, what="the standby taking over")
        print(f"\nhandover after SIGKILL: {time.monotonic() - killed:.2f} s (lease 3 s)")
        wait_for(lambda: step_state(kube) == ("Idling", 3, "Completed"), timeout=120,
                 what="the rollout completed by the new leader", observe=lambda: step_state(kube))
        assert sorted(fleet10.ready_driver_nodes(NEW)) == sorted(fleet10.node_names)
        assert observer.violations == [], observer.violations
        assert observer.max_in_flight <= 5
        wait_for(lambda: any("rollout completed" in s for s in subjects(policy_remote)),
                 timeout=30, what="the new leader's completed snapshot")
        own = [s for s in subjects(policy_remote) if s.startswith("gpu-gitops-reconciler:")]
        assert len(own) == len(set(own)), own
        lease = kube.get(resource_path("coordination.k8s.io/v1", "leases", "gpu-reconciler",
                                       namespace="metax-operator"))
        assert lease["spec"]["holderIdentity"].startswith(standby.name)
    finally:
        observer.stop()
        for replica in replicas:
            if replica.alive():
                assert replica.stop() == 0, replica.log()[-2000:]
