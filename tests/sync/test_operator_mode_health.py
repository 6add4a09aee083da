"""Operator mode's health gate as `reconciler run --role sync --mode operator` runs it: the
``health`` section is read at every commit, and a merged section that does not validate fails
closed: the sync role commits ``pause: true`` with the located error (the vendor stops) and
records a Warning Event (docs/health.md#operator-mode)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.kube.api import KubeApi
from reconciler.sim.control_plane import ControlPlane
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from reconciler.sync.health_watch import IDLE_INTERVAL_ENV, stop_vendor
from tests.controller.helpers import event_reasons
from tests.sync.conftest import (
    CLUSTER,
    POLICY_PATH,
    REPO_CONFIG,
    Person,
    Remote,
    SyncFactory,
    policy,
)
from tests.sync.daemon import Daemon, wait_port_ready
from tests.sync.helpers import cluster_operator, driver, source_commit, subjects

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

#: the health watch's debug line at each look (``--log-level debug``)
LOOKED = "health section looked at"


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
                   "--fetch-interval", "300ms", "--log-level", "debug"], workdir=tmp_path,
                  name="sync", env={IDLE_INTERVAL_ENV: "0.5"})
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
        # past the watch's next passes (every 0.5 s here, 10 s by default, without a valid
        # section)
        looks = sync.log().count(LOOKED)
        wait_for(lambda: sync.log().count(LOOKED) >= looks + 3, timeout=30,
                 what="three more looks of the health watch", observe=lambda: sync.log()[-1500:])
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


def test_a_health_pause_survives_a_person_commit_applied_while_it_was_on_its_way(
    kube: KubeApi, fleet10: Fleet, policy_remote: Remote, alice: Person,
    make_sync: SyncFactory,
) -> None:
    """The watch pauses the vendor at once (``stop_vendor``), then a person's commit the sync
    applies puts Git's ``pause: false`` back; the pause commit, landing after it, is applied
    like a person's, so the cluster ends up paused (it once stayed unpaused: the commit was
    one of the reconciler's own, which the sync never applies)."""
    seed = policy_remote.head()
    sync = make_sync(policy_remote.url, fetch_interval=0.3)
    wait_for(lambda: source_commit(kube) == seed, timeout=30, what="the seed applied")
    stop_vendor(kube, sync.name, sync.drift)
    assert driver(kube)["upgradePolicy"]["pause"] is True
    unrelated = alice.commit_and_push("Canary waits 5 minutes",
                                      {POLICY_PATH: policy(first_pause="300")})
    wait_for(lambda: source_commit(kube) == unrelated, timeout=30,
             what="the person's commit applied")
    assert driver(kube)["upgradePolicy"]["pause"] is False  # Git's value, as the race did
    sync.write_backs.pause_for_health("health check gpus-available failed on node gpu-3",
                                      cluster_operator(kube))
    wait_for(lambda: any("pause the rollout" in s for s in subjects(policy_remote)),
             timeout=30, what="the health pause committed")
    wait_for(lambda: driver(kube)["upgradePolicy"].get("pause") is True, timeout=30,
             what="the landed health pause applied to the cluster",
             observe=lambda: (subjects(policy_remote), source_commit(kube)))
    pause_commit = next(line.split()[0] for line in policy_remote.log("main").splitlines()
                        if "pause the rollout" in line)
    assert source_commit(kube) == pause_commit  # the cluster runs the pause commit
    # a person releases it as usual
    alice.pull()
    release = alice.commit_and_push("Resume", {POLICY_PATH: policy(first_pause="300")})
    wait_for(lambda: source_commit(kube) == release, timeout=30, what="the release applied")
    assert driver(kube)["upgradePolicy"]["pause"] is False
