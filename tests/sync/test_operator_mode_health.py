"""Operator mode's health gate as `reconciler run --role sync --mode operator` runs it: the
``health`` section is read at every commit, and a merged section that does not validate fails
closed: the sync role commits ``pause: true`` with the located error (the vendor stops) and
records a Warning Event (SPEC 9)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from reconciler.kube.api import KubeApi
from reconciler.sim.control_plane import ControlPlane
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from tests.controller.helpers import event_reasons
from tests.sync.conftest import CLUSTER, POLICY_PATH, REPO_CONFIG, Person, Remote, policy
from tests.sync.daemon import Daemon, wait_port_ready
from tests.sync.helpers import driver, source_commit, subjects

pytestmark = pytest.mark.cluster

INVALID_HEALTH = REPO_CONFIG + """\
health:
  prometheus: {url: 'http://127.0.0.1:9'}
  nodeChecks:
    - name: gpus-available
      query: 'min(mx_gpu_state{Hostname="{{node}}"})'
      expect: '== 1'
      within: 0s
"""


def test_a_merged_invalid_health_section_commits_pause_with_the_located_error(
    kube: KubeApi, control_plane: ControlPlane, fleet10: Fleet, policy_remote: Remote,
    alice: Person, tmp_path: Path,
) -> None:
    seed = policy_remote.head()
    kubeconfig = str(control_plane.kubeconfig)
    vendor = Daemon(["--role", "controller", "--kubeconfig", kubeconfig], workdir=tmp_path,
                    name="vendor-operator")
    sync = Daemon(["--role", "sync", "--mode", "operator", "--repo", policy_remote.url,
                   "--cluster", CLUSTER, "--kubeconfig", kubeconfig,
                   "--fetch-interval", "300ms"], workdir=tmp_path, name="sync")
    try:
        wait_port_ready(vendor)
        wait_port_ready(sync)
        wait_for(lambda: source_commit(kube) == seed, timeout=30, what="the seed applied")
        assert driver(kube)["upgradePolicy"].get("pause") is not True
        merge = alice.commit_and_push("Add health checks", {"reconciler.yaml": INVALID_HEALTH})

        def paused_commit() -> str | None:
            return next((s for s in subjects(policy_remote)
                         if "pause the rollout" in s and "health section invalid" in s), None)

        subject = wait_for(paused_commit, timeout=60, what="pause: true committed",
                           observe=lambda: (subjects(policy_remote), sync.log()[-1500:]))
        assert subject is not None
        # located: the file, line and column of `within: 0s`, and the rule
        assert "reconciler.yaml:11:15:" in subject and "[health-duration]" in subject
        assert merge in policy_remote.log()
        wait_for(lambda: driver(kube)["upgradePolicy"].get("pause") is True, timeout=30,
                 what="the pause applied to the cluster (the vendor stops)")
        policy_text = policy_remote.show(f"main:{POLICY_PATH}")
        assert "pause: true" in policy_text
        assert "HealthConfigInvalid" in event_reasons(kube)
        time.sleep(12)  # past the watch's next passes (every 10 s without a valid section)
        assert driver(kube)["upgradePolicy"]["pause"] is True  # no repair undid it
        assert sum("health section invalid" in s for s in subjects(policy_remote)) == 1
        # a person fixes the section and releases the pause: the sync applies it as usual
        alice.pull()
        alice.commit_and_push("Fix the health section, resume", {
            "reconciler.yaml": REPO_CONFIG, POLICY_PATH: policy()})
        wait_for(lambda: driver(kube)["upgradePolicy"].get("pause") is False, timeout=30,
                 what="pause: false applied once a person merged it")
    finally:
        assert sync.stop() == 0, sync.log()[-2000:]
        assert vendor.stop() == 0, vendor.log()[-2000:]
