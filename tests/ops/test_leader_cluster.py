"""Two replicas against a real kube-apiserver: exactly one acts; a killed leader is replaced
within the lease time; a replica stopped with SIGTERM hands the Lease over at once.

The replicas are separate processes (tests/ops/leader_replica.py) with a least-privilege
identity: a Role that may only get, create and update Leases in their namespace.
"""

from __future__ import annotations

import itertools
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from reconciler.kube.api import KubeApi, resource_path
from reconciler.sim.control_plane import ControlPlane
from reconciler.sim.waiting import wait_for
from tests.ops.leader_replica import LEASE, RETRY

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

REPLICA = Path(__file__).with_name("leader_replica.py")
ROOT = Path(__file__).resolve().parents[2]
JITTER = 1.2


@pytest.fixture
def lease_identity(control_plane: ControlPlane, kube: KubeApi) -> tuple[Path, str]:
    """A namespace and a kubeconfig that may only work with Leases in it."""
    namespace = f"leader-{uuid.uuid4().hex[:8]}"
    kube.create(
        resource_path("v1", "namespaces"),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
    )
    rbac = "rbac.authorization.k8s.io/v1"
    kube.create(
        resource_path(rbac, "roles", namespace=namespace),
        {
            "apiVersion": rbac,
            "kind": "Role",
            "metadata": {"name": "leader-election", "namespace": namespace},
            "rules": [
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "verbs": ["get", "create", "update"],
                }
            ],
        },
    )
    kubeconfig = control_plane.mint_kubeconfig(None, namespace_roles={namespace: "leader-election"})
    return kubeconfig, namespace


class Replica:
    def __init__(self, kubeconfig: Path, namespace: str, identity: str, log: Path) -> None:
        self.identity = identity
        self.proc = subprocess.Popen(
            [sys.executable, str(REPLICA), str(kubeconfig), namespace, identity, str(log)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line == "running", self.proc.stderr.read() if self.proc.stderr else line

    def stop(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.proc.wait(timeout=15)

    def stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read()


def actions(log: Path) -> list[tuple[str, float, float]]:
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        who, start, end = line.split()
        out.append((who, float(start), float(end)))
    return out


def wait_for_actor(log: Path, identity: str, since: float, timeout: float) -> float:
    starts = wait_for(lambda: [s for who, s, _ in actions(log) if who == identity and s >= since],
                      timeout=timeout, what=f"{identity} acting",
                      observe=lambda: sorted({who for who, _, _ in actions(log)}))
    return min(starts)


def test_two_replicas_one_acts_and_a_killed_leader_is_replaced(
    lease_identity: tuple[Path, str], tmp_path: Path
) -> None:
    kubeconfig, namespace = lease_identity
    log = tmp_path / "actions.log"
    replicas: list[Replica] = []
    try:
        a = Replica(kubeconfig, namespace, "replica-a", log)
        replicas.append(a)
        wait_for_actor(log, "replica-a", 0, timeout=10)
        b = Replica(kubeconfig, namespace, "replica-b", log)
        replicas.append(b)
        watch_from = time.time()
        time.sleep(3 * LEASE)  # long enough for b to have taken over, were it going to
        during = [who for who, start, _ in actions(log) if start >= watch_from]
        assert set(during) == {"replica-a"}, "exactly one replica acts"

        killed_at = time.time()
        a.stop(signal.SIGKILL)
        took_over = wait_for_actor(log, "replica-b", killed_at, timeout=3 * LEASE)
        handover = took_over - killed_at
        # b takes over when the lease it last saw renewed expires: at most the lease duration
        # after the kill, plus how stale b's last look was (one jittered retry period), plus a
        # second of slack for process scheduling on a loaded machine.
        assert handover <= LEASE + RETRY * (1 + JITTER) + 1.0, f"handover took {handover:.2f}s"
        print(f"\nhandover after SIGKILL of the leader: {handover:.2f}s (lease {LEASE}s)")

        c = Replica(kubeconfig, namespace, "replica-c", log)
        replicas.append(c)
        time.sleep(2 * RETRY)
        stopped_at = time.time()
        b.stop(signal.SIGTERM)  # clean shutdown releases the Lease
        assert b.proc.returncode == 0, b.stderr()
        took_over = wait_for_actor(log, "replica-c", stopped_at, timeout=3 * LEASE)
        assert took_over - stopped_at < LEASE, "a released Lease is taken before it would expire"
        print(f"handover after SIGTERM of the leader: {took_over - stopped_at:.2f}s")
    finally:
        for r in replicas:
            r.stop(signal.SIGKILL)

    # no two replicas ever acted at the same time
    intervals = sorted(actions(log), key=lambda x: x[1])
    assert len({who for who, _, _ in intervals}) == 3
    for (who1, start1, end1), (who2, start2, end2) in itertools.combinations(intervals, 2):
        if who1 != who2:
            assert end1 <= start2 or end2 <= start1, f"{who1} and {who2} acted at the same time"
    for r in replicas:
        err = r.stderr()
        assert "Traceback" not in err, err


def test_an_identity_without_lease_rights_never_leads(
    control_plane: ControlPlane, lease_identity: tuple[Path, str], caplog: pytest.LogCaptureFixture
) -> None:
    from kubernetes import config

    from reconciler.ops.leader import ElectionConfig, KubernetesLeaseClient, LeaderElector

    _, namespace = lease_identity
    kubeconfig = control_plane.mint_kubeconfig(None)  # bound to nothing
    elector = LeaderElector(
        KubernetesLeaseClient(config.new_client_from_config(str(kubeconfig))),
        ElectionConfig(namespace, "gpu-reconciler", "no-rights", LEASE, 2.0, RETRY),
    )
    elector.tick()
    assert not elector.is_leader
    assert any("HTTP 403" in r.getMessage() for r in caplog.records), caplog.text
