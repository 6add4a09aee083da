"""Operator mode's health watch runs on the worker every controller runs on: only the leader
looks (a second replica would otherwise query Prometheus and pause the vendor too)."""

from __future__ import annotations

import threading
from typing import Any, cast

from reconciler.health.section import HealthSection
from reconciler.kube.api import KubeApi
from reconciler.sync.health_watch import VendorHealthWatch


def test_only_the_leader_looks_and_a_new_leader_looks_at_once() -> None:
    leader = threading.Event()
    looked = threading.Event()
    looks: list[bool] = []

    def section() -> HealthSection:
        looks.append(leader.is_set())
        looked.set()
        return HealthSection()  # no section: nothing to check, no API call

    def no_failure(reason: str, live: Any) -> None:
        raise AssertionError(f"no check ran, yet a failure: {reason}")

    watch = VendorHealthWatch(cast(KubeApi, object()), cluster_operator="cluster-operator",
                              section=section, on_failure=no_failure,
                              is_leader=leader.is_set).start()
    try:
        assert not looked.wait(1.5), "a replica that is not the leader looked"
        leader.set()
        watch.worker.kick()  # else the next look comes within IDLE_INTERVAL
        assert looked.wait(5), "the leader never looked"
        assert looks and all(looks)
    finally:
        watch.stop()
    assert not watch.worker.thread_alive
