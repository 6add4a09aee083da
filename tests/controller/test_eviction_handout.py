"""An eviction handed out is not handed out again while it waits for a worker: without that, a
pass planned meanwhile repeats it, every repeat counts as acting, the controller plans again
at once, and the queue of repeats grows until no start gets a worker (the drain benchmark's
stall at 2,000 nodes). Pure: ``held_back`` reads only the executor's own records."""

from __future__ import annotations

from typing import cast

from reconciler.controller.act import (
    EVICTION_BACKOFF_SECONDS,
    EVICTION_PENDING_SECONDS,
    ActionExecutor,
    Target,
)
from reconciler.kube.api import KubeApi
from reconciler.rollout.actions import Cordon, EvictPod


def test_a_handed_out_eviction_is_held_back_until_asked_or_forgotten() -> None:
    now = [1000.0]
    executor = ActionExecutor(cast(KubeApi, None), Target("cluster-operator"),
                              clock=lambda: now[0])
    evict, other = EvictPod("node-1", "serve", "web-1"), Cordon("node-2")
    assert executor.held_back([evict, other]) == ([evict, other], None)
    # planned again before a worker asked: held back, and the pass wakes within the back-off
    kept, until = executor.held_back([evict, other])
    assert kept == [other] and until == now[0] + EVICTION_BACKOFF_SECONDS
    # never asked (say the pool shut down): handed out again once the record is old
    now[0] += EVICTION_PENDING_SECONDS
    assert executor.held_back([evict]) == ([evict], None)
