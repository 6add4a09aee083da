"""The controller's translation of API objects into the planner's view (pure parts)."""

from __future__ import annotations

from reconciler.firmware.controller import event_time, node_view
from reconciler.timefmt import parse_seconds as parse_time


def test_node_view_reads_readiness_boot_id_vfio_and_workloads() -> None:
    node = {
        "metadata": {"name": "node-0001", "labels": {"a": "b"},
                     "annotations": {"gpu.metax-tech.com/firmware-flow": "fw-1.2"}},
        "spec": {"unschedulable": True},
        "status": {"conditions": [{"type": "Ready", "status": "False"}],
                   "nodeInfo": {"bootID": "boot-1"},
                   "allocatable": {"metax-tech.com/vfio-gpu": "4"}},
    }
    view = node_view(node, 12.0, ["ns/b", "ns/a"])
    assert (view.name, view.ready, view.unschedulable, view.boot_id, view.vfio_gpus) == (
        "node-0001", False, True, "boot-1", 4)
    assert view.workloads == ("ns/a", "ns/b") and view.need_reboot_at == 12.0
    assert view.annotations == {"gpu.metax-tech.com/firmware-flow": "fw-1.2"}
    bare = node_view({"metadata": {"name": "n"}}, None)
    assert (bare.ready, bare.boot_id, bare.vfio_gpus, bare.labels) == (False, "", 0, {})


def test_event_time_prefers_the_last_occurrence() -> None:
    assert event_time({"lastTimestamp": "2026-11-30T02:00:05Z",
                       "firstTimestamp": "2026-11-30T02:00:00Z"}) == parse_time(
        "2026-11-30T02:00:05Z")
    assert event_time({"eventTime": "2026-11-30T02:00:07.123456Z"}) == parse_time(
        "2026-11-30T02:00:07Z")
    assert event_time({"metadata": {"creationTimestamp": "2026-11-30T02:00:09Z"}}) == parse_time(
        "2026-11-30T02:00:09Z")
    assert event_time({}) is None
