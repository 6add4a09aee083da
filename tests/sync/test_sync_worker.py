"""The sync role on the worker core: what kicks it, how a replica that is not the leader waits,
and the back-off of a failing pass, on a virtual monotonic clock. ClusterSync is built over a
real Git remote but never started; turns are taken by hand, and the API server is a stand-in
that refuses every request."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s_client

from reconciler.gitops.source import NewCommit
from reconciler.kube.api import KubeApi, KubeError
from reconciler.sync.loop import ClusterSync
from tests.clocks import VirtualClock
from tests.sync.conftest import CLUSTER, Remote


class RefusingApi(KubeApi):
    """Every read fails as an API server in trouble answers."""

    def __init__(self) -> None:
        super().__init__(k8s_client.ApiClient(k8s_client.Configuration()))
        self.gets: list[str] = []

    def get(self, path: str, **kwargs: Any) -> Any:
        self.gets.append(path)
        raise KubeError(503, "ServiceUnavailable", "etcd leader changed", method="GET",
                        path=path)


def unstarted_sync(remote: Remote, tmp_path: Path, clock: VirtualClock, *,
                   leader: list[bool]) -> tuple[ClusterSync, RefusingApi]:
    api = RefusingApi()
    sync = ClusterSync(api, remote.url, cluster=CLUSTER, state_dir=tmp_path / "state",
                       fetch_interval=30.0, is_leader=lambda: leader[0], monotonic=clock)
    sync.watch.wait_synced = lambda timeout=None: True  # type: ignore[method-assign]
    return sync, api


def test_a_sync_replica_that_is_not_the_leader_does_not_pass_and_looks_again_in_0_2_s(
    policy_remote: Remote, tmp_path: Path,
) -> None:
    clock = VirtualClock(500.0)
    leader = [False]
    sync, api = unstarted_sync(policy_remote, tmp_path, clock, leader=leader)
    assert not sync.worker.turn()
    assert api.gets == [], "no pass: not even the live object was read"
    assert sync.worker.next_wait() == pytest.approx(0.2)
    clock.now += 0.2
    assert sync.worker.next_wait() is None
    leader[0] = True
    assert sync.worker.turn()
    assert api.gets, "the leader's pass (a resync) reads the live object"


def test_new_heads_watch_events_and_resyncs_kick_the_sync_worker(
    policy_remote: Remote, tmp_path: Path,
) -> None:
    clock = VirtualClock(500.0)
    sync, _ = unstarted_sync(policy_remote, tmp_path, clock, leader=[False])
    kicks = {
        "a new head": lambda: sync._on_commit(NewCommit("main", "a" * 40, None, ())),
        "a ClusterOperator event": lambda: sync._on_cluster_operator(
            "MODIFIED", {"metadata": {"name": "cluster-operator"}}),
        "a resync": sync.resync,
    }
    for what, kick in kicks.items():
        sync.worker.turn()
        assert sync.worker.next_wait() == pytest.approx(0.2), what
        kick()
        assert sync.worker.next_wait() is None, what


def test_a_failing_sync_pass_backs_off_from_0_2_s_doubling_to_10_s_whatever_kicks_it(
    policy_remote: Remote, tmp_path: Path,
) -> None:
    clock = VirtualClock(500.0)
    sync, api = unstarted_sync(policy_remote, tmp_path, clock, leader=[True])
    waits = []
    for _ in range(8):
        sync.resync()  # what each failed pass consumed: the next one looks again
        assert sync.worker.turn()
        wait = sync.worker.next_wait()
        assert wait is not None and wait != math.inf
        waits.append(wait)
        sync.resync()
        sync._on_cluster_operator("MODIFIED", {"metadata": {"name": "cluster-operator"}})
        assert sync.worker.next_wait() == wait, "kicks do not cut the back-off short"
        clock.now += wait
    assert waits == pytest.approx([0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 10.0, 10.0])
    assert sync.stats.errors == len(api.gets) == 8
