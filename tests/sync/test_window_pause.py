"""Operator mode's window pauses (docs/configuration.md#maintenance-windows) on the real path: a
real remote, the sync role on the real control plane, the watch on a virtual clock. ``pause: true``
is committed when the window is closed and applied to the cluster; ``pause: false`` when the next
opens; a person's pause is never undone."""

from __future__ import annotations

import calendar
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from reconciler.kube.api import KubeApi
from reconciler.sim.control_plane import ControlPlane
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from reconciler.sync.loop import ClusterSync
from reconciler.sync.window_watch import WindowPauseWatch
from reconciler.timefmt import format_seconds
from tests.sync.conftest import (
    CLUSTER,
    PAYLOAD,
    POLICY_PATH,
    REPO_CONFIG,
    Person,
    Remote,
    SyncFactory,
    git,
    policy,
)
from tests.sync.daemon import Daemon, wait_port_ready
from tests.sync.helpers import driver, file_at_head, source_commit

pytestmark = pytest.mark.cluster
WINDOWS = "windows:\n  timezone: UTC\n  allow: [{schedule: '0 22 * * *', duration: 8h}]\n"


def utc(*parts: int) -> float:
    return float(calendar.timegm((*parts, 0, 0)))


def _window_commits(remote: Remote) -> list[str]:
    return git(remote.path, "log", "--format=%H", "--grep", "Reconciler-Window", "main").split()


def _paused(kube: KubeApi) -> object:
    return driver(kube)["upgradePolicy"].get("pause")


def _judged(sync: ClusterSync, remote: Remote) -> None:
    """The sync fetched and judged the remote's newest policy commit (its mirror has it)."""
    newest = git(remote.path, "log", "-1", "--format=%H", "--invert-grep", "--grep",
                 "Reconciler-Commit: true", "main")

    def judged() -> bool:
        sync.trigger()  # fetch again: our own pushes land between looks
        return sync.handled_source == newest

    wait_for(judged, timeout=20, what="the head judged", interval=0.2)


def test_the_window_pauses_the_vendor_when_closed_and_resumes_only_its_own_pause(
    kube: KubeApi, fleet_factory: Callable[..., Fleet], policy_remote: Remote, alice: Person,
    make_sync: SyncFactory,
) -> None:
    fleet_factory(nodes=1, payload=PAYLOAD, install_seconds=0.2)
    sync = make_sync(policy_remote.url)
    config = alice.commit_and_push("prod-a starts nodes only at night",
                                   {"reconciler.yaml": REPO_CONFIG + WINDOWS})
    _judged(sync, policy_remote)
    wait_for(lambda: source_commit(kube) == config, timeout=20, what="the config applied")
    now = [utc(2026, 12, 1, 12)]
    watch = WindowPauseWatch(sync.repo, cluster=CLUSTER, branch="main", clock=lambda: now[0],
                             windows=lambda: sync.settings.current().windows)
    # closed: pause: true with its reason, a policy change the sync applies
    assert watch.run_once() <= utc(2026, 12, 1, 22)
    pause = wait_for(lambda: _window_commits(policy_remote), timeout=20,
                     what="the pause committed")[0]
    message = git(policy_remote.path, "log", "-1", "--format=%B", pause)
    assert "pause the rollout: outside the maintenance windows; the next window opens at " \
           "2026-12-01T22:00:00Z" in message
    assert "Reconciler-Window: pause" in message and "Reconciler-Commit" not in message
    assert "pause: true" in file_at_head(policy_remote, POLICY_PATH)
    wait_for(lambda: _paused(kube) is True, timeout=30, what="pause applied to the cluster")
    _judged(sync, policy_remote)
    watch.run_once()  # the same closed period: nothing more
    # the next window opens: its own pause is undone (a fresh watch: state is Git's)
    now[0] = utc(2026, 12, 1, 23)
    restarted = WindowPauseWatch(sync.repo, cluster=CLUSTER, branch="main",
                                 clock=lambda: now[0], windows=watch.windows)
    restarted.run_once()
    wait_for(lambda: len(_window_commits(policy_remote)) == 2, timeout=20,
             what="the resume committed")
    assert "pause: false" in file_at_head(policy_remote, POLICY_PATH)
    wait_for(lambda: _paused(kube) is False, timeout=30, what="resume applied to the cluster")
    # a person's pause inside the window: kept through the next close and open
    alice.pull()
    alice.commit_and_push("Hold prod-a: investigating", {POLICY_PATH: policy(pause=True)})
    _judged(sync, policy_remote)
    for moment in (utc(2026, 12, 2, 12), utc(2026, 12, 2, 23)):
        now[0] = moment
        restarted.run_once()
    _judged(sync, policy_remote)
    assert len(_window_commits(policy_remote)) == 2
    assert "pause: true" in file_at_head(policy_remote, POLICY_PATH)
    assert _paused(kube) is True


def test_reconciler_run_in_operator_mode_pauses_the_cluster_inside_a_deny_range(
    kube: KubeApi, control_plane: ControlPlane, fleet_factory: Callable[..., Fleet],
    policy_remote: Remote, alice: Person, tmp_path: Path,
) -> None:
    fleet_factory(nodes=1, payload=PAYLOAD, install_seconds=0.2)
    now = time.time()
    freeze = (f"windows:\n  deny: [{{from: '{format_seconds(now - 3600)}', until: "
              f"'{format_seconds(now + 3600)}', reason: test freeze}}]\n")
    alice.commit_and_push("Freeze prod-a", {"reconciler.yaml": REPO_CONFIG + freeze})
    sync = Daemon(["--role", "sync", "--mode", "operator", "--repo", policy_remote.url,
                   "--cluster", CLUSTER, "--kubeconfig", str(control_plane.kubeconfig),
                   "--fetch-interval", "300ms", "--webhook-repository", "example/policy"],
                  workdir=tmp_path, name="sync")
    try:
        wait_port_ready(sync)
        pause = wait_for(lambda: _window_commits(policy_remote), timeout=30,
                         what="the window pause committed", observe=lambda: sync.log()[-2000:])
        assert len(pause) == 1
        subject = git(policy_remote.path, "log", "-1", "--format=%s", pause[0])
        assert subject.startswith(f"policy({CLUSTER}): pause the rollout: deny window: test "
                                  "freeze; the next window opens at ")
        wait_for(lambda: _paused(kube) is True, timeout=30, what="the pause applied",
                 observe=lambda: driver(kube))
    finally:
        assert sync.stop() == 0, sync.log()[-2000:]
