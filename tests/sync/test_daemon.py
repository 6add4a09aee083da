"""``reconciler run`` as a process: webhook -> apply, signed refusals, /readyz, /metrics,
SIGTERM, SIGUSR1's stack dump; operator mode with a separate controller process; a SIGKILLed
sync restarting."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest

from reconciler.kube.api import KubeApi
from reconciler.sim.control_plane import ControlPlane, free_ports
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from tests.sync.conftest import CLUSTER, NEW, POLICY_PATH, GitDaemon, Person, Remote, policy
from tests.sync.daemon import Daemon, metric_value, wait_port_ready
from tests.sync.helpers import driver, source_commit, status_file, step_state, subjects

pytestmark = pytest.mark.cluster
REPOSITORY = "fleet/policy"


def test_readyz_is_false_until_the_caches_are_synced(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    # the real credentials, but an API server address where nothing answers
    port = free_ports(1)[0]
    dead = tmp_path / "unreachable.kubeconfig"
    text = control_plane.kubeconfig.read_text()
    dead.write_text(re.sub(r"server: \S+", f"server: https://127.0.0.1:{port}", text))
    daemon = Daemon(["--role", "controller", "--kubeconfig", str(dead)], workdir=tmp_path,
                    name="unsynced")
    try:
        wait_for(lambda: _answers(daemon), timeout=30, what="the ops endpoints")
        # the caches check is registered once the controller has started its watches
        wait_for(lambda: "[-]caches" in daemon.get("/readyz")[1], timeout=30,
                 what="the caches check on /readyz", observe=lambda: daemon.get("/readyz"))
        status, body = daemon.get("/readyz")
        assert status == 503 and "[-]caches" in body
        assert daemon.get("/healthz")[0] == 200
    finally:
        assert daemon.stop() == 0


def test_sigusr1_writes_every_threads_stack_and_the_daemon_goes_on(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    # a daemon whose caches never sync, the kind one wants to look into without stopping it
    port = free_ports(1)[0]
    dead = tmp_path / "unreachable.kubeconfig"
    dead.write_text(re.sub(r"server: \S+", f"server: https://127.0.0.1:{port}",
                           control_plane.kubeconfig.read_text()))
    daemon = Daemon(["--role", "controller", "--kubeconfig", str(dead)], workdir=tmp_path,
                    name="stuck")
    try:
        wait_for(lambda: _answers(daemon), timeout=30, what="the ops endpoints")
        assert daemon.proc is not None
        daemon.proc.send_signal(signal.SIGUSR1)
        wait_for(lambda: "most recent call first" in daemon.log(), timeout=10,
                 what="the stack dump")
        log = daemon.log()
        assert "Current thread" in log or "Thread 0x" in log
        assert "shutdown on" not in log  # a dump, not a stop
        assert daemon.alive() and daemon.get("/healthz")[0] == 200
    finally:
        assert daemon.stop() == 0
    assert "shutdown on SIGTERM" in daemon.log()


def _answers(daemon: Daemon) -> bool:
    try:
        daemon.get("/healthz")
        return True
    except OSError:
        return False


@pytest.mark.compat
def test_webhook_push_applies_and_metrics_follow_the_rollout(
    kube: KubeApi, control_plane: ControlPlane, fleet10: Fleet, policy_remote: Remote,
    alice: Person, tmp_path: Path,
) -> None:
    server = GitDaemon(policy_remote.root)
    server.start()
    url = server.url("policy.git")
    seed = policy_remote.head()  # before the sync role pushes status snapshots
    daemon = Daemon(["--repo", url, "--cluster", CLUSTER, "--kubeconfig",
                     str(control_plane.kubeconfig), "--fetch-interval", "1h",
                     "--webhook-repository", REPOSITORY, "--log-format", "json",
                     "--ready-timeout", "30s"], workdir=tmp_path, name="all")
    try:
        wait_port_ready(daemon)
        wait_for(lambda: source_commit(kube) == seed, timeout=30, what="the seed applied")
        # forged and other-branch events trigger nothing
        assert daemon.push_event(REPOSITORY, secret="not-the-secret") == 401
        assert daemon.push_event(REPOSITORY, signature="sha256=" + "0" * 64) == 401
        assert daemon.push_event(REPOSITORY, branch="feature") == 202
        merge = alice.commit_and_push(f"Upgrade prod-a to {NEW}", {POLICY_PATH: policy(NEW)})
        # each answer is counted before it is sent: none of the three triggered a fetch, and
        # with a fetch interval of an hour nothing else fetches
        seen = daemon.metrics()
        assert (metric_value(seen, "gpu_reconciler_webhook_requests_total",
                             outcome="triggered") or 0) == 0, seen
        assert metric_value(seen, "gpu_reconciler_webhook_requests_total",
                            outcome="ignored") == 1, seen
        assert source_commit(kube) == seed, "nothing fetched without a valid webhook"
        pushed = time.monotonic()
        assert daemon.push_event(REPOSITORY) == 202
        wait_for(lambda: source_commit(kube) == merge, timeout=20, what="the webhook's commit")
        print(f"\nwebhook -> ClusterOperator updated: {time.monotonic() - pushed:.3f} s")
        assert driver(kube)["payload"]["version"] == NEW

        wait_for(lambda: step_state(kube) == ("Progressing", 1, "StepPaused"), timeout=60,
                 what="the gate", observe=lambda: step_state(kube))
        text = wait_for(lambda: _metric_ready(daemon), timeout=30, what="metrics at the gate")
        assert metric_value(text, "gpu_reconciler_rollout_step", cluster=CLUSTER) == 1
        assert metric_value(text, "gpu_reconciler_rollout_step_state", cluster=CLUSTER,
                            state="StepPaused") == 1
        assert metric_value(text, "gpu_reconciler_nodes", cluster=CLUSTER,
                            state="upgraded") == 1
        assert metric_value(text, "gpu_reconciler_rollout_condition", cluster=CLUSTER,
                            type="ManualGate") == 1
        assert metric_value(text, "gpu_reconciler_rollout_condition", cluster=CLUSTER,
                            type="BatchFailed") == 0
        assert metric_value(text, "gpu_reconciler_sync_rejected", cluster=CLUSTER) == 0
        assert (metric_value(text, "gpu_reconciler_merge_to_apply_seconds_count",
                             cluster=CLUSTER) or 0) >= 2
        assert metric_value(text, "gpu_reconciler_webhook_requests_total",
                            outcome="triggered") == 1
        assert metric_value(text, "gpu_reconciler_webhook_requests_total",
                            outcome="unauthorized") == 2
        wait_for(lambda: (metric_value(daemon.metrics(), "gpu_reconciler_status_commits_total",
                                       kind="pause") or 0) >= 1,
                 timeout=20, what="the pause write-back counted")
        assert '"logger": "reconciler.sync.loop"' in daemon.log(), "JSON logs on request"
    finally:
        code = daemon.stop(signal.SIGTERM)
        server.stop()
        if code != 0:
            print(daemon.log()[-6000:])
    assert code == 0, daemon.log()[-2000:]
    assert "shutdown on SIGTERM" in daemon.log()


def _metric_ready(daemon: Daemon) -> str | None:
    text = daemon.metrics()
    # the metrics follow the ClusterOperator's status at the daemon's next pass: wait for the
    # gate's state there too, not only the phase (seen Progressing at StepUpgrade under load)
    value = metric_value(text, "gpu_reconciler_rollout_phase", cluster=CLUSTER,
                         phase="Progressing")
    paused = metric_value(text, "gpu_reconciler_rollout_step_state", cluster=CLUSTER,
                          state="StepPaused")
    return text if value == 1 and paused == 1 else None


def test_operator_mode_mirrors_a_separate_controller_and_survives_a_sigkill(
    kube: KubeApi, control_plane: ControlPlane, fleet10: Fleet, policy_remote: Remote,
    alice: Person, tmp_path: Path,
) -> None:
    seed = policy_remote.head()  # before the sync role pushes status snapshots
    kubeconfig = str(control_plane.kubeconfig)
    vendor = Daemon(["--role", "controller", "--kubeconfig", kubeconfig, "--ready-timeout",
                     "30s"], workdir=tmp_path, name="vendor-operator")
    sync_args = ["--role", "sync", "--mode", "operator", "--repo", policy_remote.url,
                 "--cluster", CLUSTER, "--kubeconfig", kubeconfig, "--fetch-interval", "300ms",
                 "--webhook-repository", REPOSITORY]
    sync = Daemon(sync_args, workdir=tmp_path, name="sync")
    try:
        wait_port_ready(vendor)
        wait_port_ready(sync)
        assert "rollout controller started" not in sync.log(), "operator mode runs no controller"
        wait_for(lambda: source_commit(kube) == seed, timeout=30,
                 what="the seed applied")
        merge = alice.commit_and_push(f"Upgrade prod-a to {NEW}", {POLICY_PATH: policy(NEW)})
        wait_for(lambda: step_state(kube) == ("Progressing", 1, "StepPaused"), timeout=60,
                 what="the vendor's gate", observe=lambda: step_state(kube))
        wait_for(lambda: any("pause the rollout at step 1/3: manual gate" in s
                             for s in subjects(policy_remote)), timeout=30,
                 what="the vendor's pause written back", observe=lambda: subjects(policy_remote))
        wait_for(lambda: (status_file(policy_remote) or {}).get("upgradeStatus", {})
                 .get("status", {}).get("currentStepState") == "StepPaused", timeout=30,
                 what="the vendor's status mirrored to Git")
        before = subjects(policy_remote)

        sync.stop(signal.SIGKILL)  # killed mid-rollout, then restarted
        sync.start()
        wait_port_ready(sync)
        # the restarted process's first pass judged the head and looked at the object (its
        # rollout metrics come from that look, after the status and before the write-backs)
        wait_for(lambda: metric_value(sync.metrics(), "gpu_reconciler_rollout_step_state",
                                      cluster=CLUSTER, state="StepPaused") == 1, timeout=30,
                 what="the restarted sync's first pass", observe=lambda: sync.log()[-2000:])
        assert subjects(policy_remote) == before, "a restart commits nothing again"
        assert step_state(kube) == ("Progressing", 1, "StepPaused"), "a restart releases no gate"
        assert driver(kube)["upgradePolicy"]["pause"] is True

        alice.pull()
        resume = alice.commit_and_push("Release the rest", {POLICY_PATH: policy(NEW, pause=False)})
        wait_for(lambda: step_state(kube) == ("Idling", 3, "Completed"), timeout=90,
                 what="the vendor's rollout completed", observe=lambda: step_state(kube))
        snapshot = wait_for(lambda: _completed_snapshot(policy_remote), timeout=30,
                            what="the completed status in Git")
        assert snapshot["sourceCommit"] == resume
        log = subjects(policy_remote)
        own = [s for s in log if s.startswith("gpu-gitops-reconciler:")]
        assert len(own) == len(set(own)), own
        assert merge in policy_remote.log()
    finally:
        assert sync.stop() == 0, sync.log()[-2000:]
        assert vendor.stop() == 0, vendor.log()[-2000:]


def _completed_snapshot(remote: Remote) -> dict[str, object] | None:
    snapshot = status_file(remote) or {}
    state = snapshot.get("upgradeStatus", {}).get("status", {}).get("currentStepState")
    return snapshot if state == "Completed" else None
