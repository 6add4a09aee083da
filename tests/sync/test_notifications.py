"""Notifications through the sync role (docs/notifications.md): a merged upgrade stops at the manual
gate and the Slack receiver on loopback is told, with the exact change to merge (the policy file,
the line of ``pause:``, ``pause: false``); another replica taking over (a new sync with its own
state folder) reads the annotation and sends nothing again. One gate and one completion are
exactly two posts, through our own ``pause: true`` write-back (a new head), a restart of
``reconciler run`` mid-gate and the gate's release. The sink's URL never reaches the log."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from reconciler.controller.loop import RolloutController
from reconciler.kube.api import KubeApi
from reconciler.names import NOTIFIED_ANNOTATION
from reconciler.notify.ledger import parse_sent
from reconciler.sim.control_plane import ControlPlane
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from tests.notify.receivers import receiver
from tests.sync import conftest as world
from tests.sync.daemon import Daemon, wait_port_ready
from tests.sync.helpers import cluster_operator, source_commit, step_state

pytestmark = pytest.mark.cluster


def test_a_gate_is_told_once_with_the_change_to_merge_across_a_takeover(
    kube: KubeApi, fleet10: Fleet, controller: RolloutController,
    policy_remote: world.Remote, alice: world.Person, make_sync: world.SyncFactory,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="reconciler")
    with receiver(path="/services/T1/B1/secret-slack-key") as slack:
        url_file = tmp_path / "slack-url"
        url_file.write_text(slack.url + "\n")
        config = (world.REPO_CONFIG
                  + f"notify:\n  - {{name: team, type: slack, urlFile: {url_file}}}\n")
        alice.commit_and_push(f"Upgrade prod-a to {world.NEW}, telling the team",
                              {"reconciler.yaml": config,
                               world.POLICY_PATH: world.policy(world.NEW)})
        sync = make_sync(policy_remote.url)
        wait_for(lambda: step_state(kube) == ("Progressing", 1, "StepPaused"), timeout=90,
                 what="step 1 paused at the manual gate", observe=lambda: step_state(kube))
        wait_for(lambda: slack.got, timeout=60, what="the gate told to Slack")
        text = slack.got[0].body.decode()
        assert "manual gate" in text
        assert f"{world.POLICY_PATH}:" in text and "`pause: false`" in text
        wait_for(lambda: NOTIFIED_ANNOTATION in (kube.get(
            "/apis/gpu.metax-tech.com/v1alpha1/clusteroperators/cluster-operator")["metadata"]
            .get("annotations") or {}), timeout=30, what="the sent event recorded")
        sync.stop()

        again = make_sync(policy_remote.url, state_dir=tmp_path / "other-replica")
        wait_for(lambda: again.notifier.last_snapshot is not None, timeout=60,
                 what="the new sync's first pass")
        assert again.notifier.wait_idle(30)
        assert step_state(kube) == ("Progressing", 1, "StepPaused")
        assert len(slack.got) == 1
    assert "secret-slack-key" not in caplog.text


def _sent(kube: KubeApi) -> list[str]:
    """The event keys the ledger (the ClusterOperator's annotation) holds for the sink."""
    annotations = cluster_operator(kube)["metadata"].get("annotations") or {}
    return parse_sent(annotations.get(NOTIFIED_ANNOTATION)).get("team", [])


def _pause_write_back(remote: world.Remote) -> str | None:
    """Our ``pause: true`` commit at the gate, once it is on the remote."""
    log = world.git(remote.path, "log", "--format=%H %s", "main").splitlines()
    return next((line.split()[0] for line in log
                 if "pause the rollout at step 1/3: manual gate" in line), None)


def test_one_gate_and_one_completion_are_two_posts_across_a_restart_mid_gate(
    kube: KubeApi, control_plane: ControlPlane, fleet10: Fleet, policy_remote: world.Remote,
    alice: world.Person, tmp_path: Path,
) -> None:
    """Found in use (issue 42): one gate was posted twice, keyed by the head, which our own
    ``pause: true`` write-back moves. The key is the commit that started the rollout."""
    with receiver(path="/services/T1/B1/secret-slack-key") as slack:
        url_file = tmp_path / "slack-url"
        url_file.write_text(slack.url + "\n")
        config = (world.REPO_CONFIG
                  + f"notify:\n  - {{name: team, type: slack, urlFile: {url_file}}}\n")
        merge = alice.commit_and_push(f"Upgrade prod-a to {world.NEW}, telling the team",
                                      {"reconciler.yaml": config,
                                       world.POLICY_PATH: world.policy(world.NEW)})
        daemon = Daemon(["--repo", policy_remote.url, "--cluster", world.CLUSTER,
                         "--kubeconfig", str(control_plane.kubeconfig),
                         "--fetch-interval", "1s", "--ready-timeout", "30s"],
                        workdir=tmp_path, name="notify")
        try:
            wait_port_ready(daemon)
            wait_for(lambda: step_state(kube) == ("Progressing", 1, "StepPaused"), timeout=90,
                     what="step 1 paused at the manual gate", observe=lambda: step_state(kube))
            gate = f"prod-a/{merge[:12]}/gate/1/3"
            wait_for(lambda: _sent(kube) == [gate], timeout=60, what="the gate sent, recorded",
                     observe=lambda: (_sent(kube), len(slack.got)))
            # our write-back of pause: true is a new head
            wait_for(lambda: _pause_write_back(policy_remote), timeout=30,
                     what="the pause write-back")
            assert daemon.stop() == 0, daemon.log()[-3000:]
            assert step_state(kube) == ("Progressing", 1, "StepPaused")

            daemon.start()  # the same gate, read again by a new process
            wait_port_ready(daemon)
            # the release is a new head too, applied while the gate still shows in the status
            alice.pull()
            release = alice.commit_and_push(
                "Release the rest of prod-a",
                {world.POLICY_PATH: world.policy(world.NEW, pause=False)})
            wait_for(lambda: source_commit(kube) == release, timeout=30,
                     what="the release applied")
            wait_for(lambda: step_state(kube) == ("Idling", 3, "Completed"), timeout=120,
                     what="the rollout completed", observe=lambda: step_state(kube))
            completed = f"prod-a/{merge[:12]}/completed/-"
            wait_for(lambda: _sent(kube) == [gate, completed], timeout=60,
                     what="the completion sent, recorded",
                     observe=lambda: (_sent(kube), len(slack.got)))
        finally:
            code = daemon.stop()
        assert code == 0, daemon.log()[-3000:]
        bodies = [r.body.decode() for r in slack.got]
        assert len(bodies) == 2, bodies
        assert "manual gate" in bodies[0]
        assert f"the rollout of {world.NEW} completed" in bodies[1]
    assert "secret-slack-key" not in daemon.log()
