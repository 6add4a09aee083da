"""The sync's rules against a real remote and the real control plane: a rejected commit
changes nothing and says why in Git, in an Event and in the log; a deleted cluster folder
deletes nothing; a restart and a remote outage mid-rollout lose no snapshot and duplicate none;
a person pushing while the reconciler writes keeps every commit."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from reconciler.controller.loop import RolloutController
from reconciler.kube.api import KubeApi, resource_path
from reconciler.kube.events import EVENT_NAMESPACE
from reconciler.kube.objects import cluster_operator_path
from reconciler.names import CLUSTER_OPERATOR_NAME
from reconciler.ops.metrics import Metrics
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from tests.sync.conftest import (
    NEW,
    PAYLOAD,
    POLICY_PATH,
    Person,
    Remote,
    SyncFactory,
    git,
    policy,
)
from tests.sync.helpers import (
    cluster_operator,
    driver,
    source_commit,
    status_file,
    step_state,
    subjects,
)

pytestmark = pytest.mark.cluster


@pytest.fixture
def small_fleet(fleet_factory: Callable[..., Fleet]) -> Fleet:
    return fleet_factory(nodes=2, payload=PAYLOAD, install_seconds=0.2)


def _events(kube: KubeApi, reason: str) -> list[str]:
    items = kube.list(resource_path("v1", "events", namespace=EVENT_NAMESPACE))["items"]
    return [e["message"] for e in items if e.get("reason") == reason
            and e["involvedObject"].get("name") == "cluster-operator"]


def _sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    value: float | None = metrics.registry.get_sample_value(name, labels)
    return value


def test_an_invalid_commit_changes_nothing_and_git_says_why(
    kube: KubeApi, small_fleet: Fleet, policy_remote: Remote, alice: Person,
    make_sync: SyncFactory, caplog: pytest.LogCaptureFixture,
) -> None:
    seed = policy_remote.head()  # before the sync role pushes status snapshots
    metrics = Metrics()
    sync = make_sync(policy_remote.url, metrics=metrics)
    wait_for(lambda: source_commit(kube) == seed, timeout=30, what="the seed applied")
    before = cluster_operator(kube)
    wait_for(lambda: _sample(metrics, "gpu_reconciler_sync_rejected", cluster="prod-a") == 0,
             timeout=10, what="the seed counted as not rejected")

    bad = policy(NEW).replace("pause: false", 'pause: "false"')  # the seed's mistake
    caplog.set_level(logging.WARNING, logger="reconciler.sync")
    sha = alice.commit_and_push("Upgrade, with a string for a boolean", {POLICY_PATH: bad})
    sync.trigger()
    wait_for(lambda: sync.handled_commit == sha, timeout=20, what="the bad commit handled")

    after = cluster_operator(kube)
    assert after["spec"] == before["spec"], "a rejected commit changes nothing in the cluster"
    assert source_commit(kube) == seed
    line = next(i for i, text in enumerate(bad.splitlines(), 1) if 'pause: "false"' in text)
    where = f"{POLICY_PATH}:{line}"
    # Git: a status snapshot naming file, line and reason, committed at once
    snapshot = wait_for(lambda: (status_file(policy_remote) or {}).get("rejection"), timeout=20,
                        what="the rejection in Git", observe=lambda: subjects(policy_remote))
    assert snapshot["commit"] == sha
    finding = snapshot["findings"][0]
    assert (finding["file"], finding["line"]) == (POLICY_PATH, line)
    assert "expected boolean, got string 'false'" in finding["message"]
    assert any(s.startswith(f"gpu-gitops-reconciler: status(prod-a): rejected {sha[:12]}: "
                            f"{where}") for s in subjects(policy_remote))
    # the event and the log line
    events = wait_for(lambda: _events(kube, "PolicyRejected"), timeout=10, what="the event")
    assert any(sha[:12] in m and where in m for m in events)
    assert any(sha[:12] in r.getMessage() and where in r.getMessage() for r in caplog.records)
    # the metrics the SyncRejected alert reads (deploy/alerts.yaml)
    assert _sample(metrics, "gpu_reconciler_sync_rejected", cluster="prod-a") == 1
    assert _sample(metrics, "gpu_reconciler_sync_rejections_total", cluster="prod-a",
                   reason="PolicyRejected") == 1

    # the fix applies, and the snapshot no longer carries the rejection
    alice.pull()
    fixed = alice.commit_and_push("Fix the boolean", {POLICY_PATH: policy(NEW, enable=False)})
    sync.trigger()
    wait_for(lambda: source_commit(kube) == fixed, timeout=20, what="the fix applied")
    assert driver(kube)["payload"]["version"] == NEW
    wait_for(lambda: _sample(metrics, "gpu_reconciler_sync_rejected", cluster="prod-a") == 0,
             timeout=10, what="the fix counted as not rejected")
    wait_for(lambda: "rejection" not in (status_file(policy_remote) or {"rejection": 1}),
             timeout=20, what="a snapshot without the rejection",
             observe=lambda: status_file(policy_remote))

    # a change made directly in the cluster is drift: Git wins
    kube.patch(cluster_operator_path(CLUSTER_OPERATOR_NAME),
               {"spec": {"driver": {"upgradePolicy": {"maxParallel": 7}}}})
    wait_for(lambda: driver(kube)["upgradePolicy"]["maxParallel"] == "100%", timeout=20,
             what="Git's maxParallel applied again",
             observe=lambda: driver(kube)["upgradePolicy"])
    # counted once the repair's apply returned, a moment after the object shows it
    wait_for(lambda: sync.stats.drift_repairs >= 1, timeout=10, what="the repair counted")

    # deleting the cluster's folder never deletes its ClusterOperator
    alice.pull()
    git(alice.dir, "rm", "-q", "-r", "clusters/prod-a")
    git(alice.dir, "commit", "-q", "-m", "Retire prod-a from Git")
    git(alice.dir, "push", "-q", "origin", "HEAD:main")
    gone = git(alice.dir, "rev-parse", "HEAD")
    sync.trigger()
    wait_for(lambda: sync.handled_commit == gone, timeout=20, what="the deletion handled")
    assert cluster_operator(kube)["spec"]["driver"]["payload"]["version"] == NEW


def test_restart_and_remote_outage_mid_rollout_lose_nothing_and_duplicate_nothing(
    kube: KubeApi, fleet10: Fleet, controller: RolloutController, policy_remote: Remote,
    alice: Person, make_sync: SyncFactory, tmp_path: Path,
) -> None:
    state = tmp_path / "sync-state"
    seed = policy_remote.head()  # before the sync role pushes status snapshots
    sync = make_sync(policy_remote.url, state_dir=state)
    wait_for(lambda: source_commit(kube) == seed, timeout=30,
             what="the seed applied")
    merge = alice.commit_and_push(f"Upgrade prod-a to {NEW}", {POLICY_PATH: policy(NEW)})
    sync.trigger()
    wait_for(lambda: source_commit(kube) == merge, timeout=20, what="the merge applied")
    policy_remote.go_down()  # the Git server is down while the rollout reaches its gate
    wait_for(lambda: step_state(kube) == ("Progressing", 1, "StepPaused"), timeout=60,
             what="the gate", observe=lambda: step_state(kube))
    wait_for(lambda: sync.stats.write_backs >= 1, timeout=10, what="the pause write-back queued")
    sync.stop()  # stopped (think: killed) while the remote is down: the queue is on disk
    queued = [c.subject for c in sync.repo.policy_publisher.pending()]
    assert any("pause the rollout" in s for s in queued), queued
    policy_remote.come_back()

    restarted = make_sync(policy_remote.url, state_dir=state)
    wait_for(lambda: any("pause the rollout" in s for s in subjects(policy_remote)), timeout=30,
             what="the queued write-back pushed", observe=lambda: subjects(policy_remote))
    wait_for(lambda: (status_file(policy_remote) or {}).get("upgradeStatus", {}).get("status", {})
             .get("currentStepState") == "StepPaused", timeout=30, what="the gate in Git")
    # the baseline comes from the object's annotation
    wait_for(lambda: restarted.applied_commit == merge, timeout=20, what="the baseline restored")

    # a person releases the gate; meanwhile Bob pushes while the reconciler writes status
    bob = Person(policy_remote.url, tmp_path / "bob", name="Bob Builder")
    alice.pull()
    resume = alice.commit_and_push("Release the rest", {POLICY_PATH: policy(NEW, pause=False)})
    restarted.trigger()
    bobs = [bob.commit_and_push(f"Bob's note {i}", {f"notes/{i}.md": f"note {i}\n"})
            for i in range(4)]
    wait_for(lambda: step_state(kube) == ("Idling", 3, "Completed"), timeout=90,
             what="the rollout completed", observe=lambda: step_state(kube))
    wait_for(lambda: any("rollout completed" in s for s in subjects(policy_remote)), timeout=30,
             what="the completed snapshot")
    log = subjects(policy_remote)
    print("\n".join(log))
    history = git(policy_remote.path, "rev-list", "main").split()
    assert all(sha in history for sha in [merge, resume, *bobs]), "every person's commit survives"
    own = Counter(s for s in log if s.startswith("gpu-gitops-reconciler:"))
    assert all(n == 1 for n in own.values()), f"duplicated commits: {own}"
    assert sum("pause the rollout" in s for s in log) == 1
    assert sum("step 1/3 paused" in s for s in log) == 1
