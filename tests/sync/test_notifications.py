"""Notifications through the sync role (docs/notifications.md): a merged upgrade stops at the manual
gate and the Slack receiver on loopback is told, with the exact change to merge (the policy file,
the line of ``pause:``, ``pause: false``); another replica taking over (a new sync with its own
state folder) reads the annotation and sends nothing again. The sink's URL never reaches the log."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from reconciler.controller.loop import RolloutController
from reconciler.kube.api import KubeApi
from reconciler.names import NOTIFIED_ANNOTATION
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from tests.notify.receivers import receiver
from tests.sync import conftest as world
from tests.sync.helpers import step_state

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
